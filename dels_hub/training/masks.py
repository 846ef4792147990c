"""The DFlash training attention mask: N blocks drafted in one forward over one sequence's context.

Keys/values are ``[context (C) | block 0 | ... | block N-1]``. A query in block n sees context positions
strictly before its anchor (the anchor's own target feature is not context yet, exactly as at inference),
all bs slots of its own block bidirectionally, and nothing of the other blocks.
"""

import torch


def context_mask(anchors: torch.Tensor, context_len: int, block_size: int) -> torch.Tensor:
    """``anchors [B, N]`` -> ``[B, N*bs, C]`` bool: slot queries of block n see context ``j < anchor_n``."""
    visible = torch.arange(context_len, device=anchors.device) < anchors[..., None]  # [B, N, C]
    return visible.repeat_interleave(block_size, dim=1)


def block_diagonal(allowed: torch.Tensor) -> torch.Tensor:
    """``[B, N, bs, bs]`` within-block visibility -> ``[B, N*bs, N*bs]`` with nothing across blocks."""
    batch, blocks, block_size, _ = allowed.shape
    same = torch.eye(blocks, dtype=torch.bool, device=allowed.device)[None, :, None, :, None]
    return (same & allowed[:, :, :, None, :]).reshape(batch, blocks * block_size, blocks * block_size)


def dflash_mask(anchors: torch.Tensor, context_len: int, block_size: int) -> torch.Tensor:
    """``[B, N*bs, C + N*bs]`` bool: the full DFlash training mask (True = may attend)."""
    batch, blocks = anchors.shape
    inside = torch.ones(batch, blocks, block_size, block_size, dtype=torch.bool, device=anchors.device)
    return torch.cat([context_mask(anchors, context_len, block_size), block_diagonal(inside)], dim=-1)


def attention_mask_for(mask: torch.Tensor, attn_implementation: str, dtype: torch.dtype) -> torch.Tensor:
    """``[B, Q, KV]`` bool -> the ``[B, 1, Q, KV]`` form the attention interface wants: bool for sdpa (which
    also keeps bf16 autocast happy), an additive float mask for eager and the others."""
    mask = mask[:, None]
    if attn_implementation == "sdpa":
        return mask
    return torch.zeros(mask.shape, dtype=dtype, device=mask.device).masked_fill(~mask, torch.finfo(dtype).min)
