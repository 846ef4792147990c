"""The DeLS head for vLLM, the parts that need no vLLM: the drafter folder the plugin's architecture is named in,
and the fused logits its ``compute_logits`` returns (vLLM itself runs them in tests/test_engine.py)."""

import json

import pytest
import torch

from dels_hub.errors import FusionScheduleError
from dels_hub.fusion import fuse_logits
from dels_hub.loading import load_head
from dels_hub.vllm_plugin import (
    ARCHITECTURE,
    FUSION_KEY,
    BlockFusion,
    fused_draft_logits,
    write_drafter_folder,
)

from conftest import VOCAB, make_dflash, make_head, make_tokenizer


@pytest.fixture(scope="module")
def parts(tmp_path_factory):
    root = tmp_path_factory.mktemp("plugin")
    make_dflash(block_size=8).save_pretrained(root / "dflash")
    make_head(make_tokenizer(), alpha=0.5, beta=0.3).save_pretrained(root / "head")
    return root


def chain_by_hand(fusion: BlockFusion, drafter: torch.Tensor, anchors: torch.Tensor) -> torch.Tensor:
    """The fused greedy chain written out with ``fuse_logits``: the head reads the anchor, then each argmax."""
    head, blocks = fusion.head, []
    head_logits, state = head.step(anchors, head.initial_state(anchors.shape[0]))
    for i in range(fusion.num_drafts):
        blocks.append(fuse_logits(drafter[:, i], head_logits, fusion.log_prior, fusion.alpha[i], fusion.beta[i]))
        head_logits, state = head.step(blocks[-1].argmax(-1), state)
    return torch.stack(blocks, dim=1)


@torch.no_grad()
def test_the_plugins_logits_are_the_fused_chain_of_fuse_logits(parts, tmp_path):
    folder = write_drafter_folder(parts / "dflash", parts / "head", 7, folder=tmp_path / "dels")
    fusion = BlockFusion.from_folder(folder, 7, "cpu")
    generator = torch.Generator().manual_seed(0)
    requests = 4
    drafter = torch.randn(requests * 7, VOCAB, generator=generator) * 3  # vLLM's rows: request-major, k per request
    anchors = torch.randint(0, VOCAB - 4, (requests,), generator=generator)
    fused = fused_draft_logits(fusion, drafter, anchors)
    expected = chain_by_hand(fusion, drafter.view(requests, 7, VOCAB), anchors)
    torch.testing.assert_close(fused.view(requests, 7, VOCAB), expected)
    # The pure prefix takes the drafter alone; after it the head moves the logits (the control: a fusion that did
    # nothing would fail the comparison above only if the chain changed, so check it changes them).
    torch.testing.assert_close(fused.view(requests, 7, VOCAB)[:, 0], drafter.view(requests, 7, VOCAB)[:, 0])
    assert (fused.view(requests, 7, VOCAB)[:, 1:] - drafter.view(requests, 7, VOCAB)[:, 1:]).abs().max() > 0.1
    # Negative control: the head conditioned on other anchors gives other logits, so the comparison can fail.
    other = chain_by_hand(fusion, drafter.view(requests, 7, VOCAB), (anchors + 1) % (VOCAB - 4))
    assert not torch.allclose(fused.view(requests, 7, VOCAB), other)


def test_the_drafter_folder_names_the_plugin_and_carries_the_head(parts, tmp_path):
    folder = write_drafter_folder(parts / "dflash", parts / "head", 7, folder=tmp_path / "dels")
    config = json.loads((folder / "config.json").read_text())
    assert config["architectures"] == [ARCHITECTURE]
    assert config["dflash_config"] == json.loads((parts / "dflash" / "config.json").read_text())["dflash_config"]
    assert config[FUSION_KEY] == {"alpha": 0.5, "beta": 0.3, "pure_prefix_len": 1, "head": "head"}
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


def test_the_default_folder_is_reused_for_the_same_pairing(parts, tmp_path, monkeypatch):
    monkeypatch.setenv("DELS_HUB_CACHE", str(tmp_path))
    first = write_drafter_folder(parts / "dflash", parts / "head", 7)
    assert first.parent == tmp_path / "vllm"
    assert write_drafter_folder(parts / "dflash", parts / "head", 7) == first
    assert write_drafter_folder(parts / "dflash", parts / "head", 7, alpha=0.9) != first
