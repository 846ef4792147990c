"""The KV caches of the decode loop: sized once per ``generate`` call (or kept between compiled calls), rolled back
without copying.

The target's cache is a ``StaticSlotCache`` (slot == position, masked by position) where the target allows it, else
its own ``DynamicCache`` behind the same two methods (``DynamicTargetCache``): ``forward_inputs(positions, ...)``
gives a forward's cache and mask arguments, ``keep(length)`` rolls back to the first ``length`` positions. The
drafter's cache is a ``StaticDraftCache`` (eager) or a ``StaticSlotCache`` (compiled).

The static classes are duck-typed caches (``update(key, value, layer_idx, ...)``), not ``transformers.Cache``
subclasses: transformers' ``StaticCache`` writes at its own per-layer ``cumulative_length`` counters and has no
``crop`` in 5.17 (it has an in-place one in 5.24), and its mask path reads that counter with a host sync on every
call. Here the loop says where to write and passes its own 4D mask, so the same code runs unchanged on
transformers 5.17 and 5.24.
"""

import torch
from transformers import DynamicCache

from ..compat import crop_cache


class StaticSlotCache:
    """KV cache of the target (and, padded, of the drafter): ``[B, kv_heads, max_len, head_dim]`` per layer; in each
    row, slot index == that row's own position.

    Before each forward the loop sets ``write_positions`` (``[B, T]`` device slot ids) and passes a
    ``causal_mask``; ``update`` writes there and returns the whole buffer. Stale slots beyond the query
    positions stay masked until overwritten, so rollback is free. Rows that are only padding (a left-padded
    prompt's pads, a rejected draft's context row) are written to trash slots past every position.
    """

    def __init__(self, max_len: int, num_layers: int, device, dtype):
        self.max_len = max_len
        self.num_layers = num_layers
        self.device, self.dtype = torch.device(device), dtype
        self.keys: list[torch.Tensor | None] = [None] * num_layers
        self.values: list[torch.Tensor | None] = [None] * num_layers
        self.write_positions: torch.Tensor | None = None
        self.slots = torch.arange(max_len, device=self.device)

    def forward_inputs(self, positions: torch.Tensor, model, cache_arg: str, slots=None, mask=None) -> dict:
        """The cache and mask arguments of a forward at ``positions [B, T]``, which it writes (or ``slots [B, T]``:
        a padded prompt's pads go to trash slots, a tree's nodes to one slot each). ``mask``: given when not causal
        by position (a tree's)."""
        self.write_positions = positions if slots is None else slots
        if mask is None:
            mask = causal_mask(self.slots, positions, model.dtype, model.config._attn_implementation)
        return {cache_arg: self, "attention_mask": mask}

    def move(self, sources: torch.Tensor, destinations: torch.Tensor) -> None:
        """Copy slots ``sources [B, D]`` to ``destinations [B, D]`` in every layer, every source read before any
        destination is written: a tree's accepted path goes to the slots of its positions."""
        for buffers in (self.keys, self.values):
            for buffer in buffers:
                index = sources[:, None, :, None].expand(-1, buffer.shape[1], -1, buffer.shape[-1])
                buffer.scatter_(2, destinations[:, None, :, None].expand_as(index), buffer.gather(2, index))

    def keep(self, length: int) -> None:
        """Slots past ``length`` are masked until rewritten: nothing to do."""

    def keep_rows(self, rows: torch.Tensor) -> None:
        """Keep only batch ``rows`` (the sequences still generating): one copy when a row finishes."""
        self.keys = [None if k is None else k.index_select(0, rows) for k in self.keys]
        self.values = [None if v is None else v.index_select(0, rows) for v in self.values]

    def update(self, key: torch.Tensor, value: torch.Tensor, layer_idx: int, *args, **kwargs):
        """``key``/``value [B, kv_heads, T, head_dim]`` -> the full ``[B, kv_heads, max_len, head_dim]`` buffers."""
        if self.keys[layer_idx] is None:  # first (prefill) call: shapes come from the model itself
            shape = (key.shape[0], key.shape[1], self.max_len, key.shape[-1])
            self.keys[layer_idx] = key.new_zeros(shape)
            self.values[layer_idx] = value.new_zeros(shape[:-1] + (value.shape[-1],))
        keys, values = self.keys[layer_idx], self.values[layer_idx]
        index = self.write_positions[:, None, :, None]
        keys.scatter_(2, index.expand_as(key), key)
        values.scatter_(2, index.expand_as(value), value)
        return keys, values

    def get_seq_length(self, layer_idx: int = 0) -> int:
        # Only reached when a model computes its own positions; the fast loop always passes position_ids.
        raise NotImplementedError("StaticSlotCache has no length of its own; pass position_ids")


