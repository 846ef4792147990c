"""Block-level peeking: a training-only crutch for DFlash drafters; inference is unchanged.

During training, the input of draft layer l (for l = 1..L-1, the intermediate layers; never the block
embedding itself) may receive, at block slot m >= 2, the frozen target embedding of the true token of slot
m-1 as a residual: ``h[m] += E(x[anchor + m - 1])``. Slot 1 gets nothing (its previous token is the anchor,
already its input). Which (layer, block, slot) is revealed is a Bernoulli draw with ratio

    rho_l(t) = peek_max_ratio * (l / (L - 1)) * (1 - acc_l) * max(0, 1 - t / (peek_anneal * max_steps))

* depth ``l / (L - 1)``: shallow layers build the context representation and must learn it without help;
  deep layers, closest to the output, are where knowing the previous token (the dependency DFlash lacks
  inside a block) pays most;
* ``1 - acc_l``, where ``acc_l`` is an exponential moving average of the greedy accuracy of layer l's output
  read through the final norm and the frozen LM head (a logit lens, on a sample of supervised slots): a
  layer that already predicts well is weaned off the crutch, one that struggles is helped;
* the linear anneal reaches zero at ``peek_anneal`` of training, so the last quarter (by default) is plain
  DFlash training, exactly the inference regime; the drafter ends where an unpeeked drafter would be.

**The peek mask.** Attention inside a DFlash block is bidirectional, so a revealed token would flow to every
slot at the next attention, including the slot whose label it is. Training therefore tracks, per block, the
matrix ``knows[k, j]`` ("slot k's state depends on the true token of slot j") and, at every layer, lets slot
k attend to slot m only if ``not knows[m, k]``; after the attention ``knows[k] |= knows[m]`` for each slot m it
attended. Reveals only ever add ``j = m - 1 != m`` and attention never brings k its own label, so by induction
no position ever sees its own label, at any layer (``tests/test_training.py::test_peek_mask_never_leaks``
checks this by gradients, with a negative control). Context attention (strictly before the anchor) is never
affected. Without reveals every mask is the plain DFlash mask.
"""

import torch

from .masks import attention_mask_for, block_diagonal


def reveal_ratios(accuracy: torch.Tensor, step: int, config) -> torch.Tensor:
    """``[L]`` reveal probability of each draft layer's input at ``step`` (0 for layer 0)."""
    num_layers = accuracy.shape[0]
    depth = torch.arange(num_layers, dtype=torch.float32) / max(num_layers - 1, 1)
    anneal = max(0.0, 1.0 - step / (config.peek_anneal * config.max_steps))
    return config.peek_max_ratio * depth * (1.0 - accuracy.float()).clamp(0, 1) * anneal


def sample_reveals(ratios: torch.Tensor, revealable: torch.Tensor, generator: torch.Generator) -> torch.Tensor:
    """``[B, L, N, bs]`` bool: reveal slot m's previous true token at layer l.

    Args:
        ratios: ``[L]`` from ``reveal_ratios``.
        revealable: ``[B, N, bs]`` slots m >= 2 whose previous slot is a real token of the sequence.
    """
    batch, blocks, block_size = revealable.shape
    draws = torch.rand(batch, ratios.shape[0], blocks, block_size, generator=generator)
    return (draws < ratios[None, :, None, None]) & revealable[:, None]


def peek_mask(knows: torch.Tensor) -> torch.Tensor:
    """``knows [B, N, bs, bs]`` -> ``allowed [B, N, bs, bs]``: slot k may attend slot m iff m does not know k."""
    return ~knows.transpose(-1, -2)


def peeked_forward(drafter, target_hidden, noise_embedding, position_ids, context_mask, reveal, truth):
    """The drafter's forward, layer by layer, with reveals and peek masks (training only).

    Args:
        target_hidden: ``[B, C, F*H]``; noise_embedding ``[B, N*bs, H]``; position_ids ``[B, C + N*bs]``.
        context_mask: ``[B, N*bs, C]`` bool, which context positions each block slot sees.
        reveal: ``[B, L, N, bs]`` bool from ``sample_reveals``.
        truth: ``[B, N, bs, H]`` target embeddings of the true block tokens.

    Returns:
        ``(hidden [B, N*bs, H] after the final norm, layer_states)``, ``layer_states`` being each layer's
        output before the final norm (for the per-layer accuracy).
    """
    batch, blocks, block_size, hidden_size = truth.shape
    previous = torch.cat([torch.zeros_like(truth[:, :, :1]), truth[:, :, :-1]], dim=2)  # slot m <- x[m - 1]
    shift = torch.eye(block_size, dtype=torch.bool, device=truth.device).roll(-1, dims=1)  # [m, m - 1] is True
    shift[0] = False
    knows = torch.zeros(batch, blocks, block_size, block_size, dtype=torch.bool, device=truth.device)

    context = drafter.project_context(target_hidden)
    hidden = noise_embedding
    position_embeddings = drafter.rotary_emb(hidden, position_ids)
    impl = drafter.config._attn_implementation
    layer_states = []
    for index, layer in enumerate(drafter.layers):
        revealed = reveal[:, index]  # [B, N, bs]
        hidden = hidden + (revealed[..., None] * previous).reshape(batch, blocks * block_size, hidden_size)
        knows = knows | (revealed[..., None] & shift)
        allowed = peek_mask(knows)
        mask = torch.cat([context_mask, block_diagonal(allowed)], dim=-1)
        hidden = layer(hidden, context, position_embeddings, attention_mask_for(mask, impl, hidden.dtype))
        # Information flows along the attention edges just used.
        knows = knows | (torch.einsum("bnkm,bnmj->bnkj", allowed.float(), knows.float()) > 0)
        layer_states.append(hidden)
    check_no_leak(knows)
    return drafter.norm(hidden), layer_states


def check_no_leak(knows: torch.Tensor) -> None:
    """Internal invariant (one host sync per step): no slot's state depends on its own label."""
    assert not knows.diagonal(dim1=-2, dim2=-1).any(), "a block slot saw its own label"
