"""The Hub-ready SmolLM2 repos committed under ``upload/``: publishable, within budget, and a working pair."""

import json
from pathlib import Path

import pytest
import torch
from transformers import AutoTokenizer

from dels_hub import check_compatibility, heads, tokenizer_fingerprint
from dels_hub.checks import check_head
from dels_hub.errors import IncompatibleTokenizerError
from dels_hub.families import get_family
from dels_hub.hub import check_repo
from dels_hub.loading import load_dflash, load_head
from dels_hub.proving_ground import SMOLLM2_DRAFTERS, SMOLLM2_HEADS, UPLOAD_DIR, smollm2_location

MEGABYTE = 1_000_000
SMOLLM2_GRU_HEAD, SMOLLM2_NGRAM_HEAD = SMOLLM2_HEADS["gru"], SMOLLM2_HEADS["ngram"]  # trained; counted
QWEN3_HEAD = UPLOAD_DIR / "qwen3-dels-head"
CODE_ADAPTER = UPLOAD_DIR / "smollm2-dels-head-code-lora"  # a PEFT adapter over SMOLLM2_GRU_HEAD
QWEN3_NGRAM_HEAD = UPLOAD_DIR / "qwen3-ngram-head"
QWEN35_NGRAM_HEAD = UPLOAD_DIR / "qwen3.5-ngram-head"
BUDGETS = {
    **{path: 25 * MEGABYTE for path in SMOLLM2_DRAFTERS.values()},
    SMOLLM2_GRU_HEAD: 15 * MEGABYTE,
    QWEN3_HEAD: 50 * MEGABYTE,
    CODE_ADAPTER: 15 * MEGABYTE,
    SMOLLM2_NGRAM_HEAD: 64 * MEGABYTE,  # the budget per head repo
    QWEN3_NGRAM_HEAD: 64 * MEGABYTE,
    QWEN35_NGRAM_HEAD: 64 * MEGABYTE,
}
KINDS = {SMOLLM2_GRU_HEAD: "head", QWEN3_HEAD: "head", CODE_ADAPTER: "adapter", SMOLLM2_NGRAM_HEAD: "head",
         QWEN3_NGRAM_HEAD: "head", QWEN35_NGRAM_HEAD: "head"}
STAGED = [path for path in BUDGETS if path.is_dir()]

pytestmark = pytest.mark.skipif(not STAGED, reason="no repo staged under upload/ yet")


@pytest.fixture
def elsewhere(monkeypatch, tmp_path):
    """The staged adapter names its base head by Hub id, ``ORG/smollm2-dels-head``, as a published adapter does, and
    finds it staged beside itself (the sibling folder whose card has that repo_id) from any working directory."""
    monkeypatch.chdir(tmp_path)


@pytest.mark.parametrize("repo", STAGED, ids=lambda path: path.name)
def test_staged_repo_is_publishable_and_within_budget(repo, elsewhere):
    report = check_repo(repo)  # a card with metadata, safetensors only, loads strictly with from_pretrained
    assert report["kind"] == KINDS.get(repo, "dflash")
    size = sum(path.stat().st_size for path in repo.iterdir() if path.is_file())
    assert size <= BUDGETS[repo], f"{repo.name}: {size / MEGABYTE:.1f} MB over {BUDGETS[repo] / MEGABYTE:.0f} MB"
    if report["kind"] != "adapter":
        assert json.loads((repo / "config.json").read_text())["dtype"] == "bfloat16"


@pytest.mark.parametrize("location", [SMOLLM2_GRU_HEAD, SMOLLM2_NGRAM_HEAD], ids=lambda path: path.name)
def test_staged_head_pairs_with_the_smollm2_tokenizer_and_every_staged_drafter(location):
    if not location.is_dir():
        pytest.skip("no head staged")
    directory, gguf = smollm2_location()
    tokenizer = AutoTokenizer.from_pretrained(directory, **gguf)
    head = load_head(str(location))
    assert head.config.tokenizer_fingerprint["sha256"] == tokenizer_fingerprint(tokenizer)["sha256"]  # check_head
    for drafter_dir in SMOLLM2_DRAFTERS.values():
        if drafter_dir.is_dir():
            drafter = load_dflash(str(drafter_dir))
            assert drafter.config.block_size <= head.config.block_size
            assert drafter.config.vocab_size == len(tokenizer)


