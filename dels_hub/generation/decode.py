"""The speculative loop (batch size 1): prefill, then per block draft -> verify -> commit.

One loop for every mode. It owns no weights: models come in, a token buffer and statistics go out. What varies is
where the state lives, chosen once per call in ``DecodeState.allocate``:

* the target's KV cache is a ``StaticSlotCache`` (slot == position; every forward gets a 4D mask built from its
  positions, so a rejection is rolled back by not reading stale slots) when the target allows it
  (``static_cache_supported``), else the target's own ``DynamicCache`` behind the same interface, cropped on
  rollback (``DynamicTargetCache``);
* the drafter runs eagerly over a ``StaticDraftCache`` (its crop moves a host-int pointer), or, compiled, as one
  fixed-shape graph with the head loop inside (``graph_steps.draft_step``): its context is padded to the last
  verify's ``block_size`` rows, its cache is a ``StaticSlotCache`` too, and its sampling draws one ``[k, V]`` race per
  block instead of one per position. On CPU that consumes the generator exactly as the eager loop does (same tokens
  for a seed); on CUDA the draws differ, so a seeded sampled run may differ too. The distribution is the same;
* the verify input ``[anchor, drafts]`` is one preallocated ``[1, block_size]`` buffer that the drafts are written
  into; positions are views of one arange built per call.

Each block makes one device-to-host transfer, in ``verify.commit_count``: the accepted count and the first stop
position, packed together.
"""

import time
from dataclasses import dataclass

import torch

from ..compat import cache_kwarg_name, synchronize
from ..copy_expert import CopyChain
from ..sampling import choose
from ..verify import commit_count, is_stop, verify_block
from .caches import DynamicTargetCache, StaticDraftCache, StaticSlotCache
from .drafting import context_features, propose
from .graph_steps import Drafting, compiled, draft_step, graph_warping, static, verify_step
from .output import DecodeResult
from .settings import DecodeSettings

FAST_ATTENTION = ("sdpa", "eager")  # the implementations that take our 4D mask as-is
# Compiled: cache lengths are rounded up to this, so a new prompt length rarely means a new graph.
COMPILE_BUCKET = 256


def static_cache_supported(target) -> str | None:
    """None when the target's KV cache can be a ``StaticSlotCache``, else the reason it cannot."""
    config = target.config
    attention = getattr(config, "_attn_implementation", None)
    if attention not in FAST_ATTENTION:
        return f"attention implementation {attention!r} is not one of {FAST_ATTENTION}"
    layer_types = set(getattr(config, "layer_types", None) or ["full_attention"])
    if layer_types != {"full_attention"}:
        return f"layer types {sorted(layer_types)}: only full attention has a position-indexed static cache"
    if not getattr(target, "_can_compile_fullgraph", False):
        return f"{type(target).__name__} does not declare static-cache (fullgraph) support"
    return None


def reused(workspace: dict, name: str, key, build):
    """``workspace[name]`` when it was built for ``key``, else a new ``build()`` kept there."""
    if workspace.get(name, (None, None))[0] != key:
        workspace[name] = (key, build())
    return workspace[name][1]


@dataclass
class GraphedDraft:
    """The compiled draft step's inputs that change from block to block, as device tensors of fixed shape."""

    cache: StaticSlotCache
    n_context: torch.Tensor  # 0-dim: how many of the context rows are real (the rest are the last verify's padding)
    anchor_at: torch.Tensor  # 0-dim: the anchor's position, for the copy expert
    races: torch.Tensor | None  # [k, V] Exp(1) draws, refilled in place each block (None when greedy)
    context_start: int = 0  # position of the context features' first row


