"""The fast loop's two fixed-shape steps: the functions ``torch.compile`` turns into (CUDA) graphs.

* ``verify_step``: one target forward over ``[anchor, drafts]`` through the static cache, its mask built inside.
* ``draft_step``: one DFlash forward over the context and the block, then the head/fusion/sampling loop over
  the block. Its shapes do not depend on how many drafts the last block accepted: the context is always the
  last verify's ``block_size`` rows, and the rejected ones are written to trash slots that no mask reaches.
  Sampling reads exponential races drawn before the call, because a ``torch.Generator`` argument breaks
  the graph.
"""

import torch

from ..copy_expert import CopyChain
from ..sampling import Warping
from .drafting import propose
from .static_cache import causal_mask

_compiled: dict[tuple[str, str], object] = {}


def verify_step(model, ids, positions, kv_index, cache, cache_arg: str, logits_to_keep: int = 0):
    """One target forward at ``positions`` (``[1, T]``) through the static cache -> ``(logits, hidden_states)``.

    ``kv_index`` is ``arange(max_len)``, the cache's slots. Fixed shapes for a fixed ``T`` (mask included).
    """
    cache.write_positions = positions[0]
    mask = causal_mask(kv_index, positions[0], model.dtype, model.config._attn_implementation)
    out = model(input_ids=ids, position_ids=positions, attention_mask=mask, **{cache_arg: cache}, use_cache=True,
                output_hidden_states=True, logits_to_keep=logits_to_keep)
    return out.logits, out.hidden_states


def draft_step(drafter, embed, lm_head, features, context_positions, n_context, block, block_positions, kv_index,
               cache, warping, races, head, log_prior, alpha, beta, tokens=None, anchor=None, copy_weights=None):
    """Draft one block through the drafter's static cache -> ``(drafts [k], q [k, V] or None)``.

    Args:
        features, context_positions: ``[1, C, F*H]`` target features of the context not yet cached, at
            positions ``[1, C]``; rows from ``n_context`` (a 0-dim device tensor) on are padding.
        block, block_positions: ``[1, bs]`` the block ``[anchor, MASK...]`` and its positions.
        kv_index, cache: ``arange(slots)`` and the drafter's ``StaticSlotCache``, whose top slots lie past
            every position: padding row i goes to slot ``slots - 1 - i``.
        races: ``[k, V]`` Exp(1) draws for sampling (None when greedy); the rest as in ``propose``.
        tokens, anchor, copy_weights: the token buffer, the anchor's position (0-dim) and the copy expert's
            gamma by match length; ``copy_weights=None`` leaves the copy expert out.
    """
    rows = torch.arange(features.shape[1], device=features.device)
    # Slot == position for real rows; padding goes to the top slots, which the mask below never shows.
    context_slots = torch.where(rows < n_context, context_positions[0], kv_index.shape[0] - 1 - rows)
    cache.write_positions = torch.cat([context_slots, block_positions[0]])
    # The block is bidirectional and sees all context: every slot up to its last position, nothing stale.
    last = block_positions[0, -1:].expand(block_positions.shape[1])
    mask = causal_mask(kv_index, last, drafter.dtype, drafter.config._attn_implementation)
    hidden = drafter(target_hidden=features, noise_embedding=embed(block),
                     position_ids=torch.cat([context_positions, block_positions], dim=1), past_key_values=cache,
                     use_cache=True, attention_mask=mask)
    copy = None if copy_weights is None else CopyChain(tokens, anchor, copy_weights)
    return propose(lm_head(hidden[0, 1:]), block[0, :1], warping, None, head, log_prior, alpha, beta, races=races,
                   copy=copy)


def graph_warping(warping: Warping, device) -> Warping:
    """``warping`` with temperature and top_p as 0-dim device tensors, so the draft graph guards only on which
    warps apply (and on top_k): another temperature or top_p is new data, not a new graph."""
    if warping.greedy:
        return warping
    top_p = None if warping.top_p is None else torch.full((), warping.top_p, dtype=torch.float32, device=device)
    return Warping(torch.full((), warping.temperature, dtype=torch.float32, device=device), warping.top_k, top_p)


def static(tensor: torch.Tensor) -> torch.Tensor:
    """Mark a buffer that every call of a compiled step reads or writes in place: its address is part of the
    graph, so CUDA graphs use it directly instead of copying it in (or skipping graphs for a mutated input)."""
    torch._dynamo.mark_static_address(tensor)
    return tensor


def compiled(step, device: torch.device):
    """``step`` compiled once per process: CUDA graphs (``reduce-overhead``) on CUDA, inductor elsewhere."""
    mode = "reduce-overhead" if device.type == "cuda" else "default"
    key = (step.__name__, mode)
    if key not in _compiled:
        _compiled[key] = torch.compile(step, mode=mode, dynamic=False)
    return _compiled[key]
