"""The copy expert: its matcher against plain Python, its settings, and losslessness with it on."""

import random

import pytest
import torch
from test_generation import chi_square_pvalue, exact_distribution, sampled_counts

from dels_hub import DeLSGenerator
from dels_hub.copy_expert import CopyChain, CopySettings
from dels_hub.errors import FusionScheduleError
from dels_hub.sampling import Warping

from conftest import SMALL_VOCAB, VOCAB, make_dflash, make_head, make_tokenizer, small_prompts


def reference_vote(committed: list[int], drafts: list[int], max_ngram: int) -> tuple[int | None, int]:
    """The longest (then most recent) suffix of ``committed + drafts``, up to ``max_ngram`` tokens, that also
    ends at a committed position j < anchor -> ``(committed[j + 1], length)``; ``(None, 0)`` without a match."""
    chain = committed + drafts
    best = (0, -1)
    for j in range(len(committed) - 1):  # the anchor is committed[-1]: j + 1 must be committed
        length = 0
        while length < max_ngram and j - length >= 0 and committed[j - length] == chain[-1 - length]:
            length += 1
        best = max(best, (length, j))
    length, j = best
    return (committed[j + 1], length) if length else (None, 0)


@pytest.mark.parametrize("max_ngram", [1, 2, 3, 5])
def test_matcher_equals_a_plain_python_reference(max_ngram):
    """Three rows at a time (a batch), each with its own anchor, against the reference row by row."""
    rng = random.Random(max_ngram)
    weights = torch.arange(max_ngram + 1, dtype=torch.float32) * 10.0  # gamma(m) = 10 m: the vote names m
    votes_with_a_match = 0
    for _ in range(120):
        alphabet = rng.choice([2, 3, 5, 20])
        shared = rng.random() < 0.5  # one host-int anchor for every row, or a device tensor of anchors
        anchors = [rng.randrange(0, 40)] * 3 if shared else [rng.randrange(0, 40) for _ in range(3)]
        committed = [[rng.randrange(alphabet) for _ in range(anchor + 1)] for anchor in anchors]
        # The buffer past each anchor holds garbage that the matcher must never read.
        width = max(anchors) + 10
        buffer = torch.tensor([row + [rng.randrange(alphabet) for _ in range(width - len(row))] for row in committed])
        chain = CopyChain(buffer, anchors[0] if shared else torch.tensor(anchors), weights)
        drafts = [[], [], []]
        for _ in range(6):
            voted = chain.vote(torch.zeros(3, alphabet + 1))
            chosen = []
            for row in range(3):
                token, length = reference_vote(committed[row], drafts[row], max_ngram)
                if token is None:
                    assert not voted[row].any()
                else:
                    votes_with_a_match += 1
                    expected = torch.zeros(alphabet + 1)
                    expected[token] = 10.0 * length
                    assert torch.equal(voted[row], expected), (committed[row], drafts[row], token, length, voted)
                follow = token is not None and rng.random() < 0.7
                chosen.append(token if follow else rng.randrange(alphabet))
                drafts[row].append(chosen[-1])
            chain.extend(torch.tensor(chosen))
    assert votes_with_a_match > 500


def test_settings_are_validated_and_expand_gamma():
    assert CopySettings(4, 8.0).per_length() == [2.0, 4.0, 6.0, 8.0]
    assert CopySettings(2, [1.0, 5.0]).weights().tolist() == [0.0, 1.0, 5.0]
    assert CopySettings(0).weights() is None and CopySettings(3, 0.0).weights() is None
    for bad, message in [(dict(max_ngram=-1), "max_ngram must be an int >= 0"),
                         (dict(max_ngram=2.5), "max_ngram must be an int"),
                         (dict(max_ngram=3, gamma=[1.0, 2.0]), "2 values but max_ngram is 3"),
                         (dict(max_ngram=2, gamma=-1.0), "finite and >= 0"),
                         (dict(max_ngram=2, gamma=[1.0, float("nan")]), "finite and >= 0")]:
        with pytest.raises(FusionScheduleError, match=message):
            CopySettings(**bad)


def repeating_prompts(target, count=4, length=8, copied=24, seed=11):
    """Prompts that repeat: ``p + target_greedy(p) + p``. The repeated prompt and the tiny target's own greedy
    loops (it falls into short cycles) give the copy expert something to copy."""
    generator = torch.Generator().manual_seed(seed)
    prompts = []
    for _ in range(count):
        p = torch.randint(0, VOCAB - 6, (1, length), generator=generator)
        continuation = target.generate(p, max_new_tokens=copied, do_sample=False)
        prompts.append(torch.cat([continuation, p], dim=1))
    return prompts


