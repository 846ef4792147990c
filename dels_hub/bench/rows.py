"""Benchmark rows measured through our own loop: target alone (block size 1), DFlash only, and DeLS per head.

A row turns one encoded prompt into a ``Sample``: the new tokens, the tokens committed per verify step,
and wall-clock times taken at the call boundary (the same boundary for every row, ours and the
transformers peers in ``peers.py``), so setup costs count alike.
"""

import time
from dataclasses import dataclass, field

import torch

from ..compat import synchronize


@dataclass
class Sampling:
    """Decoding settings shared by every row: ``temperature == 0`` is greedy."""

    max_new_tokens: int
    temperature: float = 0.0
    top_p: float = 1.0

    @property
    def greedy(self) -> bool:
        return self.temperature == 0

    def generate_kwargs(self) -> dict:
        """Keyword arguments for ``generate`` (ours or transformers'): no top-k, so every row warps alike."""
        if self.greedy:
            return {"do_sample": False, "max_new_tokens": self.max_new_tokens}
        return {
            "do_sample": True,
            "temperature": self.temperature,
            "top_p": self.top_p,
            "top_k": 0,
            "max_new_tokens": self.max_new_tokens,
        }


@dataclass
class Sample:
    """One row on one prompt turn. Times in seconds from the start of the ``generate`` call."""

    new_tokens: list[int]
    acceptance_lengths: list[int] | None  # tokens per verify step after the prefill; None when unknown
    time_to_first_token: float
    total_seconds: float
    peak_memory_bytes: int | None = None
    policy: dict | None = None  # what our loop's draft policy chose (``DeLSGenerateOutput.policy_summary``)


@dataclass
class Row:
    """A named way of generating. ``block_size`` is the verify width (1 for plain decoding)."""

    name: str
    kind: str  # "target", "dflash", "dels", "peer"
    block_size: int
    head: str | None = None
    notes: list[str] = field(default_factory=list)
    compare_to: str | None = None  # a DeLS row's DFlash-only row (same drafter): its gain is reported paired
    compare_to_head: str | None = None  # with several heads, the first head's DeLS row (same drafter), idem
    compare_to_base: str | None = None  # a "+ copy" row's row without the copy expert, idem
    compare_to_full_vocab: str | None = None  # a pruned-vocabulary row's row that drafts over every token, idem
    compare_to_peer: str | None = None  # a "+ copy" row's model-free copier (prompt lookup) in the same run, idem
    compare_to_policy: str | None = None  # a cost-aware row's fixed-blocks twin, idem
    compare_to_chain: str | None = None  # a tree row's chain row (same drafter, head and copy), idem

    def generate(self, input_ids: torch.Tensor, sampling: Sampling, seed: int) -> Sample:
        raise NotImplementedError


# Each paired gain a summary row may hold -> the ``Row`` field naming its baseline row.
GAINS = {
    "gain_over_dflash": "compare_to",
    "gain_over_first_head": "compare_to_head",
    "gain_of_copy": "compare_to_base",
    "gain_of_draft_vocab": "compare_to_full_vocab",
    "gain_over_prompt_lookup": "compare_to_peer",
    "gain_over_fixed_blocks": "compare_to_policy",
    "gain_of_tree": "compare_to_chain",
}


class LoopRow(Row):
    """``DeLSGenerator.generate``: ``block_size=1`` is the target alone through the same loop. ``policy`` and
    ``draft_mode`` as in ``generate`` (None: the generator's)."""

    def __init__(self, name, kind, generator, block_size, head=None, alpha=None, beta=None, policy=None,
                 draft_mode=None):
        super().__init__(name=name, kind=kind, block_size=block_size, head=head)
        self.generator = generator
        self.alpha, self.beta = alpha, beta
        self.policy, self.draft_mode = policy, draft_mode

    def generate(self, input_ids, sampling, seed):
        fusion = {"alpha": self.alpha, "beta": self.beta} if self.generator.head is not None else {}
        synchronize(input_ids.device)
        started = time.perf_counter()
        choices = {name: value for name, value in (("policy", self.policy), ("draft_mode", self.draft_mode))
                   if value is not None}
        out = self.generator.generate(
            input_ids,
            block_size=self.block_size,
            seed=seed,
            return_dict_in_generate=True,
            **fusion,
            **choices,
            **sampling.generate_kwargs(),
        )
        synchronize(input_ids.device)
        total = time.perf_counter() - started
        return Sample(
            new_tokens=out.sequences[0, input_ids.shape[1] :].tolist(),
            acceptance_lengths=list(out.acceptance_lengths),
            # The loop times its prefill itself; argument handling before it counts as time to first token.
            time_to_first_token=total - out.decode_seconds,
            total_seconds=total,
            policy=out.policy_summary,
        )


def plain_decoding_row(name: str, generator, draft_mode=None) -> LoopRow:
    """Block size 1 through the loop: plain autoregressive decoding, the baseline of every speedup."""
    return LoopRow(name, "target", generator, 1, draft_mode=draft_mode)
