"""Product-of-experts fusion of DFlash and local-head logits (DeLS-Spec).

    fused_i = L_i + alpha_i * S_i - beta_i * log p_hat

``L_i`` are the DFlash logits of draft position i, ``S_i`` the local head's, ``log p_hat`` the head's unigram
log-prior. By Bayes, log p(x|y,z) = log p(x|y) + log p(x|z) - log p(x) + R: the prior term keeps token
frequency from being counted twice; alpha and beta temper the two experts and absorb the dropped R.
Positions inside the pure prefix take L alone, which is alpha = beta = 0 there.
"""

from collections.abc import Sequence

import torch

from .errors import FusionScheduleError

Schedule = float | Sequence[float]


def fuse_logits(
    dflash_logits: torch.Tensor,
    head_logits: torch.Tensor,
    log_prior: torch.Tensor,
    alpha: torch.Tensor | float,
    beta: torch.Tensor | float,
) -> torch.Tensor:
    """Fuse the two experts.

    Args:
        dflash_logits: ``[..., V]`` L, over the target's vocabulary (embedding rows).
        head_logits: ``[..., V_head]`` S, with ``V_head <= V``; ids past ``V_head`` (padding rows of the
            target's embedding) keep L unchanged.
        log_prior: ``[V_head]`` log p_hat.
        alpha: weight of the head, a scalar or a tensor broadcastable to ``[..., 1]``.
        beta: weight of the prior correction, as ``alpha``.

    Returns:
        ``[..., V]`` float32 fused logits; the inputs are not modified.
    """
    fused = dflash_logits.float().clone()
    vocab = head_logits.shape[-1]
    fused[..., :vocab] += alpha * head_logits.float() - beta * log_prior.float()
    return fused


def expand_schedule(name: str, value: Schedule, num_fused: int) -> list[float]:
    """A scalar or per-position list -> one float per fused position (the positions after the pure prefix).

    A list may be longer than needed (a head tuned for block 16 used at block 8), never shorter.
    """
    if isinstance(value, (int, float)):
        values = [float(value)] * num_fused
    else:
        values = [float(v) for v in value]
        if len(values) < num_fused:
            raise FusionScheduleError(
                f"{name} schedule has {len(values)} values but {num_fused} fused positions need one each "
                f"(block positions after the pure prefix); give a scalar or a list of length >= {num_fused}"
            )
        values = values[:num_fused]
    bad = [v for v in values if not torch.isfinite(torch.tensor(v))]
    if bad:
        raise FusionScheduleError(f"{name} schedule has non-finite values {bad}; expected finite floats")
    return values


def fusion_weights(
    alpha: Schedule, beta: Schedule, pure_prefix_len: int, num_draft_positions: int, device=None
) -> tuple[torch.Tensor, torch.Tensor]:
    """Per-draft-position ``(alpha, beta)``, each ``[num_draft_positions]`` float32, zero in the pure prefix."""
    if pure_prefix_len < 0:
        raise FusionScheduleError(f"pure_prefix_len must be >= 0, got {pure_prefix_len}")
    pure = min(pure_prefix_len, num_draft_positions)
    num_fused = num_draft_positions - pure
    alphas = [0.0] * pure + expand_schedule("alpha", alpha, num_fused)
    betas = [0.0] * pure + expand_schedule("beta", beta, num_fused)
    return (
        torch.tensor(alphas, dtype=torch.float32, device=device),
        torch.tensor(betas, dtype=torch.float32, device=device),
    )
