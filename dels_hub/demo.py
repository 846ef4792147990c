"""``dels-hub demo`` / ``make demo``: DeLS on the embedded SmolLM2 default, with tau and speedups measured here."""

import logging
import time

import torch

from .bench.peers import target_generate_row
from .bench.rows import Sampling
from .copy_expert import DEFAULT_NGRAM
from .generation import DeLSGenerator
from .generation.policy import describe_policy
from .loading import load_dflash, load_head, load_target, load_tokenizer
from .proving_ground import SMOLLM2_DFLASH, SMOLLM2_DRAFT_VOCAB, SMOLLM2_HEAD, smollm2_location, staged_repo

logger = logging.getLogger(__name__)

DEFAULT_PROMPT = "Write a Python function that returns the n-th Fibonacci number, with a short docstring."
# Each generator's warm-up call: another prompt of the same kind, so the measured call is a generator's second, with
# what the cost-aware policy learned in the first (as any later call gets), and nothing learned from its own text.
WARM_UP_PROMPT = "Write a Python function that checks whether a string is a palindrome, with a short docstring."


def _time_per_output_token(output) -> float:
    """Decode seconds per token after the first (the prefill's token is timed as time to first token)."""
    return output.decode_seconds / max(output.num_new_tokens - 1, 1)


def _time_per_output_token_of(sample) -> float:
    """A bench sample's decode seconds per token after the first, as ``_time_per_output_token``."""
    return (sample.total_seconds - sample.time_to_first_token) / max(len(sample.new_tokens) - 1, 1)


def run_demo(prompt: str = DEFAULT_PROMPT, max_new_tokens: int = 128, dflash=None, head=None, print_fn=print) -> dict:
    """Generate a reply with DeLS and the copy expert (drafting from the head's ``SMOLLM2_DRAFT_VOCAB`` most frequent
    tokens); measure it against ``target.generate``, the target alone through our loop, DFlash only and DeLS without
    the copy expert, in this process.
    Every speculative run uses the default cost-aware policy: each generator's warm-up call, on ``WARM_UP_PROMPT``,
    calibrates the cost model (once per machine, then cached) and teaches the policy what pays here, so the measured
    call is a generator's second."""
    started = time.perf_counter()
    # The staged repos, or the ones named (never an untrained stand-in), found before anything loads.
    dflash_source = str(dflash) if dflash else str(staged_repo(SMOLLM2_DFLASH, "drafter (pass --dflash)"))
    head_source = str(head) if head else str(staged_repo(SMOLLM2_HEAD, "head (pass --head)"))
    directory, gguf = smollm2_location()
    print_fn(f"Loading SmolLM2-135M-Instruct from {directory} ...")
    tokenizer = load_tokenizer(directory, **gguf)
    target = load_target(directory, torch.float32, **gguf).eval()
    drafter = load_dflash(dflash_source, dtype=torch.float32)
    local_head = load_head(head_source)
    print_fn(f"drafter: {dflash_source}\nhead:    {head_source}\nDeLS + copy drafts from the head's "
             f"{SMOLLM2_DRAFT_VOCAB} most frequent tokens")

    dels = DeLSGenerator(target, drafter, local_head, tokenizer)
    dflash_only = DeLSGenerator(target, drafter, None, tokenizer)
    # The product as shipped: DeLS with the training-free copy expert at its tuned default, drafting from the head's
    # most frequent tokens.
    copying = DeLSGenerator(target, drafter, local_head, tokenizer, copy_ngram=DEFAULT_NGRAM,
                            draft_vocab=SMOLLM2_DRAFT_VOCAB)
    def chat(text):
        return tokenizer.apply_chat_template([{"role": "user", "content": text}], add_generation_prompt=True,
                                             return_tensors="pt", return_dict=True)["input_ids"]

    input_ids, warm_up_ids = chat(prompt), chat(WARM_UP_PROMPT)
    settings = dict(max_new_tokens=max_new_tokens, do_sample=False, return_dict_in_generate=True)
    # Warm-up: first calls pay one-time costs (allocation, the cost model's calibration), and the policy learns.
    for generator in (dels, dflash_only, copying):
        generator.generate(warm_up_ids, max_new_tokens=max_new_tokens, do_sample=False)
    runs = {
        "target": dels.generate(input_ids, block_size=1, **settings),
        "dflash": dflash_only.generate(input_ids, **settings),
        "dels": dels.generate(input_ids, **settings),
        "dels_copy": copying.generate(input_ids, **settings),
    }
    # target.generate, timed as the bench's reference row times it
    pad = tokenizer.pad_token_id if tokenizer.pad_token_id is not None else tokenizer.eos_token_id
    reference = target_generate_row(target, pad).generate(input_ids, Sampling(max_new_tokens), seed=0)
    reference_tpot = _time_per_output_token_of(reference)
    shipped = runs["dels_copy"]
    reply = tokenizer.decode(shipped.sequences[0, input_ids.shape[1]:], skip_special_tokens=True)
    identical = all(out.sequences[0, input_ids.shape[1]:].tolist() == reference.new_tokens for out in runs.values())
    tpot = {name: _time_per_output_token(out) for name, out in runs.items()}
    results = {
        "reply": reply,
        "identical_to_target": identical,
        "new_tokens": shipped.num_new_tokens,
        "tau": {name: out.tau for name, out in runs.items() if name != "target"},
        "tokens_per_second": {name: out.tokens_per_second for name, out in runs.items()},
        "speedup_over_target": {name: tpot["target"] / tpot[name] for name in runs if name != "target"},
        "speedup_over_target_generate": {name: reference_tpot / tpot[name] for name in runs},
        "policy": {name: out.policy_summary for name, out in runs.items() if name != "target"},
        "wall_seconds": time.perf_counter() - started,
    }
    labels = {"dels_copy": "DeLS + copy", "dels": "DeLS", "dflash": "DFlash only", "target": "target, our loop"}
    print_fn("\n--- DeLS + copy expert reply " + "-" * 46 + f"\n{reply}\n" + "-" * 75)
    print_fn(f"greedy output identical to target.generate: {'yes' if identical else 'NO (bug)'}")
    print_fn(f"new tokens: {shipped.num_new_tokens}")
    print_fn("tau (tokens per verify step, bonus included): "
             + " | ".join(f"{labels[name]} {tau:.2f}" for name, tau in results["tau"].items()))
    print_fn("tokens/s: " + " | ".join(f"{labels[name]} {tps:.1f}"
                                       for name, tps in results["tokens_per_second"].items()))
    print_fn("speedup over target.generate (time per output token): "
             + " | ".join(f"{labels[name]} {x:.2f}x" for name, x in results["speedup_over_target_generate"].items()))
    # Our loop runs the target's steps on oneDNN's matmul (``packed_weights``), so the target alone through it is
    # already faster than target.generate: over it, a row's speedup is speculation's share alone.
    print_fn("speedup over the target alone through our loop (speculation's share): "
             + " | ".join(f"{labels[name]} {x:.2f}x" for name, x in results["speedup_over_target"].items()))
    print_fn(f"DeLS + copy, {describe_policy(shipped.policy_summary)}")
    print_fn(f"(one prompt, one run on this machine, after one warm-up call per generator on another prompt; "
             f"`dels-hub bench` gives medians over many prompts) "
             f"[{results['wall_seconds']:.0f} s in all]")
    return results
