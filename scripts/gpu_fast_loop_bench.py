"""Time the decode loop on the static cache against the same loop on the target's DynamicCache ("eager"), and
target-alone decoding.

One self-contained call for the GPU machine (torch + transformers + dels_hub only, no downloads):
Qwen3-4B- and 8B-shaped targets with random bf16 weights, a matching 5-layer DFlash drafter and a local
head. An oracle verifier accepts exactly k drafts per block, so the acceptance length is controlled
(k = 1, 4, 8, 15 at block size 16). Per block it reports verify, draft, head and overhead (CUDA events;
perf_counter on CPU), tokens/s of both loops and of the target alone, and writes everything as JSON. With
--compile it adds the compiled loop, whose head runs inside the draft graph, and the same without the head
(``g-nohd``): the head's cost there is the difference of the two rows' draft parts.

    python scripts/gpu_fast_loop_bench.py                       # H200: both shapes, full depth
    python scripts/gpu_fast_loop_bench.py --layers 8            # shallower targets, a quick pass
    python scripts/gpu_fast_loop_bench.py --smoke               # tiny shapes, runs on CPU in seconds
    python scripts/gpu_fast_loop_bench.py --shapes smollm2 --block-size 8 --ks 1 4 7   # the real SmolLM2 target
                                                                # with the staged drafter and head (CPU)
"""

import argparse
import json
import os
import statistics
import time
from contextlib import contextmanager

import torch
import transformers
from transformers import Qwen3Config, Qwen3ForCausalLM

from dels_hub import DeLSGenerator, DeLSLocalHead, DeLSLocalHeadConfig, DFlashConfig, DFlashDraftModel, verify
from dels_hub.generation import decode
from dels_hub.generation.decode_state import static_cache_supported
from dels_hub.generation.policy import describe_policy, pooled
from dels_hub.generation.tree import DEFAULT_BRANCHING, checked_tree

# Published Qwen3 shapes (config.json of Qwen/Qwen3-4B and Qwen/Qwen3-8B).
SHAPES = {
    "qwen3-4b": dict(hidden_size=2560, intermediate_size=9728, num_hidden_layers=36, num_attention_heads=32,
                     num_key_value_heads=8, head_dim=128, vocab_size=151936, tie_word_embeddings=True),
    "qwen3-8b": dict(hidden_size=4096, intermediate_size=12288, num_hidden_layers=36, num_attention_heads=32,
                     num_key_value_heads=8, head_dim=128, vocab_size=151936, tie_word_embeddings=False),
    "smoke": dict(hidden_size=64, intermediate_size=128, num_hidden_layers=4, num_attention_heads=4,
                  num_key_value_heads=2, head_dim=16, vocab_size=512, tie_word_embeddings=False),
}


def build_smollm2(device, dtype):
    """The packaged SmolLM2-135M-Instruct target with the drafter and head staged under ``upload/``, and its
    tokenizer (the head's family is checked against it)."""
    from dels_hub.loading import load_dflash, load_head, load_target, load_tokenizer
    from dels_hub.proving_ground import SMOLLM2_DFLASH, SMOLLM2_HEADS, smollm2_location

    directory, gguf = smollm2_location()
    target = load_target(directory, dtype, **gguf).to(device)
    drafter = load_dflash(str(SMOLLM2_DFLASH), dtype).to(device)
    head = load_head(str(SMOLLM2_HEADS["gru"]), dtype).to(device)  # the head of the committed breakdowns
    target.generation_config.eos_token_id = None  # the oracle decides the acceptance: never stop early
    target.generation_config.pad_token_id = 0
    return target.eval(), drafter.eval(), head.eval(), load_tokenizer(directory, **gguf)


