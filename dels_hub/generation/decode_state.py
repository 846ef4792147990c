"""Where the speculative loop's state lives: what one call of ``speculative_decode`` allocates, once.

``DecodeState.allocate`` chooses it: the token buffer, positions, the verify input, the target's KV cache (a
``StaticSlotCache`` when ``static_cache_supported``, else a ``DynamicTargetCache``) and the drafter's (a
``StaticDraftCache`` for eager drafting, or a ``PaddedDraft``'s ``StaticSlotCache``); ``keep_rows`` drops the rows
that finished. Compiled calls reuse the caches between calls (``reused``), since graphs replay against them.
"""

from dataclasses import dataclass

import torch

from .caches import DynamicTargetCache, StaticDraftCache, StaticSlotCache
from .graph_steps import static
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
class PaddedDraft:
    """The padded draft step's inputs that change from block to block, as device tensors of fixed shape."""

    cache: StaticSlotCache
    context_real: torch.Tensor  # [B, C] bool: which context rows are real (the rest are padding)
    anchor_at: torch.Tensor  # [B]: each row's anchor position, for the copy expert
    # [B, C]: positions of the context rows: the last verify's (or the prompt's), then one per plain step since
    context_positions: torch.Tensor
    races: torch.Tensor | None  # [B, k, V] Exp(1) draws, refilled in place each block (None when greedy)


