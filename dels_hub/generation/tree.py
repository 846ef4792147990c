"""Token trees over the fused distribution: a drafted block that branches, verified by the target in one forward.

A chain drafts one token per position, so a wrong first choice loses the block even when the second choice was
right. A tree keeps several candidates per position. It is grown best-first by path probability (DDTree, EAGLE-2)
from the fused distribution of each branch, which is where the DeLS head pays: DFlash's logits at a depth are the
same on every branch, but the head and the copy expert read each branch's own prefix, so siblings get different
children (TreeFlash's point).

Layout of a tree of ``N`` nodes, for each row of a batch: index 0 is the root (the block's anchor), nodes 1..N
follow in order of depth, so a node's parent always comes before it. ``parents[0] == 0``. The verify reads
``tokens [B, N + 1]`` at positions ``anchor + depths`` and writes them to the cache slots ``anchor + index``; the
mask lets each node see the committed context and its own ancestors (``ancestors``, ancestor-or-self).
"""

from dataclasses import dataclass, replace

import torch

from ..copy_expert import CopyChain
from ..errors import FusionScheduleError, GenerationArgumentError
from ..fusion import fuse_logits, fusion_weights

# Children kept per expanded node. On SmolLM2 validation replays (scripts/tree_replay.py), 16 gave a tree of 32 nodes
# +44% tau over the chain where 4 gave +30%: the drafter's first choice is often wrong, so the tree should fan out
# wide near the root.
DEFAULT_BRANCHING = 16


@dataclass(frozen=True)
class TreeFusion:
    """How a head's trees rank their nodes: its config's ``tree_fusion``, ``{"alpha", "beta", "temperature"}``, each
    a scalar or one value per fused position (alpha and beta as the head's own; missing: the head's alpha and beta,
    temperature 1). The temperature divides the fused logits that a tree ranks and chooses children by. A chain only
    needs the right first choice; a tree adds up path probabilities across depths, so it needs them calibrated.

    Tuned on validation replays (``scripts/tree_replay.py``), for the SmolLM2 drafter with the n-gram head: the
    chain's alpha 0.7, beta 0.5 ranked trees of 16 nodes at +30% tau over the chain, alpha 1.0, beta 0.5 at
    temperature 1.6 at +37%. DFlash alone ranks best at temperature 1: it is the product of two experts that is
    overconfident, and ranking by it crowds the budget into one deep branch."""

    alpha: tuple[float, ...] | None = None
    beta: tuple[float, ...] | None = None
    temperature: float | tuple[float, ...] = 1.0

    @classmethod
    def of_head(cls, config, pure_prefix_len: int, k: int) -> "TreeFusion":
        """The ``tree_fusion`` of a head ``config`` (None, or no head: the chain's fusion at temperature 1) for ``k``
        drafted depths, or ``FusionScheduleError`` naming the bad key or value."""
        fusion = getattr(config, "tree_fusion", None) or {}
        if not isinstance(fusion, dict) or set(fusion) - {"alpha", "beta", "temperature"}:
            raise FusionScheduleError(f"tree_fusion must be a dict with keys among alpha, beta and temperature, got "
                                      f"{fusion!r}")
        alpha, beta = fusion_weights(fusion.get("alpha", 0.0), fusion.get("beta", 0.0), pure_prefix_len, k)
        temperature = fusion.get("temperature", 1.0)
        scalar = isinstance(temperature, (int, float)) and not isinstance(temperature, bool)
        values = [temperature] * k if scalar else temperature
        if not isinstance(values, (list, tuple)) or len(values) < k or not all(
                isinstance(t, (int, float)) and not isinstance(t, bool) and 0 < t < float("inf") for t in values):
            raise FusionScheduleError(f"tree_fusion temperature must be a float > 0 or a list of one per depth (at "
                                      f"least {k}), got {temperature!r}")
        return cls(tuple(alpha.tolist()) if "alpha" in fusion else None,
                   tuple(beta.tolist()) if "beta" in fusion else None,
                   float(temperature) if scalar else tuple(float(t) for t in values[:k]))


@dataclass(frozen=True)
class TreeSettings:
    """``budget`` drafted nodes per block (the root, the anchor, is not counted); each expanded node keeps its
    ``branching`` most probable children, and each depth expands its ``frontier`` most probable nodes (None: as many
    as the budget, so that every node the budget can keep is expanded: exact best-first growth). ``fusion`` ranks the
    nodes (``TreeFusion``: the head's ``tree_fusion``; the default, the chain's fusion at temperature 1)."""

    budget: int
    branching: int = DEFAULT_BRANCHING
    frontier: int | None = None
    fusion: TreeFusion = TreeFusion()

    @property
    def expanded(self) -> int:
        return self.budget if self.frontier is None else self.frontier


