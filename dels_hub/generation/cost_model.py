"""What a block costs on this device: a verify of w tokens for every w, and a draft. Calibrated once, cached on disk
under a key of everything that changes it, and refined online from the loop's own block timings.

The cost-aware policy (``policy.py``) divides expected committed tokens by these costs. A block that drafts costs
``draft_ms + verify_ms[w - 1]``; a plain step (no draft) costs ``verify_ms[0]``; a copy block (the copy expert's
own continuation, no drafter forward) costs ``verify_ms[w - 1]``. The verify cost need not be monotone
in w (a CPU's GEMM may take a slower path for a few rows than for more), so every width is measured, not fitted.

Online refinement: the loop times each block between its host syncs (no extra sync), and each kind of block (plain,
drafted, copied) keeps a running ratio of measured to calibrated time, so a cost table taken at another context
length, or on a busier machine, converges to what the loop actually sees.
"""

import hashlib
import json
import os
import platform
import statistics
import time
from dataclasses import dataclass, field
from pathlib import Path

import torch

from ..compat import cache_kwarg_name, synchronize
from ..files import write_text_atomic
from .caches import DynamicTargetCache, StaticSlotCache
from .drafting import context_features
from .graph_steps import verify_step

CALIBRATION_CONTEXT = 128  # tokens of context the calibration verifies and drafts after
CALIBRATION_REPEATS = 3  # timed calls per measurement, after one warm-up; the median is kept
REFINE_RATE = 0.1  # weight of one block's timing in the running measured/calibrated ratio
# One block's measured/calibrated ratio is clipped to this range before it is folded in: a stall (another process,
# a page fault, a compile) says little about the next block, and must not switch drafting off on its own.
RATIO_RANGE = (0.5, 2.0)
# A block verifies the anchor alone ("plain"), drafts with the drafter ("drafted"), or verifies the copy expert's own
# continuation ("copied").
BLOCK_KINDS = ("plain", "drafted", "copied")
COST_MODEL_VERSION = 2  # bump when what is measured changes: old cache files are then ignored


def cache_folder() -> Path:
    """Where calibrations are kept: ``$DELS_HUB_CACHE/cost_models``, else ``~/.cache/dels_hub/cost_models``."""
    root = os.environ.get("DELS_HUB_CACHE") or Path.home() / ".cache" / "dels_hub"
    return Path(root) / "cost_models"


@dataclass
class CostModel:
    """Milliseconds of a block's parts for one device, dtype, target, drafter, head, thread count and batch size.

    Attributes:
        key: what the costs were measured for (``calibration_key``).
        verify_ms: ``[block_size]``: ``verify_ms[w - 1]`` is one target forward over w tokens per row.
        draft_ms: one draft: the drafter's forward, the LM head rows, the head, the fusion and the copy expert.
        scale: running measured/calibrated ratio of each kind of block, "plain", "drafted" and "copied" (start at
            1).
        refine: whether blocks' timings update those ratios (False keeps a table as given).
    """

    key: dict
    verify_ms: list[float]
    draft_ms: float
    scale: dict = field(default_factory=lambda: dict.fromkeys(BLOCK_KINDS, 1.0))
    refine: bool = True
    observed: dict = field(default_factory=lambda: dict.fromkeys(BLOCK_KINDS, 0))

    @property
    def block_size(self) -> int:
        return len(self.verify_ms)

    def plain_ms(self) -> float:
        """A plain decoding step: a verify of the anchor alone, no draft."""
        return self.verify_ms[0] * self.scale["plain"]

    def drafted_ms(self, width: int) -> float:
        """A block that drafts and verifies ``width`` tokens (the anchor and ``width - 1`` drafts)."""
        return (self.draft_ms + self.verify_ms[width - 1]) * self.scale["drafted"]

    def copied_ms(self, width: int) -> float:
        """A copy block that verifies ``width`` tokens: the copy expert's drafts cost no forward of their own. Width 1
        copies nothing, so it is a plain step, at a plain step's running price (copy blocks' measured overhead must
        not make plain steps look dearer than they are)."""
        return self.plain_ms() if width == 1 else self.verify_ms[width - 1] * self.scale["copied"]

    def observe(self, kind: str, width: int, measured_ms: float) -> None:
        """Fold one block's measured time into the running ratio of its ``kind`` ("plain", "drafted", "copied")."""
        self.observed[kind] += 1
        if not self.refine:
            return
        calibrated = {"plain": self.verify_ms[0], "drafted": self.draft_ms + self.verify_ms[width - 1],
                      "copied": self.verify_ms[width - 1]}[kind]
        ratio = min(max(measured_ms / calibrated, RATIO_RANGE[0]), RATIO_RANGE[1])
        self.scale[kind] += REFINE_RATE * (ratio - self.scale[kind])

    def to_json(self) -> dict:
        return {"version": COST_MODEL_VERSION, "key": self.key, "verify_ms": self.verify_ms,
                "draft_ms": self.draft_ms}

    def save(self, path: Path) -> None:
        """Write the calibration (not the online ratios) atomically: a crash never leaves half a file."""
        write_text_atomic(path, json.dumps(self.to_json(), indent=1))

    @classmethod
    def load(cls, path: Path, key: dict) -> "CostModel | None":
        """The calibration at ``path`` if it was measured for ``key`` by this version, else None."""
        try:
            data = json.loads(path.read_text())
        except (OSError, ValueError):
            return None
        if data.get("version") != COST_MODEL_VERSION or data.get("key") != key:
            return None
        return cls(key=key, verify_ms=[float(v) for v in data["verify_ms"]], draft_ms=float(data["draft_ms"]))