def build(shape: dict, layers: int | None, block_size: int, device, dtype):
    """Random target, 5-layer drafter and local head, all on ``device`` in ``dtype``."""
    shape = dict(shape, num_hidden_layers=layers or shape["num_hidden_layers"])
    default_dtype = torch.get_default_dtype()
    torch.set_default_dtype(dtype)
    try:
        with torch.device(device):
            target = Qwen3ForCausalLM(Qwen3Config(max_position_embeddings=4096, rope_theta=1e6, **shape))
            drafter = DFlashDraftModel(DFlashConfig(
                vocab_size=shape["vocab_size"], hidden_size=shape["hidden_size"],
                intermediate_size=shape["intermediate_size"], num_hidden_layers=5,
                num_attention_heads=shape["num_attention_heads"], num_key_value_heads=shape["num_key_value_heads"],
                head_dim=shape["head_dim"], rope_theta=1e6, max_position_embeddings=4096, block_size=block_size,
                num_target_layers=shape["num_hidden_layers"],
                dflash_config={"mask_token_id": shape["vocab_size"] - 1},
            ))
            head = DeLSLocalHead(DeLSLocalHeadConfig(vocab_size=shape["vocab_size"], block_size=block_size))
            with torch.no_grad():  # a "trained-like" head, so the fusion does real work
                head.output_proj.weight.normal_(0.0, 0.02)
    finally:
        torch.set_default_dtype(default_dtype)
    target.generation_config.eos_token_id = None  # random weights: never stop early
    target.generation_config.pad_token_id = 0
    return target.eval(), drafter.eval(), head.eval()


def oracle(k: int, device):
    """A greedy verifier that accepts exactly min(k, drafts) drafts (the commit content is the target argmax)."""
    accepted = torch.tensor(k, device=device)

    def verify(draft_ids, target_logits):
        return target_logits.argmax(-1), accepted.clamp_max(draft_ids.shape[-1]).expand(draft_ids.shape[:-1])

    return verify


class Sections:
    """Wall time of labelled calls, CUDA events on GPU (read after one sync at the end), else perf_counter."""

    def __init__(self, device):
        self.cuda = torch.device(device).type == "cuda"
        self.spans: dict[str, list] = {}
        self.depth = 0

    def wrap(self, label, function):
        def timed(*args, **kwargs):
            if self.depth:  # nested (lm_head inside the target): counted by the outer section
                return function(*args, **kwargs)
            self.depth += 1
            begin = torch.cuda.Event(enable_timing=True) if self.cuda else time.perf_counter()
            if self.cuda:
                begin.record()
            try:
                return function(*args, **kwargs)
            finally:
                if self.cuda:
                    end = torch.cuda.Event(enable_timing=True)
                    end.record()
                else:
                    end = time.perf_counter()
                self.spans.setdefault(label, []).append((begin, end))
                self.depth -= 1

        return timed

    def seconds(self, label, skip=0) -> float:
        if self.cuda:
            torch.cuda.synchronize()
            return sum(b.elapsed_time(e) / 1e3 for b, e in self.spans.get(label, [])[skip:])
        return sum(e - b for b, e in self.spans.get(label, [])[skip:])


class Timed:
    """A module stand-in that times its calls and forwards every attribute (``out_features``...) to the module."""

    def __init__(self, module, timed_call):
        self.module, self.timed_call = module, timed_call

    def __call__(self, *args, **kwargs):
        return self.timed_call(*args, **kwargs)

    def __getattr__(self, name):
        return getattr(self.module, name)


@contextmanager
def instrumented(generator, sections: Sections):
    """Time target forwards (verify; the first is the prefill), drafter + lm_head (draft) and the head loop.

    The loops' own lm_head (from ``get_output_embeddings``) is swapped for a timed stand-in; the module
    itself is untouched. With ``generator.compile`` the steps are timed from outside (a timer inside would
    break their graphs): the compiled verify, the compiled draft (the head loop inside it) and the first
    block's eager draft (its context is the whole prompt); the eager prefill is not timed.
    """
    target, drafter, lm_head = generator.target, generator.drafter, generator.target.get_output_embeddings()
    saved = (decode.propose, decode.compiled, decode.draft_step)
    if generator.compile:
        first_draft = sections.wrap("first_draft", saved[2])

        def timed_compiled(step, device):
            step = saved[2] if step is first_draft else step
            label = {"verify_step": "verify", "draft_step": "draft"}[step.__name__]
            return sections.wrap(label, saved[1](step, device))

        decode.compiled, decode.draft_step = timed_compiled, first_draft
    else:
        target.forward = sections.wrap("verify", target.forward)
        drafter.forward = sections.wrap("draft", drafter.forward)
        timed_lm_head = Timed(lm_head, sections.wrap("draft", lm_head))
        target.get_output_embeddings = lambda: timed_lm_head
        decode.propose = sections.wrap("head", decode.propose)
    try:
        yield
    finally:
        if not generator.compile:
            del target.get_output_embeddings, drafter.forward, target.forward
        decode.propose, decode.compiled, decode.draft_step = saved


