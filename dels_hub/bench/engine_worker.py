"""One vLLM row of ``dels-hub bench --engine``, run inside the engine environment (it imports vLLM).

    PYTHON -m dels_hub.bench.engine_worker SPEC.json

``SPEC.json``: ``target``, ``dtype``, ``enforce_eager``, ``prompts`` (token ids of each prompt), ``max_tokens``,
``temperature``, ``top_p``, ``seed``, ``concurrency`` (e.g. ``[1, 8]``) and ``speculative_config`` (None: the
target alone). The engine starts once (with as many sequences as the largest concurrency, and no prefix caching,
so that every phase prefills its prompts), warms up on the first prompt, then runs every prompt at each
concurrency: at 1, one request after another; at c > 1, all of them submitted at once, so that vLLM keeps c in
flight. Prints one line ``RESULT {json}`` among vLLM's logs: per concurrency the wall seconds, new tokens and vLLM's
spec-decode counters over that phase, and the answers of the concurrency-1 phase.
"""

import json
import os
import sys
import time

RESULT = "RESULT "  # vLLM logs to stdout too: the result line is the one that starts with this


def spec_counters(llm) -> dict:
    """vLLM's cumulative spec-decode counters (drafts, draft tokens, accepted tokens)."""
    counters = {m.name: getattr(m, "value", None) for m in llm.get_metrics() if "spec_decode" in m.name}
    return {name: value for name, value in counters.items() if isinstance(value, (int, float))}


def build_llm(target: str, speculative_config: dict | None, max_num_seqs: int, seed: int = 0, dtype="float32",
              enforce_eager: bool = True):
    os.environ.setdefault("VLLM_CPU_KVCACHE_SPACE", "2")  # GiB of KV cache on CPU: plenty for a small target
    from vllm import LLM

    return LLM(model=target, dtype=dtype, speculative_config=speculative_config, max_model_len=4096,
               max_num_seqs=max_num_seqs, enforce_eager=enforce_eager, seed=seed, disable_log_stats=False,
               enable_prefix_caching=False)


def main(spec_path: str) -> None:
    from vllm import SamplingParams, TokensPrompt

    spec = json.loads(open(spec_path, encoding="utf-8").read())
    llm = build_llm(spec["target"], spec["speculative_config"], max(spec["concurrency"]), spec["seed"], spec["dtype"],
                    spec["enforce_eager"])
    prompts = [TokensPrompt(prompt_token_ids=ids) for ids in spec["prompts"]]
    sampling = SamplingParams(temperature=spec["temperature"], top_p=spec["top_p"], max_tokens=spec["max_tokens"],
                              seed=spec["seed"], ignore_eos=False)
    llm.generate(prompts[:1], SamplingParams(max_tokens=8), use_tqdm=False)  # warm-up, untimed
    phases, answers = {}, None
    for concurrency in spec["concurrency"]:
        before = spec_counters(llm)
        started = time.perf_counter()
        if concurrency == 1:
            outputs = [llm.generate([prompt], sampling, use_tqdm=False)[0] for prompt in prompts]
            answers = [list(output.outputs[0].token_ids) for output in outputs]
        else:
            outputs = llm.generate(prompts, sampling, use_tqdm=False)
        seconds = time.perf_counter() - started
        after = spec_counters(llm)
        phases[str(concurrency)] = {
            "seconds": seconds,
            "new_tokens": sum(len(output.outputs[0].token_ids) for output in outputs),
            "spec_decode": {name: value - before.get(name, 0) for name, value in after.items()},
        }
    print(RESULT + json.dumps({"concurrency": phases, "answers": answers}), flush=True)


if __name__ == "__main__":  # vLLM starts its workers by spawning: the main module must be importable
    main(sys.argv[1])
