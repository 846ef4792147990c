"""DFlash drafter: z-lab config layouts, strict loading, on-disk format, and numerical parity."""

import importlib.util
import json
import os

import pytest
import torch
from safetensors.torch import load_file, save_file
from transformers import DynamicCache

from dels_hub import DFlashConfig, DFlashDraftModel, build_target_layer_ids
from dels_hub.errors import CheckpointKeysError
from dels_hub.loading import load_dflash

from conftest import HIDDEN, make_dflash

ZLAB_BASE = {
    "architectures": ["DFlashDraftModel"],
    "auto_map": {"AutoModel": "dflash.DFlashDraftModel"},
    "model_type": "qwen3",
    "hidden_size": HIDDEN,
    "intermediate_size": 128,
    "num_hidden_layers": 2,
    "num_attention_heads": 4,
    "num_key_value_heads": 2,
    "head_dim": 16,
    "rms_norm_eps": 1e-6,
    "max_position_embeddings": 512,
    "vocab_size": 96,
    "hidden_act": "silu",
    "attention_bias": False,
    "tie_word_embeddings": True,
    "dtype": "float32",
}


def write_zlab_checkpoint(path, config: dict, drop=(), extra=()):
    """A checkpoint in z-lab's layout: config.json + model.safetensors with un-prefixed keys."""
    os.makedirs(path, exist_ok=True)
    with open(os.path.join(path, "config.json"), "w") as f:
        json.dump(config, f)
    model = DFlashDraftModel(DFlashConfig(**{k: v for k, v in config.items() if k != "auto_map"}))
    state = {k: v.contiguous() for k, v in model.state_dict().items() if k not in drop}
    for key in extra:
        state[key] = torch.zeros(2, 2)
    save_file(state, os.path.join(path, "model.safetensors"))
    return model


def test_build_target_layer_ids_matches_reference_values():
    assert build_target_layer_ids(36, 5) == [1, 9, 17, 25, 33]
    assert build_target_layer_ids(32, 5) == [1, 8, 15, 22, 29]
    assert build_target_layer_ids(30, 1) == [15]


def test_old_layout_top_level_block_size_and_rope_theta(tmp_path):
    config = dict(ZLAB_BASE, block_size=16, num_target_layers=36, rope_theta=1_000_000, rope_scaling=None,
                  dflash_config={"mask_token_id": 95, "target_layer_ids": [1, 9, 17, 25, 33]})
    write_zlab_checkpoint(tmp_path, config)
    model = load_dflash(str(tmp_path))
    assert (model.block_size, model.mask_token_id) == (16, 95)
    assert model.target_layer_ids == [1, 9, 17, 25, 33]
    assert model.config.rope_parameters["rope_theta"] == 1_000_000
    assert model.fc.weight.shape == (HIDDEN, 5 * HIDDEN)


def test_new_layout_block_size_in_dflash_config_default_layer_ids_and_rope_parameters(tmp_path):
    config = dict(ZLAB_BASE, num_target_layers=32, layer_types=["full_attention"] * 2,
                  rope_parameters={"rope_type": "default", "rope_theta": 5e6},
                  dflash_config={"mask_token_id": 7, "block_size": 10})
    write_zlab_checkpoint(tmp_path, config)
    model = load_dflash(str(tmp_path))
    assert model.block_size == 10
    assert model.target_layer_ids == build_target_layer_ids(32, 2) == [1, 29]
    assert model.config.rope_parameters["rope_theta"] == 5e6


def test_missing_mask_token_id_is_a_clear_error():
    with pytest.raises(ValueError, match="mask_token_id"):
        DFlashConfig(**dict(ZLAB_BASE, block_size=8, num_target_layers=6, dflash_config={}))


