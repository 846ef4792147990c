"""A head's chain and trees on cached logits, at the staged head's fusion (alpha 0.7, beta 0.5) and tree fusion,
or with a JSON list of tree fusions to try (``--tree-fusions``).

    python headeval.py val12-b8.pt HEAD [--dflash] [--budgets 16 32] [--tree-fusions '[{"temperature": 1.4}]']
"""

import argparse
import json

import torch
from evaltree import load, mean, taus, tree

parser = argparse.ArgumentParser()
parser.add_argument("cache")
parser.add_argument("head")
parser.add_argument("--budgets", type=int, nargs="+", default=[16])
parser.add_argument("--tree-fusions", type=json.loads, default=None)
parser.add_argument("--dflash", action="store_true", help="also DFlash alone, chain and tree of 16")
args = parser.parse_args()
cache = torch.load(args.cache, weights_only=False)
head = load(args.head)
head.config.alpha, head.config.beta = 0.7, 0.5
shipped = {"alpha": 1.0, "beta": 0.5, "temperature": 1.6}
if args.tree_fusions:
    for fusion in args.tree_fusions:
        print(fusion, round(mean(taus(cache, head, tree(16, head, fusion))), 4), flush=True)
else:
    chain = mean(taus(cache, head, None))
    print(args.head, "chain", round(chain, 4), flush=True)
    for budget in args.budgets:
        tau = mean(taus(cache, head, tree(budget, head, shipped)))
        print(budget, round(tau, 4), f"{100 * (tau / chain - 1):+.1f}%", flush=True)
if args.dflash:
    print("DFlash chain", round(mean(taus(cache, None, None)), 3),
          "tree16", round(mean(taus(cache, None, tree(16, None, None))), 3))
