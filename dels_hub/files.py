"""Files that are never half-written, and damaged files that are named.

Every model, card and config dels_hub writes goes to a temporary file beside its destination and is then renamed
over it (``os.replace`` is atomic on POSIX and Windows): a kill or a full disk mid-write leaves the old file or the
new one, never a mix. A safetensors file is checked by reading its header (cheap: no tensor is read), which catches
truncation and garbage, so the error can name the file rather than surface from deep inside a loader.
"""

import contextlib
import os
import shutil
import tempfile
from pathlib import Path

from safetensors import SafetensorError, safe_open

from .errors import DamagedFileError


@contextlib.contextmanager
def replaced_atomically(path):
    """Yields a temporary path beside ``path`` to write; once written it is renamed over ``path``. If the write
    fails, the temporary file is removed and ``path`` is left as it was."""
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    handle, temporary = tempfile.mkstemp(dir=path.parent, prefix=f".{path.name}.", suffix=".tmp")
    os.close(handle)
    # mkstemp makes the file private (0600); the result gets the mode the file had, else the one open() would give.
    os.chmod(temporary, path.stat().st_mode & 0o777 if path.exists() else 0o666 & ~_umask())
    try:
        yield Path(temporary)
        os.replace(temporary, path)
    finally:
        Path(temporary).unlink(missing_ok=True)


def _umask() -> int:
    mask = os.umask(0)
    os.umask(mask)
    return mask


def write_text_atomic(path, text: str) -> Path:
    """Write ``text`` (UTF-8) to ``path`` through a temporary sibling; returns ``path``."""
    with replaced_atomically(path) as temporary:
        temporary.write_text(text, encoding="utf-8")
    return Path(path)


def save_pretrained_atomic(model, folder, **kwargs) -> None:
    """``model.save_pretrained`` into a temporary folder beside ``folder``, then each file renamed into it."""
    folder = Path(folder)
    folder.mkdir(parents=True, exist_ok=True)
    staging = Path(tempfile.mkdtemp(dir=folder.parent, prefix=f".{folder.name}.saving-"))
    try:
        model.save_pretrained(staging, **kwargs)
        for source in sorted(staging.rglob("*")):
            if source.is_file():
                destination = folder / source.relative_to(staging)
                destination.parent.mkdir(parents=True, exist_ok=True)
                os.replace(source, destination)
    finally:
        shutil.rmtree(staging, ignore_errors=True)


def check_safetensors(path) -> dict[str, str]:
    """The metadata of a safetensors file whose header is whole; ``DamagedFileError`` naming it otherwise."""
    try:
        with safe_open(str(path), framework="pt") as f:
            return f.metadata() or {}
    except (SafetensorError, OSError) as error:
        raise DamagedFileError(f"{path} is damaged (truncated or not a safetensors file): {error}") from error


def check_safetensors_folder(folder) -> None:
    """Check the header of every ``*.safetensors`` file directly in ``folder``."""
    for path in sorted(Path(folder).glob("*.safetensors")):
        check_safetensors(path)
