"""The copy expert: a training-free third expert in the product of experts.

Text repeats itself: code reuses names and lines, answers quote the prompt. At draft position i the chain so
far is the committed tokens followed by the block's drafts before i. Its longest suffix (up to n tokens) that
also ends at an earlier committed position j votes for the token that followed there, ``c[j + 1]``:

    fused_i = L_i + alpha_i * S_i - beta_i * log p_hat + gamma(m) * onehot(c[j + 1])

where m is the match length and gamma(0) = 0. Ties go to the most recent match. Sampling stays exact because
q is whatever fused distribution the draft is drawn from.

The matching is tensor arithmetic over the loop's token buffer, so it costs no host sync and has fixed shapes
inside the compiled draft step. A vector ``M[j]`` holds the length of the chain's suffix that ends at committed
position j. It is built once per block from the anchor, and each draft d extends it:
``M'[j] = [c[j] == d] * min(M[j - 1] + 1, n)``. So once a draft takes the copied token, the next position
continues the same match.
"""

import math
from collections.abc import Sequence
from dataclasses import dataclass

import torch

from .errors import FusionScheduleError

# gamma at a full-length match when only max_ngram is given. Tuned on 16 ShareGPT validation continuations with the
# staged SmolLM2 drafter: about 4 logits per matched token was best at every n from 3 to 8 (n = 4: gamma 16).
DEFAULT_NGRAM = 4
DEFAULT_GAMMA = 16.0


@dataclass(frozen=True)
class CopySettings:
    """How the copy expert votes: ``max_ngram`` n (0 turns it off) and gamma as a function of match length.

    ``gamma`` is a scalar g, meaning gamma(m) = g * m / n (longer matches are stronger evidence), or a list of
    n values gamma(1)..gamma(n).
    """

    max_ngram: int = 0
    gamma: float | Sequence[float] = DEFAULT_GAMMA

    def __post_init__(self):
        if isinstance(self.max_ngram, bool) or not isinstance(self.max_ngram, int) or self.max_ngram < 0:
            raise FusionScheduleError(f"copy max_ngram must be an int >= 0 (0 is off), got {self.max_ngram!r}")
        if not isinstance(self.gamma, (int, float)):
            object.__setattr__(self, "gamma", tuple(self.gamma))
            if self.max_ngram and len(self.gamma) != self.max_ngram:
                raise FusionScheduleError(
                    f"copy gamma has {len(self.gamma)} values but max_ngram is {self.max_ngram}: give a scalar "
                    f"or one value per match length 1..{self.max_ngram}"
                )
        values = [self.gamma] if isinstance(self.gamma, (int, float)) else list(self.gamma)
        bad = [v for v in values if not (isinstance(v, (int, float)) and math.isfinite(v) and v >= 0)]
        if bad:
            raise FusionScheduleError(f"copy gamma must be finite and >= 0, got {bad}")

    @property
    def enabled(self) -> bool:
        return self.max_ngram > 0 and any(v > 0 for v in self.per_length())

    def per_length(self) -> list[float]:
        """gamma(1)..gamma(n)."""
        n = self.max_ngram
        if isinstance(self.gamma, (int, float)):
            return [float(self.gamma) * m / n for m in range(1, n + 1)]
        return [float(v) for v in self.gamma]

    def weights(self, device=None) -> torch.Tensor | None:
        """``[n + 1]`` float32 gamma indexed by match length (gamma(0) = 0), or None when the expert is off:
        the form the decode loops take."""
        if not self.enabled:
            return None
        return torch.tensor([0.0, *self.per_length()], dtype=torch.float32, device=device)


