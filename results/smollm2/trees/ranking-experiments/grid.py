"""Trees of 16 nodes with the staged head, its shipped tree fusion changed by each setting of a JSON list: tree
fusion keys, and the knobs of ``growx.KNOBS`` (``depth_bias``, ``rank_bias``, ``offw``, ``mix``).

    python grid.py val12-b8.pt '[{"depth_bias": [0, -0.3, -0.3, -0.3, -0.3, -0.3, -0.3]}, {"mix": 0.8}]'
"""

import json
import sys

import torch
from evaltree import SHIPPED_HEAD, load, mean, taus, tree
from growx import KNOBS

SHIPPED = {"alpha": 1.0, "beta": 0.5, "temperature": 1.6}
CHAIN = 1.674  # the staged head's chain on these sequences (base.py)

cache = torch.load(sys.argv[1], weights_only=False)
head = load(SHIPPED_HEAD)
for setting in json.loads(sys.argv[2]):
    for name, knob in (("depth", "depth_bias"), ("rank", "rank_bias"), ("offw", "offw"), ("mix", "mix")):
        KNOBS[name] = setting.pop(knob, None)
    tau = mean(taus(cache, head, tree(16, head, SHIPPED | setting)))
    print(16, setting, KNOBS, round(tau, 4), f"{100 * (tau / CHAIN - 1):+.1f}%", flush=True)
