"""Lossless verification of a drafted block, and what of it is committed. Convention (Leviathan et al.):
p = target, q = draft.

The verifiers are pure and vectorized over any leading batch dimensions (one row per sequence of a batch): they
return the committed tokens and the number of accepted drafts as device tensors; ``committed`` turns them into every
row's committed count and stop, which the loop packs into the block's one device-to-host transfer. Every transfer
goes through ``to_host``: that one, the prefill's one (its stops), and, under the cost-aware policy, the drafts'
confidences, which the verify's width waits for.
"""

import torch

from .sampling import Warping, sample, warp_probs


def accepted_prefix(draft_ids: torch.Tensor, reference_ids: torch.Tensor) -> torch.Tensor:
    """How many leading drafts equal the reference tokens, as a 0-dim device tensor: greedy acceptance, shared by
    the verifier (the reference is the target's argmax) and the fusion tuner's replay (the target's known
    continuation)."""
    return (draft_ids == reference_ids).long().cumprod(-1).sum(-1)


def verify_greedy(draft_ids: torch.Tensor, target_logits: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """Keep the longest prefix of drafts equal to the target's argmax, then the target's own next token.

    Args:
        draft_ids: ``[..., k]`` drafted tokens d_1..d_k.
        target_logits: ``[..., k + 1, V]`` target logits at the anchor and at each draft.

    Returns:
        ``(tokens [..., k + 1], n_accepted [...])``: the committed tokens are ``tokens[:n_accepted + 1]``, the
        last one being the target's bonus token.
    """
    target_ids = target_logits.argmax(-1)
    n_accepted = accepted_prefix(draft_ids, target_ids[..., :-1])
    # Accepted drafts equal the target's argmax, so the argmax row already holds every committed token.
    return target_ids, n_accepted


def verify_rejection(
    draft_ids: torch.Tensor,
    q_draft: torch.Tensor,
    p_target: torch.Tensor,
    generator: torch.Generator | None = None,
) -> tuple[torch.Tensor, torch.Tensor]:
    """Speculative (rejection) sampling: output is distributed exactly as sampling from p.

    Accept d_i with probability min(1, p_i(d_i) / q_i(d_i)); at the first rejection draw from
    normalize(max(0, p_i - q_i)); if every draft is accepted draw the bonus from p_{k+1}.

    Args:
        draft_ids: ``[..., k]`` drafts, each sampled from its row of ``q_draft``.
        q_draft: ``[..., k, V]`` draft distributions (warped, float32).
        p_target: ``[..., k + 1, V]`` target distributions (warped the same way, float32).

    Returns:
        ``(tokens [..., k + 1], n_accepted [...])`` as in ``verify_greedy``.
    """
    k = draft_ids.shape[-1]
    index = draft_ids.unsqueeze(-1)
    p_of_draft = p_target[..., :k, :].gather(-1, index).squeeze(-1)
    q_of_draft = q_draft.gather(-1, index).squeeze(-1)
    uniform = torch.rand(draft_ids.shape, device=draft_ids.device, generator=generator)
    accepted = uniform * q_of_draft <= p_of_draft  # u <= p/q without dividing by a zero q
    n_accepted = accepted.long().cumprod(-1).sum(-1)

    residual = (p_target[..., :k, :] - q_draft).clamp_min(0.0)
    mass = residual.sum(-1, keepdim=True)
    # p == q leaves no residual mass; rejection then has probability zero, and p is the right fallback.
    residual = torch.where(mass > 0, residual / mass.clamp_min(1e-30), p_target[..., :k, :])
    replacement = sample(torch.cat([residual, p_target[..., k:, :]], dim=-2), generator)  # [..., k + 1]

    positions = torch.arange(k + 1, device=draft_ids.device)
    padded_drafts = torch.cat([draft_ids, draft_ids.new_zeros(draft_ids.shape[:-1] + (1,))], dim=-1)
    tokens = torch.where(positions < n_accepted.unsqueeze(-1), padded_drafts, replacement)
    return tokens, n_accepted


def verify_match(draft_ids: torch.Tensor, p_target: torch.Tensor, generator: torch.Generator | None = None,
                 draws: torch.Tensor | None = None):
    """Top-token drafts against the target's own samples (sample and match): exact for any draft that does not
    depend on the target's draws.

    Draw the target's token at every position from ``p_target`` and keep the drafts while each equals the draw
    there; the first draw that differs is the bonus. Every committed token is then the target's own sample given
    the committed prefix, which is what sampling from p one token at a time gives.

    Args:
        draft_ids: ``[..., k]`` drafted tokens (chosen without looking at the target's draws, e.g. the fused argmax).
        p_target: ``[..., k + 1, V]`` warped target distributions (float32).
        draws: optional ``[..., k + 1]`` target samples already drawn (the loop's keyed draws, ``keyed_sample``);
            drawn here from ``generator`` when None.

    Returns:
        ``(tokens [..., k + 1], n_accepted [...])`` as in ``verify_greedy``.
    """
    samples = sample(p_target, generator) if draws is None else draws
    return samples, accepted_prefix(draft_ids, samples[..., :-1])


def verify_block(warping: Warping, drafts: torch.Tensor, q, logits: torch.Tensor, generator):
    """``(tokens, n_accepted)`` of one block: greedy verification, or rejection sampling against the warped
    target ``p``. No drafts (a plain step): an empty ``q`` makes the verifier draw the bonus straight from p."""
    if warping.greedy:
        return verify_greedy(drafts, logits)
    p = warp_probs(logits, warping)
    return verify_rejection(drafts, p[..., :0, :] if q is None else q[..., : drafts.shape[-1], :], p, generator)


def to_host(values: torch.Tensor) -> list:
    """Every device-to-host transfer of the decode loop goes through here (one per block, one in the prefill), so a
    test can count them and allow exactly them under ``torch.cuda.set_sync_debug_mode("error")``."""
    return values.tolist()


def committed(tokens, n_accepted, stop_ids, block_index, budget: torch.Tensor) -> tuple:
    """How many of each row's verified ``tokens [B, w]`` are committed, and which rows stop, on the device.

    Accepted drafts plus the bonus, cut after the first stop token among them and at ``budget [B]`` (new tokens
    each row may still add); ``block_index`` is ``arange(w)``.

    Returns:
        ``(n_commit [B], stopped [B] bool)``; a row stops on a stop token, not on its budget (the loop counts that
        itself).
    """
    width = block_index.shape[0]
    is_stop_token = torch.isin(tokens, stop_ids) & (block_index <= n_accepted.unsqueeze(-1))
    first_stop = torch.where(is_stop_token, block_index, width).amin(-1)
    stopped = first_stop < width
    return torch.where(stopped, first_stop, n_accepted).add(1).minimum(budget), stopped


def verify_tree(choices: torch.Tensor, tokens: torch.Tensor, parents: torch.Tensor, depths: torch.Tensor,
                ancestors: torch.Tensor, k: int) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """Walk a drafted tree (``generation.tree``'s layout) down the target's own choices.

    ``choices [..., N + 1]`` is the target's token after each node: its argmax (greedy) or its keyed sample (top-token
    drafts at T > 0, as in ``verify_match``). A node is accepted when it equals the target's choice after its parent
    and so is every ancestor; siblings hold distinct tokens, so at most one node per depth is. The deepest accepted
    node ends the path, and the target's choice after it is the bonus. Every committed token is then the target's
    own choice given the committed prefix, as in a chain.

    Args:
        choices: the target's token after each node, the root (the anchor) first.
        tokens, parents, depths: ``[..., N + 1]`` each node's token, parent index and depth (the root's are the
            anchor, 0 and 0).
        ancestors: ``[..., N + 1, N + 1]`` bool, ancestor-or-self.
        k: the deepest a path may go (``block_size - 1``).

    Returns:
        ``(committed_tokens [..., k + 1], n_accepted [...], path [..., k + 1])``: the committed tokens are
        ``committed_tokens[:n_accepted + 1]``, as from a chain verifier; ``path`` holds the node index at each
        depth 0..n_accepted (0, the root, past it).
    """
    good = tokens == choices.gather(-1, parents)
    good[..., 0] = True
    accepted = ~(ancestors & ~good.unsqueeze(-2)).any(-1)
    deepest = torch.where(accepted, depths, -1).argmax(-1, keepdim=True)
    n_accepted = depths.gather(-1, deepest).squeeze(-1)
    on_path = ancestors.gather(-2, deepest.unsqueeze(-1).expand(*deepest.shape, tokens.shape[-1])).squeeze(-2)
    nodes = torch.arange(tokens.shape[-1], device=tokens.device).expand_as(tokens)
    # Each path node to its depth; the other nodes to a spare column past k.
    path = torch.zeros(tokens.shape[:-1] + (k + 2,), dtype=torch.long, device=tokens.device)
    path = path.scatter(-1, torch.where(on_path, depths, k + 1), nodes)[..., : k + 1]
    index = torch.arange(k + 1, device=tokens.device)
    path = torch.where(index <= n_accepted.unsqueeze(-1), path, 0)
    drafted = tokens.gather(-1, torch.cat([path[..., 1:], path[..., :1]], dim=-1))  # the path's tokens after the root
    bonus = choices.gather(-1, deepest)
    return torch.where(index < n_accepted.unsqueeze(-1), drafted, bonus), n_accepted, path
