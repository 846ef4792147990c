"""The arguments of ``DeLSGenerator.generate``, checked and resolved at the boundary: the prompt (``input_ids`` and its
``attention_mask``) and the generation fields (``max_new_tokens``, sampling, padding), merged as transformers merges
them and refused where the loop would not honour them."""

import copy
import numbers

import torch
from transformers import GenerationConfig

from ..errors import GenerationArgumentError, UnsupportedInputError
from ..sampling import Warping

# transformers' own defaults for fields a generation config leaves unset (GenerationConfig
# ._get_default_generation_params); ours must be the same for the drop-in to sample the same distribution.
GENERATION_DEFAULTS = {"max_length": 20, "do_sample": False, "temperature": 1.0, "top_k": 50, "top_p": 1.0}
# Types of the fields the loop reads (transformers does not check them; a string would fail deep inside).
INTEGER, NUMBER, FLAG = (numbers.Integral, "an integer"), (numbers.Real, "a number"), (bool, "True or False")
GENERATION_TYPES = {"max_new_tokens": INTEGER, "max_length": INTEGER, "top_k": INTEGER, "temperature": NUMBER,
                    "top_p": NUMBER, "do_sample": FLAG}
# Logits processors the loop does not apply: a non-default value would change the target's distribution.
UNSUPPORTED = {
    "num_beams": 1,
    "num_return_sequences": 1,
    "repetition_penalty": 1.0,
    "no_repeat_ngram_size": 0,
    "min_length": 0,
    "min_new_tokens": None,
    "min_p": None,
    "typical_p": 1.0,
}


def validated_input(target, input_ids, attention_mask) -> tuple[torch.Tensor, list[int] | None]:
    """``(input_ids [B, N] on the device, each row's real length or None when no row is padded)``."""
    if hasattr(input_ids, "keys") and "input_ids" in input_ids:  # a BatchEncoding from a tokenizer
        attention_mask = input_ids.get("attention_mask", attention_mask)
        input_ids = input_ids["input_ids"]
    if not isinstance(input_ids, torch.Tensor):
        raise UnsupportedInputError(f"input_ids must be a LongTensor [B, N], got {type(input_ids).__name__}")
    if input_ids.dim() == 1:
        input_ids = input_ids.unsqueeze(0)
    if input_ids.dim() != 2 or input_ids.shape[0] == 0:
        raise UnsupportedInputError(f"input_ids has shape {tuple(input_ids.shape)}; expected [B, N] with B >= 1")
    if input_ids.shape[1] == 0:
        raise UnsupportedInputError("input_ids is empty; the prompt needs at least one token")
    if input_ids.dtype.is_floating_point or input_ids.dtype.is_complex or input_ids.dtype == torch.bool:
        raise UnsupportedInputError(f"input_ids must hold integer token ids (torch.long), got {input_ids.dtype}")
    mask = torch.ones_like(input_ids) if attention_mask is None else torch.as_tensor(attention_mask)
    if mask.shape != input_ids.shape:
        raise UnsupportedInputError(f"attention_mask has shape {tuple(mask.shape)}, input_ids "
                                    f"{tuple(input_ids.shape)}; expected the same")
    mask = mask.to(input_ids.device)
    not_left_padded = ((mask != 0) & (mask != 1)).any(1) | (mask[:, 1:] < mask[:, :-1]).any(1)
    # One host transfer: the id range, each row's length, and whether each row is left-padded 0s then 1s.
    low, high, *facts = torch.cat([torch.stack([input_ids.min(), input_ids.max()]), mask.sum(1),
                                   not_left_padded.long()]).tolist()
    lengths, bad_rows = facts[: input_ids.shape[0]], facts[input_ids.shape[0] :]
    rows = target.get_input_embeddings().weight.shape[0]
    if low < 0 or high >= rows:
        bad = low if low < 0 else high
        raise UnsupportedInputError(f"input_ids holds token id {bad}, outside the target's embedding rows "
                                    f"0..{rows - 1}")
    if any(bad_rows):
        row = bad_rows.index(1)
        raise UnsupportedInputError(
            f"attention_mask row {row} is {mask[row].tolist()}: expected left padding, zeros then ones (decoder-"
            "only models generate after the last token; tokenize with padding_side='left')"
        )
    if 0 in lengths:
        raise UnsupportedInputError(f"attention_mask row {lengths.index(0)} is all zeros; every prompt needs at "
                                    "least one token")
    return input_ids.to(target.device), (None if min(lengths) == input_ids.shape[1] else lengths)


def merged_generation_config(target, generation_config, kwargs) -> GenerationConfig:
    config = copy.deepcopy(generation_config or target.generation_config or GenerationConfig())
    check_types(kwargs)  # before transformers' own validation compares them
    try:
        unused = config.update(**kwargs)
    except ValueError as error:  # transformers' own validation, e.g. max_new_tokens=0
        raise GenerationArgumentError(str(error)) from error
    if unused:
        raise GenerationArgumentError(f"unknown generation arguments {sorted(unused)}")
    for name, default in GENERATION_DEFAULTS.items():
        if getattr(config, name, None) is None:
            setattr(config, name, default)
    check_types({name: getattr(config, name, None) for name in GENERATION_TYPES})
    for name, neutral in UNSUPPORTED.items():
        value = getattr(config, name, neutral)
        if value is not None and value != neutral:
            raise GenerationArgumentError(
                f"{name}={value} is not supported by DeLSGenerator (expected {neutral}); "
                "it would change the target's distribution, which the verifier must preserve"
            )
    return config


def max_new_tokens_for(config: GenerationConfig, prompt_len: int) -> int:
    max_new = config.max_new_tokens if config.max_new_tokens is not None else config.max_length - prompt_len
    if max_new < 1:
        raise GenerationArgumentError(
            f"max_new_tokens resolves to {max_new} (max_new_tokens={config.max_new_tokens}, "
            f"max_length={config.max_length}, prompt length {prompt_len}); expected >= 1"
        )
    return max_new


def warping_for(config: GenerationConfig) -> Warping:
    if not config.do_sample:
        return Warping()
    if not config.temperature > 0:
        raise GenerationArgumentError(f"temperature must be > 0 when sampling, got {config.temperature}")
    if not 0 < config.top_p <= 1:
        raise GenerationArgumentError(f"top_p must be in (0, 1], got {config.top_p}")
    if config.top_k < 0:
        raise GenerationArgumentError(f"top_k must be >= 0, got {config.top_k}")
    return Warping(temperature=float(config.temperature), top_k=int(config.top_k), top_p=float(config.top_p))


def pad_id_for(config: GenerationConfig) -> int:
    """What fills a batch row after its end: the pad token, else the (first) EOS token, as transformers does."""
    for value in (config.pad_token_id, config.eos_token_id):
        if value is not None:
            return value if isinstance(value, int) else list(value)[0]
    return 0


def check_types(values: dict) -> None:
    """The generation fields the loop reads must have their types; transformers does not check them, and a string
    ``max_new_tokens`` would fail deep inside."""
    for name, (kind, expected) in GENERATION_TYPES.items():
        value = values.get(name)
        if value is not None and (isinstance(value, bool) != (kind is bool) or not isinstance(value, kind)):
            raise GenerationArgumentError(f"{name} must be {expected}, got {value!r} ({type(value).__name__})")


def checked_choice(name: str, value, choices: tuple) -> str:
    if value not in choices:
        raise GenerationArgumentError(f"{name} must be one of {choices}, got {value!r}")
    return value
