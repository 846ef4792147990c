"""Verifies on oneDNN's matmul (``generation/packed_weights.py``): the same products, the target's greedy output,
only inside the loop's verify of the chosen widths, and a calibration of their own."""

import json

import pytest
import torch

from dels_hub import DeLSGenerator
from dels_hub.errors import GenerationArgumentError, UnsupportedInputError
from dels_hub.generation import kernel_choice
from dels_hub.generation.cost_model import calibration_key
from dels_hub.generation.kernel_choice import faster_widths
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
                              policy="fixed", packed_widths=tuple(range(1, 8)))  # every block a tree of 6 nodes
    packs = generator.packed(4, generator.tree)
    assert packs.widths == tuple(range(1, 8))  # the chain's widths and the tree's, its 6 nodes and its root
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
    monkeypatch.setattr(generator, "packed", lambda *args: broken)
    assert any(not torch.equal(generator.generate(input_ids, max_new_tokens=20), out)
               for input_ids, out in zip(small_prompts(count=3), outputs))


def test_auto_considers_float32_cpu_steps_and_keys_their_calibration(small):
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


def test_faster_widths_keeps_the_widths_that_measured_faster_on_onednn():
    linear = {1: 10.0, 2: 12.0, 4: 15.0, 9: 30.0}
    onednn = {1: 11.0, 2: 11.5, 4: 14.0, 9: 31.0}
    # 3 takes 4's choice (the next measured width above), 5..8 take 9's, 12 the widest measured's.
    assert faster_widths((1, 2, 3, 4, 5, 8, 12), linear, onednn) == (2, 3, 4)
    assert faster_widths((1, 2), onednn, linear) == (1,)  # the kernels' roles swapped: the other choice


@needs_onednn
def test_auto_packs_what_measured_faster_here_and_caches_the_choice(small, tmp_path, monkeypatch):
    monkeypatch.setenv("DELS_HUB_CACHE", str(tmp_path))
    target = small["qwen3"]
    drafter = make_dflash(4, SMALL_VOCAB - 1, vocab=SMALL_VOCAB, seed=5)
    generator = DeLSGenerator(target, drafter, None, small["tokenizer"], tree_budget=16)
    chosen = generator._packed_widths(4, generator.tree)
    files = list((tmp_path / "cost_models" / "kernels").glob("*.json"))
    assert len(files) == 1
    saved = json.loads(files[0].read_text())
    # Every chain width and each tree of the ladder (16 and 8 nodes, and their roots) was timed on both kernels.
    assert sorted(int(w) for w in saved["ms"]["oneDNN"]) == [1, 2, 3, 4, 9, 17]
    ms = {name: {int(w): v for w, v in by_width.items()} for name, by_width in saved["ms"].items()}
    assert chosen == faster_widths(tuple(range(1, 18)), ms["F.linear"], ms["oneDNN"])

    # A second generator reads the choice back instead of measuring; the file decides what runs on oneDNN.
    def no_measuring(*args, **kwargs):
        raise AssertionError("measured again")

    monkeypatch.setattr(kernel_choice, "verify_times", no_measuring)
    faster_everywhere = {name: {w: (1.0 if name == "oneDNN" else 2.0) for w in by_width}
                         for name, by_width in saved["ms"].items()}
    files[0].write_text(json.dumps(dict(saved, ms=faster_everywhere)))
    again = DeLSGenerator(target, drafter, None, small["tokenizer"], tree_budget=16)
    assert again._packed_widths(4, again.tree) == tuple(range(1, 18))
    assert again.packed(4).widths == (1, 2, 3, 4)  # a call without a tree: from the same file
    slower_everywhere = {name: {w: (2.0 if name == "oneDNN" else 1.0) for w in by_width}
                         for name, by_width in saved["ms"].items()}
    files[0].write_text(json.dumps(dict(saved, ms=slower_everywhere)))
    assert again._packed_widths(4, again.tree) == () and again.packed(4, again.tree) is None


def test_packed_widths_are_checked_before_any_work(small):
    target = small["qwen3"]
    drafter = make_dflash(4, SMALL_VOCAB - 1, vocab=SMALL_VOCAB, seed=5)
    for bad in ("always", (0,), (4, "8"), 4, (True,)):
        with pytest.raises(GenerationArgumentError, match="packed_widths"):
            DeLSGenerator(target, drafter, None, small["tokenizer"], packed_widths=bad)
    with pytest.raises(UnsupportedInputError, match="float32"):
        DeLSGenerator(make_target("qwen3", vocab=SMALL_VOCAB).to(torch.bfloat16), drafter.to(torch.bfloat16), None,
                      small["tokenizer"], packed_widths=(4,))
