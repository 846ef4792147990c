"""Model cards (render only) and Hub upload (``HfApi.upload_folder``, with a dry run that checks and lists)."""

from ..errors import RepoCardError, RepoCheckError
from .card import add_card_arguments, card_main, render_card, repo_kind, write_card
from .upload import add_upload_arguments, check_repo, upload_main, upload_repo

__all__ = [
    "RepoCardError",
    "RepoCheckError",
    "add_card_arguments",
    "add_upload_arguments",
    "card_main",
    "check_repo",
    "render_card",
    "repo_kind",
    "upload_main",
    "upload_repo",
    "write_card",
]
