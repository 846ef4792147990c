"""The decode loop's two per-block steps, at fixed shapes: the functions ``torch.compile`` turns into (CUDA) graphs.

* ``verify_step``: one target forward over ``[anchor, drafts]`` through the target's cache (mask included);
  ``verify_tree_step``, the same over a token tree.
* ``draft_step``: one DFlash forward over the context and the block, then the head/fusion/sampling loop over the
  block. Its shapes do not depend on how many drafts the last block accepted: the context is always the last
  verify's ``block_size`` rows, and the rejected ones are written to trash slots that no mask reaches. Sampling
  reads exponential races drawn before the call, because a ``torch.Generator`` argument breaks the graph.

What drafting reads and never changes within a call (models, fusion weights, warping, the copy expert's weights)
travels as one frozen ``Drafting``.
"""

from dataclasses import dataclass
from functools import partial

import torch

from ..copy_expert import CopyChain
from ..draft_vocabulary import DraftVocabulary
from ..heads.context import head_start
from ..sampling import Warping
from .caches import causal_mask
from .drafting import propose

_compiled: dict[tuple[str, str], object] = {}


@dataclass(frozen=True)
class Drafting:
    """The drafter, the target's embedding and LM head it borrows, and how a block's drafts are chosen.

    ``alpha``/``beta`` are ``[k]`` per-position fusion weights (zero in the pure prefix), ``log_prior`` the head's
    ``[V_head]`` log unigram prior, ``copy_weights`` the copy expert's ``[n + 1]`` gamma by match length (None: off).
    ``confidence``: also report each draft's probability (the cost-aware policy chooses how many to verify from it).
    """

    drafter: torch.nn.Module
    embed: torch.nn.Module
    lm_head: torch.nn.Module
    warping: Warping
    head: torch.nn.Module | None = None
    log_prior: torch.Tensor | None = None
    alpha: torch.Tensor | None = None
    beta: torch.Tensor | None = None
    copy_weights: torch.Tensor | None = None
    confidence: bool = False

    def copy_chain(self, tokens: torch.Tensor, anchor, slot_hidden: torch.Tensor) -> CopyChain | None:
        """The block's copy expert over ``tokens`` up to ``anchor`` (None when off). With a pruned draft
        vocabulary, its candidate is scored from ``slot_hidden [B, k, H]`` by the full LM head row."""
        if self.copy_weights is None:
            return None
        unpruned = partial(self.lm_head.token_logits, slot_hidden) if isinstance(self.lm_head, DraftVocabulary) \
            else None
        return CopyChain(tokens, anchor, self.copy_weights, unpruned)

    def head_state(self, tokens: torch.Tensor | None, anchor) -> torch.Tensor | None:
        """The state the head reads the anchor at ``anchor`` of ``tokens [B, T]`` from; None when there is no head,
        or when it reads its block alone (``heads.context.head_start``)."""
        return None if self.head is None else head_start(self.head, tokens, anchor)


def verify_step(model, ids, positions, cache, cache_arg: str, logits_to_keep: int = 0, slots=None, mask=None):
    """One target forward at ``positions [B, T]`` through ``cache`` -> ``(logits, hidden_states)``.

    Fixed shapes for a fixed ``T`` (the static cache's mask included). ``slots``: where the cache writes, when not
    at the positions (a padded prompt's pads, a tree's nodes). ``mask``: the static cache's attention mask, when
    not causal by position (a tree's, ``tree.tree_mask``).
    """
    out = model(input_ids=ids, position_ids=positions,
                **cache.forward_inputs(positions, model, cache_arg, slots, mask),
                use_cache=True, output_hidden_states=True, logits_to_keep=logits_to_keep)
    return out.logits, out.hidden_states


def verify_tree_step(model, ids, positions, cache, cache_arg: str, slots, mask):
    """``verify_step`` over a token tree: its own function, so that compiled it keeps its own graphs (one per tree
    size, a few per call: the budget ladder) apart from the chain's verify widths, and neither crowds the other out
    of dynamo's recompile limit."""
    return verify_step(model, ids, positions, cache, cache_arg, slots=slots, mask=mask)