def run_loop(generator, input_ids, new_tokens, block_size, fast):
    out = generator.generate(input_ids, max_new_tokens=new_tokens, block_size=block_size, fast=fast, policy="fixed",
                             return_dict_in_generate=True, eos_token_id=None)
    blocks = len(out.acceptance_lengths)
    return out, out.decode_seconds / blocks, (out.num_new_tokens - 1) / out.decode_seconds


def measure(generator, prompts, new_tokens, block_size, fast, repeats):
    """Median block time and decode tokens/s over prompts x repeats, after discarded warm-up runs (three when
    compiled: compilation, the CUDA-graph warm-up run, the recording)."""
    for _ in range(3 if generator.compile else 1):
        run_loop(generator, prompts[0], new_tokens, block_size, fast)
    block_times, rates, tau = [], [], []
    for _ in range(repeats):
        for input_ids in prompts:
            out, block_time, rate = run_loop(generator, input_ids, new_tokens, block_size, fast)
            block_times.append(block_time)
            rates.append(rate)
            tau.append(out.tau)
    return dict(block_ms=1e3 * statistics.median(block_times), tokens_per_s=statistics.median(rates),
                tau=statistics.mean(tau))


def breakdown(generator, input_ids, new_tokens, block_size, fast):
    """Per-block verify / draft / head / overhead (ms, each part's total over the run's blocks) from one
    instrumented run. Compiled, the head loop runs inside the draft graph (``head`` is None) and the first
    block's eager draft is its own part, ``first_draft``, so that it does not count as loop overhead."""
    sections = Sections(generator.device)
    with instrumented(generator, sections):
        out, block_time, _ = run_loop(generator, input_ids, new_tokens, block_size, fast)
    blocks = len(out.acceptance_lengths)
    if generator.compile:  # the prefill did not run through the timed graph
        parts = {"verify": sections.seconds("verify"), "draft": sections.seconds("draft"),
                 "first_draft": sections.seconds("first_draft"), "head": None}
    else:
        parts = {"verify": sections.seconds("verify", skip=1), "draft": sections.seconds("draft"),
                 "head": sections.seconds("head")}
    parts = {label: None if value is None else 1e3 * value / blocks for label, value in parts.items()}
    parts["block"] = 1e3 * block_time
    parts["overhead"] = parts["block"] - sum(value or 0.0 for label, value in parts.items() if label != "block")
    return parts


def measure_with_parts(generator, prompts, args, fast):
    """``measure`` plus one instrumented run's per-block breakdown."""
    data = measure(generator, prompts, args.new_tokens, args.block_size, fast, args.repeats)
    data["parts_ms"] = breakdown(generator, prompts[0], args.new_tokens, args.block_size, fast)
    return data


def target_alone(target, prompts, new_tokens, repeats, cache_implementation=None):
    """Plain ``target.generate`` greedy decoding, decode tokens/s excluding the prefill: on its DynamicCache, or
    with ``cache_implementation="static"``, where transformers compiles the decode step on CUDA (the fair
    baseline there: the eager target is bound by kernel launches, not by the GPU)."""
    def timed(input_ids, count):
        if torch.device(target.device).type == "cuda":
            torch.cuda.synchronize()
        began = time.perf_counter()
        target.generate(input_ids, max_new_tokens=count, do_sample=False, cache_implementation=cache_implementation)
        if torch.device(target.device).type == "cuda":
            torch.cuda.synchronize()
        return time.perf_counter() - began

    for _ in range(3 if cache_implementation else 1):  # compilation, the CUDA-graph warm-up, the recording
        timed(prompts[0], new_tokens)
    rates = []
    for _ in range(repeats):
        for input_ids in prompts:
            rates.append((new_tokens - 1) / (timed(input_ids, new_tokens) - timed(input_ids, 1)))
    return dict(tokens_per_s=statistics.median(rates))


def cost_aware(generator, prompts, new_tokens):
    """The default cost-aware policy with the real verifier and the head: tokens/s, what it chose, and the cost table
    it calibrated on this device (a verify's milliseconds at every width: the figure that decides whether trees and
    long blocks can pay here)."""
    generator.generate(prompts[0], max_new_tokens=new_tokens, eos_token_id=None)  # calibrates, once per device
    rates, summaries = [], []
    for input_ids in prompts:
        out = generator.generate(input_ids, max_new_tokens=new_tokens, eos_token_id=None, return_dict_in_generate=True)
        rates.append((out.num_new_tokens - 1) / out.decode_seconds)
        summaries.append(out.policy_summary)
    (cost, *_) = generator.cost_models
    return dict(tokens_per_s=statistics.median(rates), policy=pooled(summaries), verify_ms=cost.verify_ms,
                draft_ms=cost.draft_ms)