class CopyChain:
    """One block's matches against the committed tokens of each row: built from the anchor, extended by each draft.

    Args:
        tokens: ``[B, T]`` the token buffer, one row per sequence; positions ``0..anchor`` of a row are committed,
            the rest is never read.
        anchor: ``[B]`` each row's anchor position, a device tensor (or a host int shared by every row).
        weights: ``[n + 1]`` gamma by match length, from ``CopySettings.weights``.
        unpruned: with a pruned draft vocabulary, ``unpruned(slot, ids [B, 1]) -> [B, 1]`` scores the copied
            token's DFlash logit with its full LM head row (``DraftVocabulary.token_logits``; see ``unprune``).
            A copy is evidence from the text itself, so the pruning (counted on other texts) must not veto it: a
            name that recurs in one prompt is rarely among the most frequent tokens.
    """

    def __init__(self, tokens: torch.Tensor, anchor, weights: torch.Tensor, unpruned=None):
        self.tokens, self.weights, self.unpruned = tokens, weights, unpruned
        self.slot = 0  # the block slot the next vote is for
        self.max_ngram = weights.shape[0] - 1
        rows, size = tokens.shape
        if isinstance(anchor, torch.Tensor):
            anchor = anchor.view(-1, 1).expand(rows, 1)  # [B, 1]
        else:  # a fill, not a host-to-device copy
            anchor = torch.full((rows, 1), anchor, dtype=torch.long, device=tokens.device)
        self.positions = torch.arange(size, device=tokens.device)
        # j may end a match only if the token after it is committed: j + 1 <= anchor.
        self.candidates = self.positions < anchor
        padded = torch.cat([tokens.new_full((rows, self.max_ngram), -1), tokens], dim=1)  # [:, n + i] == [:, i]
        offsets = torch.arange(self.max_ngram, device=tokens.device)
        suffix = tokens.gather(1, (anchor - offsets).clamp(min=0))  # anchor, anchor - 1, ... (clamped never count)
        run = self.candidates.clone()
        matches = torch.zeros((rows, size), dtype=torch.long, device=tokens.device)
        for t in range(self.max_ngram):
            shifted = padded[:, self.max_ngram - t : self.max_ngram - t + size]  # tokens[j - t], -1 before 0
            run = run & (shifted == suffix[:, t : t + 1]) & (anchor >= t)
            matches = matches + run
        self.matches = matches

    def candidate(self) -> tuple[torch.Tensor, torch.Tensor]:
        """Each row's copied token ``[B, 1]``, the one that followed its longest, most recent match, and its gamma
        ``[B, 1]`` (0 without a match), at the current slot."""
        return self.branch_candidates(self.matches.unsqueeze(1))

    def branch_candidates(self, matches: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        """``candidate()`` of each branch of a token tree, from its own matches ``[B, F, T]``: ``[B, F]`` each."""
        copied, length = self.branch_copies(matches)
        return copied, self.weights[length]

    def branch_copies(self, matches: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        """Each branch's copied token and the length of the match it was copied at (0: no match; the token is then
        meaningless), from its matches ``[B, F, T]``: ``[B, F]`` each."""
        size = self.tokens.shape[1]
        # gather with index tensors, never x[0-dim tensor]: on CUDA a 0-dim index is read on the host (a sync).
        best = (matches * size + self.positions).argmax(-1)  # [B, F]
        copied = self.tokens.gather(1, (best + 1).clamp(max=size - 1))
        return copied, matches.gather(2, best.unsqueeze(-1)).squeeze(-1)

    def continuation(self, k: int, drafts: torch.Tensor) -> torch.Tensor:
        """The copy expert's block on its own, as prompt lookup drafts: at each of ``k`` slots the copied token,
        written to ``drafts [B, k]``, and the chain grown by it. Returns the match length each was copied at
        ``[B, k]`` (0 from the first slot without a match on: what follows is not worth verifying)."""
        lengths = []
        for slot in range(k):
            copied, length = self.branch_copies(self.matches.unsqueeze(1))
            drafts[:, slot] = copied[:, 0]
            lengths.append(length[:, 0])
            self.extend(copied[:, 0])
        lengths = torch.stack(lengths, dim=1)
        return lengths * (lengths > 0).long().cumprod(dim=1)

    def unprune(self, dflash_logits: torch.Tensor, candidate: tuple[torch.Tensor, torch.Tensor]) -> torch.Tensor:
        """``dflash_logits [B, V]`` with each row's voted candidate scored by its full LM head row where a pruned
        draft vocabulary left it -inf, before the fusion; unchanged without pruning."""
        if self.unpruned is None:
            return dflash_logits
        copied, gamma = candidate
        current = dflash_logits.gather(1, copied)
        outside = torch.isneginf(current) & (gamma > 0)
        full = self.unpruned(self.slot, copied).to(dflash_logits.dtype)
        return dflash_logits.scatter(1, copied, torch.where(outside, full, current))

    def vote(self, logits: torch.Tensor, candidate: tuple[torch.Tensor, torch.Tensor] | None = None) -> torch.Tensor:
        """``logits [B, V]`` (float32) plus gamma(m) on each row's ``candidate()`` (computed when not given)."""
        copied, gamma = self.candidate() if candidate is None else candidate
        return logits.scatter_add(1, copied, gamma)

    def extend(self, token: torch.Tensor) -> None:
        """Each row's chain grew by ``token [B]`` (its drafted id): matches ending at j continue where ``c[j]``
        equals it."""
        self.matches = self.branch_extended(self.matches.unsqueeze(1), token.unsqueeze(1)).squeeze(1)
        self.slot += 1

    def branch_extended(self, matches: torch.Tensor, token: torch.Tensor) -> torch.Tensor:
        """``extend`` of each branch of a token tree: its matches ``[B, F, T]`` after it grew by ``token [B, F]``."""
        previous = torch.cat([matches.new_zeros(matches.shape[:2] + (1,)), matches[..., :-1]], dim=-1)
        grown = (previous + 1).clamp(max=self.max_ngram)
        same = self.candidates.unsqueeze(1) & (self.tokens.unsqueeze(1) == token.unsqueeze(-1))
        return torch.where(same, grown, 0)


def longest_matches(tokens: torch.Tensor, anchor: torch.Tensor, weights: torch.Tensor) -> torch.Tensor:
    """``[B]`` each row's longest copy match (0..n) at its ``anchor [B]``: the match length the copy expert votes with
    at the block's first slot, read by the cost-aware policy before it decides to draft."""
    return CopyChain(tokens, anchor, weights).matches.amax(-1)
