"""Wide verifies at nearly the price of narrow ones on x86 CPUs: the target's linear layers on oneDNN's matmul.

``F.linear`` runs on MKL's sgemm, which on a product of a few rows is far from its best: on SmolLM2-135M in float32
at one thread (the AMD EPYC this project runs on), the target's linear layers took 31 ms for one row, 49 for two,
62 for three and 56 for eight, so a verify of 8 tokens cost 1.6 target steps. oneDNN's matmul
(``torch.ops.mkldnn._linear_pointwise``, the kernel inductor uses for CPU linears) took 33 ms for two rows and 39 for
eight, on the same weights, with no copy of them: the loop's calibrated table read 41-47 ms for verifies of 2..8
tokens against 37-39 ms for one (``results/smollm2/onednn-verify/``). An earlier version packed the weights once
per width for MKL's packed GEMM (a copy each); on this machine oneDNN is faster at every width.

There oneDNN is faster for one row too (31 ms to 23 for the linear layers), so the loop's plain steps run on it as
well: the bench's "target (loop, b=1)" row then shows what the kernel alone gives over ``target.generate``, and a
speculative row's speedup over that row is speculation's. Elsewhere it may lose at some widths (an Intel Xeon with
AMX: one row), so ``"auto"`` keeps the widths that measured faster on this machine (``kernel_choice.py``).
Only the loop's steps of a chosen set of widths (per row: ``PackedLinears.wrap``) run on it; the prefill,
``target.generate`` and anything else that calls the model keep ``F.linear``. Another kernel sums in another order,
as any other width's does, so greedy output stays the target's up to float32 near-ties, as for every verify.
"""

import weakref

import torch

from ..errors import GenerationArgumentError


def packing_available(model) -> bool:
    """oneDNN's matmul applies: float32 weights on a CPU, and a torch built with oneDNN."""
    weight = next(model.parameters())
    return (weight.device.type == "cpu" and weight.dtype == torch.float32 and torch.backends.mkldnn.is_available()
            and hasattr(torch.ops.mkldnn, "_linear_pointwise"))


def auto_widths(model, block_size: int) -> tuple[int, ...]:
    """The widths ``"auto"`` considers for oneDNN (it keeps those that measured faster, ``kernel_choice.py``): every
    step of 1..``block_size`` tokens, when it applies; else none. (A call with a tree passes its largest tree,
    budget + 1 tokens, when that is wider: its tree verifies may run there too.)"""
    return tuple(range(1, block_size + 1)) if packing_available(model) else ()


class PackedLinears:
    """Every ``nn.Linear`` of ``model`` on oneDNN's matmul while active (``with packs:``), for the loop's steps of
    ``widths`` tokens per row (``wrap``). Only the layers' own ``forward`` changes, and only while active (an instance
    attribute, restored on exit): a torch function mode would do the same for every op of the forward, at about
    10 ms a verify of SmolLM2. ``hits`` counts the products that ran on it."""

    def __init__(self, model, widths: tuple[int, ...]):
        self.widths = tuple(widths)
        self.layers = [(module, self._packed_forward(module)) for module in model.modules()
                       if isinstance(module, torch.nn.Linear)]
        self.hits = 0
        self._saved: list = []

    def _packed_forward(self, module: torch.nn.Linear):
        weight, bias = module.weight, module.bias

        def forward(x):
            self.hits += 1
            return torch.ops.mkldnn._linear_pointwise(x, weight, bias, "none", [], "")

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
        """``step`` (a loop step: ``step(model, ids [B, w], ...)``) run on oneDNN when ``w`` is one of the widths,
        and plainly otherwise."""
        def packed_step(model, ids, *args, **kwargs):
            if ids.shape[-1] not in self.widths:
                return step(model, ids, *args, **kwargs)
            with self:
                return step(model, ids, *args, **kwargs)

        return packed_step


# One set per model and widths, shared by every generator over that model (a bench builds one per row).
_shared: "weakref.WeakKeyDictionary[torch.nn.Module, dict]" = weakref.WeakKeyDictionary()


def packed_linears(model, widths: tuple[int, ...]) -> PackedLinears | None:
    """The shared ``PackedLinears`` of ``model`` for ``widths`` (built on first use), or None for no widths."""
    if not widths:
        return None
    by_widths = _shared.setdefault(model, {})
    if widths not in by_widths:
        by_widths[widths] = PackedLinears(model, widths)
    return by_widths[widths]


def checked_packed_widths(value) -> str | tuple[int, ...]:
    """``"auto"``, or the step widths to run on oneDNN as a tuple of integers >= 1 (None or empty: none), else
    ``GenerationArgumentError`` naming the bad value."""
    if value == "auto":
        return value
    widths = () if value is None else value
    if not isinstance(widths, (tuple, list)) or not all(
            isinstance(width, int) and not isinstance(width, bool) and width >= 1 for width in widths):
        raise GenerationArgumentError(f"packed_widths must be 'auto', None or step widths (integers >= 1), got "
                                      f"{value!r}")
    return tuple(sorted(set(widths)))