def causal_mask(kv_index: torch.Tensor, positions: torch.Tensor, dtype, attn_implementation: str) -> torch.Tensor:
    """The ``[B, 1, T, max_len]`` mask of queries at ``positions [B, T]`` over key slots ``kv_index [max_len]``.

    Slot j is visible to the query at position p iff j <= p, which also hides every stale slot past p.
    sdpa takes a boolean mask (True = attend); eager adds a float one (0 or the dtype's minimum). Built per
    call from the positions (O(T x max_len)), never as a max_len x max_len table.
    """
    allowed = (kv_index <= positions.unsqueeze(-1)).unsqueeze(1)
    if attn_implementation == "sdpa":
        return allowed
    return torch.zeros((), dtype=dtype, device=kv_index.device).masked_fill(~allowed, torch.finfo(dtype).min)


class StaticDraftCache:
    """Drafter KV cache: context keys/values at ``[0, length)``, the current block written after them.

    ``update`` appends at ``length`` (a host int) and returns the valid prefix, which the DFlash attention
    reads in full (non-causally); ``crop(n)`` moves the pointer back, so the block written by the last
    forward is overwritten by the next one. Keys and values are the same as a ``DynamicCache``'s, in the
    same order, so the drafts are bit-identical to the eager loop's.
    """

    def __init__(self, max_len: int, num_layers: int):
        self.max_len = max_len
        self.length = 0  # committed context slots, shared by every layer
        self.keys: list[torch.Tensor | None] = [None] * num_layers
        self.values: list[torch.Tensor | None] = [None] * num_layers

    def update(self, key: torch.Tensor, value: torch.Tensor, layer_idx: int, *args, **kwargs):
        if self.keys[layer_idx] is None:
            shape = (key.shape[0], key.shape[1], self.max_len, key.shape[-1])
            self.keys[layer_idx] = key.new_zeros(shape)
            self.values[layer_idx] = value.new_zeros(shape[:-1] + (value.shape[-1],))
        end = self.length + key.shape[2]
        assert end <= self.max_len, (end, self.max_len)
        keys, values = self.keys[layer_idx], self.values[layer_idx]
        keys[:, :, self.length : end] = key
        values[:, :, self.length : end] = value
        return keys[:, :, :end], values[:, :, :end]

    def get_seq_length(self, layer_idx: int = 0) -> int:
        return self.length

    def crop(self, length: int) -> None:
        """Keep slots ``[0, length)``: nothing is freed or copied."""
        self.length = length


class DynamicTargetCache:
    """The target's own ``DynamicCache`` behind ``StaticSlotCache``'s interface, for targets that the static cache
    cannot serve (sliding-window or hybrid layers, other attention kernels): the model builds its own mask, and a
    rollback crops the rejected positions."""

    def __init__(self):
        self.cache = DynamicCache()

    def forward_inputs(self, positions: torch.Tensor, model, cache_arg: str, slots=None, mask=None) -> dict:
        return {cache_arg: self.cache}

    def keep(self, length: int) -> None:
        crop_cache(self.cache, length)
