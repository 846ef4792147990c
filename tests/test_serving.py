"""Serving on vLLM: the speculative config, the pairing check before vLLM starts, and ``dels-hub serve``."""

import json
import shlex

import pytest

from dels_hub import cli
from dels_hub.errors import (
    BlockSizeError,
    HiddenSizeMismatchError,
    IncompatibleTokenizerError,
    ModelNotFoundError,
    ServingError,
)
from dels_hub.serving import check_pairing, vllm_serve_command, vllm_speculative_config

from conftest import make_dflash, make_head, make_target, make_tokenizer


@pytest.fixture(scope="module")
def parts(tmp_path_factory):
    """A tiny target (with its tokenizer), a matching drafter, a mismatched one and a head, saved as repos."""
    root = tmp_path_factory.mktemp("serving")
    tokenizer = make_tokenizer()
    make_target("qwen3").save_pretrained(root / "target")
    tokenizer.save_pretrained(root / "target")
    make_dflash(block_size=8).save_pretrained(root / "dflash")
    wrong = make_dflash(block_size=8)
    wrong.config.hidden_size = 32  # a drafter for another target: only its config is read
    wrong.config.save_pretrained(root / "wrong")
    make_head(tokenizer).save_pretrained(root / "head")
    return {name: str(root / name) for name in ("target", "dflash", "wrong", "head")}


def test_the_speculative_config_is_what_vllm_takes(parts):
    assert vllm_speculative_config(parts["dflash"]) == {"method": "dflash", "model": parts["dflash"],
                                                        "num_speculative_tokens": 7}
    assert vllm_speculative_config(parts["dflash"], num_speculative_tokens=3)["num_speculative_tokens"] == 3
    with pytest.raises(BlockSizeError, match=r"integer in 1..7 .* got 8"):
        vllm_speculative_config(parts["dflash"], num_speculative_tokens=8)
    with pytest.raises(ServingError, match="give a head"):
        vllm_speculative_config(parts["dflash"], alpha=0.5)
    with pytest.raises(ModelNotFoundError):
        vllm_speculative_config(parts["dflash"] + "-missing")


def test_vllms_dynamic_speculation_is_passed_through_and_checked_first(parts, capsys):
    config = vllm_speculative_config(parts["dflash"], per_batch_size=[(1, 4, 7), (5, 256, 0)])
    assert config["num_speculative_tokens_per_batch_size"] == [[1, 4, 7], [5, 256, 0]]
    for bad, message in (([(2, 4, 7)], "start at batch size 1"), ([(1, 4, 9)], "asks for 9 drafts; expected 0..7"),
                         ([(1, 4, 3), (4, 8, 2)], "start at batch size 5"), ([], "non-empty list"),
                         ([(1, 4)], "is not \\[first batch size")):
        with pytest.raises(ServingError, match=message):
            vllm_speculative_config(parts["dflash"], per_batch_size=bad)
    assert cli.main(["serve", parts["target"], "--dflash", parts["dflash"], "--drafts-per-batch-size",
                     "[[1, 8, 7], [9, 64, 3]]", "--dry-run"]) == 0
    printed = json.loads(shlex.split(capsys.readouterr().out)[-1])
    assert printed["num_speculative_tokens_per_batch_size"] == [[1, 8, 7], [9, 64, 3]]
    with pytest.raises(ServingError, match="needs a fixed number of drafts with a head"):
        vllm_speculative_config(parts["dflash"], parts["head"], per_batch_size=[(1, 4, 7)])


def test_a_bad_pairing_fails_before_vllm_starts(parts):
    check_pairing(parts["target"], parts["dflash"])  # the same checks as from_pretrained, on meta tensors
    with pytest.raises(HiddenSizeMismatchError):
        check_pairing(parts["target"], parts["wrong"])
    with pytest.raises(HiddenSizeMismatchError):
        vllm_serve_command(parts["target"], parts["wrong"])


def test_serve_dry_run_prints_the_vllm_command(parts, capsys, monkeypatch):
    argv = ["serve", parts["target"], "--dflash", parts["dflash"], "--num-speculative-tokens", "5", "--dry-run",
            "--", "--port", "8001", "--tensor-parallel-size", "2"]
    assert cli.main(argv) == 0
    command = shlex.split(capsys.readouterr().out.strip())
    assert command[:3] == ["vllm", "serve", parts["target"]]
    assert json.loads(command[command.index("--speculative-config") + 1])["num_speculative_tokens"] == 5
    assert command[-4:] == ["--port", "8001", "--tensor-parallel-size", "2"]

    # Without `--`, a stray option is an error, not something passed on silently.
    with pytest.raises(SystemExit) as exit_:
        cli.main(["serve", parts["target"], "--dflash", parts["dflash"], "--port", "8001"])
    assert exit_.value.code == 2
    assert cli.main(["serve", parts["target"], "--dflash", parts["dflash"], "--alpha", "0.5", "--dry-run"]) == 2
    assert "give a head" in capsys.readouterr().err

    monkeypatch.setenv("PATH", "")  # no vllm here: the error says how to get it
    assert cli.main(["serve", parts["target"], "--dflash", parts["dflash"]]) == 2
    assert "make engine" in capsys.readouterr().err


def test_serving_a_head_names_a_drafter_folder_for_the_plugin(parts, tmp_path, capsys):
    folder = tmp_path / "dels-drafter"
    argv = ["serve", parts["target"], "--dflash", parts["dflash"], "--head", parts["head"], "--alpha", "0.4",
            "--drafter-folder", str(folder), "--dry-run"]
    assert cli.main(argv) == 0
    command = shlex.split(capsys.readouterr().out.strip())
    config = json.loads(command[command.index("--speculative-config") + 1])
    assert config == {"method": "dflash", "model": str(folder), "num_speculative_tokens": 7}
    written = json.loads((folder / "config.json").read_text())
    assert written["architectures"] == ["DFlashDeLSDraftModel"] and written["dels_fusion"]["alpha"] == 0.4

    # A head for another tokenizer fails the pairing check before any folder is written.
    make_head(make_tokenizer(prefix="w")).save_pretrained(tmp_path / "foreign-head")
    with pytest.raises(IncompatibleTokenizerError):
        vllm_serve_command(parts["target"], parts["dflash"], str(tmp_path / "foreign-head"),
                           fusion={"folder": tmp_path / "never"})
    assert not (tmp_path / "never").exists()


def test_a_gguf_target_is_served_by_its_file_with_the_folders_tokenizer(parts):
    command = vllm_serve_command(parts["target"], parts["dflash"])
    assert "--tokenizer" not in command
    # The pairing check reads the GGUF through transformers; a folder without one fails before vLLM starts.
    with pytest.raises(OSError):
        vllm_serve_command(parts["target"], parts["dflash"], gguf_file="model.gguf")
