"""Logit warping and sync-free sampling, shared by the draft (q) and the target (p).

Both distributions are warped identically (temperature, then top-k, then top-p, the order transformers'
``generate`` applies them), so that rejection sampling preserves the target's own warped distribution.
Top-k/top-p use thresholds and ``where``; sampling is an exponential race (argmax of p / Exp(1)), which
draws exactly from p without ``torch.multinomial``'s host sync. Probabilities are float32.
"""

from dataclasses import dataclass

import torch


@dataclass(frozen=True)
class Warping:
    """How logits become a distribution. ``temperature is None`` means greedy.

    ``top_k`` 0 and ``top_p`` >= 1 keep every token (transformers adds no warper for them) and are stored as
    None. ``temperature`` and ``top_p`` may be 0-dim tensors (the compiled draft step's, so that a new value
    is new data, not a new graph).
    """

    temperature: float | torch.Tensor | None = None
    top_k: int | None = None
    top_p: float | torch.Tensor | None = None

    def __post_init__(self):
        if not self.top_k:
            object.__setattr__(self, "top_k", None)
        if isinstance(self.top_p, (int, float)) and self.top_p >= 1.0:
            object.__setattr__(self, "top_p", None)

    @property
    def greedy(self) -> bool:
        return self.temperature is None


def warp_probs(logits: torch.Tensor, warping: Warping) -> torch.Tensor:
    """``[..., V]`` logits -> ``[..., V]`` float32 probabilities of the warped distribution."""
    logits = logits.float() / warping.temperature
    if warping.top_k:
        kth_largest = torch.topk(logits, min(warping.top_k, logits.shape[-1]), dim=-1).values[..., -1:]
        logits = logits.masked_fill(logits < kth_largest, float("-inf"))
    if warping.top_p is not None:
        # Keep the smallest set of most likely tokens whose mass reaches top_p (transformers' TopP rule:
        # drop a token when the ascending cumulative mass up to it is <= 1 - top_p; the top token stays).
        sorted_logits = torch.sort(logits, dim=-1).values
        cumulative = sorted_logits.softmax(-1).cumsum(-1)
        dropped = cumulative <= 1.0 - warping.top_p
        # fill_ on a slice, not `dropped[..., -1] = False`: on 1-D CUDA logits that indexes a 0-dim view, and
        # assigning a Python scalar to it is a blocking host-to-device copy (a sync per draft position).
        dropped[..., -1:].fill_(False)
        threshold = sorted_logits.masked_fill(dropped, float("inf")).min(dim=-1, keepdim=True).values
        logits = logits.masked_fill(logits < threshold, float("-inf"))
    return logits.softmax(-1)


def sample(probs: torch.Tensor, generator: torch.Generator | None = None, race: torch.Tensor | None = None):
    """One draw per row of ``probs [..., V]`` -> ``[...]`` ids, without a host sync.

    ``race``: Exp(1) noise of ``probs``' shape drawn beforehand (a compiled graph cannot take the generator);
    drawn here from ``generator`` when None.
    """
    if race is None:
        race = torch.empty_like(probs).exponential_(generator=generator)
    return (probs / race).argmax(-1)


def choose(logits: torch.Tensor, warping: Warping, generator=None, race=None) -> tuple:
    """Pick tokens from ``logits [..., V]``: argmax when greedy, else a sample of the warped distribution.

    Returns ``(ids [...], probs [..., V] or None when greedy)``. ``race`` as in ``sample``.
    """
    if warping.greedy:
        return logits.argmax(-1), None
    probs = warp_probs(logits, warping)
    return sample(probs, generator, race), probs


# Keyed draws: a uniform per (key, row, position) from a counter-based hash, so that the token sampled at a position
# does not depend on how many draws came before it. Under the cost-aware policy a block verifies 1..block_size
# tokens, chosen from timings; with keyed draws a seed still gives the same text, whatever the policy chose.
_MASK32 = 0xFFFFFFFF


def _mix32(x: torch.Tensor) -> torch.Tensor:
    """A 32-bit integer hash on int64 tensors holding values below 2**32 (multipliers below 2**31, so no product
    overflows int64): xorshift-multiply rounds in the manner of Wellons' lowbias32."""
    x = x ^ (x >> 16)
    x = (x * 0x7FEB352D) & _MASK32
    x = x ^ (x >> 15)
    x = (x * 0x2C1B3C6D) & _MASK32
    return x ^ (x >> 16)


def keyed_uniform(key: torch.Tensor, rows: torch.Tensor, positions: torch.Tensor) -> torch.Tensor:
    """``[B, T]`` float64 uniforms in (0, 1), a function of ``key`` (a 0-dim int64 tensor), each row's id
    ``rows [B]`` and ``positions [B, T]`` alone; 53 random bits each, from two hashes."""
    word = _mix32(positions & _MASK32) ^ _mix32((rows.view(-1, 1) * 0x9E3779B1) & _MASK32)
    word = _mix32(word ^ (key & _MASK32))
    word = _mix32(word ^ ((key >> 32) & _MASK32))
    second = _mix32(word ^ 0x5BD1E995)
    bits = (word >> 5) * (1 << 26) + (second >> 6)  # 27 + 26 bits
    return (bits.double() + 0.5) / float(1 << 53)


def keyed_sample(probs: torch.Tensor, key: torch.Tensor, rows: torch.Tensor, positions: torch.Tensor) -> torch.Tensor:
    """One draw per row of ``probs [B, T, V]`` by inverting its CDF at ``keyed_uniform(key, rows, positions)``:
    ``[B, T]`` ids, exactly distributed as ``probs`` (up to float64 rounding), without a host sync."""
    cdf = probs.double().cumsum(-1)
    target = keyed_uniform(key, rows, positions) * cdf[..., -1]
    ids = torch.searchsorted(cdf, target.unsqueeze(-1)).squeeze(-1)
    return ids.clamp_max(probs.shape[-1] - 1)
