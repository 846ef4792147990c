"""Draft-vocabulary pruning: the drafter scores only the N most frequent tokens.

A DFlash drafter borrows the target's LM head, and on a CPU that matmul is a large part of a block: for SmolLM2
(49,152 rows, width 576) it costs about as much as the drafter's layers. Scoring only the N most frequent tokens
(counted on training data: a head's unigram counts) cuts it to N rows. Decoding stays lossless: the target still
verifies each block over its whole vocabulary. A token outside the draft vocabulary gets logit -inf, so it is never
drafted (q = 0 there) and the target's own token is committed in its place. The copy expert's candidate is the
exception: it is scored with its full row (``token_logits``), since a copy is evidence from the text itself.
"""

import torch
from torch import nn

from .errors import DraftVocabularyError


def most_frequent(counts: torch.Tensor, size: int) -> torch.Tensor:
    """The ids of the ``size`` largest ``counts``, ascending (``[size]`` long)."""
    if not 1 <= size <= counts.numel():
        raise DraftVocabularyError(f"draft_vocab must be in 1..{counts.numel()} (the tokens the head counted), got "
                                   f"{size}")
    return torch.topk(counts.float(), size).indices.sort().values


def checked_token_ids(token_ids, vocab_size: int) -> torch.Tensor:
    """``token_ids`` as a sorted ``[N]`` long tensor of distinct ids in ``0..vocab_size - 1``, else
    ``DraftVocabularyError`` naming the problem."""
    ids = torch.as_tensor(token_ids)
    if ids.dim() != 1 or ids.numel() == 0 or ids.dtype.is_floating_point or ids.dtype == torch.bool:
        raise DraftVocabularyError(f"a draft vocabulary is a non-empty 1-D tensor of integer token ids, got "
                                   f"{ids.dtype} of shape {tuple(ids.shape)}")
    ids = ids.long().cpu()
    low, high = ids.min().item(), ids.max().item()
    if low < 0 or high >= vocab_size:
        raise DraftVocabularyError(f"draft vocabulary holds token id {low if low < 0 else high}, outside the LM "
                                   f"head's rows 0..{vocab_size - 1}")
    unique = ids.unique()
    if unique.numel() != ids.numel():
        raise DraftVocabularyError(f"draft vocabulary repeats {ids.numel() - unique.numel()} token ids")
    return unique  # sorted


class DraftVocabulary(nn.Module):
    """The target's LM head restricted to ``token_ids``: ``[..., H]`` -> ``[..., V]`` logits, -inf outside them.

    The kept rows are copied once, contiguous, so the matmul reads N rows instead of gathering them per call.
    """

    def __init__(self, lm_head: nn.Linear, token_ids: torch.Tensor):
        super().__init__()
        weight = lm_head.weight
        ids = token_ids.to(weight.device)
        self.vocab_size = weight.shape[0]
        bias = getattr(lm_head, "bias", None)
        # The full head stays reachable (shared, not copied) for the copy expert's candidate.
        self.full_weight, self.full_bias = weight.detach(), None if bias is None else bias.detach()
        self.register_buffer("token_ids", ids, persistent=False)
        self.register_buffer("weight", weight.detach()[ids].contiguous(), persistent=False)
        self.register_buffer("bias", None if bias is None else self.full_bias[ids].contiguous(), persistent=False)

    def forward(self, hidden_states: torch.Tensor) -> torch.Tensor:
        kept = nn.functional.linear(hidden_states, self.weight, self.bias)
        logits = kept.new_full((*kept.shape[:-1], self.vocab_size), float("-inf"))
        return logits.index_copy_(-1, self.token_ids, kept)

    def token_logits(self, hidden_states: torch.Tensor, slot: int, token_ids: torch.Tensor) -> torch.Tensor:
        """The full LM head's float32 logit of one token per row at block ``slot``: ``hidden_states [B, k, H]``,
        ``token_ids [B, 1]`` -> ``[B, 1]``. One row of the head per row of the batch, whether kept or not."""
        rows = self.full_weight[token_ids[:, 0]]  # [B, H]
        logits = (hidden_states[:, slot].float() * rows.float()).sum(-1, keepdim=True)  # [B, 1]
        if self.full_bias is not None:
            logits = logits + self.full_bias[token_ids].float()
        return logits
