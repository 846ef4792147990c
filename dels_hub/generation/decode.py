"""The speculative loop: prefill, then per block draft -> verify -> commit, for a batch of one or more rows.

One loop for every mode. It owns no weights: models come in, a token buffer and statistics go out. What varies is
where the state lives, chosen once per call in ``DecodeState.allocate`` (``decode_state.py``):

* the target's KV cache is a ``StaticSlotCache`` (slot == the row's position; every forward gets a 4D mask built
  from its positions, so a rejection is rolled back by not reading stale slots) when the target allows it
  (``static_cache_supported``), else the target's own ``DynamicCache`` behind the same interface, cropped on
  rollback (``DynamicTargetCache``, batch size 1);
* a single row without compile drafts eagerly over a ``StaticDraftCache`` (its crop moves a host-int pointer).
  Otherwise the draft is *padded*: its context is always the last verify's ``block_size`` rows, the rejected ones
  written to trash slots of a ``StaticSlotCache`` that no mask reaches, so its shapes never depend on how much
  was accepted. Compiled, that step is one fixed-shape graph with the head loop inside (``graph_steps.draft_step``)
  and samples with one ``[B, k, V]`` race per block instead of one per position. On CPU that consumes the generator
  exactly as the eager loop does (same tokens for a seed); on CUDA the draws differ, so a seeded sampled run may
  differ too. The distribution is the same;
* the verify input ``[anchor, drafts]`` is one preallocated ``[B, block_size]`` buffer that the drafts are written
  into.

Rows of a batch are ragged: each has its own positions (a left-padded prompt is realigned so that its first real
token sits at position 0), accepts its own number of tokens per block and stops on its own. A finished row leaves
the batch (its caches are compacted once), so it costs no more compute.

With ``settings.tree``, a drafted block is a token tree instead of a chain (``tree.py``, ``tree_block.py``): grown
from the same DFlash forward, verified in one target forward under an ancestor mask, and its accepted path, moved to
the slots of its positions, is committed exactly as a chain's accepted drafts are.

Each block makes one device-to-host transfer after its verify: every row's committed count and stop, packed together
(the tokens are committed on the device, so the cost-aware policy's copy signal can travel with them). Under the
cost-aware policy (``policy.py``) a block that drafts greedy or top-token drafts makes one more, of the drafts'
confidences ``[B, k]``: the width of the verify depends on them. A block the policy does not draft is a plain step
(a verify of the anchor alone) or a copy block (the copy expert's own continuation verified as drafts, one more
transfer: the match lengths it was copied at, which the width depends on); the drafter reads the rows it missed the
next time it drafts.
"""

import time

import torch

from ..compat import cache_kwarg_name, synchronize
from ..copy_expert import CopyChain, longest_matches
from ..errors import UnsupportedInputError
from ..sampling import Warping, choose, keyed_sample, warp_probs
from ..verify import committed, to_host, verify_block, verify_match
from .decode_state import FAST_ATTENTION, DecodeState, PaddedDraft, realigned
from .drafting import context_features, propose
from .graph_steps import (
    Drafting,
    compiled,
    draft_step,
    eager_hidden,
    graph_warping,
    static,
    verify_step,
    verify_tree_step,
)
from .output import DecodeResult
from .policy import COPIED, DRAFTED, PLAIN, FixedBlocks, PolicyStats
from .settings import DecodeSettings
from .tree_block import check_tree_decoding, draft_tree, verify_tree_block


