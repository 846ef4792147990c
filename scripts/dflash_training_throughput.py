"""Training throughput of a DFlash drafter recipe on this machine: seconds per step, split into the target pass
(features and greedy labels) and the drafter's forward and backward, and training tokens per second, for each
precision, anchors-per-sequence and thread count asked for. Steps run on the recipe's real data and model.

    OMP_NUM_THREADS=2 python scripts/dflash_training_throughput.py --recipe recipes/smollm2-135m-exact.dflash.toml \
        --precision fp32 bf16 --anchors 64 128 256 --threads 1 2 --steps 3 \
        --json results/smollm2/training/throughput.json
"""

import argparse
import itertools
import json
import statistics
import time
from pathlib import Path

import torch

from dels_hub.training.data import load_examples, step_generator
from dels_hub.training.dflash import DFlashTask, build_drafter, load_target_and_tokenizer
from dels_hub.training.recipe import DFlashTrainConfig, resolve_config


def time_steps(config, target, tokenizer, examples, steps: int) -> dict:
    """Median seconds of the target pass, the batch building, the forward and the backward over ``steps`` steps
    (after one warm-up step), and the training tokens per second they imply."""
    torch.manual_seed(0)
    task = DFlashTask(config, target, build_drafter(config, target, tokenizer), examples, examples[:1], "cpu")
    optimizer = torch.optim.AdamW(task.model.drafter.parameters(), lr=1e-4)
    autocast = torch.autocast("cpu", dtype=torch.bfloat16, enabled=config.precision == "bf16")
    rows = []
    for step in range(steps + 1):
        batch_examples = examples[step * config.batch_size : (step + 1) * config.batch_size]
        start = time.perf_counter()
        batch, tokens = task.make_batch(batch_examples, step_generator(0, step), step)
        built = time.perf_counter()
        with autocast:
            loss, _ = task.model(**batch)
        forward = time.perf_counter()
        loss.backward()
        optimizer.step()
        optimizer.zero_grad(set_to_none=True)
        done = time.perf_counter()
        if step:
            rows.append({"batch_s": built - start, "forward_s": forward - built, "backward_s": done - forward,
                         "step_s": done - start, "tokens": tokens,
                         "supervised_slots": int(batch["supervised"].sum())})
    step_s = statistics.median(r["step_s"] for r in rows)
    return {
        "batch_s": statistics.median(r["batch_s"] for r in rows),
        "forward_s": statistics.median(r["forward_s"] for r in rows),
        "backward_s": statistics.median(r["backward_s"] for r in rows),
        "step_s": step_s,
        "tokens_per_s": statistics.median(r["tokens"] for r in rows) / step_s,
        "supervised_slots_per_s": statistics.median(r["supervised_slots"] for r in rows) / step_s,
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--recipe", required=True)
    parser.add_argument("--precision", nargs="+", default=["fp32"], choices=["fp32", "bf16"])
    parser.add_argument("--anchors", nargs="+", type=int, default=[64])
    parser.add_argument("--threads", nargs="+", type=int, default=[torch.get_num_threads()])
    parser.add_argument("--steps", type=int, default=3, help="timed steps per setting, after one warm-up step")
    parser.add_argument("--json", type=Path)
    args = parser.parse_args()

    base = resolve_config(DFlashTrainConfig, argparse.Namespace(recipe=args.recipe, max_examples=200,
                                                                eval_examples=1))
    full_windows = None
    results = []
    for precision, anchors, threads in itertools.product(args.precision, args.anchors, args.threads):
        config = resolve_config(DFlashTrainConfig, argparse.Namespace(
            recipe=args.recipe, max_examples=200, eval_examples=1, precision=precision, anchors_per_seq=anchors))
        torch.set_num_threads(threads)
        target, tokenizer = load_target_and_tokenizer(config, torch.bfloat16 if precision == "bf16" else torch.float32)
        target.requires_grad_(False).eval()
        if full_windows is None:  # full-length windows only, so that every setting reads the same tokens
            examples, _ = load_examples(base, tokenizer)
            full_windows = [e for e in examples if len(e.ids) == base.max_length]
            needed = (args.steps + 1) * base.batch_size
            if len(full_windows) < needed:
                raise SystemExit(f"only {len(full_windows)} full-length windows in the recipe's first 200 records; "
                                 f"{needed} are needed: lower --steps")
        timing = time_steps(config, target, tokenizer, full_windows, args.steps)
        results.append({"precision": precision, "anchors_per_seq": anchors, "threads": threads, **timing})
        print(json.dumps(results[-1]), flush=True)
    if args.json:
        args.json.parent.mkdir(parents=True, exist_ok=True)
        args.json.write_text(json.dumps({"recipe": args.recipe, "batch_size": base.batch_size,
                                         "max_length": base.max_length, "results": results}, indent=1) + "\n")


if __name__ == "__main__":
    main()
