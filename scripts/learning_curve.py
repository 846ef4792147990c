"""Learning curves of drafter training runs: held-out acceptance per draft position and the implied tau, against
the training tokens read, from each run's ``train_log.jsonl`` (written by ``dels-hub train-dflash``).

    python scripts/learning_curve.py plain=runs/exact-b8-plain peek=runs/exact-b8-peek \
        --json results/smollm2/learning-curve/curve.json --png results/smollm2/learning-curve/curve.png

A run continued over several sessions (``--init-from`` the previous session's drafter) is given as several
folders joined by commas, in order: each later folder's tokens count on from the previous one's last eval.
"""

import argparse
import json
from pathlib import Path

from matplotlib.figure import Figure

from dels_hub.training.loop import read_log


def run_curve(folders: list[str]) -> list[dict]:
    """The eval records of consecutive runs, with ``train_tokens`` counted from the first run's start."""
    points, offset = [], 0
    for folder in folders:
        evals = [r for r in read_log(folder) if "eval_tau" in r and "train_tokens" in r]
        if not evals:
            raise SystemExit(f"{folder}: no evaluation with train_tokens in its train_log.jsonl (logs written before "
                             "train_tokens was recorded cannot be plotted against tokens)")
        for record in evals:
            points.append({"run": folder, "step": record["step"], "train_tokens": offset + record["train_tokens"],
                           "eval_tau": record["eval_tau"], "eval_loss": record["eval_loss"],
                           "eval_acceptance": record["eval_acceptance"], "eval_accuracy": record["eval_accuracy"]})
        offset = points[-1]["train_tokens"]
    return points


def plot(curves: dict[str, list[dict]], path: Path) -> None:
    figure = Figure(figsize=(11, 4.2))
    tau_axis, acceptance_axis = figure.subplots(1, 2)
    for name, points in curves.items():
        tokens = [p["train_tokens"] / 1e6 for p in points]
        tau_axis.plot(tokens, [p["eval_tau"] for p in points], marker="o", label=name)
        last = points[-1]["eval_acceptance"]
        acceptance_axis.plot(range(1, len(last) + 1), last, marker="o", label=f"{name} ({tokens[-1]:.2f} M tokens)")
    tau_axis.set(xlabel="training tokens (millions)", ylabel="implied tau (held-out, greedy)",
                 title="Held-out acceptance length")
    acceptance_axis.set(xlabel="draft position k", ylabel="P(accept k | accepted 1..k-1)",
                        title="Acceptance per position, last evaluation", ylim=(0, 1))
    for axis in (tau_axis, acceptance_axis):
        axis.grid(alpha=0.3)
        axis.legend()
    figure.tight_layout()
    path.parent.mkdir(parents=True, exist_ok=True)
    figure.savefig(path, dpi=110)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("runs", nargs="+", help="NAME=FOLDER[,FOLDER...]: a run, continued over the folders in order")
    parser.add_argument("--json", required=True, type=Path)
    parser.add_argument("--png", required=True, type=Path)
    args = parser.parse_args()
    curves = {}
    for spec in args.runs:
        name, sep, folders = spec.partition("=")
        if not sep or not folders:
            parser.error(f"expected NAME=FOLDER[,FOLDER...], got {spec!r}")
        curves[name] = run_curve(folders.split(","))
    args.json.parent.mkdir(parents=True, exist_ok=True)
    args.json.write_text(json.dumps(curves, indent=1) + "\n")
    plot(curves, args.png)


if __name__ == "__main__":
    main()