@pytest.mark.parametrize("head", [SMOLLM2_GRU_HEAD, QWEN3_HEAD], ids=lambda path: path.name)
def test_staged_head_ships_the_package_remote_code(head):
    """The head repo carries its modeling/config files for ``trust_remote_code`` users without dels_hub; they
    must be the package's own, not a drifted copy."""
    if not head.is_dir():
        pytest.skip("not staged")
    package = Path(heads.__file__).parent
    for name in ("modeling_local_head.py", "configuration_local_head.py"):
        assert (head / name).read_text() == (package / name).read_text(), name


@pytest.mark.parametrize("location", [QWEN3_HEAD, QWEN3_NGRAM_HEAD], ids=lambda path: path.name)
@pytest.mark.parametrize("size", ["8b", "4b"])
def test_staged_qwen3_head_pairs_with_qwen3_and_its_zlab_drafter(size, location):
    """The real configs of Qwen/Qwen3-{8B,4B} and z-lab/Qwen3-{8B,4B}-DFlash-b16, built on the meta device."""
    if not location.is_dir():
        pytest.skip("not staged")
    from test_families import meta_qwen3

    target, drafter = meta_qwen3(size)
    head = load_head(str(location))
    check_compatibility(target, drafter, head, get_family("qwen3").build_tokenizer())  # raises on any mismatch
    assert drafter.config.block_size <= head.config.block_size


@pytest.mark.parametrize("location", [QWEN3_HEAD, QWEN3_NGRAM_HEAD], ids=lambda path: path.name)
def test_staged_qwen3_head_is_refused_by_smollm2(location):
    if not location.is_dir():
        pytest.skip("not staged")
    from test_families import meta_llama

    smollm2 = meta_llama(49152, 576, 30, 9, 3, 1536)  # SmolLM2-135M-Instruct, on the meta device
    directory, gguf = smollm2_location()
    with pytest.raises(IncompatibleTokenizerError, match="family 'qwen3'"):
        check_head(smollm2, load_head(str(location)), AutoTokenizer.from_pretrained(directory, **gguf))


def test_staged_qwen35_head_carries_its_familys_fingerprint_and_is_refused_by_qwen3():
    """Qwen3.5 and Qwen3 tokenizers differ (248,077 against 151,669 ids): a head of one family never pairs with the
    other's target."""
    if not QWEN35_NGRAM_HEAD.is_dir():
        pytest.skip("not staged")
    from test_families import meta_qwen3

    head = load_head(str(QWEN35_NGRAM_HEAD))
    family = get_family("qwen3.5")
    assert head.config.tokenizer_fingerprint["sha256"] == tokenizer_fingerprint(family.build_tokenizer())["sha256"]
    target, _ = meta_qwen3("8b")
    with pytest.raises(IncompatibleTokenizerError, match="family 'qwen3.5'"):
        check_head(target, head, get_family("qwen3").build_tokenizer())


def test_staged_adapter_is_its_base_head_adapted(elsewhere):
    """head=ADAPTER loads the base head named in adapter_config.json and merges the code LoRA into it."""
    if not CODE_ADAPTER.is_dir():
        pytest.skip("not staged")
    base, adapted = load_head(str(SMOLLM2_GRU_HEAD)), load_head(str(CODE_ADAPTER))
    assert adapted.config.tokenizer_fingerprint == base.config.tokenizer_fingerprint
    assert not torch.equal(adapted.output_proj.weight, base.output_proj.weight)  # the LoRA moved the output
