"""``BenchSettings``: everything one bench run depends on, validated before any model is loaded or any token
generated. Its fields with help text are also the flags of ``dels-hub bench`` (``cli.py`` derives them), and
``to_json`` is how a run records them in ``results.json``.
"""

import math
import os
from dataclasses import asdict, dataclass
from pathlib import Path

from ..arguments import json_object, option
from ..copy_expert import DEFAULT_GAMMA, CopySettings
from ..errors import BenchArgumentError
from ..generation.generator import DRAFT_MODES
from ..generation.policy import POLICIES
from ..generation.settings import checked_block_size
from ..generation.tree import DEFAULT_BRANCHING
from ..locations import model_location
from .prompts import DATASET_NAMES, check_dataset_name
from .rows import Sampling

PEERS = ("prompt-lookup", "dflash")  # the transformers rows: assisted decoding by prompt lookup, and its DFlash


@dataclass
class BenchSettings:
    """Everything a run depends on; validated before any model is loaded or any token generated.

    The fields with help text are also the flags of ``dels-hub bench`` (``bench/cli.py`` derives them).
    """

    target: object = option(help="target model: Hub id, local path or pkg:PACKAGE (shipped in a Python package)")
    dflash: object = option(  # one drafter, or a list: one DFlash row and one DeLS row per head for each
        help="DFlash drafter: Hub id or local path (z-lab format); repeat to compare drafters, each with every head",
        action="append", metavar="DFLASH",
    )  # fmt: skip
    heads: list = option(default_factory=list, name="head", action="append", metavar="HEAD",
                         help="DeLS local head (Hub id or local path); repeat to compare heads, one DeLS row each")
    target_kwargs: dict = option(default_factory=dict, type=json_object, metavar="JSON",
                                 help='extra from_pretrained arguments of the target as JSON, e.g. '
                                      '\'{"gguf_file": "model.gguf"}\'')
    dataset: str = option("humaneval", f"prompts: one of {', '.join(DATASET_NAMES)}")
    num_prompts: int | None = option(None, "a seeded random subset of N prompts, kept in dataset order (default: all)",
                                     metavar="N")
    max_new_tokens: int = option(256, "per turn", metavar="M")
    temperature: float = option(0.0, "0 is greedy, and checks token equality")
    top_p: float = option(1.0, "nucleus sampling mass when temperature > 0")
    block_size: int | None = option(None, "verify width of the speculative rows (default: the drafter's block size)",
                                    metavar="B")
    alpha: float | None = option(None, "fusion alpha of the DeLS rows (default: the head's)")
    beta: float | None = option(None, "fusion beta of the DeLS rows (default: the head's)")
    copy_ngram: int = option(0, "above 0: add a '+ copy' row beside every DFlash and DeLS row, the copy expert with "
                             "matches of up to N tokens", metavar="N")
    copy_gamma: float = option(DEFAULT_GAMMA, "the copy expert's gamma at a full-length match", metavar="G")
    draft_vocab: int | None = option(None, "add a 'vocab N' row beside every DFlash and DeLS row (and + copy row): "
                                     "the drafter scores only the N most frequent tokens, by the first head's "
                                     "unigram counts", metavar="N")
    policies: list = option(default_factory=lambda: ["cost-aware"], name="policy", nargs="+", choices=POLICIES,
                            metavar="POLICY",
                            help="the draft policies of the speculative rows: cost-aware (the default) and/or "
                                 "fixed (every draft verified); with both, each row runs under each, paired")
    draft_mode: str = option("top", f"at T > 0, one of {', '.join(DRAFT_MODES)}: top-token drafts matched against "
                             "the target's samples, or sampled drafts verified by rejection sampling",
                             choices=DRAFT_MODES)
    tree_budgets: list[int] = option(default_factory=list, name="tree_budget", nargs="+", type=int, metavar="N",
                                help="add a 'tree N' row beside every DFlash and DeLS row (and + copy row) for each "
                                     "N: a token tree of N drafted nodes per block, verified in one forward, under "
                                     "the first policy (cost-aware: a tree or a chain per block, whichever pays), "
                                     "paired with its chain row")
    tree_branching: int = option(DEFAULT_BRANCHING, "children kept per expanded node of the tree rows", metavar="C")
    seed: int = option(0, "prompt subset and sampling seed")
    out: str | None = option(None, "where results.json, results.md, samples.jsonl and the PNGs go (the Python "
                             "API's None writes nothing)", cli_default="bench-out", metavar="DIR")
    batch_size: int | None = option(None, "measure throughput on left-padded batches of B prompts (their first "
                                    "turns): our rows against target.generate on the same batches (default: the "
                                    "per-prompt bench)", metavar="B")
    score: bool = option(False, "also measure HumanEval pass@1 per row (runs model-written code; needs "
                         "HF_ALLOW_CODE_EVAL=1)")
    tokenizer: object = None  # a loaded tokenizer (default: the target's)
    device: str | None = option(None, "where the models run (default: cuda when there is one, else cpu)")
    peers: bool | tuple = option(  # True: every peer in PEERS, False: none, or a selection of PEERS' names
        True, f"the transformers rows to run, some of {', '.join(PEERS)} (default: all)",
        nargs="+", choices=PEERS, cli_default=list(PEERS), metavar="PEER",
    )  # fmt: skip
    engine: str | None = option(None, "the Python of a vLLM environment (`make engine`: .venv-engine/bin/python): "
                                "adds vLLM rows, the target alone, + the first DFlash drafter and + it with the first "
                                "head, on the prompts' first turns at concurrency 1 and 8", metavar="PYTHON")
    engine_target: str | None = option(None, "the target as vLLM loads it (default: --target; a GGUF target needs "
                                       "a transformers folder: `make engine` writes cache/smollm2-135m-instruct)",
                                       metavar="PATH")
    warmup: bool = True
    progress: bool = True

    def validate(self) -> None:
        check_dataset_name(self.dataset)
        checks = [
            (self.num_prompts is None or self.num_prompts >= 1, f"num_prompts must be >= 1, got {self.num_prompts}"),
            (self.max_new_tokens >= 1, f"max_new_tokens must be >= 1, got {self.max_new_tokens}"),
            (math.isfinite(self.temperature) and self.temperature >= 0,
             f"temperature must be >= 0 (0 is greedy), got {self.temperature}"),
            (0 < self.top_p <= 1, f"top_p must be in (0, 1], got {self.top_p}"),
            (isinstance(self.target_kwargs, dict), f"target_kwargs must be a dict, got {self.target_kwargs!r}"),
            (self.batch_size is None or self.batch_size >= 1, f"batch_size must be >= 1, got {self.batch_size}"),
            (self.batch_size is None or not self.score,
             "--score reads the per-prompt bench's answers; it does not combine with --batch-size"),
            (self.draft_vocab is None or (self.draft_vocab >= 1 and bool(self.heads)),
             f"draft_vocab counts tokens with the first head's unigram counts: give a head and N >= 1, got "
             f"draft_vocab={self.draft_vocab} with {len(self.heads or [])} heads"),
            (bool(self.policies) and all(p in POLICIES for p in self.policies)
             and len(set(self.policies)) == len(self.policies),
             f"policies must be distinct values of {list(POLICIES)}, got {self.policies!r}"),
            (all(isinstance(n, int) and n >= 1 for n in self.tree_budgets)
             and len(set(self.tree_budgets)) == len(self.tree_budgets),
             f"tree budgets must be distinct integers >= 1, got {self.tree_budgets!r}"),
            (self.tree_branching >= 1, f"tree_branching must be >= 1, got {self.tree_branching}"),
            (not self.tree_budgets or self.temperature == 0 or self.draft_mode == "top",
             "tree rows verify top-token drafts at T > 0: use --draft-mode top"),
            (not self.tree_budgets or self.batch_size is None, "--tree-budget runs in the per-prompt bench"),
            (self.draft_mode in DRAFT_MODES,
             f"draft_mode must be one of {list(DRAFT_MODES)}, got {self.draft_mode!r}"),
            (self.engine is None or self.batch_size is None,
             "--engine measures its own concurrency; it does not combine with --batch-size"),
            (self.engine is None or Path(str(self.engine)).is_file(),
             f"--engine must be the Python of a vLLM environment (make engine: .venv-engine/bin/python); "
             f"{self.engine!r} is not a file"),
            (self.engine is not None or self.engine_target is None, "--engine-target needs --engine"),
            (self.engine is None or self.engine_target is not None or not self.target_kwargs.get("gguf_file"),
             "vLLM cannot load this GGUF target as the bench does: give --engine-target, a transformers folder of "
             "the same model (`make engine` writes cache/smollm2-135m-instruct)"),
            (self.engine is None or all(isinstance(part, (str, os.PathLike))
                                        for part in [self.target, self.drafters[0], *self.heads[:1]]),
             "--engine needs the target, the first drafter and the first head as paths or Hub ids (vLLM loads "
             "them in its own process)"),
        ]  # fmt: skip
        for ok, message in checks:
            if not ok:
                raise BenchArgumentError(message)
        CopySettings(self.copy_ngram, self.copy_gamma)  # FusionScheduleError names a bad value
        if self.block_size is not None:
            checked_block_size(self.block_size, minimum=2)  # the drafters' maximum is checked once they are loaded
        unknown = [name for name in self.peer_names if name not in PEERS]
        if unknown:
            raise BenchArgumentError(f"unknown peers {unknown}; expected some of {list(PEERS)}")
        if self.score:
            if self.dataset != "humaneval":
                raise BenchArgumentError(f"--score measures HumanEval pass@1; dataset is {self.dataset!r}")
            if os.environ.get("HF_ALLOW_CODE_EVAL") != "1":
                raise BenchArgumentError(
                    "--score executes model-written code; set HF_ALLOW_CODE_EVAL=1 to allow it (as evaluate's "
                    "code_eval requires). It runs in a subprocess with a timeout, not in a sandbox."
                )
        if self.heads and any(h is None for h in self.heads):
            raise BenchArgumentError("heads must be paths, Hub ids or loaded DeLSLocalHead models, not None")
        if not self.drafters or any(d is None for d in self.drafters):
            raise BenchArgumentError(
                f"dflash must be one or more drafters (paths, Hub ids or models), got {self.dflash!r}"
            )
        # a path that does not exist is named now, not after the target has loaded
        parts = [(self.target, "target")] + [(d, "DFlash drafter") for d in self.drafters]
        for location, what in parts + [(h, "local head") for h in self.heads or []]:
            if isinstance(location, (str, os.PathLike)):
                model_location(location, what)

    @property
    def peer_names(self) -> tuple:
        return PEERS if self.peers is True else () if self.peers is False else tuple(self.peers)

    @property
    def drafters(self) -> list:
        return list(self.dflash) if isinstance(self.dflash, (list, tuple)) else [self.dflash]

    @property
    def sampling(self) -> Sampling:
        return Sampling(max_new_tokens=self.max_new_tokens, temperature=self.temperature, top_p=self.top_p)

    def to_json(self) -> dict:
        def describe(value):
            return value if value is None or isinstance(value, str) else _describe_model(value)

        settings = {k: v for k, v in asdict(self).items() if k not in ("target", "dflash", "heads", "tokenizer")}
        settings.update(
            target=describe(self.target),
            dflash=[describe(d) for d in self.drafters],
            heads=[describe(h) for h in self.heads],
            tokenizer=describe(self.tokenizer),
        )
        return settings


def _describe_model(model) -> str:
    name = getattr(getattr(model, "config", None), "name_or_path", "") or getattr(model, "name_or_path", "")
    return f"<in-memory {type(model).__name__}{' ' + name if name else ''}>"
