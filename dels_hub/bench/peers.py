"""Rows measured through transformers' own ``generate``: the target alone, and the peers that ship with it.

* ``target.generate``: plain decoding, the independent reference for greedy token equality.
* prompt-lookup decoding (``prompt_lookup_num_tokens``), the model-free peer.
* transformers' built-in DFlash path (``generate(assistant_model=..., speculation_type="dflash")``, the
  ``DFlashTokenCandidateGenerator``), where the installed version has it. That path calls its assistant as
  ``assistant(noise_embeds=, context_hidden_states=, position_ids=, attention_mask=, cache=)`` and reads
  ``.last_hidden_state``; no z-lab-format checkpoint loads into it natively, so ``DFlashAssistant`` adapts
  the same drafter weights to that call, and the row measures transformers' assisted-decoding loop.

Times come from a ``TimingStreamer``: the first ``put`` after the prompt marks the first token, and each
``put`` of assisted decoding is one verify step, which gives the acceptance lengths.
"""

import time

import torch
from torch import nn
from transformers import GenerationConfig
from transformers.generation.streamers import BaseStreamer
from transformers.modeling_outputs import BaseModelOutput

from ..compat import synchronize
from .rows import Row, Sample


class TimingStreamer(BaseStreamer):
    """Records when the first new token arrives and how many tokens each later ``put`` carries."""

    def __init__(self):
        self.prompt_seen = False
        self.first_token_at = None
        self.chunks: list[int] = []

    def put(self, value):
        if not self.prompt_seen:  # generate() puts the prompt first
            self.prompt_seen = True
            return
        if self.first_token_at is None:
            self.first_token_at = time.perf_counter()
        self.chunks.append(value.numel())

    def end(self):
        pass


def supports_prompt_lookup() -> str | None:
    """None when supported, else the reason the row is skipped."""
    if "prompt_lookup_num_tokens" not in GenerationConfig().to_dict():
        return "the installed transformers has no prompt_lookup_num_tokens"
    return None


def supports_transformers_dflash() -> str | None:
    try:
        from transformers.generation import DFlashTokenCandidateGenerator  # noqa: F401
    except ImportError:
        return "the installed transformers has no DFlash speculation path (DFlashTokenCandidateGenerator)"
    if "speculation_type" not in GenerationConfig().to_dict():
        return "the installed transformers' GenerationConfig has no speculation_type"
    return None


class HFRow(Row):
    """``target.generate`` with extra keyword arguments (none: the target alone)."""

    def __init__(self, name, kind, target, block_size, pad_token_id=None, **extra):
        super().__init__(name=name, kind=kind, block_size=block_size)
        self.target = target
        self.pad_token_id = pad_token_id
        self.extra = extra

    def generate(self, input_ids, sampling, seed):
        streamer = TimingStreamer()
        if not sampling.greedy:
            torch.manual_seed(seed)
        synchronize(input_ids.device)
        started = time.perf_counter()
        sequences = self.target.generate(
            input_ids,
            attention_mask=torch.ones_like(input_ids),
            streamer=streamer,
            pad_token_id=self.pad_token_id,
            **self.extra,
            **sampling.generate_kwargs(),
        )
        synchronize(input_ids.device)
        total = time.perf_counter() - started
        first = streamer.first_token_at - started if streamer.first_token_at is not None else total
        # chunks[0] is the prefill's token(s); each later chunk is one verify (or decode) step.
        return Sample(
            new_tokens=sequences[0, input_ids.shape[1] :].tolist(),
            acceptance_lengths=streamer.chunks[1:],
            time_to_first_token=first,
            total_seconds=total,
        )


class DFlashAssistant(nn.Module):
    """Our ``DFlashDraftModel`` behind the call transformers' ``DFlashTokenCandidateGenerator`` makes.

    The candidate generator keeps a ``DFlashCache`` (a ``DynamicCache``) and crops the previous block out
    of it before each call, exactly the bookkeeping our drafter expects from its ``past_key_values``.
    ``block_size`` may be set below the drafter's (the generator reads it from ``config``).
    """

    def __init__(self, drafter, block_size: int | None = None):
        super().__init__()
        self.drafter = drafter
        self.config = drafter.config
        if block_size is not None and block_size != drafter.config.block_size:
            self.config = drafter.config.__class__.from_dict(drafter.config.to_dict())
            self.config.block_size = block_size

    @property
    def device(self) -> torch.device:
        return self.drafter.device

    @property
    def dtype(self) -> torch.dtype:
        return self.drafter.dtype

    def forward(self, noise_embeds, context_hidden_states, position_ids, attention_mask=None, cache=None, **kwargs):
        # attention_mask is all ones at batch size 1 without padding; our drafter's None means "see everything".
        hidden = self.drafter(
            target_hidden=context_hidden_states,
            noise_embedding=noise_embeds,
            position_ids=position_ids,
            past_key_values=cache,
            use_cache=True,
        )
        return BaseModelOutput(last_hidden_state=hidden)


def target_generate_row(target, pad_token_id) -> HFRow:
    return HFRow("target.generate", "target", target, 1, pad_token_id)


def prompt_lookup_row(target, block_size: int, pad_token_id) -> HFRow:
    return HFRow(
        f"transformers prompt-lookup (b={block_size})", "peer", target, block_size, pad_token_id,
        prompt_lookup_num_tokens=block_size - 1,
    )  # fmt: skip


def transformers_dflash_row(target, drafter, block_size: int, pad_token_id) -> HFRow:
    row = HFRow(
        f"transformers DFlash (b={block_size})", "peer", target, block_size, pad_token_id,
        assistant_model=DFlashAssistant(drafter, block_size), speculation_type="dflash",
    )  # fmt: skip
    row.notes.append(
        "transformers' assisted-decoding loop (DFlashTokenCandidateGenerator) driving the same drafter weights "
        "through an adapter (z-lab checkpoints do not load into its native assistant class)"
    )
    return row
