"""``dels-hub``: generate | demo | bench | report | tune-fusion | train-head | train-dflash | regenerate | families |
card | upload | serve."""

import argparse
import importlib
import sys

from .arguments import (
    add_fusion_arguments,
    fusion_schedules,
    json_object,
    non_negative_int,
    positive_int,
    probability_mass,
    temperature,
)
from .generation.generator import DRAFT_MODES
from .generation.policy import POLICIES, describe_policy
from .generation.tree import DEFAULT_BRANCHING


def _add_generate(subparsers):
    parser = subparsers.add_parser("generate", help="generate a reply with DeLS (or DFlash only without --head)")
    parser.add_argument(
        "--target", required=True, help="target model: Hub id, local path or pkg:PACKAGE (shipped in a Python package)"
    )
    parser.add_argument("--target-kwargs", type=json_object, default={},
                        help='JSON of extra target loading kwargs, e.g. {"gguf_file": "m.gguf"}')
    parser.add_argument("--dflash", required=True, help="DFlash drafter: Hub id or local path (z-lab format)")
    parser.add_argument("--head", default=None, help="local head: Hub id or local path (omit for DFlash only)")
    parser.add_argument("--prompt", required=True, help="user message, rendered with the target's chat template")
    parser.add_argument("--max-new-tokens", type=positive_int, default=256)
    parser.add_argument("--temperature", type=temperature, default=0.0, help="0 means greedy")
    parser.add_argument("--top-p", type=probability_mass, default=1.0)
    parser.add_argument("--seed", type=int, default=None)
    parser.add_argument("--block-size", type=positive_int, default=None,
                        help="tokens per block, anchor included (default and maximum: the drafter's; 1: no drafts)")
    add_fusion_arguments(parser)
    parser.add_argument("--copy-ngram", type=non_negative_int, default=0, metavar="N",
                        help="the copy expert: longest match of up to N tokens votes for what followed (0: off)")
    parser.add_argument("--copy-gamma", type=float, default=None, metavar="G",
                        help="the copy expert's gamma at a full-length match (default: the tuned default)")
    parser.add_argument("--draft-vocab", type=positive_int, default=None, metavar="N",
                        help="the drafter scores only the head's N most frequent tokens (default: every token)")
    parser.add_argument("--policy", choices=POLICIES, default="cost-aware",
                        help="cost-aware: draft and verify only what pays on this machine (plain steps and copy "
                             "blocks included; with a tree, a chain or a tree of the budget or one of its halves per "
                             "block); fixed: draft every block, verify every draft")
    parser.add_argument("--draft-mode", choices=DRAFT_MODES, default="top",
                        help="at --temperature > 0: top-token drafts matched against the target's samples, or "
                             "sampled drafts verified by rejection sampling")
    parser.add_argument("--tree-budget", type=non_negative_int, default=0, metavar="N",
                        help="draft a token tree of N nodes per block instead of a chain, verified in one forward "
                             "(0: chains)")
    parser.add_argument("--tree-branching", type=positive_int, default=DEFAULT_BRANCHING, metavar="C",
                        help="children kept per expanded node of the tree")
    parser.set_defaults(func=_generate)


def _generate(args):
    from transformers import TextStreamer

    from .copy_expert import DEFAULT_GAMMA, CopySettings
    from .generation import DeLSGenerator

    # Validated before anything loads.
    copy = CopySettings(args.copy_ngram, DEFAULT_GAMMA if args.copy_gamma is None else args.copy_gamma)
    fusion = fusion_schedules(args)
    generator = DeLSGenerator.from_pretrained(args.target, args.dflash, args.head, copy_ngram=copy.max_ngram,
                                              copy_gamma=copy.gamma, draft_vocab=args.draft_vocab, **fusion,
                                              policy=args.policy, draft_mode=args.draft_mode,
                                              tree_budget=args.tree_budget, tree_branching=args.tree_branching,
                                              **args.target_kwargs)
    input_ids = generator.tokenizer.apply_chat_template(
        [{"role": "user", "content": args.prompt}], add_generation_prompt=True, return_tensors="pt", return_dict=True
    )["input_ids"]
    sampling = dict(do_sample=True, temperature=args.temperature, top_p=args.top_p) if args.temperature > 0 else {}
    out = generator.generate(
        input_ids, max_new_tokens=args.max_new_tokens, seed=args.seed, block_size=args.block_size,
        return_dict_in_generate=True,
        streamer=TextStreamer(generator.tokenizer, skip_prompt=True, skip_special_tokens=True), **sampling,
    )
    summary = f"tau {out.tau:.2f} | {out.tokens_per_second:.1f} tokens/s | {out.num_new_tokens} new tokens"
    print(f"\n{summary}\n{describe_policy(out.policy_summary)}", file=sys.stderr)


