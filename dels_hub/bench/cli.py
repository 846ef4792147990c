"""``dels-hub bench``: the arguments and the entry point that ``dels_hub/cli.py`` wires as a subcommand."""

import argparse
import sys

from ..copy_expert import DEFAULT_GAMMA
from ..errors import DeLSError
from .prompts import DATASET_NAMES
from .runner import PEERS, load_json_kwargs, run_bench


def add_bench_arguments(parser: argparse.ArgumentParser) -> argparse.ArgumentParser:
    """Add the ``dels-hub bench`` options to ``parser`` (a subparser) and return it."""
    parser.add_argument(
        "--target", required=True, help="target model: Hub id, local path or pkg:PACKAGE (shipped in a Python package)"
    )
    parser.add_argument(
        "--target-kwargs",
        default=None,
        metavar="JSON",
        help='extra from_pretrained arguments of the target as JSON, e.g. \'{"gguf_file": "model.gguf"}\'',
    )
    parser.add_argument(
        "--dflash",
        action="append",
        required=True,
        metavar="DFLASH",
        help="DFlash drafter: Hub id or local path (z-lab format); repeat to compare drafters, each with every head",
    )
    parser.add_argument(
        "--head",
        action="append",
        default=[],
        metavar="HEAD",
        help="DeLS local head (Hub id or local path); repeat to compare heads, one DeLS row each",
    )
    parser.add_argument(
        "--dataset", default="humaneval", help=f"prompts: one of {', '.join(DATASET_NAMES)} (default: humaneval)"
    )
    parser.add_argument(
        "--num-prompts",
        type=int,
        default=None,
        metavar="N",
        help="a seeded random subset of N prompts, kept in dataset order (default: all)",
    )
    parser.add_argument("--max-new-tokens", type=int, default=256, metavar="M", help="per turn (default: 256)")
    parser.add_argument("--temperature", type=float, default=0.0, help="0 is greedy, and checks token equality")
    parser.add_argument("--top-p", type=float, default=1.0, help="nucleus sampling mass when temperature > 0")
    parser.add_argument(
        "--block-size",
        type=int,
        default=None,
        metavar="B",
        help="verify width of the speculative rows (default: the drafter's block size)",
    )
    parser.add_argument("--alpha", type=float, default=None, help="fusion alpha of the DeLS rows (default: head's)")
    parser.add_argument("--beta", type=float, default=None, help="fusion beta of the DeLS rows (default: head's)")
    parser.add_argument("--copy-ngram", type=int, default=0, metavar="N",
                        help="add a '+ copy' row beside every DFlash and DeLS row: the copy expert with matches of "
                             "up to N tokens (default: 0, no copy rows)")
    parser.add_argument("--copy-gamma", type=float, default=DEFAULT_GAMMA, metavar="G",
                        help=f"the copy expert's gamma at a full-length match (default: {DEFAULT_GAMMA:g})")
    parser.add_argument("--seed", type=int, default=0, help="prompt subset and sampling seed (default: 0)")
    parser.add_argument(
        "--out",
        default="bench-out",
        metavar="DIR",
        help="where results.json, results.md, samples.jsonl and the PNGs go (default: bench-out)",
    )
    peers = parser.add_mutually_exclusive_group()
    peers.add_argument("--peers", nargs="+", choices=PEERS, default=list(PEERS), metavar="PEER",
                       help=f"the transformers rows to run, some of {', '.join(PEERS)} (default: all)")
    peers.add_argument("--no-peers", dest="peers", action="store_const", const=[],
                       help="skip the transformers rows (prompt lookup, transformers DFlash) to save time")
    parser.add_argument(
        "--score",
        action="store_true",
        help="also measure HumanEval pass@1 per row (runs model-written code; needs HF_ALLOW_CODE_EVAL=1)",
    )
    return parser


def bench_main(args: argparse.Namespace) -> int:
    """Run the benchmark from parsed arguments and print the Markdown table.

    Exit status: 0, 1 when a greedy row disagreed with the target alone, 2 on invalid settings (the
    ``DeLSError`` message is printed, without a traceback).
    """
    try:
        results = _run(args)
    except DeLSError as error:
        print(f"dels-hub bench: error: {error}", file=sys.stderr)
        return 2
    from .report import markdown_table

    print(markdown_table(results))
    for name, path in results.get("files", {}).items():
        print(f"{name}: {path}")
    greedy = results["greedy_check"]
    return 1 if greedy is not None and not greedy["ok"] else 0


def _run(args: argparse.Namespace) -> dict:
    return run_bench(
        args.target,
        args.dflash,
        heads=args.head,
        target_kwargs=load_json_kwargs(args.target_kwargs),
        dataset=args.dataset,
        num_prompts=args.num_prompts,
        max_new_tokens=args.max_new_tokens,
        temperature=args.temperature,
        top_p=args.top_p,
        block_size=args.block_size,
        alpha=args.alpha,
        beta=args.beta,
        copy_ngram=args.copy_ngram,
        copy_gamma=args.copy_gamma,
        seed=args.seed,
        out=args.out,
        score=args.score,
        peers=tuple(args.peers),
    )
