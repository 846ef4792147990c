"""Replay the package's cost-aware policy beside two simpler variants of it, over both records, at one cost table:
the same policy that never drafts (copy blocks and plain steps only), and one that also takes copy blocks only where
the copy expert's match at the anchor is at least 3 tokens long. Prints the median, geometric mean and mean of the
lower half of the per-prompt speedups (a bimodal spread: the median sits between prompts that repeat themselves
and prompts that do not).

    python results/smollm2/cost-aware/policy-replay/variants.py [--verify-ms ... --draft-ms ...]
"""
import argparse
import contextlib
import io
import math
import statistics
from pathlib import Path

import replay

from dels_hub.generation.policy import PLAIN, CostAware, ProbeSchedule

HERE = Path(__file__).parent
# All steps on oneDNN (the loop's default), one thread, this project's AMD EPYC: the calibrated table.
ONEDNN_MS, ONEDNN_DRAFT_MS = [30.7, 44.6, 42.5, 44.5, 43.8, 46.1, 51.0, 50.6], 21.0


class NeverDrafts(CostAware):
    """Copy blocks at matches, plain steps elsewhere, never a drafted block (no probes either)."""

    def __init__(self, cost, widths=None):
        super().__init__(cost, widths)
        self.matched_probe = ProbeSchedule(interval=math.inf)

    def draft_now(self, match_lengths):
        return False


class CopiesFromMatch3(NeverDrafts):
    """As ``NeverDrafts``, and a match shorter than 3 tokens at the anchor is a plain step."""

    def block_kind(self, copy_lengths, can_copy):
        if copy_lengths is not None and all(row[0] < 3 for row in copy_lengths):
            return PLAIN
        return super().block_kind(copy_lengths, can_copy)


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--verify-ms", type=float, nargs="+", default=ONEDNN_MS)
    parser.add_argument("--draft-ms", type=float, default=ONEDNN_DRAFT_MS)
    args = parser.parse_args(argv)
    table = ["--quiet", "--verify-ms", *map(str, args.verify_ms), "--draft-ms", str(args.draft_ms)]
    for variant in (CostAware, NeverDrafts, CopiesFromMatch3):
        cells = []
        for record in ("humaneval-16", "sharegpt-16"):
            with contextlib.redirect_stdout(io.StringIO()):
                results = replay.main([str(HERE / f"{record}.json"), *table], policy_class=variant)
            speedups = sorted(r["speedup"] for r in results)
            geometric = math.exp(statistics.mean(map(math.log, speedups)))
            lower = statistics.mean(speedups[: len(speedups) // 2])
            cells.append(f"{record}: median {statistics.median(speedups):.3f}x, geometric {geometric:.3f}x, "
                         f"lower half {lower:.3f}x")
        print(f"{variant.__name__:>16}  " + " | ".join(cells))


if __name__ == "__main__":
    main()
