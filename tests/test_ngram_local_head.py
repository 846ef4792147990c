"""The n-gram head as tensors: the same distribution as the counted model, loadable as a head, exact in decoding."""

import pytest
import torch

from dels_hub import DeLSGenerator
from dels_hub.fingerprint import tokenizer_fingerprint
from dels_hub.heads.context import head_start, tokens_before
from dels_hub.heads.ngram import NGramHead
from dels_hub.heads.ngram_head import NGramHeadConfig, NGramLocalHead
from dels_hub.loading import load_head
from dels_hub.training.data import Example
from dels_hub.training.head import HeadTask
from dels_hub.training.recipe import HeadTrainConfig

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


def test_contexts_keep_only_their_own_next_tokens_and_empty_tables_fall_back_to_the_unigram():
    head = NGramLocalHead.from_ngram(fitted(), top_k=8, min_count=1)
    # Variable-length rows: far fewer entries than top_k per context (most contexts were followed by one token).
    assert head.config.table_entries["raw4"] < 2 * head.config.table_sizes["raw4"]
    assert head.raw4_ids.numel() == head.config.table_entries["raw4"]
    nothing_kept = NGramLocalHead.from_ngram(fitted(), top_k=2, min_count=10_000)
    assert sum(nothing_kept.config.table_sizes.values()) == 0
    assert torch.allclose(nothing_kept(BLOCKS).exp(), nothing_kept.unigram.expand(*BLOCKS.shape, -1))


def test_it_saves_and_loads_as_a_head(tmp_path):
    head = NGramLocalHead.from_ngram(fitted(), top_k=2, min_count=1)
    head.save_pretrained(tmp_path)
    loaded = load_head(str(tmp_path))
    assert isinstance(loaded, NGramLocalHead) and torch.equal(loaded(BLOCKS), head(BLOCKS))


def test_tokens_before_reads_each_rows_own_history_and_marks_what_precedes_it():
    tokens = torch.tensor([[10, 11, 12, 13, 14], [20, 21, 22, 23, 24]])
    assert tokens_before(tokens, torch.tensor([1, 4]), 3).tolist() == [[-1, -1, 10], [21, 22, 23]]
    assert tokens_before(tokens, 2, 2).tolist() == [[10, 11], [20, 21]]
    assert tokens_before(tokens, 2, 0).shape == (2, 0)


@pytest.mark.parametrize("context_tokens", [1, 2])
def test_a_primed_head_reads_the_tokens_before_its_block_as_if_they_began_it(context_tokens):
    counted = fitted()
    plain = NGramLocalHead.from_ngram(counted, top_k=3, min_count=1)
    primed = NGramLocalHead.from_ngram(counted, top_k=3, min_count=1, context_tokens=context_tokens)
    history = torch.tensor([[3, 4, 1, 2, 3], [5, 6, 7, 8, 1], [1, 2, 3, 4, 5]])
    context = tokens_before(torch.cat([history, BLOCKS], 1), history.shape[1], context_tokens)
    scored = primed(BLOCKS, state=head_start(primed, torch.cat([history, BLOCKS], 1), history.shape[1]))
    # The primed head at the block's slots is the plain head that began reading at the context.
    assert torch.equal(scored, plain(torch.cat([context, BLOCKS], 1))[:, context_tokens:])
    # Negative control: the block alone scores differently (the first slot is a bigram there).
    assert not torch.allclose(scored, plain(BLOCKS))


def test_a_head_cannot_read_more_context_than_its_state_holds():
    with pytest.raises(ValueError, match="context_tokens must be between 0 and order - 2 = 2.*got 3"):
        NGramHeadConfig(order=4, context_tokens=3)


def test_training_batches_carry_the_context_a_primed_head_reads():
    ids = torch.arange(1, 11)
    example = Example(ids, torch.ones(10, dtype=torch.bool))
    config = HeadTrainConfig(tokenizer="x", data="sharegpt:train", block_size=4, anchors_per_seq=3)
    for context_tokens in (0, 2):
        head = NGramLocalHead.from_ngram(fitted(), top_k=2, min_count=1, context_tokens=context_tokens)
        task = HeadTask(config, None, head, [example], [], torch.device("cpu"))
        batch, _ = task.make_batch([example], torch.Generator().manual_seed(0), step=0)
        if context_tokens == 0:
            assert "context" not in batch
            continue
        anchors = batch["tokens"][:, 0] - 1  # token i + 1 sits at position i
        assert batch["context"].tolist() == tokens_before(ids.expand(len(anchors), -1), anchors, 2).tolist()
        loss, _ = task.model(**batch)
        assert torch.isfinite(loss)


