"""Model cards (README.md) for what the recipes train: rendered from the Jinja templates in
``dels_hub/hub/templates/`` by ``dels_hub.hub.card`` (the same code as ``dels-hub card REPO_DIR``). Render only:
nothing here touches the network.

Both writers run after ``save_pretrained``, and after the ``training_config.json`` snapshot that training starts
with, so the card is read from the saved repo; the recipe and the end-of-training evaluation are passed in and kept
in the card metadata.
"""

from pathlib import Path

from ..hub.card import write_card
from .recipe import config_dict


def write_head_card(out: Path, head, config, last_eval: dict) -> None:
    """``head`` is the saved head (LoRA merged); its config is re-read from ``out/config.json``."""
    write_card(out, training=config_dict(config), last_eval=last_eval or None)


def write_dflash_card(out: Path, drafter_config, config, last_eval: dict) -> None:
    write_card(out, training=config_dict(config), last_eval=last_eval or None)
