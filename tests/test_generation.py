"""DeLSGenerator end to end on tiny random targets: exactness, sampling, API and compatibility errors."""


import pytest
import torch
from scipy.stats import chisquare
from transformers import TextIteratorStreamer

from dels_hub import DeLSGenerator, Warping, sample, warp_probs
from dels_hub.errors import (
    BlockSizeError,
    DtypeMismatchError,
    GenerationArgumentError,
    HiddenSizeMismatchError,
    IncompatibleTokenizerError,
    MaskTokenOutOfRangeError,
    MissingTokenizerError,
    TargetLayerOutOfRangeError,
    UnsupportedInputError,
    VocabSizeMismatchError,
)
from dels_hub.generation.cost_model import CostModel
from dels_hub.generation.policy import BlockPlan, CostAware

from conftest import SMALL_VOCAB, VOCAB, make_dflash, make_head, make_target, make_tokenizer, small_prompts


@pytest.mark.parametrize("kind", ["qwen3", "llama"])
@pytest.mark.parametrize("block_size", [2, 4, 8, 16])
@pytest.mark.parametrize("with_head", [False, True])
@pytest.mark.parametrize("policy", ["fixed", "cost-aware"])
def test_greedy_equals_target_greedy(small, kind, block_size, with_head, policy):
    target = small[kind]
    # Drafter seed 5 happens to agree with these random targets for whole blocks at times, so the test
    # covers full, partial and zero acceptance (checked below for fixed blocks), not only the rejection path.
    drafter = make_dflash(block_size=block_size, mask_token_id=SMALL_VOCAB - 1, vocab=SMALL_VOCAB, seed=5)
    generator = DeLSGenerator(target, drafter, small["head"] if with_head else None, small["tokenizer"],
                              policy=policy)
    lengths = []
    for input_ids in small_prompts(count=6):
        expected = target.generate(input_ids, max_new_tokens=40, do_sample=False)
        out = generator.generate(input_ids, max_new_tokens=40, return_dict_in_generate=True)
        assert torch.equal(out.sequences, expected)
        assert sum(out.acceptance_lengths) == out.num_new_tokens - 1  # the first token comes from the prefill
        lengths += out.acceptance_lengths
    assert max(lengths) <= block_size
    if block_size > 2 and policy == "fixed":
        assert max(lengths) > 2, "no multi-token acceptance: the test would not exercise the commit path"


@pytest.mark.parametrize("max_new_tokens", [1, 2, 3, 7, 8, 9, 33])
def test_never_exceeds_max_new_tokens(small, max_new_tokens):
    target = small["qwen3"]
    generator = DeLSGenerator(target, make_dflash(8, SMALL_VOCAB - 1, vocab=SMALL_VOCAB), small["head"], small["tokenizer"])
    for input_ids in small_prompts(count=3):
        expected = target.generate(input_ids, max_new_tokens=max_new_tokens, do_sample=False)
        out = generator.generate(input_ids, max_new_tokens=max_new_tokens)
        assert out.shape[1] == input_ids.shape[1] + max_new_tokens
        assert torch.equal(out, expected)
    assert generator.generate(input_ids, max_length=input_ids.shape[1] + 5).shape[1] == input_ids.shape[1] + 5


