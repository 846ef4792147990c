"""The greedy check: at temperature 0 every row's tokens must equal ``target.generate``'s (``REFERENCE``),
prompt by prompt. Speculative decoding is lossless, so a difference is a bug: it is reported with where it
starts and the target's logit gap there (near 0: a numerical near-tie; large: a logic bug), and ``run_bench``
warns with ``GreedyMismatchWarning``; it is never hidden.
"""

import torch

from .lineup import REFERENCE
from .prompts import Prompt


class GreedyMismatchWarning(UserWarning):
    """A greedy row produced tokens different from the target alone: a losslessness bug."""


def first_difference(expected: list[int], got: list[int]) -> int | None:
    for position, (a, b) in enumerate(zip(expected, got)):
        if a != b:
            return position
    return None if len(expected) == len(got) else min(len(expected), len(got))


@torch.inference_mode()
def logit_gap(target, input_ids: torch.Tensor, expected: list[int], position: int, got: int) -> float:
    """Target logit of the expected token minus that of the token the row produced, after the shared prefix.

    A gap near 0 points at a numerical near-tie (batched verify vs single-token forward); a large one at
    a logic bug. Either way the rows differ and the mismatch stands.
    """
    prefix = torch.tensor([expected[:position]], dtype=torch.long, device=input_ids.device)
    logits = target(input_ids=torch.cat([input_ids, prefix], dim=1)).logits[0, -1].float()
    return float(logits[expected[position]] - logits[got])


def check_greedy(runs: dict, prompts: list[Prompt], target) -> dict:
    """Compare every row's tokens with ``target.generate``'s, prompt by prompt."""
    reference = runs[REFERENCE]
    mismatches = {}
    for name, row_runs in runs.items():
        if name == REFERENCE:
            continue
        found = []
        for prompt, ref, run in zip(prompts, reference, row_runs):
            position = first_difference(ref.tokens, run.tokens)
            if position is None:
                continue
            expected = ref.tokens[position] if position < len(ref.tokens) else None
            got = run.tokens[position] if position < len(run.tokens) else None
            entry = {"prompt": prompt.id, "position": position, "expected": expected, "got": got,
                     "reference_length": len(ref.tokens), "row_length": len(run.tokens)}  # fmt: skip
            first_turn = len(ref.samples[0].new_tokens)
            if expected is not None and got is not None and position < first_turn:
                entry["logit_gap"] = logit_gap(target, ref.first_input_ids, ref.tokens, position, got)
            found.append(entry)
        mismatches[name] = found
    bad = sorted(name for name, found in mismatches.items() if found)
    return {"reference": REFERENCE, "ok": not bad, "mismatched_rows": bad, "mismatches": mismatches}
