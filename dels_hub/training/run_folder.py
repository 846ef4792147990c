"""A training output folder belongs to one run, and a run resumes only its own checkpoints.

The run's configuration is written to ``training_config.json`` before the first step and snapshotted into every
checkpoint. Before anything loads, ``claim_output_folder`` decides what this run may do with the folder:

- an empty or missing folder, or one whose ``training_config.json`` is this run's: train (and resume the newest
  readable checkpoint, if ``resume``);
- a checkpoint written with another configuration: refused, naming the keys that differ (to continue those
  weights under a new schedule, start a new folder with ``init_from``);
- any other model, card, log or checkpoint in the folder: refused, naming the files;
- ``overwrite``: start from scratch; the old checkpoints and log are deleted when training starts.

A damaged newest checkpoint is named in a warning and the previous one is used.
"""

import dataclasses
import json
import warnings
from pathlib import Path

from ..errors import DamagedFileError, OutputFolderError, ResumeConfigError
from ..files import check_safetensors
from .recipe import config_dict

CHECKPOINTS = "checkpoints"
LOG_FILE = "train_log.jsonl"
CONFIG_FILE = "training_config.json"
# What a run writes into its folder; any of them from another run is refused unless overwrite.
RUN_FILES = ("config.json", "model.safetensors", "adapter", "adapter_config.json", "adapter_model.safetensors",
             "README.md", LOG_FILE, CONFIG_FILE, CHECKPOINTS)
# Settings that change where and how often a run reports, not what it trains: they may differ on resume.
BOOKKEEPING = ("output_dir", "resume", "overwrite", "log_every", "eval_every", "save_every", "keep_checkpoints",
               "feature_cache")


def run_settings(config) -> dict:
    """The settings that define a run's trained weights, as JSON would store them."""
    settings = json.loads(json.dumps(config_dict(config), default=str))
    return {key: value for key, value in settings.items() if key not in BOOKKEEPING}


def differences(stored: dict, config) -> list[str]:
    """``key: stored -> now`` for every run setting that differs. A key that an older run did not store had its
    default then, so ``config`` must hold the default too."""
    defaults = {f.name: f.default if f.default is not dataclasses.MISSING else f.default_factory()
                for f in dataclasses.fields(config)}
    found = []
    for key, value in run_settings(config).items():
        before = stored.get(key, json.loads(json.dumps(defaults[key], default=str)))
        if before != value:
            found.append(f"{key}: {before!r} -> {value!r}")
    return found


def checkpoints(out: Path) -> list[Path]:
    """Checkpoint files, oldest first."""
    return sorted((Path(out) / CHECKPOINTS).glob("step-*.safetensors"))


def readable_checkpoint(out: Path) -> tuple[Path, dict] | None:
    """The newest checkpoint whose file is whole and its stored config; a damaged newer one is named in a
    warning and skipped. ``DamagedFileError`` if there are checkpoints and none is readable."""
    found = checkpoints(out)
    for path in reversed(found):
        try:
            stored = json.loads(check_safetensors(path)["dels_hub"])["config"]
        except DamagedFileError as error:
            problem = str(error)
        except (KeyError, TypeError, json.JSONDecodeError):
            problem = f"{path} has no dels_hub training metadata"
        else:
            return path, stored
        warnings.warn(f"skipping a damaged checkpoint: {problem}; trying the previous one", stacklevel=2)
    if found:
        raise DamagedFileError(f"every checkpoint in {Path(out) / CHECKPOINTS} is damaged: {[str(p) for p in found]}; "
                               "move them away to start again, or pass --overwrite")
    return None


def claim_output_folder(config) -> Path | None:
    """Check, before any work, that this run may write into ``config.output_dir``; returns the checkpoint to
    resume from, or None. Raises ``ResumeConfigError`` or ``OutputFolderError`` (see the module docstring)."""
    out = Path(config.output_dir)
    if config.overwrite or not out.exists():
        return None
    if not out.is_dir():
        raise OutputFolderError(f"output_dir {str(out)!r} is a file, not a folder")
    own = _is_own_folder(out, config)
    if config.resume:
        found = readable_checkpoint(out)
        if found is not None:
            path, stored = found
            changed = differences(stored, config)
            if changed:
                raise ResumeConfigError(
                    f"{path} was trained with another configuration ({'; '.join(changed)}): resuming would mix "
                    f"the two. Rerun with its settings to resume, pass --overwrite to start again in {str(out)!r}, "
                    f"or continue its weights under a new schedule in a new folder with --init-from {str(out)!r}"
                )
            return path
    present = sorted(name for name in RUN_FILES if (out / name).exists())
    if present and not own:
        raise OutputFolderError(
            f"output_dir {str(out)!r} already holds another run's files {present}: choose a new folder, or pass "
            "--overwrite to replace them"
        )
    if present and not config.resume and checkpoints(out):
        raise OutputFolderError(
            f"output_dir {str(out)!r} holds this run's checkpoints and --no-resume would train over them: resume "
            "it, or pass --overwrite to start again"
        )
    return None


def _is_own_folder(out: Path, config) -> bool:
    """The folder's ``training_config.json`` records this run's settings."""
    path = out / CONFIG_FILE
    if not path.is_file():
        return False
    try:
        stored = json.loads(path.read_text())
    except json.JSONDecodeError:
        return False
    return isinstance(stored, dict) and not differences(stored, config)
