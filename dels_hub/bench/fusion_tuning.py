"""Choose fusion weights (alpha, beta) by replaying greedy decoding on target continuations.

Greedy speculative decoding commits the target's own greedy continuation whatever is drafted, so the
acceptance length of every block follows from that continuation alone. ``replay_acceptance`` computes the
target's hidden states once per sequence, then walks the blocks exactly as the loop does (anchor = last
committed token, context = the features of everything before it) and counts the drafts that match the
continuation, so a grid of (alpha, beta) costs one target forward per sequence, not one generation per
grid point. Drafter outputs are cached per anchor: only the head re-runs for each grid point. The result
equals the loop's own ``acceptance_lengths`` up to float rounding of near-ties (tested).
"""

import itertools

import torch

from ..fusion import fusion_weights
from ..generation.drafting import context_features, propose
from ..sampling import Warping


@torch.inference_mode()
def replay_acceptance(
    target, drafter, head, sequence: torch.Tensor, prompt_len: int, alpha, beta,
    block_size: int | None = None, pure_prefix_len: int = 1, _cache: dict | None = None,
) -> list[int]:
    """Acceptance lengths of greedy DeLS (``head=None``: DFlash only) decoding ``sequence [1, N]``, whose
    tokens after ``prompt_len`` are the target's greedy continuation. ``_cache`` memoizes drafter logits per
    anchor across calls on the same sequence."""
    block_size = block_size or drafter.config.block_size
    cache = _cache if _cache is not None else {}
    if "features" not in cache:
        out = target(input_ids=sequence, output_hidden_states=True)
        cache["features"] = context_features(out.hidden_states, drafter.config.target_layer_ids)
    features = cache["features"]
    embed, lm_head = target.get_input_embeddings(), target.get_output_embeddings()
    mask_id = drafter.config.mask_token_id
    alpha_k, beta_k = fusion_weights(alpha, beta, pure_prefix_len, block_size - 1, device=sequence.device)
    log_prior = head.log_prior().to(sequence.device) if head is not None else None
    total = sequence.shape[1]
    lengths, start = [], prompt_len  # start: the anchor, i.e. the token the prefill committed
    while start + 1 < total:
        if start not in cache:
            block = torch.full((1, block_size), mask_id, dtype=torch.long, device=sequence.device)
            block[0, 0] = sequence[0, start]
            hidden = drafter(target_hidden=features[:, :start], noise_embedding=embed(block),
                             position_ids=torch.arange(start + block_size, device=sequence.device).unsqueeze(0))
            cache[start] = lm_head(hidden[0, 1:])
        drafts, _ = propose(cache[start], sequence[0, start : start + 1], Warping(), None, head, log_prior,
                            alpha_k, beta_k)
        truth = sequence[0, start + 1 : start + block_size]
        matches = (drafts[: truth.shape[0]] == truth).long().cumprod(0).sum().item()
        committed = min(matches + 1, total - start - 1)
        lengths.append(committed)
        start += committed
    return lengths


def tune_fusion(target, drafter, head, sequences: list[tuple[torch.Tensor, int]], alphas, betas,
                block_size: int | None = None, pure_prefix_len: int = 1) -> list[dict]:
    """tau (mean over sequences of the per-sequence mean acceptance length) for every (alpha, beta), best
    first. ``sequences`` are ``(ids [1, N], prompt_len)`` pairs of prompts with target greedy continuations,
    taken from a validation slice (never the benchmark's held-out slice)."""
    caches = [{} for _ in sequences]
    results = []
    for alpha, beta in itertools.product(alphas, betas):
        taus = []
        for (ids, prompt_len), cache in zip(sequences, caches, strict=True):
            lengths = replay_acceptance(target, drafter, head, ids, prompt_len, alpha, beta, block_size,
                                        pure_prefix_len, cache)
            taus.append(sum(lengths) / max(len(lengths), 1))
        results.append({"alpha": alpha, "beta": beta, "tau": sum(taus) / len(taus)})
    return sorted(results, key=lambda r: -r["tau"])
