"""One hierarchy of specific exceptions.

Every error is a ``ValueError`` subclass (as in huggingface_hub), raised once at the boundary before any
work starts, and its message names the values that disagree and what was expected.
"""


class DeLSError(ValueError):
    """Base class of every dels_hub error."""


class CheckpointKeysError(DeLSError):
    """A checkpoint has missing or unexpected weights (strict loading)."""


class IncompatibleTokenizerError(DeLSError):
    """The head was trained for another tokenizer family than the target's."""


class MissingTokenizerError(DeLSError):
    """A head was given but no tokenizer could be found to check its family against."""


class VocabSizeMismatchError(DeLSError):
    """A head or drafter vocabulary does not fit the target's embedding rows."""


class HiddenSizeMismatchError(DeLSError):
    """The drafter's hidden size differs from the target's."""


class TargetLayerOutOfRangeError(DeLSError):
    """A drafter ``target_layer_ids`` entry is not a layer of the target."""


class MaskTokenOutOfRangeError(DeLSError):
    """The drafter's ``mask_token_id`` is outside the target's embedding table."""


class DtypeMismatchError(DeLSError):
    """A drafter or head given to ``DeLSGenerator`` does not have the target's dtype."""


class BlockSizeError(DeLSError):
    """A block size is below 2 for a drafter, or above what the drafter was trained for."""


class FusionScheduleError(DeLSError):
    """An alpha/beta schedule has the wrong length or a non-finite value."""


class DraftVocabularyError(DeLSError):
    """A draft vocabulary is not a set of token ids the target's LM head has, or cannot be counted."""


class UnsupportedInputError(DeLSError):
    """Generation input the loop does not support (batch size > 1, padding, empty prompt)."""


class GenerationArgumentError(DeLSError):
    """A generation argument has an invalid value (temperature <= 0, top_p outside (0, 1], ...)."""


class UnknownDatasetError(DeLSError):
    """A benchmark dataset name is none of the known ones (nor ``jsonl:PATH``)."""


class DatasetFileError(DeLSError):
    """A ``jsonl:PATH`` file is missing, is not JSON Lines, or a record has no usable prompt."""


class DatasetUnavailableError(DeLSError):
    """A Hub dataset (gsm8k, math500, mbpp, mt-bench) could not be loaded, e.g. the Hub is unreachable."""


class BenchArgumentError(DeLSError):
    """A benchmark setting has an invalid value (num_prompts < 1, bad JSON in target_kwargs, ...)."""


class RecipeError(DeLSError):
    """A training recipe key is unknown, has the wrong type or an invalid value."""


class TrainingDataError(DeLSError):
    """Training data is missing, lacks the expected column, or yields nothing to supervise."""


class RepoCardError(DeLSError):
    """A repo folder has no recognisable model to write a card for, or the card inputs are invalid."""


class RepoCheckError(DeLSError):
    """A staged repo is not fit to publish: no card, pickled weights, or it does not load."""


class AdapterError(DeLSError):
    """A PEFT adapter of a local head names no base head, or does not apply to it."""


class PackageLocationError(RecipeError):
    """A ``pkg:NAME`` location names no installed Python package. A ``RecipeError`` because recipes raised that
    for it first; ``generate`` and ``bench`` raise it too."""


class ModelNotFoundError(DeLSError):
    """A target, drafter, head or tokenizer location is neither an existing local folder nor a Hub id."""


class ModelFolderError(ModelNotFoundError):
    """A local folder that transformers cannot load by itself (no config.json; for a tokenizer, no tokenizer files)
    holds not exactly one GGUF file, and no ``gguf_file`` says which to load. A ``ModelNotFoundError``: there is no
    model to load there as given."""


class DamagedFileError(DeLSError):
    """A weights or checkpoint file is truncated or corrupt; the message names the file and what is wrong."""


class OutputFolderError(DeLSError):
    """A training output folder holds another run's files; training refuses to write over them."""


class ResumeConfigError(DeLSError):
    """Resuming a run with a configuration that differs from the one its checkpoint was trained with."""


class ServingError(DeLSError):
    """A serving request that cannot be carried out: an engine that is not installed, a part it cannot run."""
