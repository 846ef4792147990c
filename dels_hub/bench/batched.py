"""``dels-hub bench --batch-size B``: throughput of batched ``generate``, our rows against ``target.generate`` on the
same left-padded batches.

Each prompt's first turn is used; prompts are grouped into batches of B in dataset order. Every row generates every
batch, rows interleaved batch by batch with a rotating order (as the per-prompt bench interleaves prompts). A row's
throughput is its new tokens, without the padding after a row's end, over its wall-clock seconds, summed over the
batches. Greedy rows must equal ``target.generate``'s batch token for token.
"""

import json
import time
from pathlib import Path

import torch
from tqdm.auto import tqdm

from ..compat import synchronize
from ..files import write_text_atomic
from .environment import load_average, machine, versions
from .prompts import encode_chat
from .rows import LoopRow, Sampling

REFERENCE = "target.generate"


def encode_batches(prompts, tokenizer, batch_size: int, device) -> list[dict]:
    """Left-padded ``{"input_ids", "attention_mask"}`` batches of the prompts' first turns, each encoded as the
    per-prompt bench encodes it (``encode_chat``)."""
    rows = [{"input_ids": encode_chat(tokenizer, list(prompt.messages), "cpu")[0].tolist()} for prompt in prompts]
    side, pad = tokenizer.padding_side, tokenizer.pad_token
    tokenizer.padding_side = "left"
    if pad is None:  # padded positions are masked: any token will do, and EOS is what transformers pads with
        tokenizer.pad_token = tokenizer.eos_token
    try:
        batches = [tokenizer.pad(rows[start : start + batch_size], return_tensors="pt")
                   for start in range(0, len(rows), batch_size)]
    finally:
        tokenizer.padding_side, tokenizer.pad_token = side, pad
    return [{"input_ids": b["input_ids"].to(device), "attention_mask": b["attention_mask"].to(device)}
            for b in batches]


def new_tokens(sequences: torch.Tensor, width: int, stop_ids: set[int]) -> list[list[int]]:
    """Each row's new tokens up to and including its first stop token: the padding after it is not output."""
    rows = []
    for row in sequences[:, width:].tolist():
        end = next((i + 1 for i, token in enumerate(row) if token in stop_ids), len(row))
        rows.append(row[:end])
    return rows


def generate_batch(row, batch: dict, sampling: Sampling, pad_id: int, seed: int):
    """``(sequences, acceptance lengths of every row or None, seconds)`` of one row on one batch."""
    device = batch["input_ids"].device
    synchronize(device)
    started = time.perf_counter()
    if isinstance(row, LoopRow):
        fusion = {"alpha": row.alpha, "beta": row.beta} if row.generator.head is not None else {}
        out = row.generator.generate(**batch, block_size=row.block_size, seed=seed, pad_token_id=pad_id,
                                     return_dict_in_generate=True, **fusion, **sampling.generate_kwargs())
        sequences, lengths = out.sequences, sum(out.row_acceptance_lengths, [])
    else:  # the target itself
        torch.manual_seed(seed)
        sequences, lengths = row(**batch, pad_token_id=pad_id, **sampling.generate_kwargs()), None
    synchronize(device)
    return sequences, lengths, time.perf_counter() - started


