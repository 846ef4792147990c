"""Benchmark outputs: ``results.json``, a README-ready Markdown table, PNG plots and the generated texts.

Plots use matplotlib's object API (``Figure``), not pyplot, so no global backend or figure state is
touched. Every file is written to a temporary name first and moved into place (``os.replace``).
"""

import json
from pathlib import Path

from ..files import replaced_atomically, write_text_atomic
from .engine import engine_markdown
from .rows import GAINS

TABLE_COLUMNS = (
    "Row", "tau (95% CI)", "TPOT ms", "tokens/s", "Speedup", "Paired speedup (median, min-max)",
    "Paired vs target.generate", "TTFT ms", "Peak MiB", "Greedy = target",
)  # fmt: skip


def _fmt(value, pattern: str, missing: str = "-") -> str:
    return missing if value is None else pattern.format(value)


def _tau_cell(tau: dict) -> str:
    if tau["mean"] is None:
        return "-"
    if tau["low"] is None:
        return f"{tau['mean']:.2f}"
    return f"{tau['mean']:.2f} ({tau['low']:.2f}-{tau['high']:.2f})"


def _greedy_cell(row: dict, greedy: dict | None) -> str:
    if greedy is None:
        return "n/a (sampling)"
    if row["name"] == greedy["reference"]:
        return "reference"
    found = greedy["mismatches"].get(row["name"], [])
    if not found:
        return "yes"
    return f"**MISMATCH ({len(found)}/{len(row['per_prompt'])} prompts)**"


def markdown_table(results: dict) -> str:
    """The README table: one line per row, then the definitions, skipped rows and any mismatch, loudly."""
    settings = results["settings"]
    greedy = results["greedy_check"]
    score = results.get("score")
    sampling = (
        "T=0 (greedy)" if settings["temperature"] == 0 else f"T={settings['temperature']}, top-p {settings['top_p']}"
    )
    machine = results["machine"]
    lines = [
        (
            f"**dels-hub bench** · dataset `{settings['dataset']}` ({len(results['prompts'])} prompts) · "
            f"{sampling} · max {settings['max_new_tokens']} new tokens · block size {settings['block_size']}"
        ),
        "",
        (
            f"target `{settings['target']}` · DFlash {_drafters(settings['dflash'])} · {results['dtype']} on "
            f"{results['device']} ({machine.get('gpu') or str(machine['cpu_count']) + ' CPU cores'}) · "
            f"transformers {results['versions'].get('transformers')} · torch {results['versions'].get('torch')}"
        ),
        "",
    ]
    if greedy is not None and not greedy["ok"]:
        lines += [
            (
                f"> **GREEDY MISMATCH: {', '.join(greedy['mismatched_rows'])} produced tokens different from "
                f"`{greedy['reference']}` at T=0. Speculative decoding must be lossless: this is a bug.**"
            ),
            "",
        ]
    columns = list(TABLE_COLUMNS) + (["pass@1"] if score else [])
    lines += ["| " + " | ".join(columns) + " |", "|" + "---|" * len(columns)]
    for row in results["rows"]:
        speedup = row["speedup"]
        paired = (
            f"{speedup['paired_median']:.2f}x ({speedup['paired_min']:.2f}-{speedup['paired_max']:.2f})"
            if speedup["paired_median"] is not None
            else "-"
        )
        cells = [
            row["name"],
            _tau_cell(row["tau"]),
            _fmt(row["tpot_median"] and row["tpot_median"] * 1e3, "{:.1f}"),
            _fmt(row["tokens_per_second_median"], "{:.1f}"),
            _fmt(speedup["ratio_of_medians"], "{:.2f}x"),
            paired,
            _fmt(row.get("speedup_vs_target_generate", {}).get("paired_median"), "{:.2f}x"),
            _fmt(row["time_to_first_token_median"] and row["time_to_first_token_median"] * 1e3, "{:.0f}"),
            _fmt(row["peak_memory_bytes"] and row["peak_memory_bytes"] / 2**20, "{:.0f}"),
            _greedy_cell(row, greedy),
        ]
        if score:
            cells.append(_fmt(score["rows"].get(row["name"], {}).get("pass@1"), "{:.3f}"))
        lines.append("| " + " | ".join(cells) + " |")
    memory = {
        "cuda_max_allocated": "CUDA max allocated",
        "cpu_peak_rss_per_call": "process peak RSS during the call (includes the models)",
        "cpu_peak_rss_process": "process peak RSS so far (includes the models; not reset per row)",
    }[results["peak_memory_kind"]]
    lines += [
        "",
        (
            "tau: tokens committed per verify step (bonus included), mean of per-prompt means, 95% t-interval "
            "over prompts. TPOT: time per output token after the first; TPOT, tokens/s and TTFT are medians over "
            f"prompts. Speedup: median TPOT of `{results['baseline']}` / median TPOT of the row; paired: "
            f"per-prompt ratios. Peak memory: {memory}. Rows ran interleaved per prompt after a warm-up. Wall "
            f"time {results['wall_seconds']:.0f} s."
        ),
    ]
    loads = [machine.get("load_average_at_start"), machine.get("load_average_at_end")]
    if machine["device"] == "cpu" and all(loads):
        # The run's own threads load the machine too: only load beyond them means other processes.
        busy = max(load[0] for load in loads) > machine["torch_threads"] + 0.5
        lines.append(
            f"Load average (1 min) {loads[0][0]:.1f} at start, {loads[1][0]:.1f} at end on {machine['cpu_count']} "
            f"cores, {machine['torch_threads']} torch thread(s)"
            + (": other processes were running, so absolute times are inflated; compare ratios." if busy else ".")
        )
    gains = [row[key] | {"row": row["name"]} for row in results["rows"]
             for key in GAINS if row.get(key)]
    for gain in gains:
        if gain["tau_difference"]["mean"] is not None:
            diff, speedup = gain["tau_difference"], gain["speedup"]
            interval = (f" (95% CI {diff['low']:+.3f} to {diff['high']:+.3f})" if diff["low"] is not None else "")
            relative = f", {100 * gain['tau_gain_relative']:+.1f}%" if gain["tau_gain_relative"] is not None else ""
            pace = (f"; speed {speedup['ratio_of_medians']:.3f}x of it" if speedup["ratio_of_medians"] else "")
            lines.append(f"`{gain['row']}` over `{gain['baseline']}`, paired per prompt: tau {diff['mean']:+.3f}"
                         f"{interval}{relative}{pace}.")
    lines += policy_table(results["rows"])
    for row in results["rows"]:
        for note in row["notes"]:
            lines.append(f"`{row['name']}`: {note}.")
    for skipped in results["skipped_rows"]:
        lines.append(f"Skipped `{skipped['row']}`: {skipped['reason']}.")
    if score:
        lines.append(f"pass@1: {score['backend']}.")
    return "\n".join(lines) + "\n"


