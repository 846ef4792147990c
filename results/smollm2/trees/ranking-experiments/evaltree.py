"""Greedy tree replays on cached drafter logits (``cache.py``): a block accepts the longest path of the tree on the
target's own continuation, as in ``scripts/tree_replay.py``."""

import sys
from pathlib import Path
from types import SimpleNamespace

import torch
from growx import grow_tree_x

from dels_hub.fusion import fusion_weights
from dels_hub.generation.tree import TreeFusion, TreeSettings
from dels_hub.loading import load_head

REPO = Path(__file__).resolve().parents[4]  # the repository root
sys.path.insert(0, str(REPO / "scripts"))
import tree_replay  # noqa: E402

tree_replay.grow_tree = grow_tree_x  # the replay's block walk, with growx's knobs
K = 7  # drafted depths of the b8 drafters
SHIPPED_HEAD = str(REPO / "upload/smollm2-ngram-head")


def load(path: str | None):
    return load_head(path).to(torch.float32) if path else None


@torch.inference_mode()
def taus(cache, head, settings: TreeSettings | None) -> list[float]:
    """Tau per sequence of ``cache`` with ``head`` (None: DFlash alone), a tree of ``settings`` (None: the chain)."""
    if head is not None:
        alpha, beta = fusion_weights(head.config.alpha, head.config.beta, head.config.pure_prefix_len, K)
        prior = head.log_prior()
    else:
        alpha = beta = prior = None
    out = []
    for sequence, prompt_len, logits in cache:
        drafted = lambda start, logits=logits: logits[start].float()  # noqa: E731
        lengths = tree_replay.accepted_lengths(sequence, prompt_len, K, drafted, head, settings, prior, alpha, beta,
                                               None)
        out.append(sum(lengths) / len(lengths))
    return out


def tree(budget: int, head, fusion: dict | None) -> TreeSettings:
    """A best-first tree of ``budget`` nodes, 16 children per node, ranked by the tree fusion ``fusion``."""
    ranking = TreeFusion.of_head(SimpleNamespace(tree_fusion=fusion), head.config.pure_prefix_len if head else 0, K)
    return TreeSettings(budget, 16, None, ranking)


def mean(values: list[float]) -> float:
    return sum(values) / len(values)
