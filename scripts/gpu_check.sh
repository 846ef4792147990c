#!/usr/bin/env bash
# The GPU check of the fast loop (issue 7) as one call, run from the repository root on a CUDA machine that has
# torch, transformers and pytest but neither dels_hub installed nor a package registry:
#
#     OUT=some/dir bash scripts/gpu_check.sh [extra gpu_fast_loop_bench.py options]
#
# It runs the GPU tests, then times the loops on a Qwen3-8B-shaped target (the target alone, chains at forced
# acceptance lengths 1 and 8, the cost-aware policy, and token trees of 16, 32 and 64 nodes), each under a time
# limit, so that the whole call ends inside TOTAL_S (default 480 s; the first H200 run needed about 360 s) with
# whatever finished: the benchmark rewrites its JSON after every row. Logs, the
# JSON and both exit codes (status.txt) go to $OUT. It exits non-zero when either step failed.
set -uo pipefail
cd "$(dirname "$0")/.."
export PYTHONPATH="$PWD${PYTHONPATH:+:$PYTHONPATH}" PYTHONUNBUFFERED=1
OUT=${OUT:-bench-out/gpu-check}
TOTAL_S=${TOTAL_S:-480}
mkdir -p "$OUT"

timeout 60 nvidia-smi --query-gpu=name,memory.total,driver_version --format=csv 2>&1 | tee "$OUT/gpu.txt"
timeout 60 python3 -c "import torch, transformers, pytest; print('torch', torch.__version__, 'cuda', torch.version.cuda,
      'transformers', transformers.__version__, 'pytest', pytest.__version__)" 2>&1 | tee -a "$OUT/gpu.txt"

timeout -k 10 200 python3 -m pytest -q -m gpu tests/test_fast_loop.py 2>&1 | tee "$OUT/pytest.log"
tests_status=${PIPESTATUS[0]}

left=$((TOTAL_S - SECONDS))
if ((left >= 30)); then
  echo "benchmark: ${left} s left"
  timeout -k 10 "$left" python3 scripts/gpu_fast_loop_bench.py --shapes qwen3-8b --ks 1 8 --repeats 1 \
    --json "$OUT/fast.json" "$@" 2>&1 | tee "$OUT/bench.log"
  bench_status=${PIPESTATUS[0]}
else
  echo "benchmark skipped: only ${left} s of ${TOTAL_S} left" | tee "$OUT/bench.log"
  bench_status=124
fi

# 124: a step ran out of time (the benchmark's JSON still holds every finished row).
echo "tests=$tests_status bench=$bench_status" | tee "$OUT/status.txt"
((tests_status == 0 && bench_status == 0))
