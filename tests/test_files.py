"""Writes that never leave half a file, and damaged safetensors files named by their path."""

import os

import pytest
import torch
from safetensors.torch import save_file

from dels_hub.errors import DamagedFileError
from dels_hub.files import check_safetensors, save_pretrained_atomic, write_text_atomic

from conftest import make_dflash


class DiskFull(OSError):
    pass


def test_a_failed_text_write_leaves_the_old_file_and_no_temporary(tmp_path, monkeypatch):
    path = tmp_path / "README.md"
    path.write_text("what the user wrote")

    def write_half(self, text, **kwargs):
        open(self, "w").write(text[: len(text) // 2])
        raise DiskFull("no space left on device")

    monkeypatch.setattr("pathlib.Path.write_text", write_half)
    with pytest.raises(DiskFull):
        write_text_atomic(path, "the new card " * 100)
    monkeypatch.undo()
    assert path.read_text() == "what the user wrote"
    assert [p.name for p in tmp_path.iterdir()] == ["README.md"]
    path.chmod(0o640)
    write_text_atomic(path, "the new card")  # and a write that succeeds replaces it, keeping its mode
    assert path.read_text() == "the new card" and path.stat().st_mode & 0o777 == 0o640
    fresh = write_text_atomic(tmp_path / "config.json", "{}")  # a new file: the mode open() would give it
    umask = os.umask(0)
    os.umask(umask)
    assert fresh.stat().st_mode & 0o777 == 0o666 & ~umask


def test_a_failed_model_save_leaves_the_saved_model(tmp_path):
    folder = tmp_path / "drafter"
    make_dflash(seed=1).save_pretrained(folder)
    before = {p.name: p.read_bytes() for p in folder.iterdir()}

    class FailsMidway:
        def save_pretrained(self, directory, **kwargs):
            make_dflash(seed=2).save_pretrained(directory)
            raise DiskFull("no space left on device")

    with pytest.raises(DiskFull):
        save_pretrained_atomic(FailsMidway(), folder)
    assert {p.name: p.read_bytes() for p in folder.iterdir()} == before
    assert [p.name for p in tmp_path.iterdir()] == ["drafter"]  # the staging folder is gone
    save_pretrained_atomic(make_dflash(seed=2), folder)
    assert {p.name: p.read_bytes() for p in folder.iterdir()}["model.safetensors"] != before["model.safetensors"]


@pytest.mark.parametrize("damage", [lambda data: data[:-10], lambda data: b"garbage" + data[7:], lambda data: b""])
def test_a_damaged_safetensors_file_is_named(tmp_path, damage):
    path = tmp_path / "weights.safetensors"
    save_file({"w": torch.zeros(64)}, str(path), metadata={"k": "v"})
    assert check_safetensors(path) == {"k": "v"}
    path.write_bytes(damage(path.read_bytes()))
    with pytest.raises(DamagedFileError, match=f"{path} is damaged"):
        check_safetensors(path)
