"""Heads against an n-gram baseline, on the same held-out blocks, scored by the same evaluation.

The n-gram models are fitted on the training text of a head recipe (same data, tokenizer and supervised tokens as
the head), and every model, n-gram or trained head, is scored by the training loop's own ``evaluate`` on the
recipe's held-out examples with the same anchors: per-position top-1 accuracy, the weighted loss, and the greedy
acceptance length those blocks imply for the model as a drafter on its own.

    python scripts/head_baseline.py --recipe recipes/smollm2-135m.head.toml --head upload/smollm2-dels-head \
        --orders 2 3 4 --eval-examples 128 --json results/heads/smollm2-baseline.json
"""

import argparse
import json
import shlex
import sys
import time
from pathlib import Path

import torch
from accelerate import Accelerator

from dels_hub.files import write_text_atomic
from dels_hub.heads.ngram import NGramHead
from dels_hub.loading import load_head, load_tokenizer
from dels_hub.training.data import load_examples
from dels_hub.training.head import HeadTask
from dels_hub.training.loop import evaluate
from dels_hub.training.recipe import HeadTrainConfig, read_recipe


def score(model, config, tokenizer, held_out) -> dict:
    task = HeadTask(config, tokenizer, model, [], held_out, torch.device("cpu"))
    record = evaluate(task.model, task, config, Accelerator(cpu=True), step=0, tokens_seen=0)
    accuracy = record["eval_accuracy"]
    return {"accuracy": accuracy, "mean_accuracy": sum(accuracy) / len(accuracy), "loss": record["eval_loss"],
            "acceptance": record["eval_acceptance"], "implied_tau": record["eval_tau"]}


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--recipe", required=True, help="the head recipe whose data, tokenizer and eval set to use")
    parser.add_argument("--head", action="append", default=[], help="a trained head to score beside the n-grams")
    parser.add_argument("--orders", type=int, nargs="+", default=[2, 3, 4], help="n-gram orders to fit")
    parser.add_argument("--eval-examples", type=int, default=None, help="held-out sequences (default: the recipe's)")
    parser.add_argument("--max-examples", type=int, default=None, help="training sequences (default: the recipe's)")
    parser.add_argument("--json", required=True, help="where to write the figures")
    args = parser.parse_args()
    for order in args.orders:
        if order < 2:
            parser.error(f"--orders must be >= 2 (a bigram), got {order}")
    overrides = {name: value for name, value in (("eval_examples", args.eval_examples),
                                                 ("max_examples", args.max_examples)) if value is not None}
    config = HeadTrainConfig(**read_recipe(HeadTrainConfig, args.recipe) | overrides)
    tokenizer = load_tokenizer(config.tokenizer, **({"gguf_file": config.gguf_file} if config.gguf_file else {}))
    started = time.perf_counter()
    train, held_out = load_examples(config, tokenizer)
    print(f"{len(train)} training sequences ({sum(len(e.ids) for e in train):,} tokens), {len(held_out)} held out "
          f"[{time.perf_counter() - started:.0f} s]", file=sys.stderr)
    models = {}
    for order in args.orders:
        started = time.perf_counter()
        models[f"{order}-gram"] = NGramHead.fit(((e.ids, e.loss_mask) for e in train), len(tokenizer), order)
        print(f"fitted the {order}-gram [{time.perf_counter() - started:.0f} s]", file=sys.stderr)
    for location in args.head:
        models[location] = load_head(location)
    figures = {}
    for name, model in models.items():
        started = time.perf_counter()
        figures[name] = score(model, config, tokenizer, held_out)
        print(f"{name}: mean accuracy {figures[name]['mean_accuracy']:.4f}, implied tau "
              f"{figures[name]['implied_tau']:.3f} [{time.perf_counter() - started:.0f} s]", file=sys.stderr)
    positions = len(next(iter(figures.values()))["accuracy"])
    print("| model | " + " | ".join(f"pos {k}" for k in range(1, positions + 1)) + " | mean | loss | implied tau |")
    print("|---" * (positions + 4) + "|")
    for name, entry in figures.items():
        cells = " | ".join(f"{100 * a:.1f}" for a in entry["accuracy"])
        print(f"| {name} | {cells} | {100 * entry['mean_accuracy']:.1f} | {entry['loss']:.3f} | "
              f"{entry['implied_tau']:.3f} |")
    write_text_atomic(Path(args.json), json.dumps({
        "command": "python " + shlex.join(sys.argv),
        "recipe": args.recipe,
        "train_sequences": len(train),
        "train_tokens": sum(len(e.ids) for e in train),
        "eval_sequences": len(held_out),
        "eval_anchors_per_sequence": config.anchors_per_seq,
        "models": figures,
    }, indent=1))
    return 0


if __name__ == "__main__":
    sys.exit(main())