# The cost-aware policy chooses each block's budget among the call's and its halves down to this (and the chain).
MIN_LADDER_BUDGET = 8


def budget_ladder(tree: TreeSettings) -> list[TreeSettings]:
    """The trees the cost-aware policy chooses among in a call with ``tree``: its budget, then each half of it down to
    ``MIN_LADDER_BUDGET`` (a budget below that is the call's own), largest first."""
    ladder, budget = [tree], tree.budget // 2
    while budget >= MIN_LADDER_BUDGET:
        ladder.append(replace(tree, budget=budget))
        budget //= 2
    return ladder


def checked_tree(budget, branching=DEFAULT_BRANCHING, fusion: TreeFusion = TreeFusion()) -> TreeSettings | None:
    """``TreeSettings`` ranked by ``fusion`` from a ``tree_budget`` (0 or None: chains) and ``tree_branching``, both
    integers >= 1, or ``GenerationArgumentError`` naming the bad one."""
    def integer(value, least: int) -> bool:
        return isinstance(value, int) and not isinstance(value, bool) and value >= least

    if budget is not None and not integer(budget, 0):
        raise GenerationArgumentError(f"tree_budget must be an integer >= 1 (0 or None: chains), got {budget!r}")
    if not integer(branching, 1):
        raise GenerationArgumentError(f"tree_branching must be an integer >= 1, got {branching!r}")
    return TreeSettings(budget, branching, fusion=fusion) if budget else None


@dataclass
class DraftTree:
    """One block's tree per row (see the module docstring for the layout): ``tokens``, ``parents``, ``depths``
    ``[B, N + 1]`` long, ``ancestors [B, N + 1, N + 1]`` bool (``ancestors[b, i, j]``: j is i or one of its
    ancestors)."""

    tokens: torch.Tensor
    parents: torch.Tensor
    depths: torch.Tensor
    ancestors: torch.Tensor

    @property
    def size(self) -> int:
        """N + 1: the root and the nodes, the width of the verify."""
        return self.tokens.shape[1]


def grow_tree(
    dflash_logits: torch.Tensor,
    anchor: torch.Tensor,
    settings: TreeSettings,
    head=None,
    log_prior: torch.Tensor | None = None,
    alpha: torch.Tensor | None = None,
    beta: torch.Tensor | None = None,
    copy: CopyChain | None = None,
    head_state: torch.Tensor | None = None,
) -> DraftTree:
    """Grow each row's tree of ``settings.budget`` nodes from DFlash's ``[B, k, V]`` logits of block slots 1..k.

    Depth by depth, the ``frontier`` best nodes of the last depth (by path log-probability) are expanded: each one's
    fused distribution (DFlash at that depth, plus alpha times the head's logits on the node's own path, minus beta
    times the log prior, plus the copy vote from the path's own suffix) gives its ``branching`` most probable
    children. Then the ``budget`` best of all candidates are kept. A child is never more probable than its parent, so
    the kept set is a tree (ties go to the shallower node). ``head_state``: the state the head reads the anchor from,
    as in ``drafting.propose``. ``settings.fusion``'s alpha and beta, where given, take the place of ``alpha`` and
    ``beta`` (the chain's); its temperature divides the fused logits of each depth.
    """
    rows, k, _ = dflash_logits.shape
    device = dflash_logits.device
    fusion = settings.fusion
    alpha = alpha if fusion.alpha is None else fusion.alpha
    beta = beta if fusion.beta is None else fusion.beta
    temperatures = fusion.temperature
    if isinstance(temperatures, (int, float)):
        temperatures = (temperatures,) * k
    wide = min(settings.branching, settings.budget)
    # The frontier: the nodes expanded at the next depth, ``width`` per row, as candidate ids, scores and states.
    frontier = torch.zeros((rows, 1), dtype=torch.long, device=device)
    score = torch.zeros((rows, 1), dtype=torch.float64, device=device)
    head_logits = matches = None
    if head is not None:  # from the head's initial state unless primed, as in drafting.propose
        head_logits, head_state = head.step(anchor, head.initial_state(rows) if head_state is None else head_state)
        head_logits = head_logits.unsqueeze(1)  # [B, F, V_head]
    if copy is not None:
        matches = copy.matches.unsqueeze(1)  # [B, F, T]
    tokens, parents, scores, depths = [anchor.unsqueeze(1)], [frontier], [score], [torch.zeros_like(frontier)]
    count = 1  # candidates so far (the root is candidate 0)
    for depth in range(1, k + 1):
        width = frontier.shape[1]
        logits = dflash_logits[:, depth - 1].unsqueeze(1).expand(rows, width, -1)
        if head is not None:
            logits = fuse_logits(logits, head_logits, log_prior, alpha[depth - 1], beta[depth - 1])
        else:
            logits = logits.float()
        if copy is not None:
            copied, gamma = copy.branch_candidates(matches)
            logits = logits.scatter_add(2, copied.unsqueeze(-1), gamma.unsqueeze(-1))
        if temperatures[depth - 1] != 1.0:
            logits = logits / temperatures[depth - 1]
        top_logp, top_ids = logits.log_softmax(-1).topk(wide, dim=-1)  # [B, F, c]: distinct tokens per node
        child_score = (score.unsqueeze(-1) + top_logp.double()).flatten(1)  # [B, F * c]
        child_ids = top_ids.flatten(1)
        tokens.append(child_ids)
        parents.append(frontier.repeat_interleave(wide, dim=1))
        scores.append(child_score)
        depths.append(torch.full_like(child_ids, depth))
        if depth == k:
            break
        score, chosen = child_score.topk(min(settings.expanded, child_ids.shape[1]), dim=-1)
        frontier = count + chosen
        count += child_ids.shape[1]
        from_node = chosen // wide  # which frontier node each chosen child hangs from
        token = child_ids.gather(1, chosen)
        if head is not None:
            state = head_state.view(rows, width, *head_state.shape[1:])
            state = state.gather(1, from_node.view(rows, -1, *[1] * (state.dim() - 2)).expand(
                -1, -1, *state.shape[2:])).flatten(0, 1)
            head_logits, head_state = head.step(token.flatten(), state)
            head_logits = head_logits.view(rows, token.shape[1], -1)
        if copy is not None:
            matches = matches.gather(1, from_node.unsqueeze(-1).expand(-1, -1, matches.shape[-1]))
            matches = copy.branch_extended(matches, token)
    return kept_tree(torch.cat(tokens, 1), torch.cat(parents, 1), torch.cat(scores, 1), torch.cat(depths, 1),
                     settings.budget, k)


