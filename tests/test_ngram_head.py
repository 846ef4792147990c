"""The n-gram baseline: a proper interpolated Kneser-Ney distribution, that reads a block as a head does."""

import pytest
import torch

from dels_hub.heads.ngram import NGramHead
from dels_hub.training.data import slot_weights
from dels_hub.training.head import HeadObjective

VOCAB = 12


def sequences(*texts):
    return [(torch.tensor(ids), torch.ones(len(ids), dtype=torch.bool)) for ids in texts]


def test_every_distribution_sums_to_one_and_gives_every_token_mass():
    model = NGramHead.fit(sequences([1, 2, 3, 4, 1, 2, 3, 5, 1, 2, 6]), VOCAB, order=4)
    for context in [(), (1,), (7,), (1, 2), (9, 9), (1, 2, 3), (8, 2, 3)]:
        probs = model.distribution(context)
        assert probs.sum().item() == pytest.approx(1.0, abs=1e-12), context
        assert (probs > 0).all(), context


def test_the_interpolation_is_kneser_neys():
    """After (2,) the raw counts are {3: 2, 6: 1}: P(3 | 2) = (2 - D) / 3 + (D * 2 / 3) * P_continuation(3)."""
    model = NGramHead.fit(sequences([1, 2, 3, 4, 1, 2, 3, 5, 1, 2, 6]), VOCAB, order=2)
    discount = model.discounts[2]
    unigram = model.distribution(())
    expected = (2 - discount) / 3 + discount * 2 / 3 * unigram[3].item()
    assert model.distribution((2,))[3].item() == pytest.approx(expected, rel=1e-12)
    # Token 3 follows only 2, token 1 follows 4, 5 and nothing: the continuation unigram counts predecessors.
    assert unigram[1].item() > unigram[3].item()


def test_it_reads_only_the_blocks_earlier_tokens_up_to_its_order():
    text = [1, 2, 3, 4, 5, 6, 7, 8, 9, 10] * 3
    four, two = (NGramHead.fit(sequences(text), VOCAB + 1, order=n) for n in (4, 2))
    block = torch.tensor([[3, 4, 5, 6, 7]])
    for model in (four, two):
        logits = model(block)
        assert logits.shape == (1, 5, VOCAB + 1)
        assert logits[0].argmax(-1).tolist() == [4, 5, 6, 7, 8]  # a deterministic text: every order gets it
    # Slot 0 sees only the anchor, whatever the order: both score it as a bigram.
    assert torch.allclose(four(block)[0, 0], two(block)[0, 0])
    # A token seen in a longer context is more certain under the 4-gram once the block holds that context.
    assert four(block)[0, 3, 7] > two(block)[0, 3, 7]


def test_only_ngrams_that_end_on_a_supervised_token_count():
    ids = torch.tensor([1, 2, 3, 1, 2, 4])
    model = NGramHead.fit([(ids, torch.tensor([True, True, False, True, True, True]))], VOCAB, order=2)
    assert model.raw[2].next[(2,)] == {4: 1}


def test_it_is_scored_as_a_head_is():
    model = NGramHead.fit(sequences([1, 2, 3, 4] * 5), VOCAB, order=3)
    tokens = torch.tensor([[1, 2, 3, 4], [2, 3, 4, 1]])
    loss, stats = HeadObjective(model, slot_weights(4, 7.0))(tokens, torch.ones_like(tokens, dtype=torch.bool))
    assert stats["correct"].tolist() == [2.0, 2.0, 2.0] and loss.item() < 0.5


def test_an_order_below_two_is_refused():
    with pytest.raises(ValueError, match="order must be >= 2"):
        NGramHead(VOCAB, order=1)
