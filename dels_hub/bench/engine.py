"""vLLM as a peer in ``dels-hub bench --engine PYTHON``: the target alone, + DFlash and + DFlash + head (our
plugin), each served by vLLM on the bench's own prompts, at concurrency 1 and 8.

vLLM pins its own torch and transformers, so it runs in its own environment (``make engine``): each row is one
``PYTHON -m dels_hub.bench.engine_worker`` process, after the in-process rows. The prompts are the token ids of each
prompt's first turn through the same chat template, so greedy answers are compared with ``target.generate``'s
first turns. tau comes from vLLM's own counters: (accepted + drafts) / drafts.
"""

import json
import subprocess
import tempfile
from pathlib import Path

from tqdm.auto import tqdm

from ..serving import vllm_speculative_config
from .stats import tau_from_counters

CONCURRENCY = (1, 8)
ROWS = ("vLLM target", "vLLM + DFlash", "vLLM + DFlash + head")


def engine_rows(settings, prompt_ids: list[list[int]], reference: list[list[int]] | None, block_size: int,
                dtype: str, device: str) -> tuple[list[dict], list[dict]]:
    """Run the vLLM rows with the bench's first drafter and head; returns ``(rows, skipped)``. ``reference``: the
    target's greedy first-turn answers (None when sampling). ``dtype`` and ``device`` are the bench's: vLLM runs
    the target in the same dtype, eagerly on a CPU and with its CUDA graphs on a GPU."""
    target = str(settings.engine_target or settings.target)
    drafter, head = settings.drafters[0], (settings.heads or [None])[0]
    configs = [(ROWS[0], None), (ROWS[1], vllm_speculative_config(drafter, None, block_size - 1))]
    skipped = []
    if head is None:
        skipped.append({"row": ROWS[2], "reason": "no head given"})
    else:
        fusion = {"alpha": settings.alpha, "beta": settings.beta}
        configs.append((ROWS[2], vllm_speculative_config(drafter, head, block_size - 1, **fusion)))
    rows = []
    for name, speculative in tqdm(configs, desc="bench: vLLM rows", unit="row", disable=not settings.progress):
        result = run_worker(settings.engine, {
            "target": target, "dtype": dtype, "enforce_eager": device == "cpu",
            "prompts": prompt_ids, "max_tokens": settings.max_new_tokens,
            "temperature": settings.temperature, "top_p": settings.top_p, "seed": settings.seed,
            "concurrency": [min(c, len(prompt_ids)) for c in CONCURRENCY], "speculative_config": speculative,
        })
        rows.append(summarize_row(name, result, reference))
    return rows, skipped


def run_worker(python: str, spec: dict) -> dict:
    with tempfile.TemporaryDirectory(prefix="dels-engine-") as folder:
        spec_path = Path(folder) / "spec.json"
        spec_path.write_text(json.dumps(spec), encoding="utf-8")
        done = subprocess.run([python, "-m", "dels_hub.bench.engine_worker", str(spec_path)], capture_output=True,
                              text=True)
    lines = [line for line in done.stdout.splitlines() if line.startswith("RESULT ")]
    if done.returncode != 0 or not lines:
        raise RuntimeError(f"the vLLM worker failed (exit {done.returncode}):\n{done.stderr[-3000:]}")
    return json.loads(lines[-1].removeprefix("RESULT "))


def summarize_row(name: str, result: dict, reference: list[list[int]] | None) -> dict:
    phases = result["concurrency"]
    row = {"name": name, "greedy_equal": None if reference is None else result["answers"] == reference}
    for label, (concurrency, phase) in zip(("c1", "c8"), phases.items()):
        counters = phase["spec_decode"]
        row[f"concurrency_{label}"] = int(concurrency)  # 8, or every prompt when there are fewer
        row[f"tokens_per_second_{label}"] = phase["new_tokens"] / phase["seconds"]
        row[f"tau_{label}"] = tau_from_counters(counters.get("vllm:spec_decode_num_drafts"),
                                                counters.get("vllm:spec_decode_num_accepted_tokens"))
    row["new_tokens"] = next(iter(phases.values()))["new_tokens"]
    return row


def engine_markdown(results: dict) -> str:
    """The vLLM rows as a table, with our loop's rows' tokens/s on the same prompts beside them."""
    engine = results.get("engine")
    if not engine:
        return ""
    lines = [
        "",
        f"**vLLM** ({engine['python']}, target `{engine['target']}`): first turns of the same prompts, "
        f"{engine['new_tokens']} new tokens at concurrency 1.",
        "",
        f"| Row | tau | tokens/s, concurrency 1 | tokens/s, concurrency {engine['rows'][0]['concurrency_c8']} "
        f"| Greedy = target |",
        "|---|---|---|---|---|",
    ]
    for row in engine["rows"]:
        tau = "-" if row["tau_c1"] is None else f"{row['tau_c1']:.2f}"
        greedy = "-" if row["greedy_equal"] is None else ("yes" if row["greedy_equal"] else "**NO**")
        lines.append(f"| {row['name']} | {tau} | {row['tokens_per_second_c1']:.1f} | "
                     f"{row['tokens_per_second_c8']:.1f} | {greedy} |")
    for skipped in engine["skipped"]:
        lines.append(f"\nSkipped `{skipped['row']}`: {skipped['reason']}.")
    return "\n".join(lines) + "\n"
