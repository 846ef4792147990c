"""Replay the cost-aware policy (``dels_hub.generation.policy.CostAware``, the loop's own class) over a record of
``record.py``: at every block it sees what the loop would hand it (the copy continuation's match lengths at the
anchor, and the drafts' confidences when it drafts), commits what that block would have committed, and is charged
the cost table's price. Prints each prompt's speedup over plain decoding (a TPOT ratio, as the bench's paired
speedup) next to the hindsight bound (the cheapest sequence of blocks, by dynamic programming) on the same record
and table.

    python results/smollm2/cost-aware/policy-replay/replay.py \
        results/smollm2/cost-aware/policy-replay/humaneval-16.json
"""
import argparse
import json
import statistics

from dels_hub.generation.cost_model import CostModel
from dels_hub.generation.policy import COPIED, DRAFTED, CostAware

# The loop's calibrated table behind the hindsight bound (one thread, packed widths 4 and 8; ../hindsight-bound/).
VERIFY_MS = [59.4, 94.0, 112.3, 86.3, 95.2, 92.9, 100.6, 92.7]
DRAFT_MS = 20.1


def replay(anchors: list[dict], tokens: int, policy) -> tuple[float, dict]:
    """``(milliseconds after the first token, block counts by kind)`` of ``policy``'s way through one prompt, at the
    prices of its cost table."""
    cost = policy.cost
    verify_ms = cost.verify_ms
    k = len(verify_ms) - 1
    i, committed, total_ms, first, kinds = 1, 1, 0.0, True, {"plain": 0, "copied": 0, "drafted": 0}
    while committed < tokens:
        anchor = anchors[i]
        kind = policy.block_kind([anchor["copy_lengths"]], True)
        if kind == DRAFTED:
            plan = policy.plan([anchor["confidence"]], k + 1, 1)
            count, ms = min(anchor["draft_accepted"], plan.width - 1) + 1, cost.draft_ms + verify_ms[plan.width - 1]
        elif kind == COPIED:
            plan = policy.copy_plan([anchor["copy_lengths"]], 1)
            count, ms = min(anchor["copy_accepted"], plan.width - 1) + 1, verify_ms[plan.width - 1]
        else:
            plan = policy.plain(1)
            count, ms = 1, verify_ms[0]
        count = min(count, tokens - committed)
        committed += count
        policy.observe(plan, [count], [committed < tokens], ms, [anchor["match"]], timed=not (first and plan.drafted))
        first = first and not plan.drafted
        kinds[plan.kind] += 1
        total_ms += ms
        i += count
    return total_ms, kinds


def hindsight_ms(anchors: list[dict], tokens: int, verify_ms, draft_ms) -> float:
    """The cheapest sequence of blocks from the first anchor after the prefill's token (dynamic programming)."""
    k, end = len(verify_ms) - 1, tokens  # anchor index i has committed i tokens; done at ``tokens``
    best = {end: 0.0}
    for i in range(end - 1, 0, -1):
        a = anchors[i]
        options = [verify_ms[0] + best[i + 1]]
        for width in range(2, k + 2):
            if a["match"]:
                options.append(verify_ms[width - 1] + best[min(i + min(a["copy_accepted"], width - 1) + 1, end)])
            drafted_end = min(i + min(a["draft_accepted"], width - 1) + 1, end)
            options.append(draft_ms + verify_ms[width - 1] + best[drafted_end])
        best[i] = min(options)
    return best[1]


def main(argv=None, policy_class=CostAware) -> list[dict]:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("record")
    parser.add_argument("--verify-ms", type=float, nargs="+", default=VERIFY_MS)
    parser.add_argument("--draft-ms", type=float, default=DRAFT_MS)
    parser.add_argument("--quiet", action="store_true")
    args = parser.parse_args(argv)
    rows = json.load(open(args.record))["rows"]
    # One policy for every prompt, as a bench row's generator keeps its policy's calibration between calls.
    policy = policy_class(CostModel(key={}, verify_ms=list(args.verify_ms), draft_ms=args.draft_ms))
    results = []
    for row in rows:
        plain = (row["tokens"] - 1) * args.verify_ms[0]
        ms, kinds = replay(row["anchors"], row["tokens"], policy)
        bound = hindsight_ms(row["anchors"], row["tokens"], args.verify_ms, args.draft_ms)
        results.append({"prompt": row["prompt"], "speedup": plain / ms, "bound": plain / bound, **kinds})
        if not args.quiet:
            print(f"{row['prompt']:>14}  policy {plain / ms:.3f}x  bound {plain / bound:.3f}x  {kinds}")
    print(f"median: policy {statistics.median(r['speedup'] for r in results):.3f}x, "
          f"bound {statistics.median(r['bound'] for r in results):.3f}x")
    return results


if __name__ == "__main__":
    main()
