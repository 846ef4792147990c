"""What ``packed_widths="auto"`` chooses for SmolLM2-135M on this machine: a verify of each chain width (1..8) and of
each tree size of a budget of 32 (9, 17 and 33 tokens) on ``F.linear`` and on oneDNN, one thread, batch 1, timed
by ``kernel_choice.onednn_widths`` itself (medians of 3 after a warm-up, the kernels interleaved width by width).

    OMP_NUM_THREADS=1 DELS_HUB_CACHE=$(mktemp -d) python results/smollm2/kernel-choice/measure.py
"""
import json
import os
import platform
import subprocess

import torch

from dels_hub.generation.kernel_choice import choice_key, choice_path, onednn_widths
from dels_hub.loading import load_target
from dels_hub.proving_ground import smollm2_location

torch.set_num_threads(1)
directory, gguf = smollm2_location()
target = load_target(directory, torch.float32, **gguf).eval()
measured = (1, 2, 3, 4, 5, 6, 7, 8, 9, 17, 33)
chosen = onednn_widths(target, tuple(range(1, 34)), measured, batch=1, static_cache=True)
ms = json.loads(choice_path(choice_key(target, 1, True)).read_text())["ms"]
cpu = subprocess.run(["lscpu"], capture_output=True, text=True).stdout
model = next((line.split(":", 1)[1].strip() for line in cpu.splitlines() if line.startswith("Model name")),
             platform.processor())
print(f"# {model}, torch {torch.__version__}, {os.environ.get('OMP_NUM_THREADS', '?')} thread(s)")
print("width  " + " ".join(f"{w:>6}" for w in measured))
for name in ("F.linear", "oneDNN"):
    print(f"{name:<8} " + " ".join(f"{ms[name][str(w)]:6.1f}" for w in measured))
print("oneDNN where faster:", chosen)