@torch.inference_mode()
def speculative_decode(
    target,
    drafter,
    input_ids: torch.Tensor,
    settings: DecodeSettings,
    *,
    prompt_lengths: list[int] | None = None,
    head=None,
    generator: torch.Generator | None = None,
    streamer=None,
    static_cache: bool = True,
    compile: bool = False,
    workspace: dict | None = None,
    lm_head: torch.nn.Module | None = None,
    policy=None,
    packed=None,
) -> DecodeResult:
    """Generate up to ``settings.max_new_tokens`` after each row of ``input_ids [B, N]``; ``block_size=1`` is plain
    decoding.

    ``prompt_lengths``: each row's real length in a left-padded batch (None: every row is N tokens long). Rows that
    end before others are filled with ``settings.pad_id``, as transformers' ``generate`` does.
    ``static_cache=False`` keeps the target's own ``DynamicCache`` (for targets ``static_cache_supported`` refuses;
    batch size 1). ``compile=True`` (static cache, batch size 1) runs the verify forward and, when the drafter's
    attention takes a 4D mask, the draft step through ``torch.compile``; the first call compiles for each
    cache-length bucket and verify width. ``workspace``, a dict the caller keeps between compiled calls, lets the
    caches be reused, so that CUDA graphs recorded against their addresses are replayed. ``lm_head`` scores the drafts
    (default: the target's; a ``DraftVocabulary`` prunes them). ``policy`` decides per block whether to draft and how
    many drafts to verify (``policy.py``; default ``FixedBlocks``: every block, every draft). ``packed``: a
    ``PackedLinears`` whose widths' steps run on oneDNN's matmul (``packed_weights.py``; None: as loaded). Greedy
    output is the same in every mode; sampling is distributed the same.
    """
    device, (batch, width) = input_ids.device, input_ids.shape
    warping, stop_ids, max_new_tokens = settings.warping, settings.stop_ids, settings.max_new_tokens
    k = settings.block_size - 1
    policy = FixedBlocks() if policy is None else policy
    lengths = [width] * batch if prompt_lengths is None else list(prompt_lengths)
    padding = lengths != [width] * batch
    if batch > 1 and (compile or not static_cache):
        raise UnsupportedInputError(f"a batch of {batch} rows needs the static cache without compile (compiled "
                                    "decoding and the DynamicCache path run one row at a time for now)")
    tree = settings.tree if k > 0 else None
    if tree is not None:
        check_tree_decoding(settings, static_cache)
    layer_ids = drafter.config.target_layer_ids
    embed = target.get_input_embeddings()
    lm_head = target.get_output_embeddings() if lm_head is None else lm_head
    cache_arg = cache_kwarg_name(type(target))
    compile = compile and static_cache
    attention_ok = drafter.config._attn_implementation in FAST_ATTENTION
    padded_draft = k > 0 and ((compile and attention_ok) or batch > 1)
    graph_draft = padded_draft and compile
    # Top-token drafts at T > 0 are the fused argmax, verified against the target's own samples, which are keyed
    # draws: the token sampled at a position depends on the call's key, the row and the position alone, so a seed
    # gives the same text whatever the policy verified (and the same as block size 1).
    match = not warping.greedy and settings.draft_mode == "top"
    key = torch.randint(0, 1 << 62, (), generator=generator, device=device) if match else None
    row_ids = torch.arange(batch, device=device)  # each row's original index, for its keyed draws
    draft_warping = Warping() if match else warping
    sampled_drafts = not draft_warping.greedy
    width_from_drafts = policy.needs_confidence and width_may_follow_drafts(sampled_drafts)
    drafting = Drafting(drafter, embed, lm_head,
                        graph_warping(draft_warping, device) if graph_draft else draft_warping, head,
                        head.log_prior().to(device) if head is not None else None, settings.alpha, settings.beta,
                        settings.copy_weights, confidence=width_from_drafts)
    # The cost-aware policy reads each row's copy match at its anchor, with the copy expert on; it may then verify
    # the copy expert's own continuation instead of drafting (a copy block), unless drafts are sampled (rejection
    # sampling needs the q the drafts were drawn from).
    copy_signal = policy.needs_confidence and settings.copy_weights is not None and k > 0
    copy_blocks = copy_signal and not sampled_drafts

    # 0. Allocate once.
    length_at = torch.tensor(lengths, device=device) if padding else torch.full((batch,), width, device=device)
    state = DecodeState.allocate(target, drafter, input_ids, length_at, settings, static_cache=static_cache,
                                 padded_draft=padded_draft,
                                 sequential=head is not None or settings.copy_weights is not None, compile=compile,
                                 workspace={} if workspace is None else workspace, trash=width if padding else 0,
                                 sampled_drafts=sampled_drafts, confidence=width_from_drafts)
    verify = compiled(verify_step, device) if compile else verify_step
    node_index = torch.arange(tree.budget + 1, device=device) if tree is not None else None
    verify_tree = compiled(verify_tree_step, device) if compile and tree is not None else verify_step
    if packed is not None:  # the loop's steps (chains and trees) on oneDNN for its widths; the prefill as loaded
        verify, verify_tree = packed.wrap(verify), packed.wrap(verify_tree)
    draft_graph = compiled(draft_step, device) if graph_draft else None

    # 1. Prefill (eager, any length): the target reads the prompts and commits each row's first token. A padded
    # prompt is read as given (left-padded, so the last column is real in every row) at each row's own positions;
    # its pads are written to trash slots.
    started = time.perf_counter()
    prefill_positions, slots = state.positions[:, :width], None
    if padding:
        columns = state.positions[:, :width]
        pads = width - length_at.unsqueeze(1)
        prefill_positions = (columns - pads).clamp(min=0)
        slots = torch.where(columns >= pads, columns - pads, state.target_cache.max_len - 1 - columns)
    logits, hidden_states = verify_step(target, input_ids, prefill_positions.expand(batch, width), state.target_cache,
                                        cache_arg, logits_to_keep=1, slots=slots)
    if match:
        first = keyed_sample(warp_probs(logits[:, -1:], warping), key, row_ids, length_at.unsqueeze(1))[:, 0]
    else:
        first, _ = choose(logits[:, -1], warping, generator)
    state.output.scatter_(1, state.start_at.unsqueeze(1), first.unsqueeze(1))
    features = context_features(hidden_states, layer_ids) if k > 0 else None  # what the drafter reads next
    if padding and k > 0:  # realigned like the tokens: each row's real features first
        features = realigned(features, length_at)
    # The rows the drafter has not read, since it last drafted: each plain step's and copy block's features,
    # positions and which of them were committed.
    unread: list[tuple[torch.Tensor, torch.Tensor, torch.Tensor]] = []
    if compile:  # the graphs write into these buffers in place: their addresses are part of the graph
        for buffer in state.target_cache.keys + state.target_cache.values:
            static(buffer)
    # The prefill's one host transfer: each row's stop, and (for the policy) its copy continuation at the first anchor.
    transfer = [torch.isin(first, stop_ids).long().unsqueeze(0)]
    if copy_signal:
        transfer.append(copy_signal_rows(state, settings.copy_weights, k if copy_blocks else 0))
    stopped, *signal = to_host(torch.cat(transfer))
    copy_lengths = host_columns(signal) if copy_signal else None
    synchronize(device)
    prefilled = last_sync = time.perf_counter()
    if streamer is not None:
        streamer.put(input_ids.cpu())
        streamer.put(first.cpu())

    rows = list(range(batch))  # the original index of each row still in the state
    starts = list(lengths)  # each row's anchor position, on the host
    acceptance_lengths: list[list[int]] = [[] for _ in range(batch)]
    finished: dict[int, torch.Tensor] = {}  # original row -> its tokens (prompt and new), row-local
    done = [bool(stop) or max_new_tokens == 1 for stop in stopped]
    stats = PolicyStats()
    first_block = True
    while True:
        if any(done):  # finished rows leave the batch
            for i, row in enumerate(rows):
                if done[i]:
                    finished[row] = state.output[i, : starts[i] + 1]
            keep = [i for i in range(len(rows)) if not done[i]]
            if not keep:
                break
            kept = torch.tensor(keep, device=device)
            features = joined(features, unread, state.padded)
            state.keep_rows(kept)
            features, row_ids = None if features is None else features[keep], row_ids[kept]
            rows, starts, done = [rows[i] for i in keep], [starts[i] for i in keep], [False] * len(keep)
            copy_lengths = None if copy_lengths is None else [copy_lengths[i] for i in keep]
        block_positions = state.start_at.unsqueeze(1) + state.block_index  # [B, bs]
        block = state.output.gather(1, block_positions)  # [anchor, MASK...]: nothing is written past an anchor
        state.verify_ids[:, 0] = block[:, 0]
        q, confidence, grown, path = None, None, None, None
        match_lengths = None if copy_lengths is None else [row[0] for row in copy_lengths]
        kind = policy.block_kind(copy_lengths, copy_blocks) if k > 0 else PLAIN
        if compile and device.type == "cuda":
            torch.compiler.cudagraph_mark_step_begin()  # the previous block's graph outputs are no longer read
        # 2. Draft, or not: one DFlash forward over the new context and the block, then the head over the block; or
        # the copy expert's own continuation (a copy block); or nothing (a plain step).
        drafted = kind == DRAFTED
        prompt_draft = drafted and first_block  # it reads the whole prompt: a time no later block repeats
        if drafted:
            features = joined(features, unread, state.padded)
            shape = policy.tree_shape(tree) if tree is not None else None
            if shape is not None:
                grown = draft_tree(state, drafting, features, block, block_positions, starts[0], shape)
            elif state.padded is not None:
                # The graph has one context shape (the last verify's block_size rows); the first block's prompt and
                # a context grown by plain steps run eagerly.
                step = draft_step if first_block or draft_graph is None or features.shape[1] != k + 1 else draft_graph
                q, confidence = draft_padded(state, drafting, features, block, block_positions, step, generator,
                                             first=first_block)
            else:
                q, confidence = draft_eagerly(state, drafting, features, block, starts[0], generator)
            first_block = False
            if grown is not None:
                plan = policy.tree_plan(grown.size, len(rows), shape, tree)
            else:
                plan = policy.plan(to_host(confidence) if width_from_drafts else None, k + 1, len(rows),
                                   call_tree=tree)
        elif kind == COPIED:  # the continuation is in state.drafts already, written by the last transfer's step
            plan = policy.copy_plan(copy_lengths, len(rows))
        else:
            plan = policy.plain(len(rows))
        width_now = plan.width

        # 3. Verify: one target forward over [anchor, the drafts to verify] at each row's positions (or over the
        # tree, each node at its depth's position and in a slot of its own, then the accepted path moves to the
        # slots of its positions).
        if grown is not None:
            tokens, n_accepted, path, hidden_states = verify_tree_block(
                verify_tree, target, grown, state, cache_arg, block_positions, node_index, k,
                (key, row_ids, warping) if match else None)
            width_now = k + 1
        else:
            logits, hidden_states = verify(target, state.verify_ids[:, :width_now], block_positions[:, :width_now],
                                           state.target_cache, cache_arg)
            if match:  # the target's draw at each verified position, for the token after it
                p = warp_probs(logits, warping)
                draws = keyed_sample(p, key, row_ids, block_positions[:, :width_now] + 1)
                tokens, n_accepted = verify_match(state.drafts[:, : width_now - 1], p, draws=draws)
            else:
                tokens, n_accepted = verify_block(warping, state.drafts[:, : width_now - 1], q, logits, generator)

        # 4. Commit on the device, then the one host transfer per block: every row's count and stop (and, for the
        # policy, its copy continuation at the new anchor).
        index = state.block_index[:width_now]
        n_commit, stop_now = committed(tokens, n_accepted, stop_ids, index, state.budget)
        written = torch.where(index < n_commit.unsqueeze(1), state.start_at.unsqueeze(1) + 1 + index,
                              state.output.shape[1] - 1)
        state.output.scatter_(1, written, tokens)
        state.start_at += n_commit
        state.budget -= n_commit
        transfer = [torch.stack([n_commit, stop_now.long()])]
        if copy_signal:
            transfer.append(copy_signal_rows(state, settings.copy_weights, k if copy_blocks else 0))
        counts, stops, *signal = to_host(torch.cat(transfer))
        now = time.perf_counter()
        if streamer is not None:
            streamer.put(tokens[0, : counts[0]].cpu())

        # 5. Only the anchor and the accepted drafts become context; the new anchor (bonus) is not in the cache.
        # A plain step's or copy block's rows wait in unread: the drafter catches up the next time it drafts.
        if k > 0:
            new_features = context_features(hidden_states, layer_ids)
            if path is not None:  # the tree's accepted path, from the anchor: the rows a chain would have kept
                new_features = new_features.gather(1, path.unsqueeze(-1).expand(-1, -1, new_features.shape[-1]))
            if not drafted:
                # One row: its committed rows alone (eager drafting reads every row it is given). Padded: all the
                # verified rows, those not committed marked padding.
                if state.padded is None:
                    unread.append((new_features[:, : counts[0]], None, None))
                else:
                    unread.append((new_features[:, :width_now], block_positions[:, :width_now],
                                   index < n_commit.unsqueeze(1)))
            elif state.padded is not None:
                features = padded_context(state.padded, new_features, block_positions, n_commit, state.block_index)
            else:
                features = new_features[:, : counts[0]]
            if state.padded is not None:
                state.padded.anchor_at.copy_(state.start_at)
        starts = [start + n for start, n in zip(starts, counts)]
        stopped = [bool(stop) for stop in stops]
        done = [stop or start + 1 - length >= max_new_tokens
                for stop, start, length in zip(stopped, starts, (lengths[row] for row in rows))]
        for i, n in enumerate(counts):
            acceptance_lengths[rows[i]].append(n)
        policy.observe(plan, counts, [not end for end in done], (now - last_sync) * 1e3, match_lengths,
                       timed=not prompt_draft)
        stats.record(plan, counts, (now - last_sync) * 1e3)
        copy_lengths = host_columns(signal) if copy_signal else None
        last_sync = now
        state.target_cache.keep(starts[0])

    synchronize(device)
    finished_at = time.perf_counter()
    if streamer is not None:
        streamer.end()
    return DecodeResult(
        sequences=assemble(input_ids, lengths, [finished[row] for row in range(batch)], settings.pad_id),
        acceptance_lengths=acceptance_lengths[0] if batch == 1 else sum(acceptance_lengths, []),
        row_acceptance_lengths=acceptance_lengths,
        time_to_first_token=prefilled - started,
        decode_seconds=finished_at - prefilled,
        policy=stats.summary(policy.name),
    )