def trees(generator, prompts, args):
    """Token trees of each budget (the static loop, the head on, the fixed policy): a block's milliseconds and
    tokens/s, and whether the tree's greedy tokens equal the chain's; with ``--compile`` also ``graphs``, the tree's
    verify compiled (its growth stays eager). Random weights accept little, so the figure that matters is the block's
    cost against the chain's: what a verify of N + 1 tokens and the tree's growth cost on this device."""
    chain = run_loop(generator, prompts[0], args.new_tokens, args.block_size, True)[0].sequences

    def timed_tree():
        row = measure(generator, prompts, args.new_tokens, args.block_size, True, args.repeats)
        row["greedy_equals_chain"] = torch.equal(
            run_loop(generator, prompts[0], args.new_tokens, args.block_size, True)[0].sequences, chain)
        return row

    rows = {}
    for budget in args.tree_budgets:
        generator.tree = checked_tree(budget, DEFAULT_BRANCHING, generator.tree_fusion)  # as generate builds it
        try:
            rows[budget] = timed_tree()
            if args.compile:
                generator.compile = True
                rows[budget]["graphs"] = attempt(timed_tree)
        finally:
            generator.tree, generator.compile = None, False
    return rows


def variants(args):
    """(label, fast, compiled, with head): the eager DynamicCache loop first (the reference of every speedup).
    Compiled, the head runs inside the draft graph, so its cost is the graphs row minus the same row without it."""
    rows = [("eager", False, False, True), ("fast", True, False, True)]
    return rows + [("graphs", True, True, True), ("g-nohd", True, True, False)] if args.compile else rows


def exactness(generator, input_ids) -> dict:
    """Greedy with the real verifier through both loops. Random bf16 weights give nearly flat logits over a
    large vocabulary, where the loops' different attention shapes can flip a near-tie; so a difference comes
    with the target's top-1 minus top-2 logit at that step: a margin within bf16 rounding is a tie, not a bug."""
    fast = generator.generate(input_ids, max_new_tokens=32, fast=True, eos_token_id=None, policy="fixed")
    eager = generator.generate(input_ids, max_new_tokens=32, fast=False, eos_token_id=None, policy="fixed")
    if torch.equal(fast, eager):
        return {"fast_equals_eager_greedy": True}
    width = min(fast.shape[1], eager.shape[1])
    differing = (fast[0, :width] != eager[0, :width]).nonzero()
    at = int(differing[0]) if len(differing) else width
    with torch.no_grad():
        logits = generator.target(eager[:, :at]).logits[0, -1].float()
    top = logits.topk(2).values
    return {"fast_equals_eager_greedy": False, "first_difference_new_token": at - input_ids.shape[1],
            "eager_top2_margin": float(top[0] - top[1]), "eager_top1_logit": float(top[0])}


def attempt(function, *args):
    """Run one measurement; an error is recorded in its place so the other rows still get measured."""
    try:
        return function(*args)
    except Exception as error:  # noqa: BLE001 - one failing path must not lose the others' figures
        print(f"  failed: {error!r}", flush=True)
        return {"error": repr(error)}


def graph_counters() -> dict:
    """Inductor's CUDA-graph skips and dynamo's graph count so far in this process: a compiled row whose skips
    grew ran plain inductor, not CUDA graphs, and the figures must say so."""
    from torch._dynamo.utils import counters

    return {"cudagraph_skips": counters["inductor"]["cudagraph_skips"],
            "unique_graphs": counters["stats"]["unique_graphs"]}


def counter_change(before: dict, after: dict) -> dict:
    return {name: after[name] - before[name] for name in after}


