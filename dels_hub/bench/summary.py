"""The summary of a bench run: per row, tau with its 95% interval, acceptance histograms, median time per
output token and the speedups over ``BASELINE`` and ``REFERENCE``, and the paired per-prompt gain of a row over
the row it is compared with (a DeLS row over its DFlash row, a copy row over its base, and so on).
"""

from ..generation.policy import pooled
from . import stats
from .lineup import BASELINE, REFERENCE
from .prompts import Prompt
from .rows import GAINS, Row


def summarize(rows: list[Row], runs: dict, prompts: list[Prompt], greedy: dict | None) -> list[dict]:
    records = {name: [run.record(p.id) for p, run in zip(prompts, row_runs)] for name, row_runs in runs.items()}
    tpot = {name: [r["tpot"] for r in recs] for name, recs in records.items()}
    summaries = []
    for row in rows:
        if row.name not in records:
            continue
        recs = records[row.name]
        per_prompt_lengths = [r["acceptance_lengths"] for r in recs if r["acceptance_lengths"] is not None]
        taus = [r["tau"] for r in recs if r["tau"] is not None]
        peaks = [r["peak_memory_bytes"] for r in recs if r["peak_memory_bytes"] is not None]
        summary = {
            "name": row.name,
            "kind": row.kind,
            "block_size": row.block_size,
            "head": row.head,
            "notes": row.notes,
            "tau": stats.mean_ci95(taus),
            "acceptance_histogram": stats.acceptance_histogram(per_prompt_lengths),
            "acceptance_profile": stats.position_profile(per_prompt_lengths, row.block_size),
            "tpot_median": stats.median([t for t in tpot[row.name] if t is not None]),
            "tokens_per_second_median": stats.median([r["tokens_per_second"] for r in recs if r["tokens_per_second"]]),
            "time_to_first_token_median": stats.median([r["time_to_first_token"] for r in recs]),
            "new_tokens_total": sum(r["new_tokens"] for r in recs),
            "peak_memory_bytes": max(peaks) if peaks else None,
            "speedup": stats.speedup(tpot[BASELINE], tpot[row.name]),
            "speedup_vs_target_generate": stats.speedup(tpot[REFERENCE], tpot[row.name]),
            "greedy_match": None if greedy is None else (row.name == REFERENCE or not greedy["mismatches"][row.name]),
            "policy": pooled([r["policy"] for r in recs]),
            "per_prompt": recs,
        }
        for key, link in GAINS.items():
            base = getattr(row, link)
            if base in records:
                summary[key] = gain_over(records[base], recs, tpot[base], tpot[row.name]) | {"baseline": base}
        summaries.append(summary)
    return summaries


def scored_pairs(base_records: list[dict], row_records: list[dict]) -> list[tuple[float, float]]:
    """(baseline tau, row tau) per prompt, over the prompts that both rows scored."""
    return [(b["tau"], r["tau"]) for b, r in zip(base_records, row_records)
            if b["tau"] is not None and r["tau"] is not None]


def tau_gain(pairs: list[tuple[float, float]]) -> dict:
    """``(baseline tau, row tau)`` per prompt -> the per-prompt differences (mean and 95% interval) and the relative
    tau gain of the means."""
    difference = stats.mean_ci95([r - b for b, r in pairs])
    base_mean = stats.mean_ci95([b for b, _ in pairs])["mean"]
    return {"tau_difference": difference,
            "tau_gain_relative": difference["mean"] / base_mean if base_mean else None}


def gain_over(base_records: list[dict], row_records: list[dict], base_tpot: list, row_tpot: list) -> dict:
    """A row against its baseline row on the same prompts: ``tau_gain`` of the prompts both scored, and the speedup
    (baseline TPOT over row TPOT)."""
    return tau_gain(scored_pairs(base_records, row_records)) | {"speedup": stats.speedup(base_tpot, row_tpot)}