@pytest.mark.parametrize(
    "drop, extra, expected",
    [
        (("layers.1.mlp.down_proj.weight",), (), "missing_keys.*layers.1.mlp.down_proj.weight"),
        ((), ("lm_head.weight",), "unexpected_keys.*lm_head.weight"),
    ],
)
def test_strict_loading_names_the_bad_keys(tmp_path, drop, extra, expected):
    config = dict(ZLAB_BASE, block_size=8, num_target_layers=6, rope_theta=10000.0,
                  dflash_config={"mask_token_id": 95})
    write_zlab_checkpoint(tmp_path, config, drop=drop, extra=extra)
    with pytest.raises(CheckpointKeysError, match=expected):
        load_dflash(str(tmp_path))


def test_save_pretrained_writes_the_zlab_format(tmp_path):
    model = make_dflash(block_size=8, mask_token_id=95, target_layer_ids=[1, 3])
    model.save_pretrained(tmp_path)
    config = json.loads((tmp_path / "config.json").read_text())
    assert config["architectures"] == ["DFlashDraftModel"] and config["model_type"] == "qwen3"
    assert config["block_size"] == 8 and config["num_target_layers"] == 6
    assert config["dflash_config"]["mask_token_id"] == 95
    assert config["dflash_config"]["target_layer_ids"] == [1, 3]
    assert config["rope_theta"] == 10000.0  # also top level, for readers on transformers 4.x
    keys = set(load_file(tmp_path / "model.safetensors"))
    per_layer = {"input_layernorm", "post_attention_layernorm", "self_attn.q_proj", "self_attn.k_proj",
                 "self_attn.v_proj", "self_attn.o_proj", "self_attn.q_norm", "self_attn.k_norm",
                 "mlp.gate_proj", "mlp.up_proj", "mlp.down_proj"}
    expected = {"fc.weight", "hidden_norm.weight", "norm.weight"}
    expected |= {f"layers.{i}.{name}.weight" for i in range(2) for name in per_layer}
    assert keys == expected
    reloaded = load_dflash(str(tmp_path))
    for key, value in model.state_dict().items():
        assert torch.equal(value, reloaded.state_dict()[key])


# ---- numerical parity ------------------------------------------------------------------------------


def _rms(x, weight, eps):
    return weight * (x * torch.rsqrt(x.pow(2).mean(-1, keepdim=True) + eps))


def _rope(x, positions, theta, dim):
    inv_freq = 1.0 / theta ** (torch.arange(0, dim, 2, dtype=torch.float32) / dim)
    angles = positions[:, None].float() * inv_freq[None]
    cos, sin = torch.cat([angles, angles], -1).cos(), torch.cat([angles, angles], -1).sin()
    half = x.shape[-1] // 2
    rotated = torch.cat([-x[..., half:], x[..., :half]], -1)
    return x * cos + rotated * sin


def oracle_forward(model, target_hidden, noise, positions):
    """DFlash's draft forward written out from its description (research/dflash.md §3.1), head by head."""
    config = model.config
    weights = {k: v.double() for k, v in model.state_dict().items()}
    eps, d, theta = config.rms_norm_eps, config.head_dim, config.rope_parameters["rope_theta"]
    ctx = _rms(target_hidden[0].double() @ weights["fc.weight"].T, weights["hidden_norm.weight"], eps)
    h = noise[0].double()
    q_len = h.shape[0]
    for i in range(config.num_hidden_layers):
        w = {k.split(f"layers.{i}.", 1)[1]: v for k, v in weights.items() if k.startswith(f"layers.{i}.")}
        x = _rms(h, w["input_layernorm.weight"], eps)
        kv_in = torch.cat([ctx, x])
        heads = []
        for head in range(config.num_attention_heads):
            kv_head = head // (config.num_attention_heads // config.num_key_value_heads)
            q = _rms((x @ w["self_attn.q_proj.weight"].T)[:, head * d:(head + 1) * d], w["self_attn.q_norm.weight"], eps)
            k = _rms((kv_in @ w["self_attn.k_proj.weight"].T)[:, kv_head * d:(kv_head + 1) * d],
                     w["self_attn.k_norm.weight"], eps)
            v = (kv_in @ w["self_attn.v_proj.weight"].T)[:, kv_head * d:(kv_head + 1) * d]
            q, k = _rope(q, positions[-q_len:], theta, d), _rope(k, positions, theta, d)
            heads.append(torch.softmax(q @ k.T / d**0.5, -1) @ v)  # no mask: the block is bidirectional
        h = h + torch.cat(heads, -1) @ w["self_attn.o_proj.weight"].T
        y = _rms(h, w["post_attention_layernorm.weight"], eps)
        h = h + (torch.nn.functional.silu(y @ w["mlp.gate_proj.weight"].T) * (y @ w["mlp.up_proj.weight"].T)) @ w[
            "mlp.down_proj.weight"].T
    return _rms(h, weights["norm.weight"], eps)


