"""The DeLS head for vLLM, the parts that need no vLLM: the drafter folder the plugin's architecture is named in,
and the fused logits its ``compute_logits`` returns (vLLM itself runs them in tests/test_engine.py)."""

import json

import pytest
import torch

from dels_hub.errors import FusionScheduleError
from dels_hub.fingerprint import tokenizer_fingerprint
from dels_hub.generation.drafting import propose
from dels_hub.heads.ngram import NGramHead
from dels_hub.heads.ngram_head import NGramLocalHead
from dels_hub.loading import load_head
from dels_hub.sampling import Warping
from dels_hub.vllm_plugin import (
    ARCHITECTURE,
    FUSION_KEY,
    BlockFusion,
    fused_draft_logits,
    write_drafter_folder,
)

from conftest import VOCAB, load_script, make_dflash, make_head, make_tokenizer


@pytest.fixture(scope="module")
def parts(tmp_path_factory):
    root = tmp_path_factory.mktemp("plugin")
    make_dflash(block_size=8).save_pretrained(root / "dflash")
    make_head(make_tokenizer(), alpha=0.5, beta=0.3).save_pretrained(root / "head")
    return root


def engine_script():
    """scripts/vllm_generate.py, which holds the reference chain that the engine test checks vLLM's worker with."""
    return load_script("vllm_generate")


HEAD_VOCAB = VOCAB - 4  # conftest's tokenizer (and so its head) has fewer ids than the target's embedding rows


def ngram_head_folder(root):
    """An n-gram head that reads 2 tokens before its block in the loop; the plugin sees the anchors only, so under
    vLLM it reads the block alone (what ``fused_chain`` computes)."""
    texts = torch.randint(0, HEAD_VOCAB, (6, 40), generator=torch.Generator().manual_seed(3))
    counted = NGramHead.fit([(text, torch.ones(len(text), dtype=torch.bool)) for text in texts], HEAD_VOCAB, 4)
    # No pure prefix: the first slot reads the anchor's bigram, which these random texts have seen for most anchors.
    head = NGramLocalHead.from_ngram(counted, top_k=4, min_count=1, alpha=0.5, beta=0.3, pure_prefix_len=0,
                                     context_tokens=2, tokenizer_fingerprint=tokenizer_fingerprint(make_tokenizer()))
    head.save_pretrained(root / "ngram-head")
    return root / "ngram-head"


@torch.no_grad()
@pytest.mark.parametrize("kind", ["gru", "ngram"])
def test_the_plugins_logits_are_the_fused_chain_of_fuse_logits(parts, tmp_path, kind):
    head = parts / "head" if kind == "gru" else ngram_head_folder(tmp_path)
    folder = write_drafter_folder(parts / "dflash", head, 7, folder=tmp_path / "dels")
    fusion = BlockFusion.from_folder(folder, 7, "cpu")
    generator = torch.Generator().manual_seed(0)
    requests = 4
    drafter = torch.randn(requests * 7, VOCAB, generator=generator) * 3  # vLLM's rows: request-major, k per request
    anchors = torch.randint(0, HEAD_VOCAB, (requests,), generator=generator)
    fused = fused_draft_logits(fusion, drafter, anchors).view(requests, 7, VOCAB)
    blocks = drafter.view(requests, 7, VOCAB)
    fused_chain = engine_script().fused_chain
    torch.testing.assert_close(fused, fused_chain(fusion, blocks, anchors))
    # The GRU head's pure prefix takes the drafter alone; after it, the head moves the logits.
    if kind == "gru":
        torch.testing.assert_close(fused[:, 0], blocks[:, 0])
    assert (fused[:, 1:] - blocks[:, 1:]).abs().max() > 0.1
    # Negative control: the same chain read from other anchors differs, so the comparison above can fail.
    assert not torch.allclose(fused, fused_chain(fusion, blocks, (anchors + 1) % HEAD_VOCAB))


def test_without_a_head_the_fused_logits_are_the_drafters():
    drafter = torch.randn(2, 5, VOCAB, generator=torch.Generator().manual_seed(1))
    fused = torch.empty(drafter.shape)
    drafts, _ = propose(drafter, torch.tensor([3, 4]), Warping(), fused=fused)
    torch.testing.assert_close(fused, drafter)
    assert torch.equal(drafts, fused.argmax(-1))


