"""Errors of the training recipes, raised before training starts.

They extend the one hierarchy of ``dels_hub.errors`` (every class is a ``DeLSError``, hence a
``ValueError``); they live here only while that file is owned by the core.
"""

from ..errors import DeLSError


class RecipeError(DeLSError):
    """A recipe key is unknown, has the wrong type or an invalid value."""


class TrainingDataError(DeLSError):
    """Training data is missing, lacks the expected column, or yields nothing to supervise."""