@pytest.mark.parametrize("block_size", [2, 4, 8])
@pytest.mark.parametrize("with_head", [False, True])
def test_greedy_with_the_copy_expert_equals_the_target_and_copies_are_accepted(qwen_target, block_size,
                                                                               with_head):
    target = qwen_target
    tokenizer = make_tokenizer()
    head = make_head(tokenizer) if with_head else None
    drafter = make_dflash(block_size, VOCAB - 1, seed=5)  # random over 96 ids: it alone rarely gets accepted
    plain = DeLSGenerator(target, drafter, head, tokenizer, policy="fixed", draft_mode="sampled")
    copying = DeLSGenerator(target, drafter, head, tokenizer, copy_ngram=3, copy_gamma=50.0, policy="fixed", draft_mode="sampled")
    accepted = {"plain": 0, "copy": 0}
    for input_ids in repeating_prompts(target):
        expected = target.generate(input_ids, max_new_tokens=32, do_sample=False)
        for name, generator in (("plain", plain), ("copy", copying)):
            for fast in (True, False):
                out = generator.generate(input_ids, max_new_tokens=32, fast=fast, return_dict_in_generate=True)
                assert torch.equal(out.sequences, expected), (name, fast)
            accepted[name] += sum(n - 1 for n in out.acceptance_lengths)  # drafts accepted, bonus excluded
    if block_size > 2:
        assert accepted["copy"] > 2 * accepted["plain"] + 10, accepted


def test_copy_settings_per_call_override_the_generator(qwen_target):
    tokenizer = make_tokenizer()
    drafter = make_dflash(8, VOCAB - 1, seed=5)
    generator = DeLSGenerator(qwen_target, drafter, None, tokenizer, policy="fixed", draft_mode="sampled")
    input_ids = repeating_prompts(qwen_target, count=1)[0]
    off = generator.generate(input_ids, max_new_tokens=32, return_dict_in_generate=True)
    on = generator.generate(input_ids, max_new_tokens=32, copy_ngram=3, copy_gamma=50.0, return_dict_in_generate=True)
    assert torch.equal(off.sequences, on.sequences)
    assert len(on.acceptance_lengths) < len(off.acceptance_lengths)
    with pytest.raises(FusionScheduleError, match="copy gamma has 2 values but max_ngram is 3"):
        generator.generate(input_ids, max_new_tokens=4, copy_ngram=3, copy_gamma=[1.0, 2.0])
    with pytest.raises(FusionScheduleError, match="copy max_ngram must be an int >= 0"):
        DeLSGenerator(qwen_target, drafter, None, tokenizer, copy_ngram=-2, policy="fixed", draft_mode="sampled")


def test_compiled_draft_step_with_the_copy_expert_equals_eager(small):
    drafter = make_dflash(4, SMALL_VOCAB - 1, vocab=SMALL_VOCAB, seed=5)
    generator = DeLSGenerator(small["qwen3"], drafter, small["head"], small["tokenizer"], copy_ngram=2,
                              copy_gamma=4.0, policy="fixed", draft_mode="sampled")
    compiled = DeLSGenerator(small["qwen3"], drafter, small["head"], small["tokenizer"], copy_ngram=2,
                             copy_gamma=4.0, policy="fixed", draft_mode="sampled")
    compiled.compile = True
    for input_ids in small_prompts(count=2):
        eager = generator.generate(input_ids, max_new_tokens=20, fast=True, return_dict_in_generate=True)
        graph = compiled.generate(input_ids, max_new_tokens=20, return_dict_in_generate=True)
        assert torch.equal(graph.sequences, eager.sequences)
        assert graph.acceptance_lengths == eager.acceptance_lengths
        sampled = [g.generate(input_ids, max_new_tokens=20, do_sample=True, temperature=0.8, seed=3)
                   for g in (generator, compiled)]
        assert torch.equal(*sampled)  # on CPU the compiled step's races consume the generator as eager does


def small_copying_generator(small, with_head=True):
    drafter = make_dflash(4, SMALL_VOCAB - 1, vocab=SMALL_VOCAB)
    return DeLSGenerator(small["qwen3"], drafter, small["head"] if with_head else None, small["tokenizer"],
                         copy_ngram=2, copy_gamma=3.0, policy="fixed", draft_mode="sampled")


def test_sampling_with_the_copy_expert_matches_the_target_distribution(small):
    generator = small_copying_generator(small, with_head=False)  # the head's sequential path is tested below
    input_ids = torch.cat([small_prompts(count=1)[0]] * 2, dim=1)  # repeats, so the copy expert votes
    samples, new_tokens = 2500, 3
    expected = exact_distribution(small["qwen3"], input_ids, Warping(0.8, 0, 1.0), new_tokens)
    counts = sampled_counts(generator, input_ids, samples, new_tokens, temperature=0.8, top_k=0)
    assert chi_square_pvalue(counts, expected, samples) > 1e-3


def test_negative_control_sampling_q_instead_of_p_is_detected(small, monkeypatch):
    # Accept every draft: the output is then distributed as the fused, copy-biased q, not as the target.
    from test_generation import accept_everything

    generator = small_copying_generator(small)
    monkeypatch.setattr("dels_hub.verify.verify_rejection", accept_everything)
    input_ids = torch.cat([small_prompts(count=1)[0]] * 2, dim=1)
    samples, new_tokens = 2500, 3
    expected = exact_distribution(small["qwen3"], input_ids, Warping(0.8, 0, 1.0), new_tokens)
    counts = sampled_counts(generator, input_ids, samples, new_tokens, temperature=0.8, top_k=0)
    assert chi_square_pvalue(counts, expected, samples) < 1e-6
