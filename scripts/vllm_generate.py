"""Greedy generation through vLLM, with or without one of our DFlash drafters and heads; prints JSON (run in
.venv-engine).

    .venv-engine/bin/python scripts/vllm_generate.py TARGET --prompts prompts.json [--dflash D [--head H]]
        [--max-tokens N] [--check-fusion]

``prompts.json`` holds a list of user messages; each is sent through the target's chat template. The output is
one line ``RESULT {"tokens": [[ids of each answer]], "seconds": ..., "spec_decode": {metric: value}}`` among
vLLM's own log lines: vLLM's own counters of
drafts, drafted tokens and accepted tokens, from which its acceptance length is (accepted + drafts) / drafts.

``--check-fusion`` (with a head) also runs ``fusion_check`` in vLLM's worker, on the drafter vLLM built through our
plugin, and adds its result as ``"fusion"``.
"""

import argparse
import json
import os
import time

import torch

RESULT = "RESULT "  # vLLM logs to stdout too: the result line is the one that starts with this (as engine_worker's)


def fusion_check(worker) -> dict:
    """In vLLM's worker: the plugin's ``compute_logits`` on random hidden states and anchors, against the fused
    chain computed here from the drafter's own logits with ``dels_hub.fuse_logits``. (Pickled by value: vLLM's
    workers cannot import this script.)"""
    from vllm.model_executor.models.qwen3_dflash import DFlashQwen3ForCausalLM

    from dels_hub.fusion import fuse_logits

    model = worker.model_runner.drafter.model
    fusion, k = model.fusion, model.num_drafts
    generator = torch.Generator().manual_seed(0)
    requests, mask_id = 3, model.model.mask_token_id
    hidden = torch.randn(requests * k, model.config.hidden_size, generator=generator).to(model.lm_head.weight)
    anchors = torch.randint(0, fusion.head.config.vocab_size, (requests,), generator=generator)
    block_ids = torch.full((requests * (k + 1),), mask_id)
    block_ids[:: k + 1] = anchors
    model.block_ids = block_ids.to(hidden.device)  # what the proposer's forward leaves for compute_logits
    plugin = model.compute_logits(hidden).float().view(requests, k, -1)
    drafter = DFlashQwen3ForCausalLM.compute_logits(model, hidden).float().view(requests, k, -1)
    head, expected = fusion.head, []
    with torch.no_grad():
        head_logits, state = head.step(anchors.to(hidden.device), head.initial_state(requests))
        for i in range(k):
            expected.append(fuse_logits(drafter[:, i], head_logits, fusion.log_prior, fusion.alpha[i],
                                        fusion.beta[i]))
            head_logits, state = head.step(expected[-1].argmax(-1), state)
    expected = torch.stack(expected, dim=1)
    return {"max_abs_difference": (plugin - expected).abs().max().item(),
            "head_changed_logits": (plugin - drafter).abs().max().item(), "alpha": fusion.alpha.tolist(),
            "beta": fusion.beta.tolist()}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("target")
    parser.add_argument("--prompts", required=True)
    parser.add_argument("--dflash", default=None)
    parser.add_argument("--head", default=None)
    parser.add_argument("--check-fusion", action="store_true")
    parser.add_argument("--num-speculative-tokens", type=int, default=None)
    parser.add_argument("--max-tokens", type=int, default=48)
    args = parser.parse_args()
    os.environ.setdefault("VLLM_ALLOW_INSECURE_SERIALIZATION", "1")  # collective_rpc pickles fusion_check by value
    from vllm import SamplingParams

    from dels_hub.bench.engine_worker import build_llm, spec_counters

    speculative = None
    if args.dflash:
        from dels_hub.serving import vllm_speculative_config

        head = os.path.abspath(args.head) if args.head else None
        speculative = vllm_speculative_config(os.path.abspath(args.dflash), head, args.num_speculative_tokens)
    with open(args.prompts) as handle:
        conversations = [[{"role": "user", "content": prompt}] for prompt in json.load(handle)]
    llm = build_llm(args.target, speculative, max_num_seqs=len(conversations))
    started = time.perf_counter()
    outputs = llm.chat(conversations, SamplingParams(temperature=0, max_tokens=args.max_tokens), use_tqdm=False)
    seconds = time.perf_counter() - started
    result = {"tokens": [list(o.outputs[0].token_ids) for o in outputs], "seconds": seconds,
              "spec_decode": spec_counters(llm)}
    if args.check_fusion:
        (result["fusion"],) = llm.collective_rpc(fusion_check)
    print(RESULT + json.dumps(result))


if __name__ == "__main__":  # vLLM starts worker processes by spawning: the main module must be importable
    main()