def run_batched(settings, generator, rows: list, prompts, block_size: int, skipped: list, started: float) -> dict:
    """Measure ``rows`` (the per-prompt bench's loop rows; its target-alone and peer rows are left out) and
    ``target.generate`` on batches of ``settings.batch_size``; returns the results dict."""
    target, tokenizer, device = generator.target, generator.tokenizer, generator.device
    load_at_start = load_average()
    sampling = settings.sampling
    config = target.generation_config
    eos = config.eos_token_id
    stop_ids = set() if eos is None else {eos} if isinstance(eos, int) else set(eos)
    pad_id = tokenizer.pad_token_id if tokenizer.pad_token_id is not None else min(stop_ids, default=0)
    measured = {REFERENCE: target.generate}
    for row in rows:
        if isinstance(row, LoopRow) and row.kind in ("dflash", "dels"):
            measured[row.name] = row
        else:
            skipped.append({"row": row.name, "reason": "per-prompt rows only (batch-1 in transformers, or the "
                                                       "loop's own plain decoding)"})
    batches = encode_batches(prompts, tokenizer, settings.batch_size, device)
    if settings.warmup:  # one short untimed call per row
        short = Sampling(min(sampling.max_new_tokens, 16), sampling.temperature, sampling.top_p)
        for row in measured.values():
            generate_batch(row, batches[0], short, pad_id, settings.seed)
    totals = {name: {"tokens": 0, "seconds": 0.0, "lengths": [], "outputs": []} for name in measured}
    names = list(measured)
    bar = tqdm(total=len(batches) * len(names), desc="bench (batched)", unit="batch", disable=not settings.progress)
    for index, batch in enumerate(batches):
        shift = index % len(names)
        for name in names[shift:] + names[:shift]:
            bar.set_postfix_str(f"batch {index} | {name}", refresh=False)
            sequences, lengths, seconds = generate_batch(measured[name], batch, sampling, pad_id,
                                                         settings.seed + index)
            outputs = new_tokens(sequences, batch["input_ids"].shape[1], stop_ids)
            total = totals[name]
            total["tokens"] += sum(len(row) for row in outputs)
            total["seconds"] += seconds
            total["lengths"] += lengths or []
            total["outputs"] += outputs
            bar.update(1)
    bar.close()

    reference = totals[REFERENCE]
    summaries = []
    for name, total in totals.items():
        row = measured[name]
        tps = total["tokens"] / total["seconds"] if total["seconds"] > 0 else None
        mismatched = sum(a != b for a, b in zip(reference["outputs"], total["outputs"]))
        summaries.append({
            "name": name,
            "kind": "target" if name == REFERENCE else row.kind,
            "block_size": 1 if name == REFERENCE else row.block_size,
            "tau": sum(total["lengths"]) / len(total["lengths"]) if total["lengths"] else None,
            "new_tokens_total": total["tokens"],
            "seconds_total": total["seconds"],
            "tokens_per_second": tps,
            "speedup_vs_target_generate": tps * reference["seconds"] / reference["tokens"] if tps else None,
            "greedy_match": None if not sampling.greedy else mismatched == 0,
            "mismatched_rows": mismatched if sampling.greedy else None,
        })
    bad = [s["name"] for s in summaries if s["greedy_match"] is False]
    return {
        "dels_hub_bench": 1,
        "mode": "batched",
        "versions": versions(),
        "machine": machine(device, load_at_start) | {"load_average_at_end": load_average()},
        "dtype": str(target.dtype).removeprefix("torch."),
        "device": str(device),
        "settings": settings.to_json() | {"block_size": block_size},
        "batches": len(batches),
        "prompts": [p.id for p in prompts],
        "rows": summaries,
        "skipped_rows": skipped,
        "greedy_check": None if not sampling.greedy else {"reference": REFERENCE, "ok": not bad,
                                                          "mismatched_rows": bad},
        "wall_seconds": time.perf_counter() - started,
    }


def batched_markdown(results: dict) -> str:
    """The README table of a batched run: one line per row."""
    settings = results["settings"]
    sampling = "T=0 (greedy)" if settings["temperature"] == 0 else f"T={settings['temperature']}"
    cores = results["machine"].get("gpu") or f"{results['machine']['cpu_count']} CPU cores"
    lines = [
        f"**dels-hub bench --batch-size {settings['batch_size']}** · dataset `{settings['dataset']}` "
        f"({len(results['prompts'])} prompts, {results['batches']} batches) · {sampling} · max "
        f"{settings['max_new_tokens']} new tokens · block size {settings['block_size']} · {results['dtype']} on "
        f"{results['device']} ({cores})",
        "",
        "| Row | tau | new tokens | tokens/s | vs target.generate | Greedy = target |",
        "|---|---|---|---|---|---|",
    ]
    for row in results["rows"]:
        tau_cell = "-" if row["tau"] is None else f"{row['tau']:.2f}"
        greedy = ("n/a (sampling)" if row["greedy_match"] is None else "reference" if row["name"] == REFERENCE
                  else "yes" if row["greedy_match"] else f"**MISMATCH ({row['mismatched_rows']} rows)**")
        tps, speed = row["tokens_per_second"], row["speedup_vs_target_generate"]
        lines.append(f"| {row['name']} | {tau_cell} | {row['new_tokens_total']} | "
                     f"{'-' if tps is None else f'{tps:.1f}'} | {'-' if speed is None else f'{speed:.2f}x'} | "
                     f"{greedy} |")
    lines += ["", "tau: tokens committed per verify step of a row of a batch, over every row's blocks. tokens/s: "
              "every row's new tokens (not the padding after its end) over the row's wall-clock seconds on the same "
              "batches, rows interleaved batch by batch."]
    return "\n".join(lines) + "\n"


def write_batched(results: dict, out) -> dict:
    """Write results.json and results.md to ``out``; returns their paths."""
    directory = Path(out)
    directory.mkdir(parents=True, exist_ok=True)
    files = {"results_json": directory / "results.json", "markdown": directory / "results.md"}
    results["files"] = {name: str(path) for name, path in files.items()}
    write_text_atomic(files["markdown"], batched_markdown(results))
    write_text_atomic(files["results_json"], json.dumps(results, indent=2, default=str))
    return results["files"]
