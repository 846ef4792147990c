"""Wide verifies at nearly the price of narrow ones on x86 CPUs: the target's linear layers packed once per width.

MKL's sgemm runs ``F.linear`` (``x @ W.T``, with W stored ``[out, in]``) on a path that packs W again on every call
once x has 4 rows or more. On SmolLM2-135M in float32 at one thread, a verify of 8 tokens cost 121 ms against 58 ms
for one token, and ``aten::mm`` was 80% of it. Packed once per row count (MKL's packed GEMM, as inductor's freezing
does for compiled CPU graphs), the loop's calibrated cost table read 73 ms instead of 92 for a verify of 4 tokens, and
84 ms instead of 119 for one of 8 (the runs are in ``results/smollm2/packed-verify/``).

Each packed width costs one more copy of the weights, so only a few are packed: by default 4 and the block size. The
policy's cost table prices the other widths at their unpacked cost. Packing changes the order of the float sums, as
any other width's kernel does, so greedy output stays the target's up to float32 near-ties, as for every verify.

Only the decode loop's verify runs under the packs (``PackedLinears.wrap``), so ``target.generate``, the prefill and
anything else that calls the model keep the loaded weights.
"""

import weakref

import torch

from ..errors import GenerationArgumentError

# "auto" packs when the copies stay this small (widths x the weights' bytes): a copy per width is the price.
AUTO_PACK_LIMIT_BYTES = 4 << 30


def packing_available(model) -> bool:
    """MKL's packed GEMM applies: float32 weights on a CPU, and a torch built with MKL."""
    weight = next(model.parameters())
    return (weight.device.type == "cpu" and weight.dtype == torch.float32 and torch.backends.mkl.is_available()
            and hasattr(torch.ops.mkl, "_mkl_reorder_linear_weight"))


def auto_widths(model, block_size: int) -> tuple[int, ...]:
    """The widths ``"auto"`` packs: 4 and ``block_size``, those of them a block can verify and wider than 3 rows
    (below which MKL's own path is as fast), when packing applies and the copies stay under
    ``AUTO_PACK_LIMIT_BYTES``; else none."""
    if not packing_available(model):
        return ()
    widths = tuple(sorted({width for width in (4, block_size) if 4 <= width <= block_size}))
    weights = sum(module.weight.nbytes for module in model.modules() if isinstance(module, torch.nn.Linear))
    return widths if len(widths) * weights <= AUTO_PACK_LIMIT_BYTES else ()


class PackedLinears:
    """Every ``nn.Linear`` of ``model`` with its weight packed for each of ``widths`` (rows of the product: a single
    row's verify width), packed once, at construction; a model whose weights change later needs new packs.

    Active (``with packs:``), each of those layers runs a product of that many rows on its packed copy, and any
    other product as it would. Only the layers' own ``forward`` changes, and only while active (an instance attribute,
    restored on exit): a torch function mode would do the same for every op of the forward, at about 10 ms a verify of
    SmolLM2. ``hits`` counts the products that ran packed.
    """

    def __init__(self, model, widths: tuple[int, ...]):
        self.widths = tuple(widths)
        self.layers = [(module, self._packed_forward(module)) for module in model.modules()
                       if isinstance(module, torch.nn.Linear)]
        self.hits = 0
        self._saved: list = []

    def _packed_forward(self, module: torch.nn.Linear):
        weight, bias = module.weight, module.bias
        packs = {rows: torch.ops.mkl._mkl_reorder_linear_weight(weight.detach(), rows) for rows in self.widths}

        def forward(x):
            rows = x.numel() // x.shape[-1]
            packed = packs.get(rows)
            if packed is None:
                return torch.nn.functional.linear(x, weight, bias)
            self.hits += 1
            out = torch.ops.mkl._mkl_linear(x.reshape(rows, x.shape[-1]), packed, weight, bias, rows)
            return out.view(*x.shape[:-1], out.shape[-1])

        return forward

    def __enter__(self):
        self._saved = [module.__dict__.get("forward") for module, _ in self.layers]  # e.g. accelerate's hooks
        for module, forward in self.layers:
            module.forward = forward
        return self

    def __exit__(self, *exc):
        for (module, _), saved in zip(self.layers, self._saved):
            if saved is None:
                del module.forward
            else:
                module.forward = saved

    def wrap(self, step):
        """``step`` (a verify step: ``step(model, ids, ...)``) run under the packs when its ``ids`` have a packed
        number of tokens, and plainly otherwise."""
        def packed_step(model, ids, *args, **kwargs):
            if ids.numel() not in self.widths:
                return step(model, ids, *args, **kwargs)
            with self:
                return step(model, ids, *args, **kwargs)

        return packed_step


# One set of packs per model and widths, shared by every generator over that model (a bench builds one per row).
_shared: "weakref.WeakKeyDictionary[torch.nn.Module, dict]" = weakref.WeakKeyDictionary()


def packed_linears(model, widths: tuple[int, ...]) -> PackedLinears | None:
    """The shared ``PackedLinears`` of ``model`` for ``widths`` (packed on first use), or None for no widths."""
    if not widths:
        return None
    by_widths = _shared.setdefault(model, {})
    if widths not in by_widths:
        by_widths[widths] = PackedLinears(model, widths)
    return by_widths[widths]


def checked_packed_widths(value) -> str | tuple[int, ...]:
    """``"auto"``, or the verify widths to pack as a tuple of integers >= 2 (None or empty: none), else
    ``GenerationArgumentError`` naming the bad value."""
    if value == "auto":
        return value
    widths = () if value is None else value
    if not isinstance(widths, (tuple, list)) or not all(
            isinstance(width, int) and not isinstance(width, bool) and width >= 2 for width in widths):
        raise GenerationArgumentError(f"packed_widths must be 'auto', None or verify widths (integers >= 2), got "
                                      f"{value!r}")
    return tuple(sorted(set(widths)))