def test_stops_at_eos_like_the_target(small):
    target = small["qwen3"]
    generator = DeLSGenerator(target, make_dflash(8, SMALL_VOCAB - 1, vocab=SMALL_VOCAB), small["head"], small["tokenizer"])
    checked = 0
    for input_ids in small_prompts(count=6):
        free = target.generate(input_ids, max_new_tokens=30, do_sample=False)[0, input_ids.shape[1]:]
        eos = int(free[len(free) // 2])  # a token the target emits mid-way
        for eos_arg in (eos, [SMALL_VOCAB - 3, eos]):
            expected = target.generate(input_ids, max_new_tokens=30, do_sample=False, eos_token_id=eos_arg)
            out = generator.generate(input_ids, max_new_tokens=30, eos_token_id=eos_arg)
            assert torch.equal(out, expected)
            assert int(out[0, -1]) in ([eos_arg] if isinstance(eos_arg, int) else eos_arg)
            checked += 1
    assert checked == 12


def test_target_emitting_the_mask_token_is_kept(small):
    target = small["qwen3"]
    input_ids = small_prompts(count=1)[0]
    expected = target.generate(input_ids, max_new_tokens=30, do_sample=False)
    mask_id = int(expected[0, input_ids.shape[1] + 3])  # the target really generates this id
    generator = DeLSGenerator(target, make_dflash(8, mask_id, vocab=SMALL_VOCAB), small["head"], small["tokenizer"])
    out = generator.generate(input_ids, max_new_tokens=30)
    assert torch.equal(out, expected) and (out[0, input_ids.shape[1]:] == mask_id).any()


def test_block_size_one_is_plain_decoding_and_larger_than_trained_is_refused(small):
    target = small["llama"]
    generator = DeLSGenerator(target, make_dflash(8, SMALL_VOCAB - 1, vocab=SMALL_VOCAB), small["head"], small["tokenizer"])
    input_ids = small_prompts(count=1)[0]
    out = generator.generate(input_ids, max_new_tokens=12, block_size=1, return_dict_in_generate=True)
    assert torch.equal(out.sequences, target.generate(input_ids, max_new_tokens=12, do_sample=False))
    assert out.acceptance_lengths == [1] * 11
    sampled = generator.generate(input_ids, max_new_tokens=12, block_size=1, do_sample=True, seed=3)
    assert sampled.shape[1] == input_ids.shape[1] + 12
    with pytest.raises(BlockSizeError, match="block_size 9 is outside 1..8"):
        generator.generate(input_ids, block_size=9)


# ---- sampling: the output distribution is the target's own ------------------------------------------


def exact_distribution(target, input_ids, warping, new_tokens):
    """p(x_1..x_n | prompt) of the target's warped sampling, by enumerating every continuation."""
    probs = {(): 1.0}
    for _ in range(new_tokens):
        grown = {}
        for prefix, mass in probs.items():
            ids = torch.cat([input_ids, torch.tensor([prefix], dtype=torch.long).view(1, -1)], 1)
            with torch.no_grad():
                row = warp_probs(target(ids).logits[0, -1], warping)
            for token in torch.nonzero(row).flatten().tolist():
                grown[prefix + (token,)] = mass * row[token].item()
        probs = grown
    return probs


def accept_everything(draft_ids, q_draft, p_target, generator=None):
    """A biased verifier (negative control): never rejects, so the output follows q, not p."""
    bonus = sample(p_target[..., -1:, :], generator)
    return torch.cat([draft_ids, bonus], dim=-1), torch.full(draft_ids.shape[:-1], draft_ids.shape[-1])


def sampled_counts(generator, input_ids, samples, new_tokens, **kwargs):
    rng = torch.Generator().manual_seed(7)
    counts = {}
    for _ in range(samples):
        out = generator.generate(input_ids, max_new_tokens=new_tokens, do_sample=True, generator=rng, **kwargs)
        key = tuple(out[0, input_ids.shape[1]:].tolist())
        counts[key] = counts.get(key, 0) + 1
    return counts


def chi_square_pvalue(counts, expected_probs, samples):
    """Goodness of fit over the support, pooling cells expected below 5 into one."""
    if not set(counts) <= set(expected_probs):
        return 0.0  # sampled a continuation the target cannot produce
    keys = sorted(expected_probs, key=lambda k: -expected_probs[k])
    observed, expected, pooled_obs, pooled_exp = [], [], 0, 0.0
    for key in keys:
        e = expected_probs[key] * samples
        if e >= 5:
            observed.append(counts.get(key, 0))
            expected.append(e)
        else:
            pooled_obs += counts.get(key, 0)
            pooled_exp += e
    if pooled_exp > 0:
        observed.append(pooled_obs)
        expected.append(pooled_exp)
    scale = sum(observed) / sum(expected)  # float rounding of the enumerated masses
    return chisquare(observed, [e * scale for e in expected]).pvalue


SAMPLING_CASES = [
    dict(temperature=0.7, top_k=4, top_p=1.0, head=True),
    dict(temperature=1.0, top_k=0, top_p=0.7, head=True),
    dict(temperature=1.0, top_k=3, top_p=0.9, head=False),
]


@pytest.mark.parametrize("draft_mode", ["top", "sampled"])
@pytest.mark.parametrize("case", SAMPLING_CASES, ids=lambda c: f"T{c['temperature']}-k{c['top_k']}-p{c['top_p']}-head{c['head']}")
def test_sampling_matches_the_target_distribution(small, case, draft_mode):
    """Both draft modes, every block drafted and verified (fixed blocks): top-token drafts matched against the
    target's own samples, and sampled drafts rejection-sampled."""
    target = small["qwen3"]
    drafter = make_dflash(4, SMALL_VOCAB - 1, vocab=SMALL_VOCAB)
    generator = DeLSGenerator(target, drafter, small["head"] if case["head"] else None, small["tokenizer"],
                              policy="fixed", draft_mode=draft_mode)
    input_ids, new_tokens, samples = small_prompts(count=1)[0], 3, 2500
    warping = Warping(case["temperature"], case["top_k"], case["top_p"])
    expected = exact_distribution(target, input_ids, warping, new_tokens)
    settings = dict(temperature=case["temperature"], top_k=case["top_k"], top_p=case["top_p"])
    counts = sampled_counts(generator, input_ids, samples, new_tokens, **settings)
    assert chi_square_pvalue(counts, expected, samples) > 1e-3


def test_sampling_under_the_cost_aware_policy_matches_the_target_distribution(small):
    """The default policy mixes plain steps and drafted blocks of several widths: still the target's distribution."""
    target = small["qwen3"]
    generator = DeLSGenerator(target, make_dflash(4, SMALL_VOCAB - 1, vocab=SMALL_VOCAB), small["head"],
                              small["tokenizer"], copy_ngram=2)
    input_ids, new_tokens, samples = small_prompts(count=1)[0], 3, 2500
    expected = exact_distribution(target, input_ids, Warping(0.7, 4, 1.0), new_tokens)
    counts = sampled_counts(generator, input_ids, samples, new_tokens, temperature=0.7, top_k=4, top_p=1.0)
    assert chi_square_pvalue(counts, expected, samples) > 1e-3


@pytest.mark.parametrize("draft_mode", ["top", "sampled"])
def test_sampling_matches_the_target_distribution_when_the_policy_picks_widths(small, draft_mode):
    """A cost table where verifying one draft pays only for a confident one: top-token blocks verify 0 or 1 drafts
    by the drafts' confidence, sampled ones every draft (choosing from sampled drafts would bias), plain steps in
    between. Still the target's distribution."""
    target = small["qwen3"]
    table = CostModel(key={}, verify_ms=[10.0, 13.0, 1e6, 1e6], draft_ms=0.0, refine=False)
    generator = DeLSGenerator(target, make_dflash(4, SMALL_VOCAB - 1, vocab=SMALL_VOCAB), small["head"],
                              small["tokenizer"], policy=CostAware(table), draft_mode=draft_mode)
    input_ids, new_tokens, samples = small_prompts(count=1)[0], 3, 2500
    expected = exact_distribution(target, input_ids, Warping(0.7, 4, 1.0), new_tokens)
    counts = sampled_counts(generator, input_ids, samples, new_tokens, temperature=0.7, top_k=4, top_p=1.0)
    assert chi_square_pvalue(counts, expected, samples) > 1e-3


class PeekingPolicy(CostAware):
    """Negative control: drafts every block and verifies the first draft only when the drafter was unsure of it, a
    width chosen from what was sampled."""

    def draft_now(self, match_lengths):
        return True

    def plan(self, confidence, block_size, rows, call_tree=None):
        width = 2 if confidence[0][0] < 0.5 else 1
        return BlockPlan(True, width, rows, None, 1.0, confidence)


def test_negative_control_a_width_chosen_from_sampled_drafts_is_detected(small, monkeypatch):
    monkeypatch.setattr("dels_hub.generation.decode.width_may_follow_drafts", lambda sampled_drafts: True)
    target = small["qwen3"]
    table = CostModel(key={}, verify_ms=[10.0] * 4, draft_ms=0.0, refine=False)
    generator = DeLSGenerator(target, make_dflash(4, SMALL_VOCAB - 1, vocab=SMALL_VOCAB), small["head"],
                              small["tokenizer"], policy=PeekingPolicy(table), draft_mode="sampled")
    input_ids, samples = small_prompts(count=1)[0], 2500
    expected = exact_distribution(target, input_ids, Warping(0.7, 4, 1.0), 3)
    counts = sampled_counts(generator, input_ids, samples, 3, temperature=0.7, top_k=4, top_p=1.0)
    assert chi_square_pvalue(counts, expected, samples) < 1e-6


def accept_every_top_draft(draft_ids, p_target, generator=None, draws=None):
    """A biased matcher (negative control): keeps every top-token draft, so the output leans to the drafter."""
    return torch.cat([draft_ids, draws[..., -1:]], dim=-1), torch.full(draft_ids.shape[:-1], draft_ids.shape[-1])


@pytest.mark.parametrize("draft_mode, verifier, biased", [
    ("sampled", "dels_hub.verify.verify_rejection", accept_everything),
    ("top", "dels_hub.generation.decode.verify_match", accept_every_top_draft),
])
def test_negative_control_biased_verifier_is_detected(small, monkeypatch, draft_mode, verifier, biased):
    target = small["qwen3"]
    generator = DeLSGenerator(target, make_dflash(4, SMALL_VOCAB - 1, vocab=SMALL_VOCAB), small["head"],
                              small["tokenizer"], policy="fixed", draft_mode=draft_mode)
    monkeypatch.setattr(verifier, biased)
    input_ids, samples = small_prompts(count=1)[0], 2500
    warping = Warping(0.7, 4, 1.0)
    expected = exact_distribution(target, input_ids, warping, 3)
    counts = sampled_counts(generator, input_ids, samples, 3, temperature=0.7, top_k=4, top_p=1.0)
    assert chi_square_pvalue(counts, expected, samples) < 1e-6


@pytest.mark.parametrize("biased", [False, True], ids=["exact", "negative-control"])
def test_copy_blocks_at_t_above_0_keep_the_target_distribution(small, monkeypatch, biased):
    """Copy blocks (the copy expert's continuation, no drafter) under top-token matching: the target's distribution.
    Negative control: a matcher that keeps every copied draft leans to the copies, and the test sees it."""
    target = small["qwen3"]
    policy = CostAware(CostModel(key={}, verify_ms=[1.0] * 4, draft_ms=1e6, refine=False))  # never drafts
    for length in range(1, policy.copy_acceptance.bins):  # and copies at any match (a copy was seen to land)
        policy.copy_acceptance.update(length, True)
    generator = DeLSGenerator(target, make_dflash(4, SMALL_VOCAB - 1, vocab=SMALL_VOCAB), small["head"],
                              small["tokenizer"], copy_ngram=2, policy=policy)
    if biased:
        monkeypatch.setattr("dels_hub.generation.decode.verify_match", accept_every_top_draft)
    phrase = small_prompts(count=1, length=3, seed=11)[0]
    input_ids, samples = phrase.repeat(1, 3)[:, :8], 2500
    expected = exact_distribution(target, input_ids, Warping(0.7, 4, 1.0), 3)
    out = generator.generate(input_ids, max_new_tokens=3, do_sample=True, temperature=0.7, top_k=4,
                             return_dict_in_generate=True)
    assert out.policy_summary["copy_blocks"] >= 1 and out.policy_summary["drafted_blocks"] == 0
    counts = sampled_counts(generator, input_ids, samples, 3, temperature=0.7, top_k=4, top_p=1.0)
    pvalue = chi_square_pvalue(counts, expected, samples)
    assert pvalue < 1e-6 if biased else pvalue > 1e-3


def test_seeded_sampling_is_reproducible(small):
    generator = DeLSGenerator(small["qwen3"], make_dflash(8, SMALL_VOCAB - 1, vocab=SMALL_VOCAB), small["head"],
                              small["tokenizer"], copy_ngram=2)
    input_ids = small_prompts(count=1)[0]
    runs = [generator.generate(input_ids, max_new_tokens=20, do_sample=True, temperature=0.9, seed=5) for _ in range(2)]
    assert torch.equal(*runs)
    # Top-token drafts take keyed draws: the text depends on the seed alone, not on which blocks the policy drafted
    # or how many drafts it verified, so fixed blocks, the cost-aware policy and block size 1 all write it.
    for policy, block_size in (("fixed", None), ("fixed", 3), ("cost-aware", None), ("cost-aware", 1)):
        again = generator.generate(input_ids, max_new_tokens=20, do_sample=True, temperature=0.9, seed=5,
                                   policy=policy, block_size=block_size)
        assert torch.equal(again, runs[0])
    other = generator.generate(input_ids, max_new_tokens=20, do_sample=True, temperature=0.9, seed=6)
    assert not torch.equal(other, runs[0])  # the seed matters
    # Sampled drafts draw from the generator's stream: reproducible under fixed blocks.
    sampled = [generator.generate(input_ids, max_new_tokens=20, do_sample=True, temperature=0.9, seed=5,
                                  policy="fixed", draft_mode="sampled") for _ in range(2)]
    assert torch.equal(*sampled)


# ---- API ------------------------------------------------------------------------------------------


def test_from_pretrained_local_paths_and_return_dict(tmp_path, small):
    target, tokenizer = small["qwen3"], small["tokenizer"]
    target.save_pretrained(tmp_path / "target")
    tokenizer.save_pretrained(tmp_path / "target")
    make_dflash(8, SMALL_VOCAB - 1, vocab=SMALL_VOCAB).save_pretrained(tmp_path / "dflash")
    small["head"].save_pretrained(tmp_path / "head")
    generator = DeLSGenerator.from_pretrained(tmp_path / "target", tmp_path / "dflash", tmp_path / "head",
                                              dtype=torch.float32, alpha=0.5)
    input_ids = small_prompts(count=1)[0]
    out = generator.generate(input_ids, max_new_tokens=16, return_dict_in_generate=True)
    assert torch.equal(out.sequences, target.generate(input_ids, max_new_tokens=16, do_sample=False))
    assert out.num_new_tokens == 16 and out.tau >= 1.0 and out.tokens_per_second > 0
    assert out.time_to_first_token > 0 and out.decode_seconds > 0


def test_streamer_receives_the_new_text(small):
    tokenizer = small["tokenizer"]
    generator = DeLSGenerator(small["qwen3"], make_dflash(8, SMALL_VOCAB - 1, vocab=SMALL_VOCAB), small["head"], tokenizer)
    input_ids = small_prompts(count=1)[0]
    streamer = TextIteratorStreamer(tokenizer, skip_prompt=True)
    out = generator.generate(input_ids, max_new_tokens=12, streamer=streamer)
    streamed = "".join(streamer)
    assert streamed.split() == tokenizer.decode(out[0, input_ids.shape[1]:]).split()


@pytest.mark.parametrize(
    "kwargs, error, message",
    [
        (dict(do_sample=True, temperature=0.0), GenerationArgumentError, "temperature must be > 0"),
        (dict(do_sample=True, top_p=1.5), GenerationArgumentError, "top_p must be in"),
        (dict(num_beams=4), GenerationArgumentError, "num_beams=4 is not supported"),
        (dict(repetition_penalty=1.2), GenerationArgumentError, "repetition_penalty"),
        (dict(frobnicate=1), GenerationArgumentError, "unknown generation arguments"),
        (dict(max_new_tokens=0), GenerationArgumentError, "max_new_tokens"),
        (dict(max_new_tokens="5"), GenerationArgumentError, "max_new_tokens must be an integer, got '5'"),
        (dict(do_sample=True, temperature="0.7"), GenerationArgumentError, "temperature must be a number"),
        (dict(do_sample=1), GenerationArgumentError, "do_sample must be True or False, got 1"),
        (dict(block_size=2.5), BlockSizeError, "block_size must be an integer, got 2.5"),
    ],
)
def test_bad_generation_arguments_fail_before_work(small, kwargs, error, message):
    generator = DeLSGenerator(small["qwen3"], make_dflash(8, SMALL_VOCAB - 1, vocab=SMALL_VOCAB), None)
    with pytest.raises(error, match=message):
        generator.generate(small_prompts(count=1)[0], **kwargs)


def test_bad_inputs(small):
    generator = DeLSGenerator(small["qwen3"], make_dflash(8, SMALL_VOCAB - 1, vocab=SMALL_VOCAB), None)
    with pytest.raises(UnsupportedInputError, match=r"shape \(1, 2, 4\); expected \[B, N\]"):
        generator.generate(torch.zeros(1, 2, 4, dtype=torch.long), max_new_tokens=2)
    with pytest.raises(UnsupportedInputError, match="expected left padding"):  # batches: tests/test_batch.py
        generator.generate(torch.zeros(1, 4, dtype=torch.long), attention_mask=torch.tensor([[1, 1, 1, 0]]))
    with pytest.raises(UnsupportedInputError, match="empty"):
        generator.generate(torch.zeros(1, 0, dtype=torch.long))
    with pytest.raises(UnsupportedInputError, match="integer token ids.*got torch.float32"):
        generator.generate(torch.ones(1, 4), max_new_tokens=2)
    with pytest.raises(UnsupportedInputError, match=f"token id {SMALL_VOCAB}, outside the target's embedding rows"):
        generator.generate(torch.tensor([[1, SMALL_VOCAB]]), max_new_tokens=2)
    with pytest.raises(UnsupportedInputError, match="token id -1"):
        generator.generate(torch.tensor([[1, -1]]), max_new_tokens=2)


# ---- compatibility, checked once at construction ------------------------------------------------------


def test_compatibility_errors_name_both_values():
    tokenizer = make_tokenizer()
    target = make_target("qwen3")  # 6 layers, hidden 64, 96 embedding rows
    cases = [
        (make_dflash(mask_token_id=VOCAB), None, tokenizer, MaskTokenOutOfRangeError, f"mask_token_id {VOCAB}.*{VOCAB} rows"),
        (make_dflash(target_layer_ids=[1, 6]), None, tokenizer, TargetLayerOutOfRangeError, r"\[6\].*6 layers"),
        (make_dflash(block_size=1), None, tokenizer, BlockSizeError, "block_size is 1"),
        (make_dflash(vocab=VOCAB + 1), None, tokenizer, VocabSizeMismatchError, f"{VOCAB + 1} > target embedding rows {VOCAB}"),
        (make_dflash(), make_head(vocab=VOCAB + 8), tokenizer, VocabSizeMismatchError, f"{VOCAB + 8} > target embedding rows"),
        (make_dflash(), make_head(make_tokenizer(prefix="w")), tokenizer, IncompatibleTokenizerError, "vocab 92, sha256"),
        (make_dflash(), make_head(tokenizer), None, MissingTokenizerError, "tokenizer="),
    ]
    for drafter, head, tok, error, message in cases:
        with pytest.raises(error, match=message):
            DeLSGenerator(target, drafter, head, tok)
    wide = make_dflash()
    wide.config.hidden_size = 128
    with pytest.raises(HiddenSizeMismatchError, match="128 != target hidden_size 64"):
        DeLSGenerator(target, wide, None, tokenizer)


def test_fusion_schedule_is_validated_at_construction(small):
    drafter = make_dflash(8, SMALL_VOCAB - 1, vocab=SMALL_VOCAB)
    with pytest.raises(ValueError, match="alpha schedule has 3 values but 6 fused positions"):
        DeLSGenerator(small["qwen3"], drafter, small["head"], small["tokenizer"], alpha=[0.1, 0.2, 0.3])


def test_a_drafter_or_head_in_another_dtype_is_refused_at_construction(small):
    target, tokenizer = small["qwen3"], small["tokenizer"]
    drafter = make_dflash(8, SMALL_VOCAB - 1, vocab=SMALL_VOCAB)
    with pytest.raises(DtypeMismatchError, match=r"the drafter is torch.bfloat16 but the target is torch.float32"):
        DeLSGenerator(target, drafter.to(torch.bfloat16), None, tokenizer)
    head = make_head(tokenizer, vocab=SMALL_VOCAB - 2).to(torch.bfloat16)
    with pytest.raises(DtypeMismatchError, match="the head is torch.bfloat16"):
        DeLSGenerator(target, drafter.to(torch.float32), head, tokenizer)
