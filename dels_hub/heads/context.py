"""What a head may read before its block: the committed tokens just before the anchor.

The DeLS head reads the block alone (the anchor, then the drafts), and so does a GRU head trained like it. An
n-gram head is a table of contexts: at the block's first slots its context is one or two tokens long, while the
tokens before the anchor are committed and free to read. A head that reads them says how many in its config
(``context_tokens``); the loop hands it those tokens, and every other head starts its block from nothing.
"""

import torch


def context_width(head) -> int:
    """How many committed tokens before the anchor ``head`` reads: its config's ``context_tokens``, 0 if none."""
    return int(getattr(getattr(head, "config", None), "context_tokens", 0) or 0)


def tokens_before(tokens: torch.Tensor, anchor, width: int) -> torch.Tensor:
    """``[B, width]`` the ``width`` tokens of each row of ``tokens [B, T]`` before position ``anchor`` (``[B]`` or
    one int for every row), oldest first; -1 before the row's first token."""
    offsets = torch.arange(-width, 0, device=tokens.device)
    if isinstance(anchor, torch.Tensor):
        positions = anchor.view(-1, 1) + offsets
    else:
        positions = (offsets + anchor).expand(tokens.shape[0], -1)
    return tokens.gather(1, positions.clamp_min(0)).masked_fill(positions < 0, -1)


def head_start(head, tokens: torch.Tensor | None, anchor) -> torch.Tensor | None:
    """The state ``head`` reads a block's anchor from, primed with the committed tokens before ``anchor``; None for a
    head that reads its block alone (``drafting.propose`` then starts it afresh, and ``tokens`` may be None)."""
    width = context_width(head)
    if width == 0:
        return None
    return head.initial_state(tokens.shape[0], context=tokens_before(tokens, anchor, width))
