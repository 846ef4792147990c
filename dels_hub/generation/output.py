"""What the decode loop returns (``DecodeResult``), and what ``DeLSGenerator.generate(...,
return_dict_in_generate=True)`` returns (``DeLSGenerateOutput``)."""

from dataclasses import dataclass, field

import torch
from transformers.utils import ModelOutput


@dataclass
class DecodeResult:
    sequences: torch.Tensor  # [1, prompt + new]
    acceptance_lengths: list[int] = field(default_factory=list)
    time_to_first_token: float = 0.0
    decode_seconds: float = 0.0


@dataclass
class DeLSGenerateOutput(ModelOutput):
    """``sequences [1, prompt + new]`` plus the speculative statistics of the call.

    ``acceptance_lengths`` holds the tokens committed per verify step, bonus included (tau is their mean).
    Times are in seconds: ``time_to_first_token`` covers the prefill, ``decode_seconds`` the rest.
    """

    sequences: torch.LongTensor | None = None
    # ModelOutput requires every field after the first to default to None.
    acceptance_lengths: list[int] | None = None
    num_new_tokens: int | None = None
    time_to_first_token: float | None = None
    decode_seconds: float | None = None

    @property
    def tau(self) -> float:
        """Mean acceptance length (tokens per verify step, bonus included)."""
        return sum(self.acceptance_lengths) / len(self.acceptance_lengths) if self.acceptance_lengths else 0.0

    @property
    def tokens_per_second(self) -> float:
        total = (self.time_to_first_token or 0.0) + (self.decode_seconds or 0.0)
        return (self.num_new_tokens or 0) / total if total > 0 else 0.0
