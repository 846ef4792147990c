"""The decode loop: on the static cache, token for token as on the target's own DynamicCache and as the target;
one host sync per block; compiled steps."""

import traceback
import warnings

import pytest
import torch

from dels_hub import DeLSGenerator
from dels_hub.copy_expert import CopySettings
from dels_hub.errors import GenerationArgumentError
from dels_hub.fusion import fusion_weights
from dels_hub.generation import decode
from dels_hub.generation.caches import StaticDraftCache, StaticSlotCache, causal_mask
from dels_hub.generation.cost_model import CostModel
from dels_hub.generation.decode import speculative_decode
from dels_hub.generation.decode_state import static_cache_supported
from dels_hub.generation.policy import CostAware
from dels_hub.generation.settings import DecodeSettings
from dels_hub.sampling import Warping

from conftest import SMALL_VOCAB, make_dflash, make_head, make_target, make_tokenizer, small_prompts


def generator_for(small, kind="qwen3", block_size=8, with_head=True):
    drafter = make_dflash(block_size=block_size, mask_token_id=SMALL_VOCAB - 1, vocab=SMALL_VOCAB, seed=5)
    return DeLSGenerator(small[kind], drafter, small["head"] if with_head else None, small["tokenizer"], policy="fixed")


@pytest.mark.parametrize("kind", ["qwen3", "llama"])
@pytest.mark.parametrize("block_size", [2, 4, 8, 16])
@pytest.mark.parametrize("with_head", [False, True])
def test_fast_equals_eager_equals_target_greedy(small, kind, block_size, with_head):
    target = small[kind]
    generator = generator_for(small, kind, block_size, with_head)
    lengths = []
    for input_ids in small_prompts(count=5):
        expected = target.generate(input_ids, max_new_tokens=40, do_sample=False)
        fast = generator.generate(input_ids, max_new_tokens=40, fast=True, return_dict_in_generate=True)
        eager = generator.generate(input_ids, max_new_tokens=40, fast=False, return_dict_in_generate=True)
        assert torch.equal(fast.sequences, expected) and torch.equal(eager.sequences, expected)
        assert fast.acceptance_lengths == eager.acceptance_lengths
        lengths += fast.acceptance_lengths
    if block_size > 2:
        assert max(lengths) > 2, "no multi-token acceptance: the commit path would go untested"


def test_auto_picks_the_static_cache_for_plain_decoders(small, monkeypatch):
    calls = []
    monkeypatch.setattr("dels_hub.generation.generator.speculative_decode",
                        lambda *a, **k: calls.append(k["static_cache"]) or speculative_decode(*a, **k))
    generator = generator_for(small)
    generator.generate(small_prompts(count=1)[0], max_new_tokens=5)
    generator.generate(small_prompts(count=1)[0], max_new_tokens=5, fast=False)
    assert calls == [True, False]


@pytest.mark.parametrize("max_new_tokens", [1, 2, 3, 7, 8, 9, 33])
def test_fast_path_stops_at_max_new_tokens(small, max_new_tokens):
    generator = generator_for(small, "llama", block_size=8)
    for input_ids in small_prompts(count=3):
        expected = small["llama"].generate(input_ids, max_new_tokens=max_new_tokens, do_sample=False)
        out = generator.generate(input_ids, max_new_tokens=max_new_tokens, fast=True)
        assert torch.equal(out, expected)


