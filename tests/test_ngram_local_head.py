"""The n-gram head as tensors: the same distribution as the counted model, loadable as a head, exact in decoding."""

import pytest
import torch

from dels_hub import DeLSGenerator
from dels_hub.fingerprint import tokenizer_fingerprint
from dels_hub.heads.ngram import NGramHead
from dels_hub.heads.ngram_head import NGramLocalHead
from dels_hub.loading import load_head

from conftest import make_dflash, make_target, make_tokenizer

TEXTS = ([1, 2, 3, 4, 1, 2, 3, 5, 1, 2, 6, 7, 8, 1, 2, 3, 4] * 3, [5, 6, 7, 8, 9, 1, 2, 3])


def fitted(vocab: int = 12, order: int = 4) -> NGramHead:
    return NGramHead.fit([(torch.tensor(t), torch.ones(len(t), dtype=torch.bool)) for t in TEXTS], vocab, order)


BLOCKS = torch.tensor([[1, 2, 3, 4, 1, 2], [7, 8, 1, 2, 3, 5], [9, 9, 1, 11, 2, 3]])


@pytest.mark.parametrize("order", [2, 3, 4])
def test_unpruned_tables_give_the_counted_models_distribution(order):
    counted = fitted(order=order)
    head = NGramLocalHead.from_ngram(counted, top_k=12, min_count=1)
    assert torch.allclose(head(BLOCKS), counted(BLOCKS), atol=1e-5)


def test_pruned_tables_still_give_distributions_and_drop_what_they_say():
    counted = fitted()
    head = NGramLocalHead.from_ngram(counted, top_k=1, min_count=2)
    probs = head(BLOCKS).exp()
    assert torch.allclose(probs.sum(-1), torch.ones(BLOCKS.shape), atol=1e-5)
    assert head.config.table_sizes["raw2"] < len(counted.raw[2].next)  # contexts seen once are gone
    # Negative control: pruning changes the distribution, so the unpruned comparison above can fail.
    assert not torch.allclose(head(BLOCKS), counted(BLOCKS), atol=1e-3)


def test_it_saves_and_loads_as_a_head(tmp_path):
    head = NGramLocalHead.from_ngram(fitted(), top_k=2, min_count=1)
    head.save_pretrained(tmp_path)
    loaded = load_head(str(tmp_path))
    assert isinstance(loaded, NGramLocalHead) and torch.equal(loaded(BLOCKS), head(BLOCKS))


def test_greedy_decoding_with_the_ngram_head_equals_the_targets():
    tokenizer = make_tokenizer()
    target, drafter = make_target(), make_dflash()
    input_ids = torch.randint(0, len(tokenizer), (2, 9), generator=torch.Generator().manual_seed(1))
    expected = target.generate(input_ids, max_new_tokens=24, do_sample=False)
    # The head counts the target's own continuations, so its drafts are often right: accepted drafts are exercised.
    counted = NGramHead.fit([(row, torch.ones(len(row), dtype=torch.bool)) for row in expected], len(tokenizer), 3)
    head = NGramLocalHead.from_ngram(counted, top_k=4, min_count=1, alpha=4.0, beta=0.0, pure_prefix_len=0,
                                     tokenizer_fingerprint=tokenizer_fingerprint(tokenizer))
    out = DeLSGenerator(target, drafter, head, tokenizer, policy="fixed").generate(
        input_ids, max_new_tokens=24, return_dict_in_generate=True)
    assert torch.equal(out.sequences, expected)
    assert max(max(lengths) for lengths in out.row_acceptance_lengths) > 1  # the random drafter alone gets none
