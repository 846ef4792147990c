"""The Hub-ready SmolLM2 repos committed under ``upload/``: publishable, within budget, and a working pair."""

import json
from pathlib import Path

import pytest
from transformers import AutoTokenizer

from dels_hub import heads, tokenizer_fingerprint
from dels_hub.generation.loading import load_dflash, load_head
from dels_hub.hub import check_repo
from dels_hub.proving_ground import SMOLLM2_DRAFTERS, SMOLLM2_HEAD, smollm2_location

MEGABYTE = 1_000_000
BUDGETS = {**{path: 25 * MEGABYTE for path in SMOLLM2_DRAFTERS.values()}, SMOLLM2_HEAD: 15 * MEGABYTE}
STAGED = [path for path in BUDGETS if path.is_dir()]

pytestmark = pytest.mark.skipif(not STAGED, reason="no SmolLM2 repo staged under upload/ yet")


@pytest.mark.parametrize("repo", STAGED, ids=lambda path: path.name)
def test_staged_repo_is_publishable_and_within_budget(repo):
    report = check_repo(repo)  # a card with metadata, safetensors only, loads strictly with from_pretrained
    assert report["kind"] == ("head" if repo == SMOLLM2_HEAD else "dflash")
    size = sum(path.stat().st_size for path in repo.iterdir() if path.is_file())
    assert size <= BUDGETS[repo], f"{repo.name}: {size / MEGABYTE:.1f} MB over {BUDGETS[repo] / MEGABYTE:.0f} MB"
    assert json.loads((repo / "config.json").read_text())["dtype"] == "bfloat16"


def test_staged_head_pairs_with_the_smollm2_tokenizer_and_every_staged_drafter():
    if not SMOLLM2_HEAD.is_dir():
        pytest.skip("no head staged")
    directory, gguf = smollm2_location()
    tokenizer = AutoTokenizer.from_pretrained(directory, **gguf)
    head = load_head(str(SMOLLM2_HEAD))
    assert head.config.tokenizer_fingerprint["sha256"] == tokenizer_fingerprint(tokenizer)["sha256"]  # check_head
    for drafter_dir in SMOLLM2_DRAFTERS.values():
        if drafter_dir.is_dir():
            drafter = load_dflash(str(drafter_dir))
            assert drafter.config.block_size <= head.config.block_size
            assert drafter.config.vocab_size == len(tokenizer)


def test_staged_head_ships_the_package_remote_code():
    """The head repo carries its modeling/config files for ``trust_remote_code`` users without dels_hub; they
    must be the package's own, not a drifted copy."""
    if not SMOLLM2_HEAD.is_dir():
        pytest.skip("no head staged")
    package = Path(heads.__file__).parent
    for name in ("modeling_local_head.py", "configuration_local_head.py"):
        assert (SMOLLM2_HEAD / name).read_text() == (package / name).read_text(), name
