"""What one speculative block costs on this machine, per drafter depth and block size, for SmolLM2-135M.

Chooses the SmolLM2 drafter's shape before any training: a forward pass costs the same whatever the
weights, so untrained drafters (tau = 1: every block commits exactly one token) time the block, and the
target alone (block size 1 through the same loop) times a plain decoding step. A drafter whose block costs
``c`` target steps gives a speedup of ``tau / c``; the table prints ``c`` and the tau each shape needs to
break even and to reach 1.8x.

    OMP_NUM_THREADS=1 python scripts/smollm2_block_costs.py --layers 1 2 3 5 --blocks 4 8 16
"""

import argparse
import json
import statistics

import torch

from dels_hub import DeLSGenerator, DeLSLocalHead, DeLSLocalHeadConfig
from dels_hub.loading import load_target, load_tokenizer
from dels_hub.proving_ground import smollm2_location, untrained_smollm2_drafter

PROMPT = "Write a Python function that returns the n-th Fibonacci number, with a docstring and tests."


def seconds_per_block(generator, input_ids, block_size, new_tokens, repeats, with_head):
    """Median decode seconds per verify step over ``repeats`` runs (after one warm-up)."""
    head = generator.head
    generator.head = head if with_head else None
    times = []
    for run in range(repeats + 1):
        out = generator.generate(
            input_ids, max_new_tokens=new_tokens, do_sample=False, block_size=block_size, policy="fixed",
            return_dict_in_generate=True,
        )
        if run:
            times.append(out.decode_seconds / max(len(out.acceptance_lengths) - 1, 1))
    generator.head = head
    return statistics.median(times)


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--layers", type=int, nargs="+", default=[1, 2, 3, 5])
    parser.add_argument("--blocks", type=int, nargs="+", default=[4, 8, 16])
    parser.add_argument("--new-tokens", type=int, default=48)
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--json", help="also write the rows here")
    args = parser.parse_args()

    directory, kwargs = smollm2_location()
    tokenizer = load_tokenizer(directory, **kwargs)
    target = load_target(directory, torch.float32, **kwargs).eval()
    input_ids = tokenizer.apply_chat_template(
        [{"role": "user", "content": PROMPT}], add_generation_prompt=True, return_tensors="pt", return_dict=True
    )["input_ids"]
    head = DeLSLocalHead(DeLSLocalHeadConfig(
        vocab_size=target.config.vocab_size, block_size=max(args.blocks), embedding_rank=64, hidden_size=384,
        output_rank=64,
    )).eval()

    torch.manual_seed(0)
    plain = DeLSGenerator(target, untrained_smollm2_drafter(target, max(args.blocks)), None, tokenizer)
    step = seconds_per_block(plain, input_ids, 1, args.new_tokens, args.repeats, with_head=False)
    print(f"target alone: {step * 1e3:.1f} ms per token ({torch.get_num_threads()} threads)")
    rows = []
    for layers in args.layers:
        drafter = untrained_smollm2_drafter(target, max(args.blocks), num_layers=layers)
        generator = DeLSGenerator(target, drafter, head, tokenizer)
        for block in args.blocks:
            for with_head in (False, True):
                block_s = seconds_per_block(generator, input_ids, block, args.new_tokens, args.repeats, with_head)
                cost = block_s / step
                rows.append({"layers": layers, "block_size": block, "head": with_head, "block_ms": block_s * 1e3,
                             "cost_in_target_steps": cost, "tau_for_1x": cost, "tau_for_1.8x": 1.8 * cost})
                print(f"layers {layers} block {block:2d} {'DeLS  ' if with_head else 'DFlash'}: "
                      f"{block_s * 1e3:6.1f} ms/block = {cost:.2f} target steps; tau for 1.8x: {1.8 * cost:.2f}",
                      flush=True)
    if args.json:
        with open(args.json, "w") as handle:
            json.dump({"target_ms_per_token": step * 1e3, "threads": torch.get_num_threads(), "rows": rows},
                      handle, indent=1)


if __name__ == "__main__":
    main()