def draft_step(drafting: Drafting, features, context_positions, context_real, block, block_positions, cache, races,
               tokens, anchor):
    """Draft one block of each row through the drafter's ``StaticSlotCache`` -> ``(drafts [B, k], q [B, k, V] or
    None, confidence [B, k] or None)`` (``confidence`` as in ``drafting.propose``, when ``drafting.confidence``).

    ``features`` .. ``cache`` as in ``draft_hidden``; ``races``: ``[B, k, V]`` Exp(1) draws for sampling (None when
    greedy); ``tokens``, ``anchor``: the ``[B, T]`` token buffer and the ``[B]`` anchor positions, read by the copy
    expert and by a head that reads the tokens before its block.
    """
    slot_hidden = draft_hidden(drafting, features, context_positions, context_real, block, block_positions, cache)
    confidence = (torch.empty(slot_hidden.shape[:2], dtype=torch.float32, device=slot_hidden.device)
                  if drafting.confidence else None)
    drafts, q = propose(drafting.lm_head(slot_hidden), block[:, 0], drafting.warping, None, drafting.head,
                        drafting.log_prior, drafting.alpha, drafting.beta, races=races,
                        copy=drafting.copy_chain(tokens, anchor, slot_hidden), confidence=confidence,
                        head_state=drafting.head_state(tokens, anchor))
    return drafts, q, confidence


def draft_hidden(drafting: Drafting, features, context_positions, context_real, block, block_positions, cache):
    """The drafter's hidden states ``[B, k, H]`` of block slots 1..k, through its ``StaticSlotCache`` (padded).

    Args:
        features, context_positions: ``[B, C, F*H]`` target features of the context not yet cached, at
            positions ``[B, C]``; ``context_real [B, C]`` (bool, on the device) is False on padding rows (a rejected
            draft's, a padded prompt's, a copy block's).
        block, block_positions: ``[B, bs]`` the blocks ``[anchor, MASK...]`` and their positions.
        cache: the drafter's ``StaticSlotCache``, whose top ``bs`` (at least) slots lie past every position: padding
            row i goes to slot ``slots - 1 - i % bs``. No mask reaches them, so rows that share one lose nothing.
    """
    drafter = drafting.drafter
    rows = torch.arange(features.shape[1], device=features.device) % block_positions.shape[1]
    # Slot == position for real rows; padding goes to the top slots, which the mask below never shows.
    context_slots = torch.where(context_real, context_positions, cache.max_len - 1 - rows)
    cache.write_positions = torch.cat([context_slots, block_positions], dim=1)
    # The block is bidirectional and sees all context: every slot up to its last position, nothing stale.
    last = block_positions[:, -1:].expand(-1, block_positions.shape[1])
    mask = causal_mask(cache.slots, last, drafter.dtype, drafter.config._attn_implementation)
    hidden = drafter(target_hidden=features, noise_embedding=drafting.embed(block),
                     position_ids=torch.cat([context_positions, block_positions], dim=1), past_key_values=cache,
                     use_cache=True, attention_mask=mask)
    return hidden[:, 1:]


def eager_hidden(drafting: Drafting, cache, positions, features, block, start: int) -> torch.Tensor:
    """The drafter's hidden states ``[1, k, H]`` of a single row's block slots 1..k, through its ``StaticDraftCache``
    (eager): ``features`` is every context row the drafter has not read, ``positions`` the loop's arange, ``start``
    the anchor's position. The cache keeps the context only: the block is redrafted next time."""
    hidden = drafting.drafter(target_hidden=features, noise_embedding=drafting.embed(block),
                              position_ids=positions[:, cache.length : start + block.shape[1]],
                              past_key_values=cache, use_cache=True)
    cache.crop(start)
    return hidden[:, 1:]


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
