"""The speculative loop on preallocated state: static KV caches, fixed buffers, one host sync per block.

Same steps, same random draws and same output as ``loop.speculative_decode`` (which stays the reference
and the fallback); what changes is where the state lives:

* the target cache is a ``StaticSlotCache`` (slot == position) and every target forward gets a 4D mask
  built from its positions (slot <= position), so a rejection is rolled back by not reading stale slots;
* the drafter cache is a ``StaticDraftCache`` whose crop moves a host-int pointer;
* the verify input ``[anchor, drafts]`` is one preallocated ``[1, block_size]`` buffer that the head loop
  writes in place; positions are views of one arange built per call;
* the one device-to-host transfer per block packs the accepted count and the first stop position.

Compiled (opt-in), both per-block steps run as graphs at fixed shapes (``graph_steps``): the verify forward,
and the drafter forward with the head loop, whose context is padded to the last verify's ``block_size`` rows
and whose cache is a ``StaticSlotCache`` too. Its sampling draws one ``[k, V]`` race per block instead of one
per position: on CPU that consumes the generator exactly as the eager loop does (same tokens for a seed); on
CUDA the draws differ, so a seeded sampled run may differ too. The distribution is the same either way.
"""

import time

import torch

from ..compat import cache_kwarg_name, synchronize
from ..copy_expert import CopyChain
from ..sampling import Warping, choose
from .drafting import context_features, propose
from .graph_steps import compiled, draft_step, graph_warping, static, verify_step
from .loop import DecodeResult, Verifiers, commit_count, verify_block
from .static_cache import StaticDraftCache, StaticSlotCache

FAST_ATTENTION = ("sdpa", "eager")  # the implementations that take our 4D mask as-is
# Compiled: cache lengths are rounded up to this, so a new prompt length rarely means a new graph.
COMPILE_BUCKET = 256


def reused(workspace: dict, name: str, key, build):
    """``workspace[name]`` when it was built for ``key``, else a new ``build()`` kept there."""
    if workspace.get(name, (None, None))[0] != key:
        workspace[name] = (key, build())
    return workspace[name][1]


def to_host(values: torch.Tensor) -> list:
    """The loop's only device-to-host transfers (one per block, one in the prefill) go through here, so a
    test can count them and allow exactly them under ``torch.cuda.set_sync_debug_mode("error")``."""
    return values.tolist()


def fast_path_supported(target) -> str | None:
    """None when the static-cache loop can run ``target``, else the reason it cannot."""
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