@pytest.mark.parametrize("context_tokens,tree_budget,rows", [(0, None, 2), (1, None, 2), (1, None, 1), (1, 6, 2),
                                                            (1, 6, 1)])
def test_greedy_decoding_with_the_ngram_head_equals_the_targets(context_tokens, tree_budget, rows):
    tokenizer = make_tokenizer()
    target, drafter = make_target(), make_dflash()
    input_ids = torch.randint(0, len(tokenizer), (rows, 9), generator=torch.Generator().manual_seed(1))
    expected = target.generate(input_ids, max_new_tokens=24, do_sample=False)
    # The head counts the target's own continuations, so its drafts are often right: accepted drafts are exercised.
    counted = NGramHead.fit([(row, torch.ones(len(row), dtype=torch.bool)) for row in expected], len(tokenizer), 3)
    head = NGramLocalHead.from_ngram(counted, top_k=4, min_count=1, alpha=4.0, beta=0.0, pure_prefix_len=0,
                                     tokenizer_fingerprint=tokenizer_fingerprint(tokenizer),
                                     context_tokens=context_tokens)
    out = DeLSGenerator(target, drafter, head, tokenizer, policy="fixed").generate(
        input_ids, max_new_tokens=24, return_dict_in_generate=True, tree_budget=tree_budget)
    assert torch.equal(out.sequences, expected)
    assert max(max(lengths) for lengths in out.row_acceptance_lengths) > 1  # the random drafter alone gets none


def test_the_fit_script_writes_the_tree_fusion_it_is_given_and_refuses_a_bad_one_before_counting(tmp_path):
    """``scripts/fit_ngram_head.py --tree-fusion`` puts the ranking in the head's config, as trees read it; a bad one
    (a key the fusion has no use for, or a per-depth list shorter than the head's block) stops the script before
    anything is counted or written."""
    import json
    import subprocess
    import sys
    from pathlib import Path

    from dels_hub.generation.tree import TreeFusion

    make_tokenizer(12).save_pretrained(tmp_path / "tokenizer")
    (tmp_path / "text.jsonl").write_text("".join(
        json.dumps({"text": " ".join(f"t{i}" for i in text)}) + "\n" for text in TEXTS))
    (tmp_path / "head.toml").write_text(f'kind = "head"\ntokenizer = "{tmp_path / "tokenizer"}"\n'
                                        f'data = "{tmp_path / "text.jsonl"}"\nfamily = "tiny"\nblock_size = 4\n')
    script = Path(__file__).resolve().parent.parent / "scripts" / "fit_ngram_head.py"

    def fit(out: str, fusion: str):
        return subprocess.run([sys.executable, str(script), "--recipe", str(tmp_path / "head.toml"), "--order", "3",
                               "--min-count", "1", "--tree-fusion", fusion, "--output-dir", str(tmp_path / out)],
                              capture_output=True, text=True)

    done = fit("good", '{"alpha": 1.0, "temperature": [1.5, 1.4, 1.3]}')
    assert done.returncode == 0, done.stderr
    config = load_head(str(tmp_path / "good")).config
    assert config.tree_fusion == {"alpha": 1.0, "temperature": [1.5, 1.4, 1.3]}
    assert TreeFusion.of_head(config, config.pure_prefix_len, 3).temperature == (1.5, 1.4, 1.3)
    for out, fusion, named in (("key", '{"temp": 2}', "'temp': 2"), ("short", '{"temperature": [1.5, 1.4]}',
                                                                    "at least 3")):
        refused = fit(out, fusion)
        assert refused.returncode == 2 and "--tree-fusion" in refused.stderr and named in refused.stderr
        assert not (tmp_path / out).exists()
