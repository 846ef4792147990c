"""A tree block inside the decode loop (``decode.py``): draft the tree, verify it in one target forward, keep the
accepted path. The tree itself (growth, mask) is ``tree.py``; its verifier is ``verify.verify_tree``."""

import torch

from ..errors import UnsupportedInputError
from ..sampling import keyed_sample, warp_probs
from ..verify import verify_tree
from .decode_state import DecodeState
from .graph_steps import Drafting, draft_hidden, eager_hidden
from .settings import DecodeSettings
from .tree import DraftTree, TreeSettings, grow_tree, tree_mask


def check_tree_decoding(settings: DecodeSettings, static_cache: bool) -> None:
    """Trees need the static cache (a tree is a mask over its slots) and verify top-token drafts (sampled trees would
    need multi-draft rejection sampling). Compiled, the tree's verify is a graph per tree size; its growth is eager."""
    budget = settings.tree.budget
    if not static_cache:
        raise UnsupportedInputError(f"tree_budget={budget} needs the static cache (a tree is a mask over its slots); "
                                    f"this call has static_cache=False")
    if not settings.warping.greedy and settings.draft_mode != "top":
        raise UnsupportedInputError(f"tree_budget={budget} at T > 0 verifies top-token drafts: use draft_mode='top', "
                                    f"got {settings.draft_mode!r}")


def draft_tree(state: DecodeState, drafting: Drafting, features, block, block_positions, start: int,
               settings: TreeSettings) -> DraftTree:
    """One DFlash forward over the new context and the block (padded for a batch, eager for a single row), then the
    tree grown from its logits with the head and the copy expert on each branch."""
    padded = state.padded
    if padded is not None:
        slot_hidden = draft_hidden(drafting, features, padded.context_positions, padded.context_real, block,
                                   block_positions, padded.cache)
        anchor = padded.anchor_at
    else:
        slot_hidden = eager_hidden(drafting, state.draft_cache, state.positions, features, block, start)
        anchor = start
    return grow_tree(drafting.lm_head(slot_hidden), block[:, 0], settings, drafting.head, drafting.log_prior,
                     drafting.alpha, drafting.beta, drafting.copy_chain(state.output, anchor, slot_hidden),
                     drafting.head_state(state.output, anchor))


def verify_tree_block(verify, target, tree: DraftTree, state: DecodeState, cache_arg: str, block_positions,
                      node_index: torch.Tensor, k: int, keyed=None):
    """Verify ``tree`` in one target forward and keep its accepted path -> ``(tokens [B, k + 1], n_accepted [B],
    path [B, k + 1], hidden_states)``, committed as a chain's.

    Each node is read at position anchor + depth from a slot of its own (anchor + index); the target's choice after
    each node is its argmax, or with ``keyed = (key, row_ids, warping)`` its keyed draw (top-token drafts at T > 0,
    as in the chain). Then the accepted path's keys and values move to the slots of their positions
    (``block_positions``), where the next block reads them.
    """
    start = state.start_at.unsqueeze(1)
    positions = start + tree.depths
    mask = tree_mask(state.target_cache.slots, state.start_at, tree.ancestors, target.dtype,
                     target.config._attn_implementation)
    logits, hidden_states = verify(target, tree.tokens, positions, state.target_cache, cache_arg,
                                   slots=start + node_index[: tree.size], mask=mask)
    if keyed is None:
        choices = logits.argmax(-1)
    else:
        key, row_ids, warping = keyed
        choices = keyed_sample(warp_probs(logits, warping), key, row_ids, positions + 1)
    tokens, n_accepted, path = verify_tree(choices, tree.tokens, tree.parents, tree.depths, tree.ancestors, k)
    state.target_cache.move(start + path[:, 1:], block_positions[:, 1:])
    return tokens, n_accepted, path, hidden_states