def policy_table(rows: list[dict]) -> list[str]:
    """What each speculative row's draft policy chose, pooled over prompts: the share of row-blocks that verified
    d drafts (0: a plain step, or a draft not worth verifying), how many blocks were plain, copy and drafted blocks
    and what each of the latter committed, and the tokens per millisecond the cost model
    predicted against those the loop measured (close when it is calibrated)."""
    chosen = [row for row in rows if row.get("policy") and row["kind"] in ("dflash", "dels")]
    if not chosen:
        return []
    lines = ["", "| Row | policy | drafts verified: share of row-blocks | plain / copied / drafted | "
                 "tau (copied) | tau (drafted) | predicted tok/ms | measured tok/ms |",
             "|---|---|---|---|---|---|---|---|"]
    for row in chosen:
        policy = row["policy"]
        total = sum(policy["chosen_drafts"].values()) or 1
        shares = " ".join(f"{d}:{n / total:.0%}" for d, n in policy["chosen_drafts"].items())
        # copy blocks: results from before they existed have none
        lines.append(f"| {row['name']} | {policy['policy']} | {shares} | {policy['plain_blocks']} / "
                     f"{policy.get('copy_blocks', 0)} / {policy['drafted_blocks']} | "
                     f"{_fmt(policy.get('tau_copied'), '{:.2f}')} | {_fmt(policy['tau_drafted'], '{:.2f}')} | "
                     f"{_fmt(policy['predicted_tokens_per_ms'], '{:.4f}')} | "
                     f"{_fmt(policy['measured_tokens_per_ms'], '{:.4f}')} |")
    return lines


