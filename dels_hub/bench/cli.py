"""``dels-hub bench``: the arguments and the entry point that ``dels_hub/cli.py`` wires as a subcommand."""

import argparse
import dataclasses
import sys

from ..arguments import add_dataclass_arguments
from ..errors import DeLSError
from .runner import run_bench
from .settings import BenchSettings


def add_bench_arguments(parser: argparse.ArgumentParser) -> argparse.ArgumentParser:
    """Add the ``dels-hub bench`` options to ``parser`` (a subparser) and return it: one flag per
    ``BenchSettings`` field, plus ``--no-peers``."""
    peers = parser.add_mutually_exclusive_group()
    add_dataclass_arguments(parser, BenchSettings, groups={"peers": peers})
    peers.add_argument("--no-peers", dest="peers", action="store_const", const=[],
                       help="skip the transformers rows (prompt lookup, transformers DFlash) to save time")
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
    from .batched import batched_markdown
    from .report import markdown_table

    print(batched_markdown(results) if results.get("mode") == "batched" else markdown_table(results))
    for name, path in results.get("files", {}).items():
        print(f"{name}: {path}")
    greedy = results["greedy_check"]
    return 1 if greedy is not None and not greedy["ok"] else 0


def _run(args: argparse.Namespace) -> dict:
    names = [f.name for f in dataclasses.fields(BenchSettings) if hasattr(args, f.name)]
    settings = {name: getattr(args, name) for name in names}
    return run_bench(**settings | {"peers": tuple(args.peers)})
