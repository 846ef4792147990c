"""One drafted block: DFlash logits for every slot, then (with a head or the copy expert) the sequential fusion
over the block."""

import torch

from ..copy_expert import CopyChain
from ..fusion import fuse_logits
from ..sampling import Warping, choose


def context_features(hidden_states: tuple[torch.Tensor, ...], layer_ids: list[int]) -> torch.Tensor:
    """``cat(hidden_states[l + 1] for l in layer_ids)``: outputs of target decoder layers l (index 0 is the
    embedding output), ``[B, T, F*H]``."""
    return torch.cat([hidden_states[layer + 1] for layer in layer_ids], dim=-1)


def propose(
    dflash_logits: torch.Tensor,
    anchor: torch.Tensor,
    warping: Warping,
    generator: torch.Generator | None = None,
    head=None,
    log_prior: torch.Tensor | None = None,
    alpha: torch.Tensor | None = None,
    beta: torch.Tensor | None = None,
    drafts: torch.Tensor | None = None,
    q: torch.Tensor | None = None,
    races: torch.Tensor | None = None,
    copy: CopyChain | None = None,
    fused: torch.Tensor | None = None,
    confidence: torch.Tensor | None = None,
    head_state: torch.Tensor | None = None,
) -> tuple[torch.Tensor, torch.Tensor | None]:
    """Draft the k = bs - 1 tokens of a block, for each row of a batch.

    Args:
        dflash_logits: ``[B, k, V]`` DFlash logits L of block slots 1..k.
        anchor: ``[B]`` the block's anchor (the last committed token); the head reads it first.
        head, log_prior, alpha, beta: the local head, its ``[V_head]`` log-prior and ``[k]`` fusion weights;
            ``head=None`` drafts from DFlash alone (all slots at once, unless the copy expert votes).
        drafts, q: optional preallocated ``[B, k]`` / ``[B, k, V]`` outputs, written in place (the static loop's
            buffers); allocated here when None. The random draws are the same either way.
        races: optional ``[B, k, V]`` Exp(1) draws to sample with instead of drawing from ``generator``
            (the compiled draft step's; one draw per block instead of one per position).
        copy: the block's copy expert (``copy_expert.CopyChain``), which votes at each slot and follows the
            drafts; None leaves it out.
        fused: optional ``[B, k, V]`` float32 buffer that receives the fused logits each slot was drafted from
            (vLLM's draft model hands logits, not tokens, to its proposer); the drafts are the same either way.
        confidence: optional ``[B, k]`` float32 buffer that receives each draft's probability under the distribution
            it was chosen from (the fused, warped q when sampling; the fused softmax when greedy): what the
            cost-aware policy reads the draft's acceptance from.
        head_state: the state the head reads the anchor from (``Drafting.head_state``: primed with the committed
            tokens before the anchor, for a head that reads them); None starts from the head's initial state.

    Returns:
        ``(drafts [B, k], q [B, k, V] or None)``: q, the warped draft distributions the drafts were sampled from,
        is None when greedy.
    """
    rows, k = dflash_logits.shape[:2]
    if head is None and copy is None:
        if fused is not None:
            fused.copy_(dflash_logits)
        ids, probs = choose(dflash_logits, warping, generator, races)
        if confidence is not None:
            confidence.copy_(chosen_probability(dflash_logits, ids, probs))
        if drafts is None:
            return ids, probs
        drafts.copy_(ids)
        if probs is not None and q is not None:
            probs = q.copy_(probs)
        return drafts, probs
    if drafts is None:
        drafts = torch.empty((rows, k), dtype=torch.long, device=dflash_logits.device)
    if warping.greedy:
        q = None
    elif q is None:
        q = torch.empty(dflash_logits.shape, dtype=torch.float32, device=dflash_logits.device)
    # The head's state starts afresh at every block and reads the anchor then each draft as it is chosen.
    if head is not None:
        state = head.initial_state(rows) if head_state is None else head_state
        head_logits, state = head.step(anchor, state)
    for i in range(k):
        slot_logits = dflash_logits[:, i]
        if copy is not None:
            candidate = copy.candidate()
            slot_logits = copy.unprune(slot_logits, candidate)  # then fused like any other token's
        if head is not None:
            logits = fuse_logits(slot_logits, head_logits, log_prior, alpha[i], beta[i])
        else:
            logits = slot_logits.float()
        if copy is not None:
            logits = copy.vote(logits, candidate)
        if fused is not None:
            fused[:, i] = logits
        token, probs = choose(logits, warping, generator, None if races is None else races[:, i])
        if confidence is not None:
            confidence[:, i] = chosen_probability(logits, token, probs)
        drafts[:, i] = token
        if q is not None:
            q[:, i] = probs
        if i + 1 < k:
            if head is not None:
                head_logits, state = head.step(drafts[:, i], state)
            if copy is not None:
                copy.extend(token)
    return drafts, q


def chosen_probability(logits: torch.Tensor, ids: torch.Tensor, probs: torch.Tensor | None) -> torch.Tensor:
    """``[...]`` float32 probability of each chosen id: under ``probs`` (the warped q it was sampled from), or, when
    greedy (``probs`` None), under the softmax of ``logits [..., V]``, which is then its largest."""
    if probs is None:
        return logits.float().softmax(-1).amax(-1)
    return probs.gather(-1, ids.unsqueeze(-1)).squeeze(-1)