def copy_signal_rows(state: DecodeState, weights: torch.Tensor, k: int) -> torch.Tensor:
    """What the policy reads of the copy expert at each row's anchor, as rows of the block's transfer: with ``k``
    slots, the copy expert's own continuation written into ``state.drafts`` (so that a copy block verifies it as it
    stands) and the match length each slot was copied at, ``[k, B]``; with ``k = 0``, the longest match alone
    ``[1, B]`` (sampled drafts have no copy blocks)."""
    if k == 0:
        return longest_matches(state.output, state.start_at, weights).unsqueeze(0)
    return CopyChain(state.output, state.start_at, weights).continuation(k, state.drafts).T


def host_columns(rows: list[list[int]]) -> list[list[int]]:
    """The transfer's ``[n, B]`` rows as ``[B][n]``: each batch row's values."""
    return [list(column) for column in zip(*rows)]


def width_may_follow_drafts(sampled_drafts: bool) -> bool:
    """Whether the policy may choose how many drafts to verify from the drafts themselves. Greedy and top-token drafts
    may: what they commit is the target's own choice, whatever was verified. Sampled drafts may not: rejection
    sampling is exact only when which drafts face the verifier does not depend on what was sampled."""
    return not sampled_drafts


def joined(features, unread: list, padded: PaddedDraft | None):
    """The drafter's whole pending context: ``features`` (the last drafted block's rows), then the rows of each plain
    step and copy block since (``unread``: ``(features, positions, committed)`` of each, emptied here; positions and
    committed only for a padded draft, whose positions and mask grow with it, its uncommitted rows marked padding).
    Plain steps only append, so a long run of them costs one concatenation, not one per step."""
    if not unread:
        return features
    steps_features, steps_positions, steps_real = zip(*unread)
    unread.clear()
    if padded is not None:
        padded.context_positions = torch.cat([padded.context_positions, *steps_positions], dim=1)
        padded.context_real = torch.cat([padded.context_real, *steps_real], dim=1)
    return torch.cat([features, *steps_features], dim=1)