@dataclass
class DecodeState:
    """Everything one call allocates, once: the token buffer, positions, the verify input and both caches."""

    output: torch.Tensor  # [1, cache_len]: prompt, then committed tokens; the block is a slice of it
    positions: torch.Tensor  # [1, cache_len + block_size]
    verify_ids: torch.Tensor  # [1, block_size]: [anchor, drafts]
    drafts: torch.Tensor  # [k], a view of verify_ids: the drafts are written straight into the verify input
    block_index: torch.Tensor  # [block_size]
    target_cache: StaticSlotCache | DynamicTargetCache
    draft_cache: StaticDraftCache | None  # eager drafting
    graphed: GraphedDraft | None  # compiled drafting
    q_buffer: torch.Tensor | None  # [k, V] draft distributions, written in place (eager, head, sampling)

    @classmethod
    def allocate(cls, target, drafter, input_ids, settings: DecodeSettings, *, static_cache: bool,
                 graph_draft: bool, sequential: bool, compile: bool, workspace: dict) -> "DecodeState":
        """``sequential``: drafts are chosen one position at a time (a head or the copy expert votes)."""
        device, prompt_len, block_size = input_ids.device, input_ids.shape[1], settings.block_size
        # The last verify starts below max_len - 1 and covers block_size slots.
        cache_len = prompt_len + settings.max_new_tokens + block_size
        if compile:
            cache_len = -(-cache_len // COMPILE_BUCKET) * COMPILE_BUCKET
        # Only compiled runs keep their caches between calls (graphs are recorded against their addresses);
        # otherwise they live for this call. Stale slots of a reused cache are never read: each is rewritten first.
        workspace = workspace if compile else {}
        if static_cache:
            target_cache = reused(workspace, "target_cache", (cache_len, device, target.dtype),
                                  lambda: StaticSlotCache(cache_len, target.config.num_hidden_layers, device,
                                                          target.dtype))
        else:
            target_cache = DynamicTargetCache()
        output = torch.full((1, cache_len), drafter.config.mask_token_id, dtype=torch.long, device=device)
        output[:, :prompt_len] = input_ids
        verify_ids = torch.empty((1, block_size), dtype=torch.long, device=device)
        k, vocab = block_size - 1, target.get_output_embeddings().out_features
        graphed, draft_cache, q_buffer = None, None, None
        if graph_draft:
            layers = drafter.config.num_hidden_layers
            races = None
            if not settings.warping.greedy:  # a static input: refilled in place each block, never copied in
                races = reused(workspace, "races", (k, vocab, device),
                               lambda: static(torch.empty((k, vocab), dtype=torch.float32, device=device)))
            graphed = GraphedDraft(
                # block_size slots more than positions: the padding rows' trash slots.
                cache=reused(workspace, "draft_cache", (cache_len, block_size, device, drafter.dtype),
                             lambda: StaticSlotCache(cache_len + block_size, layers, device, drafter.dtype)),
                n_context=torch.full((), prompt_len, dtype=torch.long, device=device),  # a fill, not a host copy
                anchor_at=torch.full((), prompt_len, dtype=torch.long, device=device),
                races=races,
            )
        else:
            draft_cache = StaticDraftCache(cache_len, drafter.config.num_hidden_layers)
            if sequential and not settings.warping.greedy and k > 0:
                q_buffer = torch.empty((k, vocab), dtype=torch.float32, device=device)
        positions = torch.arange(cache_len + block_size, device=device).unsqueeze(0)
        return cls(output=output, positions=positions, verify_ids=verify_ids, drafts=verify_ids[0, 1:],
                   block_index=torch.arange(block_size, device=device), target_cache=target_cache,
                   draft_cache=draft_cache, graphed=graphed, q_buffer=q_buffer)


@torch.inference_mode()
def speculative_decode(
    target,
    drafter,
    input_ids: torch.Tensor,
    settings: DecodeSettings,
    *,
    head=None,
    generator: torch.Generator | None = None,
    streamer=None,
    static_cache: bool = True,
    compile: bool = False,
    workspace: dict | None = None,
) -> DecodeResult:
    """Generate up to ``settings.max_new_tokens`` after ``input_ids [1, N]``; ``block_size=1`` is plain decoding.

    ``static_cache=False`` keeps the target's own ``DynamicCache`` (for targets ``static_cache_supported`` refuses).
    ``compile=True`` (static cache only) runs the verify forward and, when the drafter's attention takes a 4D mask,
    the draft step through ``torch.compile``; the first call compiles for each cache-length bucket. ``workspace``, a
    dict the caller keeps between compiled calls, lets the caches be reused, so that CUDA graphs recorded against
    their addresses are replayed. Greedy output is the same in every mode; sampling is distributed the same.
    """
    device, prompt_len = input_ids.device, input_ids.shape[1]
    block_size, warping, stop_ids = settings.block_size, settings.warping, settings.stop_ids
    max_new_tokens, k = settings.max_new_tokens, settings.block_size - 1
    layer_ids = drafter.config.target_layer_ids
    embed, lm_head = target.get_input_embeddings(), target.get_output_embeddings()
    cache_arg = cache_kwarg_name(type(target))
    compile = compile and static_cache
    graph_draft = compile and k > 0 and drafter.config._attn_implementation in FAST_ATTENTION
    drafting = Drafting(drafter, embed, lm_head, graph_warping(warping, device) if graph_draft else warping, head,
                        head.log_prior().to(device) if head is not None else None, settings.alpha, settings.beta,
                        settings.copy_weights)

    # 0. Allocate once.
    state = DecodeState.allocate(target, drafter, input_ids, settings, static_cache=static_cache,
                                 graph_draft=graph_draft,
                                 sequential=head is not None or settings.copy_weights is not None, compile=compile,
                                 workspace={} if workspace is None else workspace)
    output, positions, verify_ids, drafts, graphed = (state.output, state.positions, state.verify_ids, state.drafts,
                                                      state.graphed)
    verify = compiled(verify_step, device) if compile else verify_step
    draft_graph = compiled(draft_step, device) if graph_draft else None

    # 1. Prefill (eager, any length): the target reads the prompt and commits the first token.
    started = time.perf_counter()
    logits, hidden_states = verify_step(target, input_ids, positions[:, :prompt_len], state.target_cache, cache_arg,
                                        logits_to_keep=1)
    first, _ = choose(logits[0, -1:], warping, generator)
    output[:, prompt_len] = first
    features = context_features(hidden_states, layer_ids)
    if compile:  # the graphs write into these buffers in place: their addresses are part of the graph
        for buffer in state.target_cache.keys + state.target_cache.values:
            static(buffer)
    stopped = is_stop(first, stop_ids)  # the one host transfer of the prefill
    synchronize(device)
    prefilled = time.perf_counter()
    if streamer is not None:
        streamer.put(input_ids.cpu())
        streamer.put(first.cpu())

    acceptance_lengths: list[int] = []
    start = prompt_len  # position of the block's anchor, a host int
    while not stopped and start + 1 - prompt_len < max_new_tokens:
        block = output[:, start : start + block_size]
        verify_ids[0, 0] = block[0, 0]
        q = None
        if compile and device.type == "cuda":
            torch.compiler.cudagraph_mark_step_begin()  # the previous block's graph outputs are no longer read
        # 2. Draft: one DFlash forward over the new context and the block, then the head over the block.
        if graphed is not None:
            q = draft_graphed(state, drafting, features, block, start, draft_graph, generator,
                              first=start == prompt_len)
        elif k > 0:
            q = draft_eagerly(state, drafting, features, block, start, generator)

        # 3. Verify: one target forward over [anchor, drafts] at positions start...
        logits, hidden_states = verify(target, verify_ids, positions[:, start : start + block_size],
                                       state.target_cache, cache_arg)
        tokens, n_accepted = verify_block(warping, drafts, q, logits[0], generator)

        # 4. Commit: the one host transfer per block carries the accepted count and the first stop position.
        n_commit, stopped = commit_count(tokens, n_accepted, stop_ids, state.block_index,
                                         max_new_tokens - (start + 1 - prompt_len))
        output[0, start + 1 : start + 1 + n_commit] = tokens[:n_commit]
        acceptance_lengths.append(n_commit)
        if streamer is not None:
            streamer.put(tokens[:n_commit].cpu())

        # 5. Only the anchor and the accepted drafts become context; the new anchor (bonus) is not in the cache.
        # The graphed draft keeps all block_size rows (fixed shape) and is told how many are real.
        features = context_features(hidden_states, layer_ids)
        if graphed is not None:
            graphed.n_context.fill_(n_commit)
            graphed.anchor_at.fill_(start + n_commit)
            graphed.context_start = start
        else:
            features = features[:, :n_commit]
        start += n_commit
        state.target_cache.keep(start)

    synchronize(device)
    finished = time.perf_counter()
    if streamer is not None:
        streamer.end()
    return DecodeResult(
        sequences=output[:, : start + 1].clone(),
        acceptance_lengths=acceptance_lengths,
        time_to_first_token=prefilled - started,
        decode_seconds=finished - prefilled,
    )


def draft_eagerly(state: DecodeState, drafting: Drafting, features, block, start: int, generator):
    """Draft the block into ``state.drafts`` with the drafter over its ``StaticDraftCache``; returns q (None when
    greedy)."""
    cache, positions, copy_weights = state.draft_cache, state.positions, drafting.copy_weights
    hidden = drafting.drafter(target_hidden=features, noise_embedding=drafting.embed(block),
                              position_ids=positions[:, cache.length : start + block.shape[1]], past_key_values=cache,
                              use_cache=True)
    cache.crop(start)  # keep context keys/values only; the block is redrafted next time
    copy = None if copy_weights is None else CopyChain(state.output[0], start, copy_weights)
    _, q = propose(drafting.lm_head(hidden[0, 1:]), block[0, :1], drafting.warping, generator, drafting.head,
                   drafting.log_prior, drafting.alpha, drafting.beta, drafts=state.drafts, q=state.q_buffer, copy=copy)
    return q


def draft_graphed(state: DecodeState, drafting: Drafting, features, block, start: int, draft_graph, generator,
                  first: bool):
    """Draft the block into ``state.drafts`` through the compiled draft step ``draft_graph``; returns q (None when
    greedy). The ``first`` block's context is the whole prompt (any length): that call runs eagerly, and allocates
    the cache buffers that the graph then writes into in place."""
    graphed, positions = state.graphed, state.positions
    step = draft_step if first else draft_graph
    if graphed.races is not None:
        graphed.races.exponential_(generator=generator)
    context_positions = positions[:, graphed.context_start : graphed.context_start + features.shape[1]]
    proposed, q = step(drafting, features, context_positions, graphed.n_context, block,
                       positions[:, start : start + block.shape[1]], graphed.cache, graphed.races, state.output[0],
                       graphed.anchor_at)
    state.drafts.copy_(proposed)
    if first:
        for buffer in graphed.cache.keys + graphed.cache.values:
            static(buffer)
    return q
