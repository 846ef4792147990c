"""``dels-hub bench``: tau and speedup of target alone, DFlash only, DeLS and the transformers peers.

From Python, ``run_bench(target, dflash, heads, dataset=..., ...)`` returns the results dict; the CLI
subcommand is ``add_bench_arguments(parser)`` + ``bench_main(args)``.
"""

from ..errors import BenchArgumentError, DatasetFileError, DatasetUnavailableError, UnknownDatasetError
from ..sharegpt import sharegpt_split  # kept here for compatibility: it lives in dels_hub/sharegpt.py
from .cli import add_bench_arguments, bench_main
from .fusion_tuning import (
    Replay,
    add_tune_fusion_arguments,
    replay_acceptance,
    tune_fusion,
    tune_fusion_main,
    tune_per_position,
)
from .greedy_check import GreedyMismatchWarning
from .prompts import Prompt, load_prompts
from .report import markdown_table
from .runner import run_bench
from .settings import BenchSettings

__all__ = [
    "BenchArgumentError",
    "BenchSettings",
    "DatasetFileError",
    "DatasetUnavailableError",
    "GreedyMismatchWarning",
    "Prompt",
    "Replay",
    "UnknownDatasetError",
    "add_bench_arguments",
    "bench_main",
    "load_prompts",
    "markdown_table",
    "replay_acceptance",
    "run_bench",
    "sharegpt_split",
    "tune_fusion",
    "tune_fusion_main",
    "tune_per_position",
    "add_tune_fusion_arguments",
]