def padded_context(padded: PaddedDraft, new_features, block_positions, n_commit, block_index) -> torch.Tensor:
    """The padded drafter's next context after a drafted block's verify of ``new_features [B, w, F]``: that verify's
    rows, padded to the block's size (``block_index``, an arange: one graph shape), with the rejected ones marked
    padding."""
    (rows, width), block_size = new_features.shape[:2], block_index.shape[0]
    if width < block_size:
        new_features = torch.cat([new_features, new_features.new_zeros((rows, block_size - width,
                                                                        new_features.shape[-1]))], dim=1)
    padded.context_positions = block_positions
    padded.context_real = block_index < n_commit.unsqueeze(1)
    return new_features


def assemble(input_ids: torch.Tensor, lengths: list[int], tokens: list[torch.Tensor], pad_id: int) -> torch.Tensor:
    """``[B, N + most new tokens]``: each row's prompt as given (padding included), its new tokens, then ``pad_id``
    up to the longest row, as transformers' ``generate`` returns a batch."""
    new = [row[length:] for row, length in zip(tokens, lengths)]
    longest = max(row.shape[0] for row in new)
    sequences = input_ids.new_full((input_ids.shape[0], input_ids.shape[1] + longest), pad_id)
    sequences[:, : input_ids.shape[1]] = input_ids
    for i, row in enumerate(new):
        sequences[i, input_ids.shape[1] : input_ids.shape[1] + row.shape[0]] = row
    return sequences


