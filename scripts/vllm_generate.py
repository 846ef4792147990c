"""Greedy generation through vLLM, with or without one of our DFlash drafters; prints JSON (run in .venv-engine).

    .venv-engine/bin/python scripts/vllm_generate.py TARGET --prompts prompts.json [--dflash D] [--max-tokens N]

``prompts.json`` holds a list of user messages; each is sent through the target's chat template. The output is
one line ``RESULT {"tokens": [[ids of each answer]], "seconds": ..., "spec_decode": {metric: value}}`` among
vLLM's own log lines: vLLM's own counters of
drafts, drafted tokens and accepted tokens, from which its acceptance length is (accepted + drafts) / drafts.
"""

import argparse
import json
import os
import time

RESULT = "RESULT "  # vLLM logs to stdout too: the result line is the one that starts with this


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("target")
    parser.add_argument("--prompts", required=True)
    parser.add_argument("--dflash", default=None)
    parser.add_argument("--num-speculative-tokens", type=int, default=None)
    parser.add_argument("--max-tokens", type=int, default=48)
    args = parser.parse_args()
    os.environ.setdefault("VLLM_CPU_KVCACHE_SPACE", "2")  # GiB of KV cache on CPU: plenty for a 135M target
    from vllm import LLM, SamplingParams

    speculative = None
    if args.dflash:
        from dels_hub.serving import vllm_speculative_config

        speculative = vllm_speculative_config(os.path.abspath(args.dflash), None, args.num_speculative_tokens)
    llm = LLM(model=args.target, dtype="float32", speculative_config=speculative, max_model_len=2048,
              enforce_eager=True, seed=0, disable_log_stats=False)
    with open(args.prompts) as handle:
        conversations = [[{"role": "user", "content": prompt}] for prompt in json.load(handle)]
    started = time.perf_counter()
    outputs = llm.chat(conversations, SamplingParams(temperature=0, max_tokens=args.max_tokens), use_tqdm=False)
    seconds = time.perf_counter() - started
    metrics = {m.name: getattr(m, "value", None) for m in llm.get_metrics() if "spec_decode" in m.name}
    metrics = {name: value for name, value in metrics.items() if isinstance(value, (int, float))}
    print(RESULT + json.dumps({"tokens": [list(o.outputs[0].token_ids) for o in outputs], "seconds": seconds,
                      "spec_decode": metrics}))


if __name__ == "__main__":  # vLLM starts worker processes by spawning: the main module must be importable
    main()
