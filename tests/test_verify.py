"""Fusion, warping and the two verifiers, in isolation (p = target, q = draft)."""

import pytest
import torch
from transformers.generation.logits_process import TemperatureLogitsWarper, TopKLogitsWarper, TopPLogitsWarper

from dels_hub import Warping, fuse_logits, fusion_weights, sample, verify_greedy, verify_rejection, warp_probs
from dels_hub.errors import FusionScheduleError


def test_fusion_formula_and_vocab_padding():
    L, S, prior = torch.randn(3, 10), torch.randn(3, 8), torch.randn(8)
    fused = fuse_logits(L, S, prior, 0.5, 0.2)
    assert torch.allclose(fused[:, :8], L[:, :8] + 0.5 * S - 0.2 * prior, atol=1e-6)  # float32 rounding order
    assert torch.equal(fused[:, 8:], L[:, 8:])  # ids the head does not know keep the DFlash logits


def test_fusion_weights_pure_prefix_and_schedules():
    alpha, beta = fusion_weights([0.1, 0.2, 0.3, 0.4], 0.5, pure_prefix_len=1, num_draft_positions=4)
    assert alpha.tolist() == pytest.approx([0.0, 0.1, 0.2, 0.3]) and beta.tolist() == pytest.approx([0, 0.5, 0.5, 0.5])
    L, S, prior = torch.randn(10), torch.randn(10), torch.randn(10)
    assert torch.equal(fuse_logits(L, S, prior, alpha[0], beta[0]), L)  # the pure prefix is DFlash alone
    with pytest.raises(FusionScheduleError, match="2 values but 3 fused positions"):
        fusion_weights([0.1, 0.2], 0.3, pure_prefix_len=1, num_draft_positions=4)
    with pytest.raises(FusionScheduleError, match="non-finite"):
        fusion_weights(float("nan"), 0.3, pure_prefix_len=1, num_draft_positions=4)


@pytest.mark.parametrize("temperature, top_k, top_p", [(0.7, 0, 1.0), (1.0, 5, 1.0), (0.7, 0, 0.8), (1.3, 20, 0.5)])
def test_warping_matches_transformers_processors(temperature, top_k, top_p):
    logits = torch.randn(4, 64) * 3
    expected = TemperatureLogitsWarper(temperature)(None, logits.clone())
    if top_k:
        expected = TopKLogitsWarper(top_k)(None, expected)
    if top_p < 1:
        expected = TopPLogitsWarper(top_p)(None, expected)
    ours = warp_probs(logits, Warping(temperature, top_k, top_p))
    assert torch.allclose(ours, expected.softmax(-1), atol=1e-6)


def test_exponential_race_samples_the_distribution():
    probs = torch.tensor([0.5, 0.3, 0.15, 0.05])
    draws = sample(probs.expand(200_000, 4), torch.Generator().manual_seed(0))
    freq = torch.bincount(draws, minlength=4).float() / draws.numel()
    assert (freq - probs).abs().max() < 0.005


def test_verify_greedy_accepts_the_matching_prefix():
    logits = torch.full((4, 6), -5.0)
    target_ids = [2, 4, 1, 5]
    logits[range(4), target_ids] = 5.0
    tokens, n = verify_greedy(torch.tensor([2, 4, 3]), logits)
    assert n.item() == 2 and tokens[:3].tolist() == [2, 4, 1]
    tokens, n = verify_greedy(torch.tensor([2, 4, 1]), logits)
    assert n.item() == 3 and tokens.tolist() == target_ids


def accept_everything(draft_ids, q_draft, p_target, generator=None):
    """A biased verifier: it never rejects, so its output follows q, not p."""
    bonus = sample(p_target[-1:], generator)
    return torch.cat([draft_ids, bonus]), torch.tensor(draft_ids.shape[0])


def committed_distribution(verifier, p, q, samples, seed=0):
    """Frequency of the first committed token after one block of k = 1 draft."""
    generator = torch.Generator().manual_seed(seed)
    drafts = sample(q.expand(samples, -1), generator)
    counts = torch.zeros(p.shape[-1])
    for i in range(samples):
        tokens, _ = verifier(drafts[i : i + 1], q[None], p.expand(2, -1), generator)
        counts[tokens[0]] += 1
    return counts / samples


@pytest.mark.parametrize("verifier, should_match", [(verify_rejection, True), (accept_everything, False)])
def test_rejection_sampling_preserves_p_and_the_test_catches_a_biased_verifier(verifier, should_match):
    p = torch.tensor([0.05, 0.4, 0.25, 0.2, 0.1, 0.0])
    q = torch.tensor([0.3, 0.1, 0.1, 0.2, 0.2, 0.1])
    freq = committed_distribution(verifier, p, q, samples=20_000)
    total_variation = 0.5 * (freq - p).abs().sum().item()
    assert (total_variation < 0.02) is should_match, total_variation


def test_rejection_sampling_of_a_whole_block_matches_p_jointly():
    """k = 2 drafts from position-dependent q; the first two committed tokens follow p jointly."""
    torch.manual_seed(0)
    vocab, samples = 4, 20_000
    p = torch.softmax(torch.randn(3, vocab), -1)  # context-free target rows, so the joint is p0 x p1
    q = torch.softmax(torch.randn(2, vocab), -1)
    generator = torch.Generator().manual_seed(1)
    counts = torch.zeros(vocab, vocab)
    for _ in range(samples):
        drafts = sample(q, generator)
        tokens, n = verify_rejection(drafts, q, p, generator)
        if n.item() >= 1:
            counts[tokens[0], tokens[1]] += 1
        else:  # after a rejection at slot 0 the next token comes from the next block: draw it from p1
            counts[tokens[0], sample(p[1], generator)] += 1
    expected = p[0][:, None] * p[1][None, :]
    assert 0.5 * (counts / samples - expected).abs().sum() < 0.03


def test_keyed_draws_follow_the_distribution_and_depend_on_key_row_and_position_alone():
    from scipy.stats import chisquare

    from dels_hub.sampling import keyed_sample

    probs = torch.tensor([0.5, 0.25, 0.125, 0.0, 0.125])
    positions = torch.arange(40000).view(1, -1)
    key = torch.tensor(12345)
    ids = keyed_sample(probs.expand(1, 40000, 5), key, torch.tensor([0]), positions)
    counts = torch.bincount(ids.flatten(), minlength=5).tolist()
    assert counts[3] == 0
    kept = [0, 1, 2, 4]
    assert chisquare([counts[i] for i in kept], [40000 * probs[i].item() for i in kept]).pvalue > 1e-3
    # The same (key, row, position) gives the same draw in any shape of call; another key or row does not.
    again = keyed_sample(probs.expand(1, 7, 5), key, torch.tensor([0]), positions[:, 100:107])
    assert torch.equal(again, ids[:, 100:107])
    other_key = keyed_sample(probs.expand(1, 40000, 5), torch.tensor(54321), torch.tensor([0]), positions)
    other_row = keyed_sample(probs.expand(1, 40000, 5), key, torch.tensor([1]), positions)
    assert (other_key != ids).float().mean() > 0.3 and (other_row != ids).float().mean() > 0.3