def describe_device(device: torch.device) -> str:
    if device.type == "cuda":
        return f"cuda:{torch.cuda.get_device_name(device)}"
    return f"{device.type}:{platform.processor() or platform.machine()}"


def describe_model(model) -> dict:
    """What of a model changes its speed: its class, its source, its shape."""
    if model is None:
        return {}
    config = model.config
    return {"class": type(model).__name__, "source": str(getattr(config, "_name_or_path", "")),
            "layers": getattr(config, "num_hidden_layers", None), "hidden": getattr(config, "hidden_size", None),
            "vocab": getattr(config, "vocab_size", None)}


def calibration_key(target, drafter, head, *, block_size: int, batch: int, copy: bool, draft_vocab: int | None,
                    compile: bool, packed: tuple[int, ...] = ()) -> dict:
    """Everything a cost table depends on; its hash names the cache file. ``packed``: the verify widths that run on
    packed weights (``packed_weights.py``)."""
    return {"device": describe_device(target.device), "dtype": str(target.dtype).removeprefix("torch."),
            "threads": torch.get_num_threads(), "batch": batch, "block_size": block_size,
            "target": describe_model(target), "drafter": describe_model(drafter), "head": describe_model(head),
            "copy": copy, "draft_vocab": draft_vocab, "compile": compile, "packed": list(packed),
            "torch": torch.__version__}


def cache_path(key: dict, folder: Path | None = None) -> Path:
    """The file of ``key`` in ``folder`` (default: ``cache_folder()``), named by the key's hash."""
    digest = hashlib.sha256(json.dumps(key, sort_keys=True).encode()).hexdigest()[:20]
    return (folder or cache_folder()) / f"{digest}.json"


def median_ms(work, device, repeats: int = CALIBRATION_REPEATS) -> float:
    """Median milliseconds of ``work()`` over ``repeats`` calls after one warm-up call."""
    work()
    times = []
    for _ in range(repeats):
        synchronize(device)
        started = time.perf_counter()
        work()
        synchronize(device)
        times.append((time.perf_counter() - started) * 1e3)
    return statistics.median(times)