def kept_tree(tokens, parents, scores, depths, budget: int, k: int) -> DraftTree:
    """The ``budget`` best candidates (``[B, M]`` each; candidate 0 is the root) as a ``DraftTree``, in order of
    depth."""
    rows, candidates = tokens.shape
    budget = min(budget, candidates - 1)
    # Ties go to the shallower node, so that a child whose log-probability rounds to 0 never displaces its parent.
    rank = scores[:, 1:] - depths[:, 1:].double() * 1e-9
    kept = rank.topk(budget, dim=-1).indices + 1  # [B, N] candidate ids
    order = (depths.gather(1, kept) * candidates + kept).argsort(dim=-1)  # by depth, then candidate id
    kept = torch.cat([torch.zeros((rows, 1), dtype=torch.long, device=tokens.device), kept.gather(1, order)], dim=1)
    # Candidate id -> node index in the tree (0 for the root and for candidates not kept, never read).
    index = torch.zeros_like(tokens).scatter(1, kept, torch.arange(budget + 1, device=tokens.device).expand(rows, -1))
    node_parents = index.gather(1, parents.gather(1, kept))
    return DraftTree(tokens.gather(1, kept), node_parents, depths.gather(1, kept),
                     ancestor_matrix(node_parents, k))


def ancestor_matrix(parents: torch.Tensor, depth: int) -> torch.Tensor:
    """``[B, N + 1, N + 1]`` ancestor-or-self of each node, from ``parents [B, N + 1]`` (the root is its own parent),
    by following parent links ``depth`` times."""
    size = parents.shape[1]
    step = torch.nn.functional.one_hot(parents, size).float()  # [B, i, parent(i)]
    reach = torch.eye(size, device=parents.device).expand_as(step)
    ancestors = reach
    for _ in range(depth):
        reach = reach @ step
        ancestors = ancestors + reach
    return ancestors > 0


def tree_mask(kv_slots: torch.Tensor, anchor: torch.Tensor, ancestors: torch.Tensor, dtype,
              attn_implementation: str) -> torch.Tensor:
    """``[B, 1, N + 1, max_len]`` mask of a tree verify whose nodes sit at slots ``anchor + index``: node i sees
    every committed slot (up to and excluding the anchor's), and the slots of its ancestors and itself."""
    size = ancestors.shape[1]
    offset = kv_slots - anchor.unsqueeze(1)  # [B, max_len]: the node index a slot holds, when 0..N
    in_tree = (offset >= 0) & (offset < size)
    seen = ancestors.gather(2, offset.clamp(0, size - 1).unsqueeze(1).expand(-1, size, -1))  # [B, N + 1, max_len]
    allowed = ((offset < 0).unsqueeze(1) | (in_tree.unsqueeze(1) & seen)).unsqueeze(1)
    if attn_implementation == "sdpa":
        return allowed
    return torch.zeros((), dtype=dtype, device=kv_slots.device).masked_fill(~allowed, torch.finfo(dtype).min)