def _drafters(dflash) -> str:
    return ", ".join(f"`{d}`" for d in (dflash if isinstance(dflash, list) else [dflash]))


def _speculative_rows(results: dict) -> list[dict]:
    return [row for row in results["rows"] if row["block_size"] > 1 and row["acceptance_histogram"]]


def plot_histograms(results: dict, path: Path) -> None:
    """Acceptance-length histogram (share of verify steps committing n tokens), one panel per row."""
    from matplotlib.figure import Figure

    rows = _speculative_rows(results)
    figure = Figure(figsize=(4.2 * max(len(rows), 1), 3.4), layout="constrained")
    axes = figure.subplots(1, max(len(rows), 1), sharey=True, squeeze=False)[0]
    for index, (axis, row) in enumerate(zip(axes, rows)):
        histogram = {int(k): v for k, v in row["acceptance_histogram"].items()}
        steps = sum(histogram.values())
        lengths = list(range(1, row["block_size"] + 1))
        axis.bar(lengths, [histogram.get(n, 0) / steps for n in lengths], color=f"C{index}")
        axis.grid(axis="y", alpha=0.3)
        axis.set_title(f"{row['name']}\ntau {row['tau']['mean']:.2f}", fontsize=9)
        axis.set_xlabel("tokens committed per step")
        axis.set_xticks(lengths)
    axes[0].set_ylabel("share of verify steps")
    if not rows:
        axes[0].text(0.5, 0.5, "no speculative rows", ha="center", va="center", transform=axes[0].transAxes)
    with replaced_atomically(path) as temporary:
        figure.savefig(temporary, dpi=120, format="png")


def plot_profile(results: dict, path: Path) -> None:
    """Per-position acceptance: P(draft at block position k was accepted), DFlash vs DeLS (and peers)."""
    from matplotlib.figure import Figure

    figure = Figure(figsize=(6.4, 4.0), layout="constrained")
    axis = figure.subplots()
    # Our rows solid, transformers peers dashed; every row its own color so overlapping lines stay readable.
    styles = {"dflash": ("-", "o"), "dels": ("-", "s"), "peer": ("--", "^")}
    for index, row in enumerate(_speculative_rows(results)):
        profile = row["acceptance_profile"]
        line, marker = styles.get(row["kind"], (":", "x"))
        axis.plot(
            range(1, len(profile) + 1), profile, color=f"C{index}", linestyle=line, marker=marker,
            markersize=5, alpha=0.9, label=f"{row['name']} (tau {row['tau']['mean']:.2f})",
        )  # fmt: skip
    axis.set_xlabel("block position of the draft")
    axis.set_ylabel("acceptance rate")
    axis.set_ylim(0, 1.02)
    axis.grid(alpha=0.3)
    axis.set_title(f"Per-position acceptance · {results['settings']['dataset']}", fontsize=10)
    if axis.get_legend_handles_labels()[0]:
        axis.legend(fontsize=8)
    with replaced_atomically(path) as temporary:
        figure.savefig(temporary, dpi=120, format="png")


def write_report(results: dict, runs: dict, prompts, out) -> dict:
    """Write results.json, results.md, samples.jsonl and the two PNGs to ``out``; returns their paths."""
    directory = Path(out)
    directory.mkdir(parents=True, exist_ok=True)
    files = {
        "results_json": directory / "results.json",
        "markdown": directory / "results.md",
        "samples": directory / "samples.jsonl",
        "acceptance_histogram": directory / "acceptance_histogram.png",
        "acceptance_profile": directory / "acceptance_profile.png",
    }
    results["files"] = {name: str(path) for name, path in files.items()}
    plot_histograms(results, files["acceptance_histogram"])
    plot_profile(results, files["acceptance_profile"])

    with replaced_atomically(files["samples"]) as temporary, open(temporary, "w", encoding="utf-8") as handle:
        for name, row_runs in runs.items():
            for prompt, run in zip(prompts, row_runs):
                record = {"row": name, "prompt": prompt.id, "turns": run.texts, "tokens": run.tokens}
                handle.write(json.dumps(record, ensure_ascii=False) + "\n")
    write_text_atomic(files["markdown"], markdown_table(results) + engine_markdown(results))
    write_text_atomic(files["results_json"], json.dumps(results, indent=2, default=str))
    return results["files"]
