"""What the decode loop returns (``DecodeResult``), and what ``DeLSGenerator.generate(...,
return_dict_in_generate=True)`` returns (``DeLSGenerateOutput``)."""

from dataclasses import dataclass, field

import torch
from transformers.utils import ModelOutput


@dataclass
class DecodeResult:
    sequences: torch.Tensor  # [B, prompt + new], padded after a row's end
    acceptance_lengths: list[int] = field(default_factory=list)  # every row's, one row after another
    row_acceptance_lengths: list[list[int]] = field(default_factory=list)  # per row
    time_to_first_token: float = 0.0
    decode_seconds: float = 0.0
    policy: dict | None = None  # what the draft policy chose (``policy.PolicyStats.summary``)


@dataclass
class DeLSGenerateOutput(ModelOutput):
    """``sequences [B, prompt + new]`` plus the speculative statistics of the call.

    ``acceptance_lengths`` holds the tokens committed per verify step, bonus included (tau is their mean); for a
    batch it holds every row's, one row after another, and ``row_acceptance_lengths`` each row's own.
    ``num_new_tokens`` counts every row's new tokens (not the padding after a row's end). Times are in seconds:
    ``time_to_first_token`` covers the prefill, ``decode_seconds`` the rest. ``policy_summary`` says what the draft
    policy chose: how often each number of drafts was verified (0 for a plain step), the drafted and plain blocks,
    tau over the drafted blocks alone, and the tokens per millisecond it predicted against those measured.
    """

    sequences: torch.LongTensor | None = None
    # ModelOutput requires every field after the first to default to None.
    acceptance_lengths: list[int] | None = None
    num_new_tokens: int | None = None
    time_to_first_token: float | None = None
    decode_seconds: float | None = None
    row_acceptance_lengths: list[list[int]] | None = None
    policy_summary: dict | None = None

    @property
    def tau(self) -> float:
        """Mean acceptance length (tokens per verify step, bonus included), over every row's blocks."""
        return sum(self.acceptance_lengths) / len(self.acceptance_lengths) if self.acceptance_lengths else 0.0

    @property
    def row_tau(self) -> list[float]:
        """Each row's own tau."""
        return [sum(row) / len(row) if row else 0.0 for row in self.row_acceptance_lengths or []]

    @property
    def tokens_per_second(self) -> float:
        total = (self.time_to_first_token or 0.0) + (self.decode_seconds or 0.0)
        return (self.num_new_tokens or 0) / total if total > 0 else 0.0
