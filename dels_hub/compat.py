"""Shims over transformers versions (5.17 on the GPU machine, the newest 5.x here)."""

import inspect
from functools import cache

import torch


@cache
def cache_kwarg_name(model_class: type) -> str:
    """Name of the KV-cache argument of ``model_class.forward``: ``cache`` (newer 5.x) or ``past_key_values``."""
    parameters = inspect.signature(model_class.forward).parameters
    return "cache" if "cache" in parameters else "past_key_values"


def crop_cache(cache, length: int) -> None:
    """Drop every cached position at index >= ``length``.

    ``Cache.crop`` takes a negative count of tokens to remove in transformers 5.x and an absolute length
    in 4.x; a negative count means "remove that many" in both, so that is the only form used.
    """
    excess = cache.get_seq_length() - length
    if excess > 0:
        cache.crop(-excess)


def synchronize(device: torch.device) -> None:
    """Wait for queued kernels; only at timing boundaries."""
    if device.type == "cuda":
        torch.cuda.synchronize(device)
