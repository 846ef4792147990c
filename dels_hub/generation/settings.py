"""``DecodeSettings``: everything one decode call needs besides the models, resolved and validated once by
``DeLSGenerator.generate`` and passed to the loop as one typed value."""

import numbers
from dataclasses import dataclass

import torch

from ..errors import BlockSizeError
from ..sampling import Warping
from .tree import TreeSettings


def checked_block_size(block_size, trained: int | None = None, *, minimum: int = 1) -> int:
    """``block_size`` if it is an integer in ``minimum..trained``, else ``BlockSizeError`` naming it. ``trained`` is
    the drafter's block size, the maximum (None before the drafter is loaded); ``minimum`` 1 allows plain decoding
    through the loop, the bench asks for 2 (its target-alone rows are the block size 1)."""
    if isinstance(block_size, bool) or not isinstance(block_size, numbers.Integral):
        raise BlockSizeError(f"block_size must be an integer, got {block_size!r} ({type(block_size).__name__})")
    if block_size < minimum or (trained is not None and block_size > trained):
        allowed = f"{minimum}..{trained} (the drafter was trained for {trained})" if trained else f">= {minimum}"
        plain = "; 1 means plain autoregressive decoding through the same loop" if minimum == 1 else ""
        raise BlockSizeError(f"block_size {block_size} is outside {allowed}{plain}")
    return int(block_size)


@dataclass(frozen=True)
class DecodeSettings:
    """One call's decoding settings, on the device the loop runs on.

    Attributes:
        max_new_tokens: new tokens allowed (>= 1).
        block_size: anchor plus drafts per block; 1 is plain decoding through the same loop.
        warping: greedy, or the temperature / top-k / top-p both p and q are warped with.
        stop_ids: ``[S]`` token ids that end generation (empty: none).
        alpha, beta: ``[block_size - 1]`` per-position fusion weights of the head and the prior (zero in the pure
            prefix); None drafts from DFlash alone.
        copy_weights: ``[n + 1]`` the copy expert's gamma by match length (``CopySettings.weights``); None is off.
        pad_id: fills a batch row after its end, up to the longest row (transformers' ``pad_token_id``).
        draft_mode: at T > 0, ``"top"`` drafts the fused argmax and accepts while the target's own samples match
            (``verify.verify_match``), ``"sampled"`` samples drafts from the fused q and rejection-samples them
            (``verify.verify_rejection``); both are exact. Greedy ignores it.
        tree: draft a token tree per block instead of a chain (``tree.py``); None drafts chains.
    """

    max_new_tokens: int
    block_size: int
    warping: Warping
    stop_ids: torch.Tensor
    alpha: torch.Tensor | None = None
    beta: torch.Tensor | None = None
    copy_weights: torch.Tensor | None = None
    pad_id: int = 0
    draft_mode: str = "top"
    tree: TreeSettings | None = None

    @property
    def verify_width(self) -> int:
        """The most tokens one verify reads per row: the block, or the tree's root and nodes."""
        return self.block_size if self.tree is None else max(self.block_size, self.tree.budget + 1)
