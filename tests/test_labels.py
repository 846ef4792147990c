"""Exact drafter labels from any text (training/labels.py): every supervised label is what greedy verification
accepts, checked by verifying the labels as drafts with the target; without the agreement mask that fails."""

import random

import pytest
import torch

from dels_hub.training.data import Example, gather_blocks
from dels_hub.training.dflash import DFlashTask
from dels_hub.training.labels import agreeing_prefix, target_blocks
from dels_hub.training.losses import block_loss, implied_tau, supervised_block_loss
from dels_hub.training.recipe import DFlashTrainConfig
from dels_hub.verify import verify_greedy

from conftest import VOCAB, make_dflash, make_target

BLOCK = 6


@pytest.fixture(scope="module")
def target():
    return make_target("llama", seed=3)


@pytest.fixture(scope="module")
def text(target) -> torch.Tensor:
    """A text that follows the target's greedy path 70% of the time: runs of agreement, broken at random."""
    rng = random.Random(0)
    ids = [rng.randrange(VOCAB - 4) for _ in range(6)]
    with torch.no_grad():
        for _ in range(90):
            greedy = target(torch.tensor([ids])).logits[0, -1].argmax().item()
            ids.append(greedy if rng.random() < 0.7 else rng.randrange(VOCAB - 4))
    return torch.tensor(ids)


def labelled_blocks(target, text, step=0):
    """The blocks the DFlash training task builds with ``labels = "target"`` (its own target pass)."""
    config = DFlashTrainConfig(target="tiny", data=["unused"], labels="target", block_size=BLOCK,
                               anchors_per_seq=len(text), batch_size=1, max_length=len(text))
    example = Example(text, torch.ones(len(text), dtype=torch.bool))
    task = DFlashTask(config, target, make_dflash(block_size=BLOCK), [example], [example], "cpu")
    batch, _ = task.make_batch([example], torch.Generator().manual_seed(0), step)
    real = len(text) - 1  # every position but the last is an anchor; the rows past them are padding
    return batch["anchors"][0, :real], batch["block_tokens"][0, :real], batch["supervised"][0, :real]


def accepted_by_greedy_verification(target, text, anchor: int, drafts: torch.Tensor) -> int:
    """Drafts accepted after the prefix ``text[..anchor]``, by the loop's verifier on one target forward."""
    block = torch.cat([text[: anchor + 1], drafts])[None]
    with torch.no_grad():
        logits = target(block).logits[0, anchor:]
    return int(verify_greedy(drafts, logits)[1])


def leading_run(mask: torch.Tensor) -> int:
    return int(mask.long().cumprod(0).sum())


def test_every_supervised_label_is_accepted_by_greedy_verification(target, text):
    anchors, labels, supervised = labelled_blocks(target, text)
    deep = 0
    for anchor, block, counted in zip(anchors.tolist(), labels, supervised):
        run = leading_run(counted[1:])
        assert counted[1:].sum() == run, "supervised slots are a prefix of the block"
        if run == 0:
            continue
        assert accepted_by_greedy_verification(target, text, anchor, block[1 : run + 1]) == run
        deep += run >= 3
    assert deep >= 5, "the text must give blocks supervised at slot 3 and beyond, or the test checks little"


def test_without_the_agreement_mask_labels_are_not_accepted(target, text):
    """Negative control: supervising every slot inside the text (the text's mask alone) labels slots that
    greedy verification rejects, whether the labels are the target's argmax or the text's tokens."""
    anchors, labels, _ = labelled_blocks(target, text)
    example = Example(text, torch.ones(len(text), dtype=torch.bool))
    text_tokens, text_supervised = gather_blocks(example, anchors, BLOCK)
    rejected_target_labels = rejected_text_labels = 0
    for anchor, block, words, counted in zip(anchors.tolist(), labels, text_tokens, text_supervised):
        run = leading_run(counted[1:])
        if run == 0:
            continue
        rejected_target_labels += accepted_by_greedy_verification(target, text, anchor, block[1 : run + 1]) < run
        rejected_text_labels += accepted_by_greedy_verification(target, text, anchor, words[1 : run + 1]) < run
    assert rejected_target_labels > 0
    assert rejected_text_labels > 0


def test_slot_one_is_always_supervised_with_the_targets_argmax(target, text):
    anchors, labels, supervised = labelled_blocks(target, text)
    with torch.no_grad():
        greedy = target(text[None]).logits[0].argmax(-1)
    assert torch.equal(anchors, torch.arange(len(text) - 1))
    assert supervised[:, 1].all()
    assert torch.equal(labels[:, 1], greedy[anchors])
    assert torch.equal(labels[:, 0], text[anchors])


def test_agreeing_prefix():
    text = torch.tensor([[5, 1, 2, 3, 4]])
    labels = torch.tensor([[5, 1, 9, 3, 4]])  # disagrees at slot 2: slot 3 and later lose their exact label
    assert agreeing_prefix(text, labels).tolist() == [[True, True, True, False, False]]
    assert target_blocks(Example(torch.arange(4), torch.ones(4, dtype=torch.bool)), torch.arange(1, 5),
                         torch.tensor([0]), 4)[1].tolist() == [[False, True, True, True]]


def test_supervised_block_loss_matches_the_dense_loss():
    torch.manual_seed(0)
    logits = torch.randn(5, 4, 11)
    labels = torch.randint(0, 11, (5, 4))
    supervised = torch.rand(5, 4) < 0.6
    weights = torch.tensor([1.0, 0.7, 0.5, 0.3])
    m = supervised.float()
    ce = torch.nn.functional.cross_entropy(logits.flatten(0, 1), labels.flatten(), reduction="none").view(5, 4)
    expected = (ce * weights * m).sum() / (weights * m).sum()
    loss, stats = block_loss(logits, labels, supervised, weights)
    sparse_loss, _ = supervised_block_loss(logits[supervised], labels, supervised, weights)
    assert torch.allclose(loss, expected) and torch.allclose(sparse_loss, expected)
    assert torch.equal(stats["counted"], m.sum(0))


def test_implied_tau_is_the_mean_acceptance_when_every_block_is_supervised():
    torch.manual_seed(1)
    hits = torch.rand(200, 7) < torch.linspace(0.8, 0.3, 7)
    supervised = torch.ones_like(hits)
    logits = torch.nn.functional.one_hot(torch.where(hits, 1, 0), 3).float()  # argmax 1 where hit
    _, stats = supervised_block_loss(logits[supervised], torch.ones(200, 7, dtype=torch.long), supervised,
                                     torch.ones(7))
    tau, rates = implied_tau(stats["reached"], stats["survived"])
    assert tau == pytest.approx(1 + hits.long().cumprod(1).sum(1).float().mean().item())
    assert rates[0] == pytest.approx(hits[:, 0].float().mean().item())
