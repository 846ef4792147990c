"""Summary statistics of a benchmark row: tau with its 95% interval, acceptance profiles, medians, speedups.

Machines are noisy, so times are summarized by medians and speedups are ratios of medians (plus the
per-prompt paired ratios); tau is the mean over prompts of each prompt's mean acceptance length
(DFlash's definition), with a Student-t 95% interval over prompts.
"""

import math
import statistics
from collections import Counter

# Two-sided 95% Student-t quantiles t(0.975, df) for df = 1..30; larger df use a Cornish-Fisher expansion.
T975 = (
    12.706, 4.303, 3.182, 2.776, 2.571, 2.447, 2.365, 2.306, 2.262, 2.228,
    2.201, 2.179, 2.160, 2.145, 2.131, 2.120, 2.110, 2.101, 2.093, 2.086,
    2.080, 2.074, 2.069, 2.064, 2.060, 2.056, 2.052, 2.048, 2.045, 2.042,
)  # fmt: skip


def t_quantile_975(df: int) -> float:
    if df <= len(T975):
        return T975[df - 1]
    z = 1.959964
    return z + (z**3 + z) / (4 * df) + (5 * z**5 + 16 * z**3 + 3 * z) / (96 * df**2)


def mean_ci95(values: list[float]) -> dict:
    """``{"mean", "low", "high", "n"}``; the interval is None with fewer than two values."""
    values = [float(v) for v in values]
    if not values:
        return {"mean": None, "low": None, "high": None, "n": 0}
    mean = statistics.fmean(values)
    if len(values) < 2:
        return {"mean": mean, "low": None, "high": None, "n": 1}
    half = t_quantile_975(len(values) - 1) * statistics.stdev(values) / math.sqrt(len(values))
    return {"mean": mean, "low": mean - half, "high": mean + half, "n": len(values)}


def tau_from_counters(drafts: int | None, accepted: int | None) -> float | None:
    """An engine's acceptance length from its counters: accepted drafts plus the bonus token, per verify step
    (vLLM's ``spec_decode_num_drafts`` and ``spec_decode_num_accepted_tokens``); None without drafts."""
    if not drafts or accepted is None:
        return None
    return (accepted + drafts) / drafts


def median(values: list[float]) -> float | None:
    return statistics.median(values) if values else None


def tau_per_prompt(acceptance_lengths: list[int]) -> float | None:
    """Mean tokens committed per verify step (bonus included) of one prompt; None if no step ran."""
    return statistics.fmean(acceptance_lengths) if acceptance_lengths else None


def acceptance_histogram(per_prompt_lengths: list[list[int]]) -> dict[int, int]:
    """How many verify steps committed 1, 2, ... tokens, pooled over prompts."""
    counts = Counter(length for lengths in per_prompt_lengths for length in lengths)
    return {length: counts[length] for length in sorted(counts)}


def position_profile(per_prompt_lengths: list[list[int]], block_size: int) -> list[float | None]:
    """Per-position acceptance: entry k is P(a verify step committed more than k + 1 tokens), i.e. the rate
    at which block position k + 1 (the k-th draft) was accepted, for k = 0 .. block_size - 2.

    Steps cut short by the token budget or a stop token count as they were recorded, as in tau.
    """
    steps = [length for lengths in per_prompt_lengths for length in lengths]
    if not steps or block_size < 2:
        return []
    return [sum(length > k + 1 for length in steps) / len(steps) for k in range(block_size - 1)]


def speedup(baseline_tpot: list[float], row_tpot: list[float]) -> dict:
    """Speedup of a row over the baseline from time per output token (same prompts, same order).

    ``ratio_of_medians`` = median(baseline TPOT) / median(row TPOT); ``paired`` holds the per-prompt
    ratios and ``paired_median`` their median.
    """
    pairs = [(b, r) for b, r in zip(baseline_tpot, row_tpot) if b is not None and r is not None and r > 0]
    paired = [b / r for b, r in pairs]
    base, row = median([b for b, _ in pairs]), median([r for _, r in pairs])
    return {
        "ratio_of_medians": base / row if base is not None and row else None,
        "paired_median": median(paired),
        "paired_min": min(paired) if paired else None,
        "paired_max": max(paired) if paired else None,
        "paired": paired,
    }
