"""Greedy tree replays on cached drafter logits (``cache.py``): a block accepts the longest path of the tree on the
target's own continuation, as in ``scripts/tree_replay.py``."""

from pathlib import Path
from types import SimpleNamespace

import torch
from growx import grow_tree_x

from dels_hub.fusion import fusion_weights
from dels_hub.generation.tree import TreeFusion, TreeSettings
from dels_hub.heads.context import head_start
from dels_hub.loading import load_head
from dels_hub.verify import verify_tree

REPO = Path(__file__).resolve().parents[4]  # the repository root
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
    settings = settings or TreeSettings(K, 1, 1)  # a chain is the tree of one child per node
    out = []
    for sequence, prompt_len, logits in cache:
        total, start, lengths = sequence.shape[1], prompt_len, []
        while start + 1 < total:
            primed = None if head is None else head_start(head, sequence, start)
            grown = grow_tree_x(logits[start].float(), sequence[:, start], settings, head, prior, alpha, beta, None,
                                primed)
            truth = sequence[0, start + 1: start + K + 2]
            truth = torch.cat([truth, truth.new_full((K + 1 - truth.shape[0],), -1)])
            _, accepted, _ = verify_tree(truth[grown.depths], grown.tokens, grown.parents, grown.depths,
                                         grown.ancestors, K)
            committed = min(int(accepted) + 1, total - start - 1)
            lengths.append(committed)
            start += committed
        out.append(sum(lengths) / len(lengths))
    return out


def tree(budget: int, head, fusion: dict | None) -> TreeSettings:
    """A best-first tree of ``budget`` nodes, 16 children per node, ranked by the tree fusion ``fusion``."""
    ranking = TreeFusion.of_head(SimpleNamespace(tree_fusion=fusion), head.config.pure_prefix_len if head else 0, K)
    return TreeSettings(budget, 16, None, ranking)


def mean(values: list[float]) -> float:
    return sum(values) / len(values)
