"""The DeLS head inside vLLM, without a fork: a ``vllm.general_plugins`` entry point that registers one fused draft
architecture, and the folder that names it.

vLLM's plugins can register model architectures but not speculative methods, so the head rides on vLLM's own DFlash
method. A *DeLS drafter folder* is the DFlash drafter's ``config.json`` with ``architectures`` set to
``ARCHITECTURE`` and a ``dels_fusion`` section (alpha, beta, pure prefix), the drafter's safetensors (linked, not
copied), and the head saved in ``head/``. Given that folder as ``speculative_config["model"]`` with method
``"dflash"``, vLLM builds ``dels_hub.vllm_drafter.DFlashDeLSDraftModel``: its own DFlash drafter whose
``compute_logits`` returns the fused logits of ``generation.drafting.propose``, the same function our loop drafts
with. vLLM's proposer takes the argmax of each row, which is the fused greedy chain.

This module imports no vLLM (the folder is written where vLLM may not be installed); ``register`` names the model
class by its path, so vLLM imports it only when it builds a drafter.
"""

import hashlib
import json
import os
import shutil
import tempfile
from dataclasses import dataclass
from pathlib import Path

import torch

from .fusion import Schedule, fusion_weights
from .generation.drafting import propose
from .loading import load_head
from .locations import is_hub_id, model_location
from .sampling import Warping

# vLLM renames a DFlash draft architecture to DFlash{name} unless the name starts or ends with DFlash.
ARCHITECTURE = "DFlashDeLSDraftModel"
MODEL_CLASS = "dels_hub.vllm_drafter:DFlashDeLSDraftModel"
FUSION_KEY = "dels_fusion"
HEAD_FOLDER = "head"


def register() -> None:
    """The ``vllm.general_plugins`` entry point: vLLM calls it in every process it starts (so it must be cheap and
    idempotent). Registering by class path defers importing vLLM's model code until a DeLS drafter is built."""
    from vllm import ModelRegistry

    if ARCHITECTURE not in ModelRegistry.get_supported_archs():
        ModelRegistry.register_model(ARCHITECTURE, MODEL_CLASS)


def default_folder() -> Path:
    """Where ``dels-hub serve --head`` writes DeLS drafter folders: ``$DELS_HUB_CACHE/vllm`` (default
    ``~/.cache/dels_hub/vllm``)."""
    return Path(os.environ.get("DELS_HUB_CACHE", Path.home() / ".cache" / "dels_hub")).expanduser() / "vllm"


def write_drafter_folder(dflash, head, num_drafts: int, *, alpha: Schedule | None = None,
                         beta: Schedule | None = None, pure_prefix_len: int | None = None, folder=None) -> Path:
    """Write (or reuse) the DeLS drafter folder for vLLM that pairs the DFlash drafter ``dflash`` with ``head``
    (each a local folder or a Hub id; a head adapter is merged). Fusion settings default to the head's, as in
    ``DeLSGenerator``, and are checked for ``num_drafts`` positions before the drafter is fetched or anything is
    written.

    ``folder`` defaults to a folder under ``default_folder()`` named by a hash of the contents (the head's weights,
    the drafter's config and weight files, the fusion settings): the same pairing reuses it, a retrained head or
    drafter gets a new one. A given ``folder`` may be new, empty, or a DeLS drafter folder written before (it is
    replaced); anything else is refused. The folder is assembled beside its destination and renamed into place:
    never half-written.
    """
    if folder is not None:
        _check_replaceable(Path(folder))
    head_model = load_head(head)
    fusion = {
        "alpha": alpha if alpha is not None else head_model.config.alpha,
        "beta": beta if beta is not None else head_model.config.beta,
        "pure_prefix_len": pure_prefix_len if pure_prefix_len is not None else head_model.config.pure_prefix_len,
    }
    fusion_weights(fusion["alpha"], fusion["beta"], fusion["pure_prefix_len"], num_drafts)
    dflash_files = _local_files(dflash)
    linked = sorted(path for pattern in LINKED_FILES for path in dflash_files.glob(pattern))
    config = json.loads((dflash_files / "config.json").read_text(encoding="utf-8"))
    config["architectures"] = [ARCHITECTURE]
    config[FUSION_KEY] = fusion | {"head": HEAD_FOLDER}
    if folder is None:
        key = _contents_hash(config, linked, head_model)
        folder = default_folder() / f"{Path(str(dflash)).name}+{Path(str(head)).name}-{key}"
        if (folder / "config.json").is_file():
            return folder
    folder = Path(folder)
    folder.parent.mkdir(parents=True, exist_ok=True)
    staging = Path(tempfile.mkdtemp(dir=folder.parent, prefix=f".{folder.name}.writing-"))
    try:
        for path in linked:
            (staging / path.name).symlink_to(path.resolve())
        head_model.save_pretrained(staging / HEAD_FOLDER, safe_serialization=True)
        (staging / "config.json").write_text(json.dumps(config, indent=2) + "\n", encoding="utf-8")
        _move_into_place(staging, folder)
    finally:
        shutil.rmtree(staging, ignore_errors=True)
    return folder


