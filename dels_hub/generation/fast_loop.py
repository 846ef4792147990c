"""The speculative loop on preallocated state: static KV caches, fixed buffers, one host sync per block.

Same steps, same random draws and same output as ``loop.speculative_decode`` (which stays the reference
and the fallback); what changes is where the state lives:

* the target cache is a ``StaticTargetCache`` (slot == position) and every target forward gets a 4D mask
  built from its positions (slot <= position), so a rejection is rolled back by not reading stale slots;
* the drafter cache is a ``StaticDraftCache`` whose crop moves a host-int pointer;
* the verify input ``[anchor, drafts]`` is one preallocated ``[1, block_size]`` buffer that the head loop
  writes in place; positions are views of one arange built per call;
* the one device-to-host transfer per block packs the accepted count and the first stop position.
"""

import time

import torch

from ..compat import cache_kwarg_name, synchronize
from ..sampling import Warping, choose
from .drafting import context_features, propose
from .loop import DecodeResult, Verifiers, commit_count, verify_block
from .static_cache import StaticDraftCache, StaticTargetCache, causal_mask

FAST_ATTENTION = ("sdpa", "eager")  # the implementations that take our 4D mask as-is
# Compiled verify: cache lengths are rounded up to this, so a new prompt length rarely means a new graph.
COMPILE_BUCKET = 256
_compiled_steps: dict[str, object] = {}


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


def verify_step(model, ids, positions, kv_index, cache, cache_arg: str, logits_to_keep: int = 0):
    """One target forward at ``positions`` (``[1, T]``) through the static cache -> ``(logits, hidden_states)``.

    ``kv_index`` is ``arange(max_len)``, the cache's slots. Fixed shapes for a fixed ``T``: this is the
    function ``torch.compile`` turns into a graph (mask construction included).
    """
    cache.write_positions = positions[0]
    mask = causal_mask(kv_index, positions[0], model.dtype, model.config._attn_implementation)
    out = model(input_ids=ids, position_ids=positions, attention_mask=mask, **{cache_arg: cache}, use_cache=True,
                output_hidden_states=True, logits_to_keep=logits_to_keep)
    return out.logits, out.hidden_states


def compiled_verify_step(device: torch.device):
    """``verify_step`` compiled once per process: CUDA graphs (``reduce-overhead``) on CUDA, inductor elsewhere."""
    mode = "reduce-overhead" if device.type == "cuda" else "default"
    if mode not in _compiled_steps:
        _compiled_steps[mode] = torch.compile(verify_step, mode=mode, dynamic=False)
    return _compiled_steps[mode]


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
) -> DecodeResult:
    """``loop.speculative_decode`` on static caches; same arguments, same result.

    ``compile=True`` runs every verify forward through ``compiled_verify_step`` (opt-in: the first call
    compiles for each cache-length bucket). ``workspace``, a dict the caller keeps between compiled calls,
    lets the target cache be reused, so CUDA graphs recorded against its addresses are replayed.
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

    # 0. Allocate once. The last verify starts below max_len - 1 and covers block_size slots.
    cache_len = max_len + block_size
    if compile:
        cache_len = -(-cache_len // COMPILE_BUCKET) * COMPILE_BUCKET
    # Only compiled runs keep the target cache between calls (graphs are recorded against its addresses);
    # otherwise it lives for this call. Stale slots of a reused cache are never read: each is rewritten first.
    workspace = workspace if compile and workspace is not None else {}
    if workspace.get("key") != (cache_len, device, target.dtype):
        layers = target.config.num_hidden_layers
        workspace.update(key=(cache_len, device, target.dtype),
                         target_cache=StaticTargetCache(cache_len, layers, device, target.dtype))
    target_cache = workspace["target_cache"]
    output = torch.full((1, cache_len), config.mask_token_id, dtype=torch.long, device=device)
    output[:, :prompt_len] = input_ids
    position_ids = torch.arange(cache_len, device=device).unsqueeze(0)
    kv_index = position_ids[0]
    draft_cache = StaticDraftCache(cache_len, config.num_hidden_layers)
    verify_ids = torch.empty((1, block_size), dtype=torch.long, device=device)
    drafts = verify_ids[0, 1:]  # the head loop writes the drafts straight into the verify input
    q_buffer = None
    if head is not None and not warping.greedy and k > 0:
        q_buffer = torch.empty((k, lm_head.out_features), dtype=torch.float32, device=device)
    block_index = torch.arange(block_size, device=device)

    step = compiled_verify_step(device) if compile else verify_step

    # 1. Prefill (eager, any length): the target reads the prompt and commits the first token.
    started = time.perf_counter()
    logits, hidden_states = verify_step(target, input_ids, position_ids[:, :prompt_len], kv_index, target_cache,
                                        cache_arg, logits_to_keep=1)
    first, _ = choose(logits[0, -1:], warping, generator)
    output[:, prompt_len] = first
    features = context_features(hidden_states, layer_ids)
    if compile:  # the graphs write into these buffers in place: their addresses are part of the graph
        for buffer in target_cache.keys + target_cache.values:
            torch._dynamo.mark_static_address(buffer)
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
        # 2. Draft: one DFlash forward over the new context and the block, then the head over the block.
        if k > 0:
            hidden = drafter(
                target_hidden=features,
                noise_embedding=embed(block),
                position_ids=position_ids[:, draft_cache.length : start + block_size],
                past_key_values=draft_cache,
                use_cache=True,
            )
            draft_cache.crop(start)  # keep context keys/values only; the block is redrafted next time
            _, q = propose(lm_head(hidden[0, 1:]), block[0, :1], warping, generator, head, log_prior, alpha, beta,
                           drafts=drafts, q=q_buffer)

        # 3. Verify: one target forward over [anchor, drafts] at positions start.., stale slots masked.
        if compile and device.type == "cuda":
            torch.compiler.cudagraph_mark_step_begin()  # the previous block's graph outputs are no longer read
        logits, hidden_states = step(target, verify_ids, position_ids[:, start : start + block_size], kv_index,
                                     target_cache, cache_arg)
        tokens, n_accepted = verify_block(verifiers, warping, drafts, q, logits[0], generator)

        # 4. Commit: the one host transfer per block carries the accepted count and the first stop position.
        n_commit, stopped = commit_count(tokens, n_accepted, stop_ids, block_index,
                                         max_new_tokens - (start + 1 - prompt_len), transfer=to_host)
        output[0, start + 1 : start + 1 + n_commit] = tokens[:n_commit]
        acceptance_lengths.append(n_commit)
        if streamer is not None:
            streamer.put(tokens[:n_commit].cpu())

        # 5. Only the anchor and the accepted drafts become context; rollback is just the new start.
        features = context_features(hidden_states, layer_ids)[:, :n_commit]
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