@torch.inference_mode()
def verify_times(target, verifies: dict, widths: tuple[int, ...], *, batch: int, static_cache: bool,
                 repeats: int = CALIBRATION_REPEATS) -> tuple[dict, torch.Tensor, torch.Tensor]:
    """Median milliseconds of a verify of each width in ``widths`` for ``batch`` rows after a context of
    ``CALIBRATION_CONTEXT`` tokens, for each named step function of ``verifies`` (interleaved width by width, so a
    change in the machine's load falls on all of them alike). Returns ``({name: {width: ms}}, context ids
    [batch, CALIBRATION_CONTEXT], the context's hidden states)``."""
    device, width = target.device, CALIBRATION_CONTEXT
    # Token ids from the embedding's range; what they are does not change what a forward costs.
    ids = torch.arange(width * batch, device=device).view(batch, width) % target.config.vocab_size
    size = width + max(widths)
    positions = torch.arange(size, device=device).expand(batch, size)
    cache_arg = cache_kwarg_name(type(target))
    target_cache = (StaticSlotCache(size, target.config.num_hidden_layers, device, target.dtype) if static_cache
                    else DynamicTargetCache())
    _, hidden_states = verify_step(target, ids, positions[:, :width], target_cache, cache_arg)
    measured: dict = {name: {} for name in verifies}
    for w in widths:
        for name, verify in verifies.items():
            def step(w=w, verify=verify):
                verify(target, ids[:, -w:], positions[:, width : width + w], target_cache, cache_arg)
                target_cache.keep(width)

            measured[name][w] = median_ms(step, device, repeats)
    return measured, ids, hidden_states


@torch.inference_mode()
def calibrate(target, drafting, *, block_size: int, batch: int, static_cache: bool, verify, draft, key: dict,
              widths: tuple[int, ...] | None = None, repeats: int = CALIBRATION_REPEATS) -> CostModel:
    """Time a verify of each width in ``widths`` (default 1..``block_size``) and one draft, for ``batch`` rows after
    a context of ``CALIBRATION_CONTEXT`` tokens, with the loop's own step functions (``verify``:
    ``graph_steps.verify_step`` or its compiled graph; ``draft``: ``graph_steps.draft_step``). A width left out (a
    compiled run verifies only a few, one graph each) costs what the next measured width does: a verify could pad
    up to it. The context is read eagerly, so a compiled verify sees only the widths it will see in the loop."""
    device, drafter = target.device, drafting.drafter
    width = CALIBRATION_CONTEXT
    widths = tuple(range(1, block_size + 1)) if widths is None else tuple(sorted(set(widths) | {block_size}))
    measured, ids, hidden_states = verify_times(target, {"verify": verify}, widths, batch=batch,
                                                static_cache=static_cache, repeats=repeats)
    verify_ms = [measured["verify"][min(m for m in widths if m >= w)] for w in range(1, block_size + 1)]
    size = width + block_size
    positions = torch.arange(size, device=device).expand(batch, size)
    # As in the loop: the context is the last block's rows before the anchor (position width - 1), then the block.
    anchor = width - 1
    features = context_features(hidden_states, drafter.config.target_layer_ids)[:, anchor - block_size : anchor]
    draft_cache = StaticSlotCache(size + block_size, drafter.config.num_hidden_layers, device, drafter.dtype)
    block = torch.full((batch, block_size), drafter.config.mask_token_id, dtype=torch.long, device=device)
    block[:, 0] = ids[:, -1]
    tokens = torch.cat([ids, block], dim=1)
    real = torch.ones((batch, block_size), dtype=torch.bool, device=device)
    anchor_at = torch.full((batch,), anchor, device=device)

    def drafted():
        draft(drafting, features, positions[:, anchor - block_size : anchor], real, block,
              positions[:, anchor : anchor + block_size], draft_cache, None, tokens, anchor_at)

    return CostModel(key=key, verify_ms=verify_ms, draft_ms=median_ms(drafted, device, repeats))


def cost_model_for(key: dict, measure) -> tuple[CostModel, bool]:
    """The cached calibration for ``key``, else ``measure()``'s, saved for next time. Returns ``(model, cached)``."""
    path = cache_path(key)
    model = CostModel.load(path, key)
    if model is not None:
        return model, True
    model = measure()
    try:
        model.save(path)
    except OSError:  # a read-only home still decodes; it calibrates again next process
        pass
    return model, False