LINKED_FILES = ("*.safetensors", "mask_embedding.pt")  # what vLLM reads from a DFlash drafter's folder


def _check_replaceable(folder: Path) -> None:
    if folder.exists() and any(folder.iterdir()) and _architecture(folder) != ARCHITECTURE:
        raise FileExistsError(f"{folder} is not empty and is not a DeLS drafter folder; name a new or empty folder")


def _architecture(folder: Path) -> str | None:
    try:
        return json.loads((folder / "config.json").read_text(encoding="utf-8"))["architectures"][0]
    except (OSError, ValueError, KeyError, IndexError, TypeError):
        return None


def _move_into_place(staging: Path, folder: Path) -> None:
    """Rename ``staging`` to ``folder``, replacing an empty folder or an earlier DeLS drafter folder there. Another
    process that wrote the same folder first wins: its folder is as good as ours."""
    old = None
    if folder.exists():
        old = folder.with_name(f".{folder.name}.old-{os.getpid()}")
        os.replace(folder, old)
    try:
        os.replace(staging, folder)
    except OSError:
        if _architecture(folder) != ARCHITECTURE:
            raise
    if old is not None:
        shutil.rmtree(old, ignore_errors=True)


def _contents_hash(config: dict, linked: list[Path], head_model) -> str:
    digest = hashlib.sha256(json.dumps(config, sort_keys=True).encode())
    for path in linked:  # a retrained drafter has new files: their size and time stand for their bytes
        stat = path.resolve().stat()
        digest.update(f"{path.name}:{stat.st_size}:{stat.st_mtime_ns}".encode())
    for name, tensor in sorted(head_model.state_dict().items()):
        digest.update(name.encode())
        digest.update(tensor.detach().cpu().contiguous().view(torch.uint8).numpy().tobytes())
    return digest.hexdigest()[:12]


def _local_files(dflash) -> Path:
    location = model_location(dflash, "DFlash drafter")
    if is_hub_id(location):
        from huggingface_hub import snapshot_download

        return Path(snapshot_download(location, allow_patterns=["*.json", *LINKED_FILES]))
    return Path(location)


@dataclass
class BlockFusion:
    """The head and its fusion weights for blocks of ``num_drafts`` drafts, on the drafter's device."""

    head: torch.nn.Module
    log_prior: torch.Tensor
    alpha: torch.Tensor
    beta: torch.Tensor
    num_drafts: int

    @classmethod
    def from_folder(cls, folder, num_drafts: int, device) -> "BlockFusion":
        config = json.loads((Path(folder) / "config.json").read_text(encoding="utf-8"))[FUSION_KEY]
        head = load_head(str(Path(folder) / config["head"])).to(device).eval()
        alpha, beta = fusion_weights(config["alpha"], config["beta"], config["pure_prefix_len"], num_drafts, device)
        return cls(head, head.log_prior().to(device), alpha, beta, num_drafts)


GREEDY = Warping()


@torch.no_grad()
def fused_draft_logits(fusion: BlockFusion, drafter_logits: torch.Tensor, anchors: torch.Tensor) -> torch.Tensor:
    """``[B * k, V]`` drafter logits in vLLM's request-major order and ``[B]`` anchors -> ``[B * k, V]`` float32
    fused logits, each slot's conditioned on the argmax of the slots before it (what vLLM's greedy drafting picks).
    """
    rows, vocab = drafter_logits.shape
    blocks = drafter_logits.view(rows // fusion.num_drafts, fusion.num_drafts, vocab)
    fused = torch.empty(blocks.shape, dtype=torch.float32, device=blocks.device)
    propose(blocks, anchors.long(), GREEDY, head=fusion.head, log_prior=fusion.log_prior, alpha=fusion.alpha,
            beta=fusion.beta, fused=fused)
    return fused.view(rows, vocab)