def _add_demo(subparsers):
    from .demo import DEFAULT_PROMPT

    parser = subparsers.add_parser("demo", help="DeLS on the embedded SmolLM2-135M-Instruct default, with speedups")
    parser.add_argument("--prompt", default=DEFAULT_PROMPT)
    parser.add_argument("--max-new-tokens", type=positive_int, default=128)
    parser.add_argument("--dflash", default=None, help="override the staged drafter (path or Hub id)")
    parser.add_argument("--head", default=None, help="override the staged head (path or Hub id)")
    parser.set_defaults(func=lambda args: _demo(args))


def _demo(args):
    from .demo import run_demo

    run_demo(args.prompt, args.max_new_tokens, args.dflash, args.head)


# Subcommands that live in optional packages: (name, module, add-arguments function, main function, help).
_EXTENSIONS = [
    ("bench", "dels_hub.bench", "add_bench_arguments", "bench_main", "measure tau and speedup of every row"),
    ("report", "dels_hub.bench.results_page", "add_report_arguments", "report_main",
     "render the docs' results page from the committed results/**/results.json"),
    ("tune-fusion", "dels_hub.bench", "add_tune_fusion_arguments", "tune_fusion_main",
     "choose a head's fusion weights by replay on validation prompts (ShareGPT and code)"),
    ("train-head", "dels_hub.training", "add_train_head_arguments", "train_head_main", "train a local head"),
    ("train-dflash", "dels_hub.training", "add_train_dflash_arguments", "train_dflash_main", "train a DFlash drafter"),
    ("regenerate", "dels_hub.training", "add_regenerate_arguments", "regenerate_main",
     "rewrite assistant turns with the target's own responses"),
    ("families", "dels_hub.families", "add_families_arguments", "families_main",
     "list the tokenizer families, their fingerprints, targets and DFlash drafters"),
    ("card", "dels_hub.hub", "add_card_arguments", "card_main", "render or refresh a head/drafter model card"),
    ("upload", "dels_hub.hub", "add_upload_arguments", "upload_main",
     "check a staged repo and upload it to the Hub (--dry-run: check and list only)"),
    ("serve", "dels_hub.serving", "add_serve_arguments", "serve_main",
     "serve a target with a DFlash drafter on vLLM, after the pairing check"),
]


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="dels-hub", description=__doc__)
    subparsers = parser.add_subparsers(dest="command", required=True)
    _add_generate(subparsers)
    _add_demo(subparsers)
    for name, module_name, add_name, main_name, help_text in _EXTENSIONS:
        try:
            module = importlib.import_module(module_name)
        except ModuleNotFoundError as error:
            if (error.name or "").split(".")[0] == "dels_hub":  # our own code is broken: say so, loudly
                raise
            sub = subparsers.add_parser(name, help=f"{help_text} (needs {error.name!r}: not installed)")
            sub.set_defaults(func=_missing_dependency(name, error.name))
            continue
        sub = subparsers.add_parser(name, help=help_text)
        getattr(module, add_name)(sub)
        sub.set_defaults(func=getattr(module, main_name), passes_arguments_on=name == "serve")
    return parser


def _missing_dependency(command: str, module: str):
    def refuse(args) -> int:
        print(f"dels-hub {command}: error: it needs the Python package {module!r}, which is not installed "
              "(pip install 'dels-hub[dev]' installs every optional dependency)", file=sys.stderr)
        return 2

    return refuse


def main(argv=None) -> int:
    from .errors import DeLSError

    parser = build_parser()
    args, extra = parser.parse_known_args(argv)
    given = sys.argv[1:] if argv is None else list(argv)
    if extra and not (getattr(args, "passes_arguments_on", False) and "--" in given):
        parser.error(f"unrecognized arguments: {' '.join(extra)}")
    args.passed_on = extra[1:] if extra[:1] == ["--"] else extra  # what `serve` hands to vLLM, after --
    try:
        result = args.func(args)
    except (DeLSError, FileNotFoundError) as error:  # user errors: the message, not a traceback
        print(f"dels-hub {args.command}: error: {error}", file=sys.stderr)
        return 2
    return result if isinstance(result, int) else 0


if __name__ == "__main__":
    sys.exit(main())
