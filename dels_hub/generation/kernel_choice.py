"""Which of the loop's step widths run faster on oneDNN's matmul than on ``F.linear``, on this machine: measured once
and cached on disk beside the cost models (``packed_widths="auto"``).

Which kernel wins is a property of the CPU, not of the model's dtype: on the AMD EPYC the project first ran on,
oneDNN won at every width (``packed_weights.py``); on an Intel Xeon with AMX, a plain step of SmolLM2-135M at one
thread took 87-89 ms on oneDNN against 73-74 on ``F.linear``, while a verify of 8 tokens took 128-131 against
138-153 (``results/smollm2/kernel-choice/measure.txt``). Packing every width by rule made the target alone
through the loop 0.88x of ``target.generate`` there; with the widths measured, 1.04x. So ``"auto"`` times a verify
of each width with both kernels, interleaved, and keeps oneDNN where it was faster.
"""

import json
from pathlib import Path

import torch

from ..files import write_text_atomic
from .cost_model import cache_folder, cache_path, describe_device, describe_model, verify_times
from .graph_steps import verify_step
from .packed_weights import PackedLinears

KERNEL_CHOICE_VERSION = 1  # bump when what is measured changes: old cache files are then ignored


def faster_widths(candidates: tuple[int, ...], linear_ms: dict[int, float], onednn_ms: dict[int, float]) -> tuple[
        int, ...]:
    """The ``candidates`` that run faster on oneDNN, from timings at some widths: a width not measured takes the
    choice of the next measured width above it (else the widest measured)."""
    measured = sorted(set(linear_ms) & set(onednn_ms))
    chosen = []
    for width in candidates:
        at = next((m for m in measured if m >= width), measured[-1])
        if onednn_ms[at] < linear_ms[at]:
            chosen.append(width)
    return tuple(chosen)


def choice_key(target, batch: int, static_cache: bool) -> dict:
    """Everything the choice depends on; its hash names the cache file, which holds every width measured so far."""
    return {"version": KERNEL_CHOICE_VERSION, "device": describe_device(target.device),
            "threads": torch.get_num_threads(), "batch": batch, "target": describe_model(target),
            "static_cache": static_cache, "torch": torch.__version__}


def choice_path(key: dict) -> Path:
    return cache_path(key, cache_folder() / "kernels")


def onednn_widths(target, candidates: tuple[int, ...], measured: tuple[int, ...], *, batch: int,
                  static_cache: bool) -> tuple[int, ...]:
    """The ``candidates`` whose steps run faster on oneDNN for ``batch`` rows, from a verify of each width of
    ``measured`` timed with both kernels. The timings are cached under ``choice_key``; a width not in the file yet
    is timed and added (a read-only cache times it again next process)."""
    if not candidates:
        return ()
    key = choice_key(target, batch, static_cache)
    path = choice_path(key)
    try:
        saved = json.loads(path.read_text())
    except (OSError, ValueError):
        saved = {}
    ms = {"F.linear": {}, "oneDNN": {}}
    if saved.get("key") == key:
        ms = {name: {int(w): value for w, value in saved["ms"][name].items()} for name in ms}
    missing = tuple(w for w in sorted(set(measured)) if w not in ms["F.linear"] or w not in ms["oneDNN"])
    if missing:
        onednn = PackedLinears(target, missing).wrap(verify_step)
        times, _, _ = verify_times(target, {"F.linear": verify_step, "oneDNN": onednn}, missing, batch=batch,
                                   static_cache=static_cache)
        for name, by_width in times.items():
            ms[name].update(by_width)
        try:
            write_text_atomic(path, json.dumps({"key": key, "ms": ms}, indent=1))
        except OSError:
            pass
    return faster_widths(candidates, ms["F.linear"], ms["oneDNN"])
