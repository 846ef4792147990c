"""The block objective shared by drafters and heads: weighted same-position cross-entropy, plus the
per-position statistics the evaluation reports."""

import torch
from torch.nn import functional as F


def block_loss(
    logits: torch.Tensor, labels: torch.Tensor, supervised: torch.Tensor, weights: torch.Tensor
) -> tuple[torch.Tensor, dict[str, torch.Tensor]]:
    """``supervised_block_loss`` of dense ``logits [M, k, V]`` for slots 1..k of M blocks."""
    return supervised_block_loss(logits[supervised], labels, supervised, weights)


def supervised_block_loss(
    logits: torch.Tensor, labels: torch.Tensor, supervised: torch.Tensor, weights: torch.Tensor
) -> tuple[torch.Tensor, dict[str, torch.Tensor]]:
    """Loss and statistics of drafted block slots 1..k, from the logits of the supervised slots only (a
    drafter's LM head is most of its training cost, and with target labels most slots are unsupervised).

    Args:
        logits: ``[S, V]`` predictions of the supervised slots, in ``supervised``'s row-major order.
        labels: ``[M, k]`` the labels of slots 1..k.
        supervised: ``[M, k]`` bool, which slots count; ``S = supervised.sum()``.
        weights: ``[k]`` ``exp(-(slot - 1) / gamma)``.

    Returns:
        ``L = sum(w * CE) / sum(w)`` over the supervised slots, and ``[k]`` counts per position:
        ``"correct"`` and ``"counted"`` (greedy hits among supervised slots), ``"reached"`` (supervised slots
        whose earlier slots were all hit: a greedy verifier would look at them) and ``"survived"`` (of those,
        the hits). ``implied_tau`` turns the last two into an acceptance length.
    """
    chosen = labels[supervised]
    w = weights.expand_as(supervised)[supervised]
    ce = F.cross_entropy(logits.float(), chosen, reduction="none")
    loss = (ce * w).sum() / w.sum().clamp_min(1e-6)
    with torch.no_grad():
        hits = torch.zeros_like(supervised)
        hits[supervised] = logits.argmax(-1) == chosen
        earlier_hit = torch.ones_like(hits)
        earlier_hit[:, 1:] = hits[:, :-1].cumprod(dim=1).bool()
        stats = {
            "correct": hits.float().sum(0),
            "counted": supervised.float().sum(0),
            "reached": (supervised & earlier_hit).float().sum(0),
            "survived": (hits & earlier_hit).float().sum(0),
        }
    return loss, stats


def implied_tau(reached: torch.Tensor, survived: torch.Tensor) -> tuple[float, list[float]]:
    """Greedy acceptance length ``1 + sum_k prod_{j <= k} a_j`` and the per-position acceptance rates
    ``a_k = survived_k / reached_k`` (slot k accepted given slots 1..k-1 were).

    A product of conditional rates (Kaplan-Meier) rather than the mean acceptance of fully supervised blocks:
    with target labels a block's later slots are often unsupervised (the text left the greedy path), and
    blocks that stay supervised to the end are the easy ones. When every block is fully supervised the two
    are equal. It still treats a slot that lost its label as censored at random, which it is not quite: text that
    follows the target's greedy path tends to be easier text, so later positions' rates lean optimistic."""
    rates = (survived / reached.clamp_min(1)).tolist()
    tau, alive = 1.0, 1.0
    for rate in rates:
        alive *= rate
        tau += alive
    return tau, rates