def bench_shape(name, args, device, dtype, result: dict, save):
    """Fill ``result`` row by row, calling ``save()`` after each, so a timeout keeps every finished row."""
    block_size = args.block_size
    if name == "smollm2":
        target, drafter, head, tokenizer = build_smollm2(device, dtype)
    else:
        target, drafter, head = build(SHAPES[name], args.layers, block_size, device, dtype)
        tokenizer = None
    generator = DeLSGenerator(target, drafter, head, tokenizer)
    vocab = target.config.vocab_size
    rng = torch.Generator().manual_seed(0)
    prompts = [torch.randint(0, vocab - 2, (1, args.prompt_len), generator=rng).to(device)
               for _ in range(args.prompts)]
    result.update(layers=target.config.num_hidden_layers, fast_path=static_cache_supported(target) or "ok", rows=[])
    result["target_generate"] = attempt(target_alone, target, prompts, args.new_tokens, args.repeats)
    result["target_generate_static"] = attempt(target_alone, target, prompts, args.new_tokens, args.repeats, "static")
    save()
    if args.baselines_only:
        return result

    result.update(attempt(exactness, generator, prompts[0]))
    save()

    real_verify_greedy = verify.verify_greedy
    for k in args.ks:
        verify.verify_greedy = oracle(k, device)  # the commit decides the acceptance: exactly k drafts
        row = {"k": k}
        result["rows"].append(row)
        for label, fast, compiled, with_head in variants(args):
            generator.compile, generator.head = compiled, head if with_head else None
            print(f"  k={k} {label}", flush=True)
            counters_before = graph_counters()
            row[label] = attempt(measure_with_parts, generator, prompts, args, fast)
            if "block_ms" in row[label] and "block_ms" in row["eager"]:
                row[label]["block_speedup"] = row["eager"]["block_ms"] / row[label]["block_ms"]
            if compiled:  # this row's own change: compilation shows as new graphs, a fallback as new skips
                row[label]["graph_counters"] = counter_change(counters_before, graph_counters())
            save()
        generator.compile, generator.head = False, head
    verify.verify_greedy = real_verify_greedy
    result["loop_block_size_1"] = {
        label: attempt(measure, generator, prompts, args.new_tokens, 1, fast, args.repeats)
        for label, fast in (("fast", True), ("eager", False))
    }
    save()
    result["cost_aware"] = attempt(cost_aware, generator, prompts, args.new_tokens)
    save()
    if args.tree_budgets:
        result["trees"] = attempt(trees, generator, prompts, args)
    del target, drafter, head, generator
    if torch.device(device).type == "cuda":
        result["peak_memory_gib"] = torch.cuda.max_memory_allocated() / 2**30
        torch.cuda.empty_cache()
        torch.cuda.reset_peak_memory_stats()
    return result


def rate(data: dict) -> str:
    """A measurement's tokens/s, or the error that replaced it."""
    return f"{data['tokens_per_s']:.1f} tok/s" if "tokens_per_s" in data else data["error"]


def print_table(result):
    # "vs tgt": against the faster of the two target.generate rows (on CUDA the static cache's compiled one)
    base = max((result[row].get("tokens_per_s", 0.0) for row in ("target_generate", "target_generate_static")),
               default=0.0) or None
    print(f"\n== {result['shape']} ({result['layers']} layers), fast path: {result['fast_path']}, "
          f"fast == eager greedy: {result.get('fast_equals_eager_greedy', result.get('error'))}")
    print(f"target.generate with a static cache (compiled on CUDA): {rate(result['target_generate_static'])}")
    if "loop_block_size_1" not in result:  # --baselines-only
        print(f"target.generate: {rate(result['target_generate'])}")
        return
    at_1 = result["loop_block_size_1"]
    print(f"target.generate: {rate(result['target_generate'])}; loop at block size 1: fast {rate(at_1['fast'])}, "
          f"eager {rate(at_1['eager'])}")
    header = (f"{'k':>3} {'path':>6} {'block ms':>9} {'verify':>7} {'draft':>7} {'head':>7} {'overhd':>7} "
              f"{'head %':>7} {'ovh %':>6} {'tok/s':>8} {'vs tgt':>7} {'vs eag':>7}")
    policy = result.get("cost_aware", {})
    if "verify_ms" in policy:
        print(f"cost-aware policy: {rate(policy)}; verify ms by width {[round(ms, 2) for ms in policy['verify_ms']]}, "
              f"draft {policy['draft_ms']:.2f} ms; {describe_policy(policy['policy'])}")
    for budget, tree in result.get("trees", {}).items():
        if "block_ms" in tree:
            graphs = tree.get("graphs", {})
            print(f"tree of {budget} nodes: {tree['block_ms']:.2f} ms a block, {rate(tree)}"
                  + (f"; verify compiled: {graphs['block_ms']:.2f} ms, {rate(graphs)}" if "block_ms" in graphs else
                     f"; verify compiled: {graphs['error']}" if graphs else ""))
    print(header)
    for row in result["rows"]:
        for label in [key for key in row if isinstance(row[key], dict)]:
            data = row[label]
            if "error" in data:
                print(f"{row['k']:>3} {label:>6} {data['error']}")
                continue
            parts = data["parts_ms"]
            draft = parts["draft"] + parts.get("first_draft", 0.0)  # compiled: the eager first block's too
            head_ms, head_share = ("in draft", "") if parts["head"] is None else (
                f"{parts['head']:.2f}", f"{100 * parts['head'] / parts['block']:.1f}%")
            print(f"{row['k']:>3} {label:>6} {data['block_ms']:>9.2f} {parts['verify']:>7.2f} {draft:>7.2f} "
                  f"{head_ms:>7} {parts['overhead']:>7.2f} {head_share:>7} "
                  f"{100 * parts['overhead'] / parts['block']:>5.1f}% {data['tokens_per_s']:>8.1f} "
                  f"{data['tokens_per_s'] / base if base else float('nan'):>6.2f}x "
                  f"{data.get('block_speedup', float('nan')):>6.2f}x")


