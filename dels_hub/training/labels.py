"""Exact drafter labels from any text, at one teacher-forced target forward per sequence (DESIGN.md §7).

In a teacher-forced forward over a text ``x``, the target's argmax at position t, ``g[t]``, is the token
greedy verification accepts after the prefix ``x[..t]``. For a block anchored at ``a``:

* slot 1's label is ``g[a]``, exact whatever the text says;
* slot k's label is ``g[a + k - 1]``, exact when the text agrees with the target at slots 1..k-1
  (``x[a + j] == g[a + j - 1]`` for j < k), because only then is ``x[..a + k - 1]`` the prefix greedy
  decoding would have reached. Slot k is supervised only there.

The share of supervised slots decays with k like acceptance does, and every token of every text serves as
an anchor: no regeneration, whose cost is one target step per token.
"""

import torch

from .data import Example, gather_blocks


def target_blocks(example: Example, greedy: torch.Tensor, anchors: torch.Tensor,
                  block_size: int) -> tuple[torch.Tensor, torch.Tensor]:
    """``(labels [n, bs], supervised [n, bs])`` of the blocks at ``anchors``, labelled by the target.

    Args:
        example: the text ``ids [T]`` and its ``loss_mask``.
        greedy: ``[T]`` the target's argmax at every position of the teacher-forced forward over ``ids``.
        anchors: ``[n]`` anchor positions.

    Slot 0 holds the anchor ``x[a]``; slot k >= 1 holds ``g[a + k - 1]`` and is supervised where the text's
    slot k is (inside the sequence, under the loss mask) and the text agrees with ``g`` at slots 1..k-1.
    """
    text, supervised = gather_blocks(example, anchors, block_size)
    before = (anchors[:, None] + torch.arange(block_size) - 1).clamp(0, len(example.ids) - 1)
    labels = greedy[before]
    labels[:, 0] = text[:, 0]
    return labels, supervised & agreeing_prefix(text, labels)


def agreeing_prefix(text: torch.Tensor, labels: torch.Tensor) -> torch.Tensor:
    """``[n, bs]`` bool: slot k's whole prefix of drafted slots 1..k-1 holds the text's tokens as the target's
    greedy labels (slot 0 and slot 1 always do)."""
    agree = text == labels
    agree[:, 0] = True
    shifted = torch.ones_like(agree)
    shifted[:, 1:] = agree[:, :-1]
    return shifted.cumprod(dim=1).bool()
