"""Draft-vocabulary pruning: the drafter scores only some tokens, and decoding stays exact."""

from functools import partial

import pytest
import torch
from test_copy_expert import repeating_prompts
from test_generation import accept_everything, chi_square_pvalue, exact_distribution, sampled_counts
from torch import nn

from dels_hub import CopyChain, CopySettings, DeLSGenerator
from dels_hub.draft_vocabulary import DraftVocabulary, most_frequent
from dels_hub.errors import DraftVocabularyError
from dels_hub.fusion import fuse_logits, fusion_weights
from dels_hub.generation.drafting import propose
from dels_hub.sampling import Warping

from conftest import SMALL_VOCAB, VOCAB, make_dflash, make_tokenizer, small_prompts


def test_pruned_logits_are_the_full_ones_on_the_kept_tokens():
    torch.manual_seed(0)
    for bias in (False, True):
        lm_head = nn.Linear(8, 20, bias=bias)
        kept = torch.tensor([1, 4, 5, 17])
        hidden = torch.randn(2, 3, 8)
        pruned = DraftVocabulary(lm_head, kept)(hidden)
        full = lm_head(hidden)
        torch.testing.assert_close(pruned[..., kept], full[..., kept])
        dropped = torch.ones(20, dtype=torch.bool)
        dropped[kept] = False
        assert torch.isneginf(pruned[..., dropped]).all()
    assert most_frequent(torch.tensor([3.0, 9.0, 1.0, 7.0]), 2).tolist() == [1, 3]


def test_with_a_head_the_unpruned_candidate_is_fused_like_any_token(small):
    torch.manual_seed(0)
    head = small["head"]
    lm_head = nn.Linear(8, SMALL_VOCAB, bias=False)
    vocabulary = DraftVocabulary(lm_head, torch.tensor([0, 1, 2]))
    slot_hidden = torch.randn(1, 3, 8)
    tokens = torch.tensor([[5, 7, 3, 5]])  # the anchor 5 repeats position 0, followed by 7 (pruned)
    chain = CopyChain(tokens, 3, CopySettings(max_ngram=2, gamma=6.0).weights(),
                      partial(vocabulary.token_logits, slot_hidden))
    alpha, beta = fusion_weights(0.8, 0.3, 0, 3)
    log_prior = head.log_prior()
    fused = torch.empty(1, 3, SMALL_VOCAB)
    propose(vocabulary(slot_hidden), tokens[:, 3], Warping(), None, head, log_prior, alpha, beta, copy=chain,
            fused=fused)
    head_logits, _ = head.step(tokens[:, 3], head.initial_state(1))
    expected = fuse_logits(lm_head(slot_hidden)[:, 0], head_logits, log_prior, alpha[0], beta[0])[0, 7] + 3.0
    torch.testing.assert_close(fused[0, 0, 7], expected)


@pytest.mark.parametrize("block_size", [2, 4, 8])
def test_greedy_output_with_a_pruned_draft_vocabulary_is_the_targets(qwen_target, block_size):
    tokenizer = make_tokenizer()
    drafter = make_dflash(block_size, VOCAB - 1, seed=5)
    # The tokens the target itself produces on these prompts, and then the same set without them.
    prompts = repeating_prompts(qwen_target, count=3)
    answers = [qwen_target.generate(ids, max_new_tokens=24, do_sample=False) for ids in prompts]
    produced = torch.cat([a[0, ids.shape[1]:] for a, ids in zip(answers, prompts)]).unique()
    others = torch.tensor([t for t in range(VOCAB) if t not in set(produced.tolist())])
    accepted = {}
    for name, vocab, copy_ngram in (("produced", produced, 3), ("others", others, 0), ("others + copy", others, 3)):
        generator = DeLSGenerator(qwen_target, drafter, None, tokenizer, copy_ngram=copy_ngram, copy_gamma=50.0,
                                  draft_vocab=vocab, policy="fixed", draft_mode="sampled")
        accepted[name] = 0
        for ids, expected in zip(prompts, answers):
            for fast in (True, False):
                out = generator.generate(ids, max_new_tokens=24, fast=fast, return_dict_in_generate=True)
                assert torch.equal(out.sequences, expected), (name, fast)
            accepted[name] += sum(n - 1 for n in out.acceptance_lengths)
    # Keeping none of the target's tokens, the drafter alone gets nothing accepted; the copy expert's candidates
    # bypass the pruning, so with it the same vocabulary gets copies accepted.
    assert accepted["others"] == 0
    if block_size > 2:
        assert accepted["produced"] > 10 and accepted["others + copy"] > 10, accepted


def test_a_copied_token_outside_the_draft_vocabulary_is_scored_by_its_full_row():
    torch.manual_seed(0)
    lm_head = nn.Linear(8, 20, bias=True)
    vocabulary = DraftVocabulary(lm_head, torch.tensor([1, 4, 5, 17]))
    slot_hidden = torch.randn(1, 3, 8)
    tokens = torch.tensor([[7, 9, 2, 7]])  # the anchor 7 (position 3) repeats position 0, followed by 9 (pruned)
    weights = CopySettings(max_ngram=2, gamma=6.0).weights()
    logits = vocabulary(slot_hidden)[:, 0]
    chain = CopyChain(tokens, 3, weights, partial(vocabulary.token_logits, slot_hidden))
    candidate = chain.candidate()
    assert candidate[0].tolist() == [[9]] and candidate[1].tolist() == [[3.0]]  # gamma(1) = 6 * 1/2
    unpruned = chain.unprune(logits, candidate)
    full = lm_head(slot_hidden)[:, 0]
    torch.testing.assert_close(unpruned[0, 9], full[0, 9])  # the DFlash logit, before any fusion
    torch.testing.assert_close(unpruned[0, [1, 4, 5, 17]], logits[0, [1, 4, 5, 17]])
    assert torch.isneginf(unpruned[0, [0, 2, 3, 7]]).all()
    torch.testing.assert_close(chain.vote(unpruned, candidate)[0, 9], full[0, 9] + 3.0)
    # Without the full row, the copy's vote cannot lift a pruned token: the pruning would veto the text.
    pruned_only = CopyChain(tokens, 3, weights)
    assert torch.isneginf(pruned_only.vote(pruned_only.unprune(logits, candidate))[0, 9])