def main():
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--smoke", action="store_true", help="tiny shapes (CPU-friendly); checks the script runs")
    parser.add_argument("--baselines-only", action="store_true",
                        help="time only the target alone: target.generate on its DynamicCache and on a static cache")
    parser.add_argument("--shapes", nargs="+", default=None, help="subset of " + ", ".join([*SHAPES, "smollm2"]))
    parser.add_argument("--layers", type=int, default=None, help="override the target layer count (quick pass)")
    parser.add_argument("--ks", type=int, nargs="+", default=[1, 4, 8, 15], help="forced acceptance lengths")
    parser.add_argument("--block-size", type=int, default=16)
    parser.add_argument("--tree-budgets", type=int, nargs="*", default=[16, 32, 64],
                        help="token-tree rows: drafted nodes per block (none: skip them)")
    parser.add_argument("--prompt-len", type=int, default=64)
    parser.add_argument("--prompts", type=int, default=2)
    parser.add_argument("--new-tokens", type=int, default=128)
    parser.add_argument("--repeats", type=int, default=2)
    parser.add_argument("--device", default="cuda" if torch.cuda.is_available() else "cpu")
    parser.add_argument("--json", default="fast_loop_bench.json")
    parser.add_argument("--compile", action=argparse.BooleanOptionalAction, default=None,
                        help="also time the static loop with its verify and draft steps compiled (default: CUDA only)")
    args = parser.parse_args()
    if args.smoke:
        args.shapes = args.shapes or ["smoke"]
        args.new_tokens, args.prompt_len, args.repeats = min(args.new_tokens, 48), min(args.prompt_len, 16), 1
    shapes = args.shapes or ["qwen3-4b", "qwen3-8b"]
    device = torch.device(args.device)
    args.compile = device.type == "cuda" if args.compile is None else args.compile
    dtype = torch.bfloat16 if device.type == "cuda" else torch.float32
    if max(args.ks) >= args.block_size:
        parser.error(f"every k must be < block size {args.block_size}, got {args.ks}")
    environment = {
        "torch": torch.__version__, "transformers": transformers.__version__, "device": str(device),
        "device_name": torch.cuda.get_device_name(device) if device.type == "cuda" else "cpu",
        "dtype": str(dtype), "threads": torch.get_num_threads(), "args": vars(args),
    }
    print(json.dumps(environment))
    torch.manual_seed(0)
    results = []

    def save():  # after every row, so a timeout or a crash keeps what finished; replaced whole, never half-written
        with open(args.json + ".tmp", "w") as handle:
            json.dump({"environment": environment, "results": results}, handle, indent=1)
        os.replace(args.json + ".tmp", args.json)

    for name in shapes:
        began = time.perf_counter()
        print(f"== {name}", flush=True)
        results.append({"shape": name})
        bench_shape(name, args, device, dtype, results[-1], save)
        results[-1]["wall_s"] = time.perf_counter() - began
        save()
        print_table(results[-1])
    print(f"\nwrote {args.json}")


if __name__ == "__main__":
    main()