def test_fast_path_stops_at_eos_like_the_target(small):
    target = small["qwen3"]
    generator = generator_for(small)
    for input_ids in small_prompts(count=5):
        free = target.generate(input_ids, max_new_tokens=30, do_sample=False)[0, input_ids.shape[1]:]
        for eos in (int(free[0]), int(free[len(free) // 2]), [SMALL_VOCAB - 3, int(free[7])]):
            expected = target.generate(input_ids, max_new_tokens=30, do_sample=False, eos_token_id=eos)
            out = generator.generate(input_ids, max_new_tokens=30, eos_token_id=eos, fast=True)
            assert torch.equal(out, expected)


def test_block_size_one_and_eager_attention(small):
    input_ids = small_prompts(count=1)[0]
    generator = generator_for(small, "llama")
    expected = small["llama"].generate(input_ids, max_new_tokens=12, do_sample=False)
    out = generator.generate(input_ids, max_new_tokens=12, block_size=1, fast=True, return_dict_in_generate=True)
    assert torch.equal(out.sequences, expected) and out.acceptance_lengths == [1] * 11

    target = make_target("qwen3", vocab=SMALL_VOCAB)
    target.config._attn_implementation = "eager"  # the float additive mask instead of sdpa's boolean one
    generator = DeLSGenerator(target, make_dflash(8, SMALL_VOCAB - 1, vocab=SMALL_VOCAB, seed=5), small["head"],
                              small["tokenizer"], policy="fixed")
    for input_ids in small_prompts(count=3):
        expected = target.generate(input_ids, max_new_tokens=30, do_sample=False)
        assert torch.equal(generator.generate(input_ids, max_new_tokens=30, fast=True), expected)


@pytest.mark.parametrize("with_head", [False, True])
@pytest.mark.parametrize("settings", [dict(temperature=0.9), dict(temperature=0.7, top_k=4, top_p=0.9)])
def test_seeded_sampling_is_identical_on_both_paths(small, with_head, settings):
    # Same random calls in the same order: a seed gives the same tokens, so the fast path inherits the
    # eager loop's distribution tests (test_generation.py) rather than needing its own.
    generator = generator_for(small, block_size=8, with_head=with_head)
    for block_size in (1, 4, 8):
        for seed, input_ids in enumerate(small_prompts(count=4)):
            runs = [generator.generate(input_ids, max_new_tokens=25, do_sample=True, seed=seed, fast=fast,
                                       block_size=block_size, **settings) for fast in (True, False)]
            assert torch.equal(*runs)


def test_unsupported_target_falls_back_or_refuses(small):
    target = make_target("qwen3", vocab=SMALL_VOCAB)
    target.config.layer_types = ["sliding_attention"] + ["full_attention"] * 5
    assert "sliding_attention" in static_cache_supported(target)
    generator = DeLSGenerator(target, make_dflash(8, SMALL_VOCAB - 1, vocab=SMALL_VOCAB), None, policy="fixed")
    with pytest.raises(GenerationArgumentError, match="fast=True but the static-cache loop cannot run"):
        generator.generate(small_prompts(count=1)[0], max_new_tokens=4, fast=True)
    target.config._attn_implementation = "flex_attention"
    assert "flex_attention" in static_cache_supported(target)


def count_host_syncs(monkeypatch):
    """Count every way a tensor reaches the host; the sanctioned ones go through ``verify.to_host``."""
    counts = {"to_host": 0, "other": 0}
    real_tolist = torch.Tensor.tolist

    def to_host(values):
        counts["to_host"] += 1
        return real_tolist(values)

    def other(name):
        real = getattr(torch.Tensor, name)

        def counted(self, *args, **kwargs):
            counts["other"] += 1
            return real(self, *args, **kwargs)

        return counted

    monkeypatch.setattr("dels_hub.verify.to_host", to_host)
    monkeypatch.setattr("dels_hub.generation.decode.to_host", to_host)
    for name in ("item", "tolist", "__bool__", "__int__", "__float__", "numpy", "cpu"):
        monkeypatch.setattr(torch.Tensor, name, other(name))
    return counts


class TokenCounter:
    """A streamer: it receives the prompt, then each block's committed tokens, on the host."""

    def __init__(self):
        self.received = 0

    def put(self, tokens):
        self.received += tokens.numel()

    def end(self):
        pass


@pytest.mark.parametrize("warping", [Warping(), Warping(0.8, 4, 0.9)], ids=["greedy", "sampled"])
@pytest.mark.parametrize("copy", [False, True], ids=["", "copy"])
@pytest.mark.parametrize("static_cache", [True, False], ids=["static", "dynamic"])
def test_one_host_transfer_per_block(small, monkeypatch, warping, copy, static_cache):
    generator = generator_for(small, block_size=8)
    input_ids = small_prompts(count=1)[0]
    weights = torch.full((7,), 0.5), torch.full((7,), 0.3)
    settings = DecodeSettings(30, 8, warping, torch.tensor([SMALL_VOCAB - 2]), *weights,
                              CopySettings(2, 4.0).weights() if copy else None)
    kwargs = dict(head=small["head"], static_cache=static_cache)
    counts = count_host_syncs(monkeypatch)
    result = speculative_decode(small["qwen3"], generator.drafter, input_ids, settings,
                                generator=torch.Generator().manual_seed(0), **kwargs)
    assert counts == {"to_host": 1 + len(result.acceptance_lengths), "other": 0}
    # Control: the counter sees other transfers, such as a streamer's (.cpu() of the prompt, then of each block).
    counts.update(to_host=0, other=0)
    streamed = speculative_decode(small["qwen3"], generator.drafter, input_ids, settings,
                                  generator=torch.Generator().manual_seed(0), streamer=TokenCounter(), **kwargs)
    assert counts == {"to_host": 1 + len(streamed.acceptance_lengths), "other": 2 + len(streamed.acceptance_lengths)}
    monkeypatch.undo()
    assert torch.equal(result.sequences, streamed.sequences)


@pytest.mark.parametrize("copy", [False, True], ids=["", "copy"])
def test_the_cost_aware_policy_adds_one_transfer_per_drafted_block(small, monkeypatch, copy):
    """Its copy signal (each row's copy continuation at the new anchor) travels with the block's counts, and the
    prefill's with its stops; the drafts' confidences are the one more transfer, and only in blocks that draft. A
    copy block adds none."""
    generator = generator_for(small, block_size=8)
    input_ids = small_prompts(count=1)[0]
    settings = DecodeSettings(30, 8, Warping(), torch.tensor([SMALL_VOCAB - 2]), None, None,
                              CopySettings(2, 4.0).weights() if copy else None)
    # Drafting loses here unless nearly every draft lands: plain steps between probes, so both kinds of block occur.
    policy = CostAware(CostModel(key={}, verify_ms=[10.0] * 8, draft_ms=12.0, refine=False))
    counts = count_host_syncs(monkeypatch)
    result = speculative_decode(small["qwen3"], generator.drafter, input_ids, settings, policy=policy)
    summary = result.policy
    assert summary["plain_blocks"] > 0 and summary["drafted_blocks"] > 0
    assert summary["copy_blocks"] > 0 if copy else summary["copy_blocks"] == 0
    blocks = len(result.acceptance_lengths)
    assert counts == {"to_host": 1 + blocks + summary["drafted_blocks"], "other": 0}


def test_static_caches_roll_back_by_pointer():
    draft = StaticDraftCache(max_len=10, num_layers=1)
    key = torch.arange(12.0).view(1, 1, 6, 2)
    keys, _ = draft.update(key, key, 0)
    assert keys.shape[2] == 6 and torch.equal(keys, key)
    draft.crop(4)
    storage = draft.keys[0].data_ptr()
    keys, _ = draft.update(-key[:, :, :3], -key[:, :, :3], 0)
    assert keys.shape[2] == 7 and torch.equal(keys[:, :, :4], key[:, :, :4]) and torch.equal(keys[:, :, 4:], -key[:, :, :3])
    assert draft.keys[0].data_ptr() == storage  # nothing reallocated

    target = StaticSlotCache(max_len=8, num_layers=1, device="cpu", dtype=torch.float32)
    target.write_positions = torch.tensor([[2, 3]])
    keys, _ = target.update(key[:, :, :2], key[:, :, :2], 0)
    assert keys.shape[2] == 8 and torch.equal(keys[:, :, 2:4], key[:, :, :2]) and not keys[:, :, 4:].any()
    mask = causal_mask(torch.arange(4), torch.tensor([[1, 2]]), torch.float32, "sdpa")
    assert mask.tolist() == [[[[True, True, False, False], [True, True, True, False]]]]
    additive = causal_mask(torch.arange(4), torch.tensor([[1, 2]]), torch.float32, "eager")
    assert additive[0, 0, 0, 2] == torch.finfo(torch.float32).min and additive[0, 0, 1, 2] == 0

    # A batch: each row writes at its own positions and sees only its own past.
    batched = StaticSlotCache(max_len=8, num_layers=1, device="cpu", dtype=torch.float32)
    batched.write_positions = torch.tensor([[2, 3], [0, 5]])
    rows = torch.cat([key[:, :, :2], -key[:, :, 2:4]])
    keys, _ = batched.update(rows, rows, 0)
    assert torch.equal(keys[0, :, 2:4], rows[0]) and torch.equal(keys[1, :, [0, 5]], rows[1])
    assert keys[0, :, [0, 1, 4, 5, 6, 7]].abs().sum() == 0 and keys[1, :, 1:5].abs().sum() == 0
    mask = causal_mask(torch.arange(4), torch.tensor([[1], [3]]), torch.float32, "sdpa")
    assert mask.tolist() == [[[[True, True, False, False]]], [[[True, True, True, True]]]]
    batched.keep_rows(torch.tensor([1]))
    assert torch.equal(batched.keys[0][0], keys[1])


@pytest.mark.gpu
@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs CUDA")
@pytest.mark.parametrize("compile", [False, True], ids=["eager", "cuda-graphs"])
@pytest.mark.parametrize("copy", [False, True], ids=["", "copy"])
def test_cuda_loop_has_no_stray_sync_and_replays_graphs(monkeypatch, compile, copy):
    from torch._dynamo.utils import counters
    from torch._inductor import cudagraph_trees

    tokenizer = make_tokenizer(SMALL_VOCAB - 2)
    target = make_target("qwen3", vocab=SMALL_VOCAB).cuda()
    drafter = make_dflash(8, SMALL_VOCAB - 1, vocab=SMALL_VOCAB, seed=5).cuda()
    head = make_head(tokenizer, vocab=SMALL_VOCAB - 2).cuda()
    generator = DeLSGenerator(target, drafter, head, tokenizer, copy_ngram=3 if copy else 0, policy="fixed")
    generator.compile = compile
    input_ids = small_prompts(count=1)[0].cuda()
    transfers, recordings = [], []
    real_to_host, real_new_graph_id = decode.to_host, cudagraph_trees.CUDAGraphTreeManager.new_graph_id

    def sanctioned(values):  # the one transfer per block is allowed; any other sync is recorded with its stack
        transfers.append(1)
        torch.cuda.set_sync_debug_mode(0)
        try:
            return real_to_host(values)
        finally:
            torch.cuda.set_sync_debug_mode("warn")

    def stray_sync(message, *_):  # "warn" mode, not "error": one run names every stray sync, not only the first
        if "called a synchronizing CUDA operation" in str(message):  # not the mode's own "prototype" notice
            strays.append("".join(traceback.format_stack(limit=6)[:-1]))

    def recorded(self):
        recordings.append(1)
        return real_new_graph_id(self)

    monkeypatch.setattr(cudagraph_trees.CUDAGraphTreeManager, "new_graph_id", recorded)
    skips = counters["inductor"]["cudagraph_skips"]
    recorded_in_warm_up = 0
    for settings in (dict(), dict(do_sample=True, temperature=0.8, top_k=5, top_p=0.9, seed=1)):
        expected = generator.generate(input_ids, max_new_tokens=24, fast=False, return_dict_in_generate=True,
                                      eos_token_id=None, **settings)
        recordings.clear()
        for _ in range(3):  # warm-up: compile, cudagraph warm-up run, recording
            warm = generator.generate(input_ids, max_new_tokens=24, fast=True, return_dict_in_generate=True,
                                      eos_token_id=None, **settings)
        if compile and settings:  # compiled sampling on CUDA draws its races differently: compare with itself
            expected = warm
        recorded_in_warm_up += len(recordings)
        decode_settings, loop_kwargs = loop_arguments(generator, settings)
        monkeypatch.setattr(decode, "to_host", sanctioned)  # the loop's own reference, not verify's
        transfers.clear()
        recordings.clear()
        strays = []
        with warnings.catch_warnings():
            warnings.simplefilter("always")
            monkeypatch.setattr(warnings, "showwarning", stray_sync)
            torch.cuda.set_sync_debug_mode("warn")
            try:
                out = speculative_decode(generator.target, generator.drafter, input_ids, decode_settings, **loop_kwargs)
                loop_strays = list(strays)
                torch.ones(1, device="cuda").sum().item()  # a planted sync: the control that the recorder sees one
            finally:
                torch.cuda.set_sync_debug_mode(0)
                monkeypatch.setattr(decode, "to_host", real_to_host)
        assert loop_strays == [], f"{len(loop_strays)} stray syncs, the first at:\n{loop_strays[0]}"
        assert len(strays) == 1, "the sync recorder missed the planted .item()"
        assert torch.equal(out.sequences, expected.sequences)
        assert len(transfers) == 1 + len(out.acceptance_lengths)
        assert recordings == []  # replayed, not re-recorded
    # Inductor never fell back to running without CUDA graphs, and, compiled, it did record some: without
    # this, "nothing re-recorded" would also hold for a verify step that never used a graph at all.
    assert counters["inductor"]["cudagraph_skips"] == skips
    assert (recorded_in_warm_up > 0) == compile


def loop_arguments(generator, settings):
    """What ``generate`` passes to the loop, built before sync checking starts (its argument checks may sync)."""
    settings = dict(settings)
    seed = settings.pop("seed", None)
    warping = Warping(settings["temperature"], settings["top_k"], settings["top_p"]) if settings else Warping()
    alpha, beta = fusion_weights(generator.alpha, generator.beta, generator.pure_prefix_len, 7, device="cuda")
    decode_settings = DecodeSettings(24, 8, warping, torch.tensor([], dtype=torch.long, device="cuda"), alpha, beta,
                                     generator.copy.weights("cuda"))
    return decode_settings, dict(
        head=generator.head, compile=generator.compile, workspace=generator._workspace,
        generator=torch.Generator(device="cuda").manual_seed(seed) if seed is not None else None,
    )


def compile_counters() -> dict:
    from torch._dynamo.utils import counters

    return {"graphs": counters["stats"]["unique_graphs"], "breaks": sum(counters["graph_break"].values())}


def test_compiled_steps_match_and_are_not_recompiled(small):
    """``generator.compile = True`` (inductor on CPU, CUDA graphs on CUDA) compiles the verify step and the
    draft step (drafter + head loop) whole: greedy gives the target's tokens with the eager loop's acceptance
    lengths; one graph per step and warping, none again for another prompt length in the same bucket."""
    torch._dynamo.reset()  # count this test's graphs from zero, whatever ran before it
    generator = generator_for(small, block_size=8)
    generator.compile = True
    input_ids, other_prompt = small_prompts(count=1)[0], small_prompts(count=1, length=9, seed=4)[0]
    before = compile_counters()
    for prompt in (input_ids, other_prompt):  # another length, same 256-slot bucket: no new graph
        expected = generator.generate(prompt, max_new_tokens=30, fast=False, return_dict_in_generate=True)
        compiled = generator.generate(prompt, max_new_tokens=30, fast=True, return_dict_in_generate=True)
        assert torch.equal(compiled.sequences, small["qwen3"].generate(prompt, max_new_tokens=30, do_sample=False))
        assert compiled.acceptance_lengths == expected.acceptance_lengths
    assert compile_counters() == {"graphs": before["graphs"] + 2, "breaks": before["breaks"]}  # verify, draft

    # Sampling: the draft graph takes pre-drawn races instead of the generator, so it stays one graph (a third),
    # and temperature and top_p are data, not guards: other values reuse it. On CPU one [k, V] race consumes the
    # generator exactly like the eager loop's k [V] races, so a seed gives the eager loop's tokens.
    for temperature, top_p in ((0.9, 0.9), (0.6, 0.8)):
        settings = dict(do_sample=True, temperature=temperature, top_p=top_p, seed=2, draft_mode="sampled")
        compiled = generator.generate(input_ids, max_new_tokens=30, fast=True, **settings)
        assert torch.equal(compiled, generator.generate(input_ids, max_new_tokens=30, fast=False, **settings))
    assert compile_counters() == {"graphs": before["graphs"] + 3, "breaks": before["breaks"]}
    # Top-token drafts at T > 0 draft greedily: the greedy draft graph serves them, no new one.
    settings = dict(do_sample=True, temperature=0.7, top_p=0.9, seed=3, draft_mode="top")
    compiled = generator.generate(input_ids, max_new_tokens=30, fast=True, **settings)
    assert torch.equal(compiled, generator.generate(input_ids, max_new_tokens=30, fast=False, **settings))
    assert compile_counters() == {"graphs": before["graphs"] + 3, "breaks": before["breaks"]}


def test_draft_step_hides_padding_rows_in_trash_slots(small):
    """``draft_step`` over a padded context drafts what the DynamicCache drafter drafts over the real rows alone
    (q to float tolerance), and writes each padding row to its own slot past every position: overlapping writes
    would go unnoticed on CPU (the later one wins) but are nondeterministic on CUDA."""
    from transformers import DynamicCache

    from dels_hub.compat import crop_cache
    from dels_hub.generation.drafting import propose
    from dels_hub.generation.graph_steps import Drafting, draft_step, graph_warping

    target, head = small["qwen3"], small["head"]
    drafter = make_dflash(4, SMALL_VOCAB - 1, vocab=SMALL_VOCAB, seed=5)
    embed, lm_head = target.get_input_embeddings(), target.get_output_embeddings()
    k, prompt, positions_len = 3, 6, 32
    warping, alpha_beta = Warping(0.8, None, 0.9), fusion_weights(0.5, 0.3, 0, 3)
    rng = torch.Generator().manual_seed(0)
    features = torch.randn(1, prompt + 4, drafter.fc.in_features, generator=rng)
    races = torch.empty(1, k, lm_head.out_features).exponential_(generator=rng)
    positions = torch.arange(positions_len + 4).unsqueeze(0)
    blocks = [torch.tensor([[anchor] + [SMALL_VOCAB - 1] * k]) for anchor in (5, 7)]
    drafting = Drafting(drafter, embed, lm_head, graph_warping(warping, "cpu"), head, head.log_prior(), *alpha_beta)
    # Block 1 at positions 6..9 over the prompt; block 1 accepted one draft, so block 2 sits at 8..11 and its
    # context is block 1's verify: 4 rows at positions 6..9, of which the first 2 are real.
    cache = StaticSlotCache(positions_len + 4, drafter.config.num_hidden_layers, "cpu", drafter.dtype)
    with torch.inference_mode():
        draft_step(drafting, features[:, :prompt], positions[:, :prompt], torch.ones(1, prompt, dtype=torch.bool),
                   blocks[0], positions[:, 6:10], cache, races, None, None)
        drafts, q, _ = draft_step(drafting, features[:, prompt:], positions[:, 6:10],
                                  torch.tensor([[True, True, False, False]]), blocks[1], positions[:, 8:12], cache,
                                  races, None, None)
    slots = cache.write_positions[0].tolist()
    assert slots[:2] == [6, 7] and slots[4:] == [8, 9, 10, 11]
    assert len(set(slots)) == len(slots) and min(slots[2:4]) >= positions_len

    reference_cache = DynamicCache()
    with torch.inference_mode():
        drafter(target_hidden=features[:, :prompt], noise_embedding=embed(blocks[0]), position_ids=positions[:, :10],
                past_key_values=reference_cache, use_cache=True)
        crop_cache(reference_cache, prompt)
        hidden = drafter(target_hidden=features[:, prompt : prompt + 2], noise_embedding=embed(blocks[1]),
                         position_ids=positions[:, 6:12], past_key_values=reference_cache, use_cache=True)
        expected_drafts, expected_q = propose(lm_head(hidden[:, 1:]), blocks[1][:, 0], warping, None, head,
                                              head.log_prior(), *alpha_beta, races=races)
    assert torch.equal(drafts, expected_drafts)
    torch.testing.assert_close(q, expected_q, atol=1e-6, rtol=1e-5)


@pytest.mark.parametrize("kind, block_size, with_head", [("llama", 4, False), ("qwen3", 16, True)])
def test_compiled_draft_with_padded_context_equals_eager(small, kind, block_size, with_head):
    """The graphed draft always reads the last verify's block_size rows and hides the rejected ones in trash
    slots; if any leaked into attention, the drafts (hence the acceptance lengths) would differ."""
    generator = generator_for(small, kind, block_size, with_head)
    lengths = []
    for input_ids in small_prompts(count=4):
        eager = generator.generate(input_ids, max_new_tokens=40, fast=False, return_dict_in_generate=True)
        generator.compile = True
        compiled = generator.generate(input_ids, max_new_tokens=40, fast=True, return_dict_in_generate=True)
        generator.compile = False
        assert torch.equal(compiled.sequences, small[kind].generate(input_ids, max_new_tokens=40, do_sample=False))
        assert compiled.acceptance_lengths == eager.acceptance_lengths
        lengths += compiled.acceptance_lengths
    assert 1 in lengths and max(lengths) > 2, "need both rejections (padding rows) and multi-token acceptance"


def test_compiled_sampling_matches_the_target_distribution(small):
    """The compiled draft samples with one race per block, a different use of the generator than the eager
    loop's: its distribution is checked directly, by the exact enumeration of ``test_generation.py`` (whose
    negative control shows the chi-square check catches a biased verifier)."""
    from test_generation import chi_square_pvalue, exact_distribution

    target = small["qwen3"]
    # pure_prefix_len 0 fuses from draft position 1 on: every draft goes through the head.
    generator = DeLSGenerator(target, make_dflash(4, SMALL_VOCAB - 1, vocab=SMALL_VOCAB), small["head"],
                              small["tokenizer"], pure_prefix_len=0, policy="fixed")
    generator.compile = True
    input_ids, new_tokens, samples = small_prompts(count=1)[0], 3, 2500
    settings = dict(temperature=0.7, top_k=4, top_p=0.9)
    expected = exact_distribution(target, input_ids, Warping(**settings), new_tokens)
    rng = torch.Generator().manual_seed(7)
    counts, graphed = {}, 0
    for _ in range(samples):
        out = generator.generate(input_ids, max_new_tokens=new_tokens, do_sample=True, generator=rng,
                                 return_dict_in_generate=True, **settings)
        key = tuple(out.sequences[0, input_ids.shape[1]:].tolist())
        counts[key] = counts.get(key, 0) + 1
        graphed += len(out.acceptance_lengths) > 1  # a second block: drafted by the compiled step
    assert chi_square_pvalue(counts, expected, samples) > 1e-3
    assert graphed > samples // 4, f"only {graphed} runs reached the compiled draft step"


def test_gpu_bench_script_writes_every_row_on_smoke_shapes(tmp_path):
    """The GPU benchmark script on the smoke shapes, compiled path included, run the way ``scripts/gpu_check.sh``
    runs it (the repository on PYTHONPATH): it writes every row, with the loops' exactness and graph counters."""
    import json
    import os
    import subprocess
    import sys
    from pathlib import Path

    root = Path(__file__).resolve().parents[1]
    output = tmp_path / "fast.json"
    environment = dict(os.environ, PYTHONPATH=str(root), OMP_NUM_THREADS="1")
    subprocess.run([sys.executable, str(root / "scripts" / "gpu_fast_loop_bench.py"), "--smoke", "--ks", "1", "3",
                    "--compile", "--tree-budgets", "4", "8", "--json", str(output)], cwd=tmp_path, env=environment, check=True,
                   capture_output=True, timeout=600)
    (result,) = json.loads(output.read_text())["results"]
    assert result["fast_equals_eager_greedy"] is True
    assert [row["k"] for row in result["rows"]] == [1, 3]
    for row in result["rows"]:
        assert {"eager", "fast", "graphs", "g-nohd"} <= row.keys()
        assert not any("error" in row[path] for path in row if path != "k")
        for path in ("graphs", "g-nohd"):
            assert row[path]["graph_counters"]["cudagraph_skips"] == 0
            assert row[path]["parts_ms"]["draft"] > 0 and row[path]["parts_ms"]["head"] is None
    assert result["target_generate"]["tokens_per_s"] > 0 and result["target_generate_static"]["tokens_per_s"] > 0
    policy = result["cost_aware"]  # the default policy with the real verifier, and the device's cost table
    assert policy["tokens_per_s"] > 0 and len(policy["verify_ms"]) == 16 and policy["policy"]["policy"] == "cost-aware"
    trees = result["trees"]  # JSON keys: the budgets
    assert sorted(trees) == ["4", "8"]
    assert all(tree["greedy_equals_chain"] is True and tree["block_ms"] > 0 for tree in trees.values())
    assert all(tree["graphs"]["greedy_equals_chain"] is True and tree["graphs"]["block_ms"] > 0
               for tree in trees.values())  # the tree's verify compiled
