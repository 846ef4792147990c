"""Benchmark-specific errors, raised before any model is loaded or any prompt is generated.

They extend ``dels_hub.errors.DeLSError`` (a ``ValueError``), so ``except ValueError`` still catches them.
"""

from ..errors import DeLSError


class UnknownDatasetError(DeLSError):
    """The dataset name is none of the known ones (nor ``jsonl:PATH``)."""


class DatasetFileError(DeLSError):
    """A ``jsonl:PATH`` file is missing, is not JSON Lines, or a record has no usable prompt."""


class DatasetUnavailableError(DeLSError):
    """A Hub dataset (gsm8k, math500, mbpp, mt-bench) could not be loaded, e.g. the Hub is unreachable."""


class BenchArgumentError(DeLSError):
    """A benchmark setting has an invalid value (num_prompts < 1, bad JSON in target_kwargs, ...)."""
