"""The speculative loop (batch size 1): prefill, then per block draft -> verify -> commit.

It owns no weights: models come in, a token buffer and statistics go out. Each block does one
device-to-host transfer (accepted count and stop position packed together).
"""

import time
from collections.abc import Callable
from dataclasses import dataclass, field

import torch
from transformers import DynamicCache

from ..compat import cache_kwarg_name, crop_cache, synchronize
from ..copy_expert import CopyChain
from ..sampling import Warping, choose, warp_probs
from ..verify import verify_greedy, verify_rejection
from .drafting import context_features, propose


@dataclass
class Verifiers:
    """The two verification rules; swapped only by tests that prove a broken verifier is caught."""

    greedy: Callable = verify_greedy
    rejection: Callable = verify_rejection


@dataclass
class DecodeResult:
    sequences: torch.Tensor  # [1, prompt + new]
    acceptance_lengths: list[int] = field(default_factory=list)
    time_to_first_token: float = 0.0
    decode_seconds: float = 0.0


def commit_count(tokens, n_accepted, stop_ids, block_index, budget: int, transfer=None) -> tuple[int, bool]:
    """How many of a verified block's ``tokens`` are committed, and whether generation stops.

    Accepted drafts plus the bonus, cut after the first stop token among them and at ``budget`` (new tokens
    still allowed). This is the block's one device-to-host transfer: the accepted count and the stop position
    travel together, through ``transfer`` (default ``Tensor.tolist``).
    """
    block_size = block_index.shape[0]
    is_stop = torch.isin(tokens, stop_ids) & (block_index <= n_accepted)
    first_stop = torch.where(is_stop, block_index, block_size).min()
    packed = torch.stack([n_accepted, first_stop])
    n_accepted, stop_at = packed.tolist() if transfer is None else transfer(packed)
    stopped = stop_at < block_size
    return min(stop_at + 1 if stopped else n_accepted + 1, budget), stopped


def verify_block(verifiers: Verifiers, warping: Warping, drafts: torch.Tensor, q, logits: torch.Tensor, generator):
    """``(tokens, n_accepted)`` of one block: greedy verification, or rejection sampling against the warped
    target ``p``. Block size 1 drafts nothing: an empty ``q`` makes the verifier draw the bonus straight from p."""
    if warping.greedy:
        return verifiers.greedy(drafts, logits)
    p = warp_probs(logits, warping)
    return verifiers.rejection(drafts, p[:0] if q is None else q, p, generator)


@torch.inference_mode()
def speculative_decode(
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
    copy_weights: torch.Tensor | None = None,
) -> DecodeResult:
    """Generate up to ``max_new_tokens`` after ``input_ids [1, N]``; ``block_size=1`` is plain decoding.

    ``alpha``/``beta`` are ``[block_size - 1]`` per-position fusion weights (zero in the pure prefix).
    ``copy_weights``: ``[n + 1]`` gamma of the copy expert by match length (``CopySettings.weights``); None is off.
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

    # 0. Allocate once: every block is a slice [anchor, MASK...] of this buffer; nothing is stripped by value.
    output = torch.full((1, max_len + block_size), config.mask_token_id, dtype=torch.long, device=device)
    output[:, :prompt_len] = input_ids
    position_ids = torch.arange(max_len + block_size, device=device).unsqueeze(0)
    target_cache, draft_cache = DynamicCache(), DynamicCache()
    block_index = torch.arange(block_size, device=device)

    # 1. Prefill: the target reads the prompt and commits the first token.
    started = time.perf_counter()
    out = target(input_ids=input_ids, **{cache_arg: target_cache}, use_cache=True, output_hidden_states=True,
                 logits_to_keep=1)
    first, _ = choose(out.logits[0, -1:], warping, generator)
    output[:, prompt_len] = first
    features = context_features(out.hidden_states, layer_ids)
    stopped = bool(torch.isin(first, stop_ids).item())  # the one host sync of the prefill
    synchronize(device)
    prefilled = time.perf_counter()
    if streamer is not None:
        streamer.put(input_ids.cpu())
        streamer.put(first.cpu())

    acceptance_lengths: list[int] = []
    start, draft_cache_len = prompt_len, 0  # start: position of the block's anchor, a host int
    while not stopped and start + 1 - prompt_len < max_new_tokens:
        block = output[:, start : start + block_size]
        drafts, q = block.new_empty(0), None
        # 2. Draft: one DFlash forward over the new context and the block, then the head over the block.
        if block_size > 1:
            hidden = drafter(
                target_hidden=features,
                noise_embedding=embed(block),
                position_ids=position_ids[:, draft_cache_len : start + block_size],
                past_key_values=draft_cache,
                use_cache=True,
            )
            crop_cache(draft_cache, start)  # keep context keys/values only; the block is redrafted next time
            draft_cache_len = start
            copy = None if copy_weights is None else CopyChain(output[0], start, copy_weights)
            drafts, q = propose(lm_head(hidden[0, 1:]), block[0, :1], warping, generator, head, log_prior, alpha, beta,
                                copy=copy)

        # 3. Verify: one target forward over [anchor, drafts].
        verify_ids = torch.cat([block[0, :1], drafts]).unsqueeze(0)
        out = target(input_ids=verify_ids, **{cache_arg: target_cache}, use_cache=True, output_hidden_states=True)
        tokens, n_accepted = verify_block(verifiers, warping, drafts, q, out.logits[0], generator)

        # 4. Commit: the one host transfer per block carries the accepted count and the first stop position.
        n_commit, stopped = commit_count(tokens, n_accepted, stop_ids, block_index,
                                         max_new_tokens - (start + 1 - prompt_len))
        output[0, start + 1 : start + 1 + n_commit] = tokens[:n_commit]
        acceptance_lengths.append(n_commit)
        if streamer is not None:
            streamer.put(tokens[:n_commit].cpu())

        # 5. Only the anchor and the accepted drafts become context; the new anchor (bonus) is not in the cache.
        features = context_features(out.hidden_states, layer_ids)[:, :n_commit]
        start += n_commit
        crop_cache(target_cache, start)

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