@torch.inference_mode()
def fast_speculative_decode(
    target,
    drafter,
    input_ids: torch.Tensor,
    *,
    max_new_tokens: int,
    block_size: int,
    warping: Warping,
    stop_ids: torch.Tensor,
    head=None,
    alpha: torch.Tensor | None = None,
    beta: torch.Tensor | None = None,
    generator: torch.Generator | None = None,
    verifiers: Verifiers | None = None,
    streamer=None,
    compile: bool = False,
    workspace: dict | None = None,
    copy_weights: torch.Tensor | None = None,
) -> DecodeResult:
    """``loop.speculative_decode`` on static caches; same arguments, same result (compiled and sampling on
    CUDA: the same distribution, see the module docstring).

    ``compile=True`` runs the verify forward and (when the drafter's attention takes a 4D mask) the draft
    step through ``torch.compile`` (opt-in: the first call compiles for each cache-length bucket).
    ``workspace``, a dict the caller keeps between compiled calls, lets the caches be reused, so CUDA graphs
    recorded against their addresses are replayed. ``copy_weights`` as in ``loop.speculative_decode``.
    """
    verifiers = verifiers or Verifiers()
    device = input_ids.device
    prompt_len = input_ids.shape[1]
    max_len = prompt_len + max_new_tokens
    config = drafter.config
    layer_ids = config.target_layer_ids
    embed, lm_head = target.get_input_embeddings(), target.get_output_embeddings()
    log_prior = head.log_prior().to(device) if head is not None else None
    cache_arg = cache_kwarg_name(type(target))
    k = block_size - 1
    graph_draft = compile and k > 0 and config._attn_implementation in FAST_ATTENTION

    # 0. Allocate once. The last verify starts below max_len - 1 and covers block_size slots.
    cache_len = max_len + block_size
    if compile:
        cache_len = -(-cache_len // COMPILE_BUCKET) * COMPILE_BUCKET
    # Only compiled runs keep their buffers between calls (graphs are recorded against their addresses);
    # otherwise they live for this call. Stale slots of a reused cache are never read: each is rewritten first.
    workspace = workspace if compile and workspace is not None else {}
    target_cache = reused(workspace, "target_cache", (cache_len, device, target.dtype),
                          lambda: StaticSlotCache(cache_len, target.config.num_hidden_layers, device, target.dtype))
    output = torch.full((1, cache_len), config.mask_token_id, dtype=torch.long, device=device)
    output[:, :prompt_len] = input_ids
    position_ids = torch.arange(cache_len + block_size, device=device).unsqueeze(0)
    kv_index, draft_kv_index = position_ids[0, :cache_len], position_ids[0]
    q_buffer = None
    if graph_draft:
        # block_size slots more than positions: the padding rows' trash slots.
        draft_cache = reused(workspace, "draft_cache", (cache_len, block_size, device, drafter.dtype),
                             lambda: StaticSlotCache(cache_len + block_size, config.num_hidden_layers, device,
                                                     drafter.dtype))
        n_context = torch.full((), prompt_len, dtype=torch.long, device=device)  # a fill, not a host copy
        anchor_at = torch.full((), prompt_len, dtype=torch.long, device=device)  # the copy expert's anchor
        draft_warping = graph_warping(warping, device)
        races = None
        if not warping.greedy:  # a static input: refilled in place each block, never copied into the graph
            races = reused(workspace, "races", (k, lm_head.out_features, device),
                           lambda: static(torch.empty((k, lm_head.out_features), dtype=torch.float32, device=device)))
    else:
        draft_cache = StaticDraftCache(cache_len, config.num_hidden_layers)
        if head is not None and not warping.greedy and k > 0:
            q_buffer = torch.empty((k, lm_head.out_features), dtype=torch.float32, device=device)
    verify_ids = torch.empty((1, block_size), dtype=torch.long, device=device)
    drafts = verify_ids[0, 1:]  # the head loop writes the drafts straight into the verify input
    block_index = torch.arange(block_size, device=device)

    verify = compiled(verify_step, device) if compile else verify_step
    draft = compiled(draft_step, device) if graph_draft else draft_step

    # 1. Prefill (eager, any length): the target reads the prompt and commits the first token.
    started = time.perf_counter()
    logits, hidden_states = verify_step(target, input_ids, position_ids[:, :prompt_len], kv_index, target_cache,
                                        cache_arg, logits_to_keep=1)
    first, _ = choose(logits[0, -1:], warping, generator)
    output[:, prompt_len] = first
    features = context_features(hidden_states, layer_ids)
    context_start = 0  # position of features' first row
    if compile:  # the graphs write into these buffers in place: their addresses are part of the graph
        for buffer in target_cache.keys + target_cache.values:
            static(buffer)
    (stopped,) = to_host(torch.isin(first, stop_ids))  # first is [1]; the one host sync of the prefill
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
        if graph_draft:
            if races is not None:
                races.exponential_(generator=generator)
            # The first block's context is the whole prompt (any length): that call runs eagerly.
            step = draft if start > prompt_len else draft_step
            proposed, q = step(drafter, embed, lm_head, features,
                               position_ids[:, context_start : context_start + features.shape[1]], n_context, block,
                               position_ids[:, start : start + block_size], draft_kv_index, draft_cache,
                               draft_warping, races, head, log_prior, alpha, beta, output[0], anchor_at, copy_weights)
            drafts.copy_(proposed)
            if start == prompt_len:  # the first call allocated them
                for buffer in draft_cache.keys + draft_cache.values:
                    static(buffer)
        elif k > 0:
            hidden = drafter(
                target_hidden=features,
                noise_embedding=embed(block),
                position_ids=position_ids[:, draft_cache.length : start + block_size],
                past_key_values=draft_cache,
                use_cache=True,
            )
            draft_cache.crop(start)  # keep context keys/values only; the block is redrafted next time
            copy = None if copy_weights is None else CopyChain(output[0], start, copy_weights)
            _, q = propose(lm_head(hidden[0, 1:]), block[0, :1], warping, generator, head, log_prior, alpha, beta,
                           drafts=drafts, q=q_buffer, copy=copy)

        # 3. Verify: one target forward over [anchor, drafts] at positions start.., stale slots masked.
        logits, hidden_states = verify(target, verify_ids, position_ids[:, start : start + block_size], kv_index,
                                       target_cache, cache_arg)
        tokens, n_accepted = verify_block(verifiers, warping, drafts, q, logits[0], generator)

        # 4. Commit: the one host transfer per block carries the accepted count and the first stop position.
        n_commit, stopped = commit_count(tokens, n_accepted, stop_ids, block_index,
                                         max_new_tokens - (start + 1 - prompt_len), transfer=to_host)
        output[0, start + 1 : start + 1 + n_commit] = tokens[:n_commit]
        acceptance_lengths.append(n_commit)
        if streamer is not None:
            streamer.put(tokens[:n_commit].cpu())

        # 5. Only the anchor and the accepted drafts become context; rollback is just the new start. The graphed
        # draft keeps all block_size rows (fixed shape) and is told how many are real.
        features = context_features(hidden_states, layer_ids)
        if graph_draft:
            n_context.fill_(n_commit)
            anchor_at.fill_(start + n_commit)
            context_start = start
        else:
            features = features[:, :n_commit]
        start += n_commit

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
