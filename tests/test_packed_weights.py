"""Verifies on oneDNN's matmul (``generation/packed_weights.py``): the same products, the target's greedy output,
only inside the loop's verify of the chosen widths, and a calibration of their own."""

import pytest
import torch

from dels_hub import DeLSGenerator
from dels_hub.errors import GenerationArgumentError, UnsupportedInputError
from dels_hub.generation.cost_model import calibration_key
from dels_hub.generation.packed_weights import PackedLinears, auto_widths, packed_linears, packing_available

from conftest import SMALL_VOCAB, make_dflash, make_target, small_prompts

needs_onednn = pytest.mark.skipif(not packing_available(torch.nn.Linear(2, 2)),
                                  reason="needs a torch built with oneDNN")


@needs_onednn
@pytest.mark.parametrize("rows", [1, 3, 4, 8])
def test_packed_products_equal_the_layers_own(rows):
    layer = torch.nn.Linear(24, 40)
    x = torch.randn(1, rows, 24)
    packs = PackedLinears(torch.nn.Sequential(layer), (4, 8))
    with packs:
        out = layer(x)
    assert torch.allclose(out, torch.nn.functional.linear(x, layer.weight, layer.bias), rtol=1e-5, atol=1e-6)
    assert packs.hits == 1
    assert "forward" not in layer.__dict__  # nothing of it is left on the layer
    layer(x)
    assert packs.hits == 1  # inactive: as loaded


@needs_onednn
def test_a_layers_own_forward_override_is_restored():
    layer = torch.nn.Linear(8, 8)
    own = layer.forward
    layer.forward = own  # as accelerate's hooks do: an instance attribute
    with PackedLinears(torch.nn.Sequential(layer), (4,)):
        assert layer.forward is not own
    assert layer.forward is own


@needs_onednn
@pytest.mark.parametrize("policy", ["fixed", "cost-aware"])
def test_greedy_equals_the_target_with_packed_verifies_and_only_there(small, policy):
    target = small["qwen3"]
    drafter = make_dflash(4, SMALL_VOCAB - 1, vocab=SMALL_VOCAB, seed=5)
    generator = DeLSGenerator(target, drafter, small["head"], small["tokenizer"], copy_ngram=2, policy=policy,
                              packed_widths=(2, 4))
    packs = generator.packed(4)
    assert packs is packed_linears(target, (2, 4))  # shared by every generator over this target
    for input_ids in small_prompts(count=3):
        hits = packs.hits
        expected = target.generate(input_ids, max_new_tokens=30, do_sample=False)
        assert packs.hits == hits  # the target's own generate runs on its loaded weights
        assert torch.equal(generator.generate(input_ids, max_new_tokens=30), expected)
    if policy == "fixed":  # every block verifies 4 tokens
        assert packs.hits > 0


@needs_onednn
def test_tree_verifies_run_on_onednn_too_and_equal_the_target(small):
    target = small["qwen3"]
    drafter = make_dflash(4, SMALL_VOCAB - 1, vocab=SMALL_VOCAB, seed=5)
    generator = DeLSGenerator(target, drafter, small["head"], small["tokenizer"], copy_ngram=2, tree_budget=6,
                              policy="fixed")  # every drafted block a tree of 6 nodes and its root
    packs = generator.packed(4, generator.tree)
    assert packs.widths == tuple(range(1, 8))  # the chain's widths and every tree size up to the budget's
    assert generator.packed(4).widths == (1, 2, 3, 4)  # a call without a tree packs the chain's
    for input_ids in small_prompts(count=3):
        hits = packs.hits
        expected = target.generate(input_ids, max_new_tokens=20, do_sample=False)
        assert torch.equal(generator.generate(input_ids, max_new_tokens=20), expected)
        assert packs.hits > hits  # the trees' verifies (every block here) ran on oneDNN


@needs_onednn
def test_a_broken_pack_is_caught(small, monkeypatch):
    """Negative control: a kernel that reads other weights (its rows shuffled) changes the greedy output, so the test
    above can fail."""
    target = small["qwen3"]
    drafter = make_dflash(4, SMALL_VOCAB - 1, vocab=SMALL_VOCAB, seed=5)
    real_linear = torch.ops.mkldnn._linear_pointwise

    def shuffled(x, weight, *args):
        return real_linear(x, weight[torch.randperm(weight.shape[0], generator=torch.Generator().manual_seed(0))],
                           *args)

    monkeypatch.setattr(torch.ops.mkldnn, "_linear_pointwise", shuffled)
    broken = PackedLinears(target, (4,))
    generator = DeLSGenerator(target, drafter, None, small["tokenizer"], policy="fixed", packed_widths=None)
    outputs = [generator.generate(input_ids, max_new_tokens=20) for input_ids in small_prompts(count=3)]
    monkeypatch.setattr(generator, "packed", lambda block_size, tree=None: broken)
    assert any(not torch.equal(generator.generate(input_ids, max_new_tokens=20), out)
               for input_ids, out in zip(small_prompts(count=3), outputs))


def test_auto_runs_float32_cpu_verifies_on_onednn_and_keys_their_calibration(small):
    target = small["qwen3"]
    drafter = make_dflash(8, SMALL_VOCAB - 1, vocab=SMALL_VOCAB, seed=5)
    available = packing_available(target)
    assert auto_widths(target, 8) == ((1, 2, 3, 4, 5, 6, 7, 8) if available else ())
    assert auto_widths(target, 1) == ((1,) if available else ())  # the target alone through the loop
    assert auto_widths(make_target("qwen3", vocab=SMALL_VOCAB).to(torch.bfloat16), 8) == ()  # float32 only
    generator = DeLSGenerator(target, drafter, None, small["tokenizer"])
    generator.compile = True
    assert generator._packed_widths(8) == ()  # compiled steps use inductor's own kernels
    keys = [calibration_key(target, drafter, None, block_size=8, batch=1, copy=False, draft_vocab=None,
                            compile=False, packed=packed) for packed in ((), (4, 8))]
    assert keys[0] != keys[1]  # such a loop's cost table is its own


def test_packed_widths_are_checked_before_any_work(small):
    target = small["qwen3"]
    drafter = make_dflash(4, SMALL_VOCAB - 1, vocab=SMALL_VOCAB, seed=5)
    for bad in ("always", (0,), (4, "8"), 4, (True,)):
        with pytest.raises(GenerationArgumentError, match="packed_widths"):
            DeLSGenerator(target, drafter, None, small["tokenizer"], packed_widths=bad)
    with pytest.raises(UnsupportedInputError, match="float32"):
        DeLSGenerator(make_target("qwen3", vocab=SMALL_VOCAB).to(torch.bfloat16), drafter.to(torch.bfloat16), None,
                      small["tokenizer"], packed_widths=(4,))