def draft_eagerly(state: DecodeState, drafting: Drafting, features, block, start: int, generator):
    """Draft a single row's block into ``state.drafts`` with the drafter over its ``StaticDraftCache``; returns
    ``(q or None when the drafts are not sampled, confidence [B, k])``. ``features`` is every context row the drafter
    has not read: the last drafted block's accepted rows and one row per plain step since."""
    slot_hidden = eager_hidden(drafting, state.draft_cache, state.positions, features, block, start)
    _, q = propose(drafting.lm_head(slot_hidden), block[:, 0], drafting.warping, generator, drafting.head,
                   drafting.log_prior, drafting.alpha, drafting.beta, drafts=state.drafts, q=state.q_buffer,
                   copy=drafting.copy_chain(state.output, start, slot_hidden), confidence=state.confidence,
                   head_state=drafting.head_state(state.output, start))
    return q, state.confidence


def draft_padded(state: DecodeState, drafting: Drafting, features, block, block_positions, step, generator,
                 first: bool):
    """Draft every row's block into ``state.drafts`` through ``step`` (``draft_step``, or its compiled graph);
    returns ``(q or None, confidence [B, k])``. The ``first`` block's context is the whole prompt (any length): that
    call runs eagerly, and allocates the cache buffers that a graph then writes into in place."""
    padded = state.padded
    if padded.races is not None:
        padded.races.exponential_(generator=generator)
    proposed, q, confidence = step(drafting, features, padded.context_positions, padded.context_real, block,
                                   block_positions, padded.cache, padded.races, state.output, padded.anchor_at)
    state.drafts.copy_(proposed)
    if first:
        for buffer in padded.cache.keys + padded.cache.values:
            static(buffer)
    return q, confidence