def test_draft_vocab_n_keeps_the_heads_most_frequent_tokens(small):
    drafter = make_dflash(4, SMALL_VOCAB - 1, vocab=SMALL_VOCAB)
    generator = DeLSGenerator(small["qwen3"], drafter, small["head"], small["tokenizer"], draft_vocab=5, policy="fixed", draft_mode="sampled")
    assert generator.draft_lm_head.token_ids.tolist() == most_frequent(small["head"].unigram_counts, 5).tolist()
    for input_ids in small_prompts(count=2):
        expected = small["qwen3"].generate(input_ids, max_new_tokens=12, do_sample=False)
        assert torch.equal(generator.generate(input_ids, max_new_tokens=12), expected)


@pytest.mark.parametrize("copy_ngram", [0, 2])
def test_compiled_draft_step_with_a_pruned_vocabulary_equals_eager(small, copy_ngram):
    drafter = make_dflash(4, SMALL_VOCAB - 1, vocab=SMALL_VOCAB, seed=5)
    options = {"draft_vocab": 6, "copy_ngram": copy_ngram}
    eager = DeLSGenerator(small["qwen3"], drafter, small["head"], small["tokenizer"], **options, policy="fixed", draft_mode="sampled")
    compiled = DeLSGenerator(small["qwen3"], drafter, small["head"], small["tokenizer"], **options, policy="fixed", draft_mode="sampled")
    compiled.compile = True
    for input_ids in small_prompts(count=2):
        input_ids = torch.cat([input_ids] * 2, dim=1)  # repeats, so the copy expert votes
        a = eager.generate(input_ids, max_new_tokens=16, fast=True, return_dict_in_generate=True)
        b = compiled.generate(input_ids, max_new_tokens=16, return_dict_in_generate=True)
        assert torch.equal(a.sequences, b.sequences) and a.acceptance_lengths == b.acceptance_lengths


def pruned_generator(small):
    drafter = make_dflash(4, SMALL_VOCAB - 1, vocab=SMALL_VOCAB)
    return DeLSGenerator(small["qwen3"], drafter, small["head"], small["tokenizer"], draft_vocab=4, policy="fixed", draft_mode="sampled")


def test_sampling_with_a_pruned_vocabulary_matches_the_target_distribution(small):
    input_ids = small_prompts(count=1)[0]
    samples, new_tokens = 2500, 3
    expected = exact_distribution(small["qwen3"], input_ids, Warping(0.8, 0, 1.0), new_tokens)
    counts = sampled_counts(pruned_generator(small), input_ids, samples, new_tokens, temperature=0.8, top_k=0)
    assert chi_square_pvalue(counts, expected, samples) > 1e-3


def test_negative_control_accepting_pruned_drafts_unchecked_is_detected(small, monkeypatch):
    # Accept every draft: the output then follows the pruned, fused q, which cannot even reach most tokens.
    monkeypatch.setattr("dels_hub.verify.verify_rejection", accept_everything)
    input_ids = small_prompts(count=1)[0]
    samples, new_tokens = 2500, 3
    expected = exact_distribution(small["qwen3"], input_ids, Warping(0.8, 0, 1.0), new_tokens)
    counts = sampled_counts(pruned_generator(small), input_ids, samples, new_tokens, temperature=0.8, top_k=0)
    assert chi_square_pvalue(counts, expected, samples) < 1e-6


def test_bad_draft_vocabularies_are_refused_when_the_generator_is_built(small):
    drafter = make_dflash(4, SMALL_VOCAB - 1, vocab=SMALL_VOCAB)
    parts = (small["qwen3"], drafter)
    cases = [
        ({"draft_vocab": 5}, "there is no head"),
        ({"draft_vocab": torch.tensor([1, SMALL_VOCAB])}, f"token id {SMALL_VOCAB}, outside"),
        ({"draft_vocab": torch.tensor([1, 2, 2])}, "repeats 1 token ids"),
        ({"draft_vocab": torch.tensor([0.5, 1.0])}, "integer token ids"),
        ({"draft_vocab": torch.tensor([], dtype=torch.long)}, "non-empty"),
    ]
    for options, message in cases:
        with pytest.raises(DraftVocabularyError, match=message):
            DeLSGenerator(*parts, None, small["tokenizer"], **options, policy="fixed", draft_mode="sampled")
    with pytest.raises(DraftVocabularyError, match=r"draft_vocab must be in 1\.\.10"):
        DeLSGenerator(*parts, small["head"], small["tokenizer"], draft_vocab=11, policy="fixed", draft_mode="sampled")


def test_draft_vocab_without_a_head_fails_before_anything_loads(tmp_path):
    with pytest.raises(DraftVocabularyError, match="there is no head"):
        DeLSGenerator.from_pretrained(str(tmp_path), str(tmp_path / "no-drafter"), None, draft_vocab=100)