@pytest.fixture
def perturbed_drafter():
    model = make_dflash(block_size=8, target_layer_ids=[1, 3])
    with torch.no_grad():  # norms start at one; perturb them so they are exercised
        for param in model.parameters():
            if param.dim() == 1:
                param.normal_(1.0, 0.1)
    return model


@pytest.mark.parametrize("attn", ["sdpa", "eager"])
def test_forward_matches_the_written_out_oracle(perturbed_drafter, attn):
    perturbed_drafter.config._attn_implementation = attn
    generator = torch.Generator().manual_seed(0)
    target_hidden = torch.randn(1, 5, 2 * HIDDEN, generator=generator)
    noise = torch.randn(1, 8, HIDDEN, generator=generator)
    positions = torch.arange(13)
    with torch.no_grad():
        ours = perturbed_drafter(target_hidden=target_hidden, noise_embedding=noise, position_ids=positions[None])
    expected = oracle_forward(perturbed_drafter, target_hidden, noise, positions)
    assert (ours[0].double() - expected).abs().max() < 1e-5


def test_cached_context_equals_recomputing_it(perturbed_drafter):
    """Two calls through a DynamicCache (cropped back to the context) equal one call over all the context."""
    generator = torch.Generator().manual_seed(1)
    ctx1, ctx2 = torch.randn(1, 5, 2 * HIDDEN, generator=generator), torch.randn(1, 3, 2 * HIDDEN, generator=generator)
    noise = torch.randn(1, 8, HIDDEN, generator=generator)
    cache = DynamicCache()
    with torch.no_grad():
        perturbed_drafter(ctx1, noise, torch.arange(13)[None], past_key_values=cache, use_cache=True)
        cache.crop(-8)
        cached = perturbed_drafter(ctx2, noise, torch.arange(5, 16)[None], past_key_values=cache, use_cache=True)
        full = perturbed_drafter(torch.cat([ctx1, ctx2], 1), noise, torch.cat([torch.arange(8), torch.arange(8, 16)])[None])
    assert (cached - full).abs().max() < 1e-5


ZLAB_MODEL_PY = os.environ.get("DELS_ZLAB_MODEL_PY")


@pytest.mark.skipif(not ZLAB_MODEL_PY, reason="set DELS_ZLAB_MODEL_PY to z-lab/dflash's dflash/model.py to compare")
def test_forward_matches_zlab_reference(perturbed_drafter, tmp_path):
    """Against z-lab's own DFlashDraftModel (not vendored: pass its file path). Measured 3.6e-7 at 44947fbf."""
    spec = importlib.util.spec_from_file_location("zlab_dflash_model", ZLAB_MODEL_PY)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    perturbed_drafter.save_pretrained(tmp_path)
    reference = module.DFlashDraftModel.from_pretrained(tmp_path, dtype=torch.float32).eval()
    generator = torch.Generator().manual_seed(0)
    target_hidden, noise = torch.randn(1, 5, 2 * HIDDEN, generator=generator), torch.randn(1, 8, HIDDEN, generator=generator)
    positions = torch.arange(13)[None]
    with torch.no_grad():
        ours = perturbed_drafter(target_hidden=target_hidden, noise_embedding=noise, position_ids=positions)
        theirs = reference(target_hidden=target_hidden, noise_embedding=noise, position_ids=positions)
    assert (ours - theirs).abs().max() < 1e-5
