"""Greedy generation through vLLM, with or without one of our DFlash drafters and heads; prints JSON (run in
.venv-engine).

    .venv-engine/bin/python scripts/vllm_generate.py TARGET --prompts prompts.json [--dflash D [--head H
        [--alpha A] [--beta B] [--pure-prefix-len P]]] [--max-tokens N] [--check-fusion]

``prompts.json`` holds a list of user messages; each is sent through the target's chat template. The output is
one line ``RESULT {"tokens": [[ids of each answer]], "seconds": ..., "spec_decode": {metric: value}}`` among
vLLM's own log lines: vLLM's own counters of
drafts, drafted tokens and accepted tokens, from which its acceptance length is (accepted + drafts) / drafts.

``--check-fusion`` (with a head) also checks, in vLLM's worker, the drafter vLLM built through our plugin:
``fusion_check`` compares its ``compute_logits`` with ``fused_chain``, and the anchors it fused with while vLLM
answered the first prompt alone are recorded and compared with that answer (``anchors_follow``). Both results are
added to the JSON as ``"fusion"`` and ``"anchors"``.
"""

import argparse
import json
import os
import time

import torch

from dels_hub.bench.engine_worker import RESULT


@torch.no_grad()
def fused_chain(fusion, drafter_logits: torch.Tensor, anchors: torch.Tensor) -> torch.Tensor:
    """The reference: DeLS's fused greedy chain over ``[B, k, V]`` drafter logits, written out with
    ``dels_hub.fuse_logits``. The head reads the anchor, then the argmax of each fused slot."""
    from dels_hub.fusion import fuse_logits

    head, slots = fusion.head, []
    head_logits, state = head.step(anchors, head.initial_state(anchors.shape[0]))
    for i in range(drafter_logits.shape[1]):
        slots.append(fuse_logits(drafter_logits[:, i], head_logits, fusion.log_prior, fusion.alpha[i], fusion.beta[i]))
        head_logits, state = head.step(slots[-1].argmax(-1), state)
    return torch.stack(slots, dim=1)


def fusion_check(worker) -> dict:
    """In vLLM's worker: the plugin's ``compute_logits`` on random hidden states and anchors, against
    ``fused_chain`` of the drafter's own logits. (Pickled by value: vLLM's workers cannot import this script.)"""
    from vllm.model_executor.models.qwen3_dflash import DFlashQwen3ForCausalLM

    model = worker.model_runner.drafter.model
    fusion, k = model.fusion, model.num_drafts
    generator = torch.Generator().manual_seed(0)
    requests, mask_id = 3, model.model.mask_token_id
    hidden = torch.randn(requests * k, model.config.hidden_size, generator=generator).to(model.lm_head.weight)
    anchors = torch.randint(0, fusion.head.config.vocab_size, (requests,), generator=generator).to(hidden.device)
    block_ids = torch.full((requests * (k + 1),), mask_id, device=hidden.device)
    block_ids[:: k + 1] = anchors
    model.block_ids = block_ids  # the layout the proposer's forward leaves: per request, the anchor then k masks
    plugin = model.compute_logits(hidden).float().view(requests, k, -1)
    drafter = DFlashQwen3ForCausalLM.compute_logits(model, hidden).float().view(requests, k, -1)
    expected = fused_chain(fusion, drafter, anchors)
    return {"max_abs_difference": (plugin - expected).abs().max().item(),
            "head_changed_logits": (plugin - drafter).abs().max().item(), "alpha": fusion.alpha.tolist(),
            "beta": fusion.beta.tolist()}


def record_anchors(worker) -> int:
    """In vLLM's worker: from now on, keep the anchors that the plugin passes to ``fused_draft_logits``."""
    import dels_hub.vllm_drafter as plugin

    original, plugin.recorded_anchors = plugin.fused_draft_logits, []

    def recording(fusion, drafter_logits, anchors):
        plugin.recorded_anchors.append(anchors.tolist())
        return original(fusion, drafter_logits, anchors)

    plugin.fused_draft_logits = recording
    return worker.model_runner.drafter.model.num_drafts


def recorded_anchors(worker) -> list:
    import dels_hub.vllm_drafter as plugin

    return plugin.recorded_anchors


def anchors_follow(anchors: list[int], answer: list[int], k: int) -> bool:
    """Whether one request's anchors, block by block, are its committed tokens: the first is the answer's first token,
    and each next one lies 1 to k + 1 tokens further on (one block's accepted drafts plus the bonus token)."""
    if not anchors or anchors[0] != answer[0]:
        return False
    reachable = {0}
    for anchor in anchors[1:]:
        reachable = {p + step for p in reachable for step in range(1, k + 2)
                     if p + step < len(answer) and answer[p + step] == anchor}
        if not reachable:
            return False
    return True


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("target")
    parser.add_argument("--prompts", required=True)
    parser.add_argument("--dflash", default=None)
    parser.add_argument("--head", default=None)
    parser.add_argument("--alpha", type=float, default=None, help="fusion weight of the head (default: the head's)")
    parser.add_argument("--beta", type=float, default=None, help="weight of the unigram prior (default: the head's)")
    parser.add_argument("--pure-prefix-len", type=int, default=None,
                        help="leading drafts taken from DFlash alone (default: the head's)")
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
        speculative = vllm_speculative_config(os.path.abspath(args.dflash), head, args.num_speculative_tokens,
                                              alpha=args.alpha, beta=args.beta,
                                              pure_prefix_len=args.pure_prefix_len)
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
        (k,) = llm.collective_rpc(record_anchors)
        alone = llm.chat(conversations[:1], SamplingParams(temperature=0, max_tokens=args.max_tokens), use_tqdm=False)
        answer = list(alone[0].outputs[0].token_ids)
        (anchors,) = llm.collective_rpc(recorded_anchors)
        result["anchors"] = {"blocks": len(anchors), "one_per_block": all(len(step) == 1 for step in anchors),
                             "follow_the_answer": anchors_follow([step[0] for step in anchors], answer, k),
                             "answer_is_the_first": answer == result["tokens"][0]}
    print(RESULT + json.dumps(result))


if __name__ == "__main__":  # vLLM starts worker processes by spawning: the main module must be importable
    main()
