"""Target / drafter / head compatibility, checked once before any generation work.

Works on meta-device models too (only shapes and configs are read), so a pairing can be proven without
downloading weights.
"""

import logging

from .errors import (
    BlockSizeError,
    HiddenSizeMismatchError,
    IncompatibleTokenizerError,
    MaskTokenOutOfRangeError,
    MissingTokenizerError,
    TargetLayerOutOfRangeError,
    VocabSizeMismatchError,
)
from .fingerprint import tokenizer_fingerprint

logger = logging.getLogger(__name__)


def target_text_config(target):
    config = target.config
    return config.get_text_config() if hasattr(config, "get_text_config") else config


def embedding_rows(target) -> int:
    return target.get_input_embeddings().weight.shape[0]


def check_dflash(target, drafter) -> None:
    """The drafter reads the target's features, embeddings and LM head: sizes and ids must fit."""
    text = target_text_config(target)
    config = drafter.config
    rows = embedding_rows(target)
    if config.hidden_size != text.hidden_size:
        raise HiddenSizeMismatchError(
            f"DFlash hidden_size {config.hidden_size} != target hidden_size {text.hidden_size}; "
            "the drafter borrows the target's embeddings and LM head, so they must be equal"
        )
    if config.block_size < 2:
        raise BlockSizeError(f"DFlash block_size is {config.block_size}; a drafter block needs >= 2 slots")
    bad_layers = [i for i in config.target_layer_ids if not 0 <= i < text.num_hidden_layers]
    if bad_layers:
        raise TargetLayerOutOfRangeError(
            f"DFlash target_layer_ids {config.target_layer_ids} has {bad_layers} outside the target's "
            f"{text.num_hidden_layers} layers (valid: 0..{text.num_hidden_layers - 1})"
        )
    if not 0 <= config.mask_token_id < rows:
        raise MaskTokenOutOfRangeError(
            f"DFlash mask_token_id {config.mask_token_id} is outside the target embedding's {rows} rows"
        )
    if config.vocab_size > rows:
        raise VocabSizeMismatchError(f"DFlash vocab_size {config.vocab_size} > target embedding rows {rows}")


def check_head(target, head, tokenizer) -> None:
    """The head must speak the target tokenizer's ids: same family fingerprint, vocabulary within the rows.

    The family is checked first (a head of another family is the clearest diagnosis), then the vocabulary
    size, which needs no tokenizer; only then is a missing tokenizer an error of its own.
    """
    expected = head.config.tokenizer_fingerprint
    if expected and tokenizer is not None:
        actual = tokenizer_fingerprint(tokenizer)
        if (actual["vocab_size"], actual["sha256"]) != (expected["vocab_size"], expected["sha256"]):
            family = expected.get("family", "unknown")
            raise IncompatibleTokenizerError(
                f"the local head was trained for tokenizer family '{family}' (vocab {expected['vocab_size']}, "
                f"sha256 {expected['sha256'][:12]}) but the target tokenizer is vocab {actual['vocab_size']}, "
                f"sha256 {actual['sha256'][:12]}: use a head trained for the target's tokenizer family"
            )
    rows = embedding_rows(target)
    if head.config.vocab_size > rows:
        raise VocabSizeMismatchError(
            f"local head vocab_size {head.config.vocab_size} > target embedding rows {rows}; "
            "the head predicts ids the target cannot verify"
        )
    if not expected:
        logger.warning("The local head carries no tokenizer_fingerprint; its tokenizer family cannot be checked.")
    elif tokenizer is None:
        raise MissingTokenizerError(
            "a local head was given but no tokenizer was found to check its tokenizer family: pass "
            "tokenizer=... to DeLSGenerator.from_pretrained (needed when the target is an in-memory model)"
        )


def check_compatibility(target, drafter, head=None, tokenizer=None) -> None:
    """Raise a specific ``dels_hub.errors`` exception at the first incompatibility."""
    check_dflash(target, drafter)
    if head is not None:
        check_head(target, head, tokenizer)
