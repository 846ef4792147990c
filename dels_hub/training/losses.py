"""The block objective shared by drafters and heads: weighted same-position cross-entropy, plus the
per-position statistics the evaluation reports."""

import torch
from torch.nn import functional as F


def block_loss(
    logits: torch.Tensor, labels: torch.Tensor, supervised: torch.Tensor, weights: torch.Tensor
) -> tuple[torch.Tensor, dict[str, torch.Tensor]]:
    """Loss and statistics of drafted block slots 1..k.

    Args:
        logits: ``[M, k, V]`` predictions for slots 1..k of M blocks.
        labels: ``[M, k]`` the true tokens at those slots.
        supervised: ``[M, k]`` bool, which slots count (inside the sequence, under the loss mask).
        weights: ``[k]`` ``exp(-(slot - 1) / gamma)``.

    Returns:
        ``L = sum(w * m * CE) / sum(w * m)`` and ``{"correct", "counted"}`` (``[k]`` greedy hits and
        supervised slots per position), ``"accepted"`` (sum over fully supervised blocks of the greedy
        acceptance length, cumprod of hits, as at inference) and ``"blocks"`` (their number).
    """
    m = supervised.float()
    ce = F.cross_entropy(logits.float().flatten(0, 1), labels.flatten(), reduction="none").view_as(m)
    w = weights[None, :] * m
    loss = (ce * w).sum() / w.sum().clamp_min(1e-6)
    with torch.no_grad():
        hits = (logits.argmax(-1) == labels) & supervised
        full = supervised.all(dim=1)
        stats = {
            "correct": hits.float().sum(0),
            "counted": m.sum(0),
            "accepted": hits[full].float().cumprod(dim=1).sum(),
            "blocks": full.float().sum(),
        }
    return loss, stats
