"""Training recipes: one loop (``loop.py``) for local heads (``head.py``) and DFlash drafters (``dflash.py``), and
``regenerate`` to rewrite chat data with the target's own answers."""

from .dflash import add_train_dflash_arguments, train_dflash_main
from .head import add_train_head_arguments, train_head_main
from .regenerate import add_regenerate_arguments, regenerate_main

__all__ = [
    "add_regenerate_arguments",
    "add_train_dflash_arguments",
    "add_train_head_arguments",
    "regenerate_main",
    "train_dflash_main",
    "train_head_main",
]
