"""One forward of the target over w new tokens after a context of 176 (a DynamicCache, cropped back after each),
its linear layers on ``F.linear`` against oneDNN (``PackedLinears``), one thread: what a tree of w - 1 nodes costs to
verify against a chain of 7 drafts (w = 8) and a plain step (w = 1). Medians of the last 7 of 9 interleaved repeats.

    OMP_NUM_THREADS=1 python results/smollm2/copy-prior/tree_verify_widths.py
"""
import statistics
import time

import torch
from transformers import DynamicCache

from dels_hub.generation.packed_weights import PackedLinears
from dels_hub.loading import load_target
from dels_hub.proving_ground import smollm2_location

WIDTHS = (1, 8, 17, 33)
CONTEXT = 176

torch.set_num_threads(1)
directory, gguf = smollm2_location()
target = load_target(directory, torch.float32, **gguf).eval()
onednn = PackedLinears(target, tuple(range(1, max(WIDTHS) + 1)))
times: dict = {}
with torch.no_grad():
    cache = DynamicCache()
    target(input_ids=torch.randint(100, 10000, (1, CONTEXT)), past_key_values=cache, use_cache=True)
    for _ in range(9):
        for width in WIDTHS:
            for kernel in ("F.linear", "oneDNN"):
                ids = torch.randint(100, 10000, (1, width))
                started = time.perf_counter()
                if kernel == "oneDNN":
                    with onednn:
                        target(input_ids=ids, past_key_values=cache, use_cache=True)
                else:
                    target(input_ids=ids, past_key_values=cache, use_cache=True)
                times.setdefault((kernel, width), []).append((time.perf_counter() - started) * 1e3)
                cache.crop(-width)
for kernel in ("F.linear", "oneDNN"):
    print(kernel.ljust(9), "  ".join(f"w{width} {statistics.median(times[(kernel, width)][2:]):6.1f} ms"
                                     for width in WIDTHS))