def test_recorded_anchors_are_checked_against_the_answer():
    anchors_follow = engine_script().anchors_follow
    answer = [5, 9, 9, 2, 7, 1, 8, 3]
    assert anchors_follow([5, 2, 1, 3], answer, k=2)  # blocks that committed 3, 2 and 2 tokens
    assert anchors_follow([5, 9], answer, k=2)
    assert not anchors_follow([16, 2], answer, k=2)  # e.g. the mask token read as the anchor
    assert not anchors_follow([5, 3], answer, k=2)  # a jump longer than one block
    assert not anchors_follow([5, 1, 9], answer, k=2)  # out of order


def test_the_drafter_folder_names_the_plugin_and_carries_the_head(parts, tmp_path):
    folder = write_drafter_folder(parts / "dflash", parts / "head", 7, folder=tmp_path / "dels")
    config = json.loads((folder / "config.json").read_text())
    assert config["architectures"] == [ARCHITECTURE]
    assert config["dflash_config"] == json.loads((parts / "dflash" / "config.json").read_text())["dflash_config"]
    assert config[FUSION_KEY] == {"alpha": 0.5, "beta": 0.3, "pure_prefix_len": 1, "head": "head"}
    # Written again to the same folder, a DeLS drafter folder is replaced (here with other fusion settings).
    write_drafter_folder(parts / "dflash", parts / "head", 7, alpha=0.9, folder=tmp_path / "dels")
    assert json.loads((folder / "config.json").read_text())[FUSION_KEY]["alpha"] == 0.9
    weights = folder / "model.safetensors"
    assert weights.is_symlink() and weights.resolve() == (parts / "dflash" / "model.safetensors").resolve()
    for name, tensor in load_head(str(folder / "head")).state_dict().items():
        assert torch.equal(tensor, load_head(str(parts / "head")).state_dict()[name])

    overridden = write_drafter_folder(parts / "dflash", parts / "head", 5, alpha=[0.1, 0.2, 0.3, 0.4],
                                      beta=0.0, pure_prefix_len=1, folder=tmp_path / "overridden")
    fusion = BlockFusion.from_folder(overridden, 5, "cpu")
    assert fusion.alpha.tolist() == pytest.approx([0.0, 0.1, 0.2, 0.3, 0.4])
    assert fusion.beta.tolist() == [0.0] * 5


def test_a_bad_schedule_or_a_used_folder_fails_before_anything_is_written(parts, tmp_path):
    with pytest.raises(FusionScheduleError, match="alpha schedule has 2 values but 6"):
        write_drafter_folder(parts / "dflash", parts / "head", 7, alpha=[0.1, 0.2], folder=tmp_path / "short")
    assert not (tmp_path / "short").exists()
    used = tmp_path / "used"
    used.mkdir()
    (used / "notes.txt").write_text("mine")
    with pytest.raises(FileExistsError, match="not empty"):
        write_drafter_folder(parts / "dflash", parts / "head", 7, folder=used)
    assert [path.name for path in used.iterdir()] == ["notes.txt"]
    assert not [path for path in tmp_path.iterdir() if path.name.startswith(".")]  # no staging folder left


def test_the_default_folder_is_reused_for_the_same_contents_only(parts, tmp_path, monkeypatch):
    monkeypatch.setenv("DELS_HUB_CACHE", str(tmp_path / "cache"))
    first = write_drafter_folder(parts / "dflash", parts / "head", 7)
    assert first.parent == tmp_path / "cache" / "vllm"
    assert write_drafter_folder(parts / "dflash", parts / "head", 7) == first
    assert write_drafter_folder(parts / "dflash", parts / "head", 7, alpha=0.9) != first
    # A head retrained in the same folder gets a new drafter folder, never the old head.
    make_head(make_tokenizer(), seed=7, alpha=0.5, beta=0.3).save_pretrained(tmp_path / "head")
    retrained = write_drafter_folder(parts / "dflash", tmp_path / "head", 7)
    make_head(make_tokenizer(), seed=8, alpha=0.5, beta=0.3).save_pretrained(tmp_path / "head")
    assert write_drafter_folder(parts / "dflash", tmp_path / "head", 7) != retrained
    # A mask embedding shipped beside the drafter's weights is linked too (vLLM reads it from the folder).
    drafter = tmp_path / "dflash-with-mask"
    drafter.mkdir()
    for name in ("config.json", "model.safetensors"):
        (drafter / name).write_bytes((parts / "dflash" / name).read_bytes())
    (drafter / "mask_embedding.pt").write_bytes(b"vLLM's file, which dels_hub never reads")
    assert (write_drafter_folder(drafter, parts / "head", 7) / "mask_embedding.pt").is_symlink()
