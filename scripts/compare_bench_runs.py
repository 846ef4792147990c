"""Each row of one `dels-hub bench` run against the same row of another run on the same prompts, paired per prompt.

    python scripts/compare_bench_runs.py BEFORE_DIR AFTER_DIR [--rename OLD=NEW ...] [--json OUT]

Use it when one part changed between two runs with the same settings (a drafter, a head's fusion weights): tau
differences are paired per prompt, and at T=0 they are exact, since greedy decoding is deterministic. Speeds from
two runs are not compared: they depend on what else the machine was doing; each run's own speedup column is the
figure to quote. ``--rename`` pairs rows whose names changed between the runs.
"""

import argparse
import json
import sys
from pathlib import Path

from dels_hub.bench.stats import mean_ci95
from dels_hub.bench.summary import scored_pairs
from dels_hub.files import write_text_atomic


def load(run_dir: Path) -> dict:
    path = run_dir / "results.json"
    if not path.is_file():
        sys.exit(f"compare_bench_runs: {str(path)!r} does not exist (give the folder a bench run wrote with --out)")
    return json.loads(path.read_text())


def compare(before: dict, after: dict, renamed: dict) -> list[dict]:
    prompts_before, prompts_after = before["prompts"], after["prompts"]
    if prompts_before != prompts_after:
        sys.exit("compare_bench_runs: the two runs did not use the same prompts; per-prompt pairs need them")
    rows_after = {row["name"]: row for row in after["rows"]}
    compared = []
    for row in before["rows"]:
        other = rows_after.get(renamed.get(row["name"], row["name"]))
        if other is None or row["tau"].get("mean") is None:
            continue
        differences = [after - before for before, after in scored_pairs(row["per_prompt"], other["per_prompt"])]
        compared.append({"row": other["name"], "tau_before": row["tau"]["mean"], "tau_after": other["tau"]["mean"],
                         "tau_difference": mean_ci95(differences)})
    return compared


def split_rename(pair: str, names: set[str]) -> tuple[str, str]:
    """``OLD=NEW`` where row names hold '=' themselves (``DFlash (b=8)``): split at the '=' that ends a row name of
    BEFORE."""
    for at, character in enumerate(pair):
        if character == "=" and pair[:at] in names:
            return pair[:at], pair[at + 1 :]
    sys.exit(f"compare_bench_runs: --rename {pair!r} does not start with a row name of BEFORE and '=' "
             f"(its rows: {sorted(names)})")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("before", type=Path)
    parser.add_argument("after", type=Path)
    parser.add_argument("--rename", nargs="+", default=[], metavar="OLD=NEW", help="a row's name in each run")
    parser.add_argument("--json", type=Path, default=None)
    args = parser.parse_args()
    before = load(args.before)
    names = {row["name"] for row in before["rows"]}
    renamed = dict(split_rename(pair, names) for pair in args.rename)
    compared = compare(before, load(args.after), renamed)
    for entry in compared:
        difference = entry["tau_difference"]
        print(f"{entry['row']}: tau {entry['tau_before']:.3f} -> {entry['tau_after']:.3f}, paired "
              f"{difference['mean']:+.3f} (95% CI {difference['low']:+.3f} to {difference['high']:+.3f})")
    if args.json:
        write_text_atomic(args.json, json.dumps({"before": str(args.before), "after": str(args.after),
                                                 "rows": compared}, indent=1))


if __name__ == "__main__":
    main()