@dataclass
class DecodeState:
    """Everything one call allocates, once: the token buffer, positions, the verify input and both caches.

    Row b of every batched tensor is the b-th sequence still generating; ``keep_rows`` drops finished ones.
    """

    output: torch.Tensor  # [B, cache_len + 1]: each row's prompt from position 0, then its committed tokens; the last
    # column is where the device-side commit writes verified tokens that were not committed
    positions: torch.Tensor  # [1, cache_len + block_size]: an arange (the eager drafter's positions are views)
    start_at: torch.Tensor  # [B]: each row's anchor position
    budget: torch.Tensor  # [B]: new tokens each row may still add
    verify_ids: torch.Tensor  # [B, block_size]: [anchor, drafts]
    block_index: torch.Tensor  # [block_size]
    target_cache: StaticSlotCache | DynamicTargetCache
    draft_cache: StaticDraftCache | None  # eager drafting of a single row
    padded: PaddedDraft | None  # padded drafting (batches, compiled)
    q_buffer: torch.Tensor | None  # [B, k, V] draft distributions, written in place (eager, head, sampling)
    confidence: torch.Tensor | None  # [B, k] each draft's probability (eager; the cost-aware policy reads it)

    @property
    def drafts(self) -> torch.Tensor:
        """``[B, k]``, a view of ``verify_ids``: the drafts are written straight into the verify input."""
        return self.verify_ids[:, 1:]

    @classmethod
    def allocate(cls, target, drafter, input_ids, lengths: torch.Tensor, settings: DecodeSettings, *,
                 static_cache: bool, padded_draft: bool, sequential: bool, compile: bool, workspace: dict,
                 trash: int, sampled_drafts: bool, confidence: bool) -> "DecodeState":
        """``lengths [B]``: each row's real prompt length. ``sequential``: drafts are chosen one position at a time
        (a head or the copy expert votes). ``trash``: slots past every position for padding rows (0 when the
        prompt has no padding). ``sampled_drafts``: drafts are sampled (``q`` is kept). ``confidence``: the
        drafts' probabilities are reported (the policy chooses the verify's width from them)."""
        device, (rows, width), block_size = input_ids.device, input_ids.shape, settings.block_size
        # The last verify starts below max_len - 1 and covers block_size slots (a tree's, one per node).
        cache_len = width + settings.max_new_tokens + settings.verify_width
        if compile:
            cache_len = -(-cache_len // COMPILE_BUCKET) * COMPILE_BUCKET
        # Only compiled runs keep their caches between calls (graphs are recorded against their addresses);
        # otherwise they live for this call. Stale slots of a reused cache are never read: each is rewritten first.
        workspace = workspace if compile else {}
        if static_cache:
            target_cache = reused(workspace, "target_cache", (cache_len + trash, rows, device, target.dtype),
                                  lambda: StaticSlotCache(cache_len + trash, target.config.num_hidden_layers, device,
                                                          target.dtype))
        else:
            target_cache = DynamicTargetCache()
        output = torch.full((rows, cache_len + 1), drafter.config.mask_token_id, dtype=torch.long, device=device)
        columns = torch.arange(width, device=device)
        # A left-padded row's real tokens move to positions 0..length - 1.
        output[:, :width] = torch.where(columns < lengths.unsqueeze(1), realigned(input_ids, lengths),
                                        output[:, :width])
        verify_ids = torch.empty((rows, block_size), dtype=torch.long, device=device)
        k, vocab = block_size - 1, target.get_output_embeddings().out_features
        padded, draft_cache, q_buffer = None, None, None
        if padded_draft:
            layers = drafter.config.num_hidden_layers
            races = None
            if sampled_drafts:  # a static input: refilled in place each block, never copied in
                races = reused(workspace, "races", (rows, k, vocab, device),
                               lambda: static(torch.empty((rows, k, vocab), dtype=torch.float32, device=device)))
            spare = max(block_size, trash)  # trash slots for the padding rows of a context
            padded = PaddedDraft(
                cache=reused(workspace, "draft_cache", (cache_len, spare, rows, device, drafter.dtype),
                             lambda: StaticSlotCache(cache_len + spare, layers, device, drafter.dtype)),
                context_real=columns < lengths.unsqueeze(1),
                anchor_at=lengths.clone(),
                context_positions=columns.expand(rows, width),
                races=races,
            )
        else:
            draft_cache = StaticDraftCache(cache_len, drafter.config.num_hidden_layers)
            if sequential and sampled_drafts and k > 0:
                q_buffer = torch.empty((rows, k, vocab), dtype=torch.float32, device=device)
        confidence = torch.empty((rows, k), dtype=torch.float32, device=device) if confidence and k > 0 else None
        positions = torch.arange(cache_len + block_size, device=device).unsqueeze(0)
        budget = torch.full((rows,), settings.max_new_tokens - 1, dtype=torch.long, device=device)
        return cls(output=output, positions=positions, start_at=lengths.clone(), budget=budget,
                   verify_ids=verify_ids, block_index=torch.arange(block_size, device=device),
                   target_cache=target_cache, draft_cache=draft_cache, padded=padded, q_buffer=q_buffer,
                   confidence=confidence)

    def keep_rows(self, rows: torch.Tensor) -> None:
        """Keep only batch ``rows``: the sequences still generating (a batch drafts padded, and is never compiled)."""
        self.output, self.start_at, self.budget = (self.output[rows], self.start_at[rows], self.budget[rows])
        self.verify_ids = self.verify_ids[rows]
        if self.confidence is not None:
            self.confidence = self.confidence[rows]
        self.target_cache.keep_rows(rows)
        padded = self.padded
        if padded is None:  # block size 1: nothing is drafted
            return
        padded.cache.keep_rows(rows)
        padded.context_real, padded.anchor_at = padded.context_real[rows], padded.anchor_at[rows]
        padded.context_positions = padded.context_positions[rows]
        if padded.races is not None:
            padded.races = padded.races[rows]


def realigned(values: torch.Tensor, lengths: torch.Tensor) -> torch.Tensor:
    """``values [B, W, ...]`` of left-padded rows, each row's last ``lengths[b]`` entries moved to its front (what
    follows them is padding)."""
    width = values.shape[1]
    index = (torch.arange(width, device=values.device) + (width - lengths.unsqueeze(1))).clamp(max=width - 1)
    return values.gather(1, index.view(index.shape + (1,) * (values.dim() - 2)).expand(values.shape))
