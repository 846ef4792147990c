"""Resolve the three parts from Hub ids, local paths or loaded models; weights load strictly."""

import json
import os

import torch
from transformers import AutoModelForCausalLM, AutoTokenizer
from transformers.utils import find_adapter_config_file

from ..dflash import DFlashDraftModel
from ..errors import AdapterError, CheckpointKeysError
from ..heads import DeLSLocalHead
from ..locations import resolve_location


def load_strict(model_class, source: str, what: str, **kwargs):
    """``from_pretrained`` that fails on any missing, unexpected or mis-shaped weight, naming the keys."""
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
        return AutoModelForCausalLM.from_pretrained(resolve_location(str(target)), dtype=dtype or "auto", **kwargs)
    return target


def load_dflash(dflash, dtype=None):
    if isinstance(dflash, (str, os.PathLike)):
        return load_strict(DFlashDraftModel, resolve_location(str(dflash)), "DFlash", dtype=dtype or "auto")
    return dflash


def load_head(head, dtype=None):
    """A head repo, or a PEFT adapter repo over one: the base head named by its ``base_model_name_or_path``
    is loaded strictly and the adapter merged in, so the loop runs a plain head."""
    if head is None or not isinstance(head, (str, os.PathLike)):
        return head
    dtype, head = dtype or torch.float32, resolve_location(str(head))
    adapter_config = find_adapter_config_file(head)
    if adapter_config is None:
        return load_strict(DeLSLocalHead, head, "local head", dtype=dtype)
    from peft import PeftModel

    base = json.loads(open(adapter_config, encoding="utf-8").read()).get("base_model_name_or_path")
    if not base:
        raise AdapterError(f"adapter {head!r} has no base_model_name_or_path (the base head's id or path)")
    base_head = load_strict(DeLSLocalHead, resolve_location(base), f"base head of adapter {head!r}", dtype=dtype)
    try:
        return PeftModel.from_pretrained(base_head, head).merge_and_unload()
    except (KeyError, RuntimeError, ValueError) as error:
        raise AdapterError(f"adapter {head!r} does not apply to its base head {base!r}: {error}") from error


def load_tokenizer(target, tokenizer, **target_kwargs):
    """The tokenizer given, else the one stored with the target (path or Hub id), else None."""
    if tokenizer is None and isinstance(target, (str, os.PathLike)):
        extra = {key: target_kwargs[key] for key in ("gguf_file", "revision", "subfolder") if key in target_kwargs}
        return AutoTokenizer.from_pretrained(resolve_location(str(target)), **extra)
    if isinstance(tokenizer, (str, os.PathLike)):
        return AutoTokenizer.from_pretrained(resolve_location(str(tokenizer)))
    return tokenizer
