#!/usr/bin/env bash
# The one device call for issue 7, run in the repository root of the GPU machine (torch and transformers are
# there, dels_hub is not installed and there is no package registry):
#
#     bash scripts/gpu_check.sh            # the device tool sets $OUT; everything it writes comes back
#
# It runs the GPU tests, then times the loops, each under its own limit so that the call ends (with what
# finished) inside the device's 600 s per call: the benchmark writes its JSON after every row.
# Before the call, here: `scripts/device_tree.sh strip` (the staged weights put the tree over 64 MiB);
# after it: `scripts/device_tree.sh restore`.
set -u
cd "$(dirname "$0")/.."
export PYTHONPATH="$PWD${PYTHONPATH:+:$PYTHONPATH}" PYTHONUNBUFFERED=1
OUT=${OUT:-gpu-check-out}
TOTAL_S=${TOTAL_S:-480}   # leaves the device's start and one short rerun inside its 15 minutes
mkdir -p "$OUT"
nvidia-smi --query-gpu=name,memory.total,driver_version --format=csv 2>&1 | tee "$OUT/gpu.txt"
python3 -c "import torch, transformers; print('torch', torch.__version__, 'transformers', transformers.__version__)" \
  2>&1 | tee -a "$OUT/gpu.txt"
timeout 200 python3 -m pytest -q -m gpu tests/test_fast_loop.py 2>&1 | tee "$OUT/pytest.log"
left=$((TOTAL_S - SECONDS))
echo "benchmark: ${left} s left"
timeout "$left" python3 scripts/gpu_fast_loop_bench.py --shapes qwen3-8b qwen3-4b --repeats 1 \
  --json "$OUT/fast.json" "$@" 2>&1 | tee "$OUT/bench.log"
