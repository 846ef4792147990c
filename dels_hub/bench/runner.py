"""``run_bench``: validate, load, warm up, then measure every row on every prompt, interleaved.

Rows run one after another on the same prompt before the next prompt starts (their order rotates from
prompt to prompt), so machine drift and thermal state hit all rows alike. Greedy rows are compared token
for token with ``target.generate``; a difference is a bug and is reported loudly, never hidden.
"""

import logging
import math
import os
import time
import warnings
from dataclasses import asdict, dataclass
from pathlib import Path

import torch
from tqdm.auto import tqdm

from ..arguments import json_object, option
from ..copy_expert import DEFAULT_GAMMA, CopySettings
from ..draft_vocabulary import most_frequent
from ..errors import BenchArgumentError
from ..generation import DeLSGenerator
from ..generation.generator import DRAFT_MODES
from ..generation.policy import POLICIES, pooled
from ..generation.settings import checked_block_size
from ..loading import load_dflash, load_head
from ..locations import model_location
from . import stats
from .environment import PeakMemory, load_average, machine, versions
from .peers import (
    prompt_lookup_row,
    supports_prompt_lookup,
    supports_transformers_dflash,
    target_generate_row,
    transformers_dflash_row,
)
from .prompts import DATASET_NAMES, Prompt, check_dataset_name, load_prompts
from .rows import LoopRow, Row, Sample, Sampling, plain_decoding_row

logger = logging.getLogger(__name__)
PEERS = ("prompt-lookup", "dflash")  # the transformers rows: assisted decoding by prompt lookup, and its DFlash

BASELINE = "target (loop, b=1)"  # speedups are over plain decoding through the same loop (DFlash's baseline)
REFERENCE = "target.generate"  # greedy tokens must equal transformers' own greedy decoding
WARMUP_TOKENS = 16


class GreedyMismatchWarning(UserWarning):
    """A greedy row produced tokens different from the target alone: a losslessness bug."""


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


# -- prompts -> token ids --------------------------------------------------------------------------------


def encode_chat(tokenizer, messages: list[dict], device) -> torch.Tensor:
    """``[1, N]`` prompt ids through the tokenizer's chat template (raw text when it has none)."""
    if getattr(tokenizer, "chat_template", None):
        encoded = tokenizer.apply_chat_template(
            messages, add_generation_prompt=True, return_dict=True, return_tensors="pt", enable_thinking=False
        )
        ids = encoded["input_ids"]
    else:
        ids = tokenizer("\n\n".join(m["content"] for m in messages), return_tensors="pt")["input_ids"]
    return ids.to(device)


# -- rows ------------------------------------------------------------------------------------------------


def _model_label(model, index: int, kind: str) -> str:
    if isinstance(model, (str, os.PathLike)):
        return Path(str(model)).name or str(model)
    return getattr(getattr(model, "config", None), "name_or_path", "") or f"{kind}{index}"


def _unique_labels(models: list, kind: str) -> list[str]:
    labels = []
    for index, model in enumerate(models):
        label = _model_label(model, index, kind)
        labels.append(label if label not in labels else f"{label}#{index}")
    return labels


def build_rows(
    settings: BenchSettings, generator: DeLSGenerator, drafters: list, block_size: int
) -> tuple[list[Row], list[dict]]:
    """Every row of the run, in table order, and the rows skipped with their reasons.

    ``drafters`` are the loaded drafters (``generator.drafter`` first); with more than one, the DFlash and
    DeLS row names say which drafter they ran.
    """
    target, drafter, tokenizer = generator.target, generator.drafter, generator.tokenizer
    pad = tokenizer.pad_token_id if tokenizer.pad_token_id is not None else tokenizer.eos_token_id
    rows: list[Row] = [
        plain_decoding_row(BASELINE, DeLSGenerator(target, drafter, None, tokenizer), settings.draft_mode),
        target_generate_row(target, pad),
    ]
    heads = [load_head(head).to(device=target.device, dtype=target.dtype) for head in settings.heads]
    head_labels = _unique_labels(settings.heads, "head")
    drafter_labels = _unique_labels(settings.drafters, "dflash")
    for drafter_label, each in zip(drafter_labels, drafters):
        which = f", {drafter_label}" if len(drafters) > 1 else ""
        dflash_row = LoopRow(f"DFlash (b={block_size}{which})", "dflash", DeLSGenerator(target, each, None, tokenizer),
                             block_size)
        rows.append(dflash_row)
        rows += copy_rows(settings, dflash_row, DeLSGenerator(target, each, None, tokenizer))
        first_head_row = None
        for label, head in zip(head_labels, heads):
            fused = DeLSGenerator(target, each, head, tokenizer)
            row = LoopRow(f"DeLS (b={block_size}{which}, {label})", "dels", fused, block_size, label, settings.alpha,
                          settings.beta)
            row.compare_to = dflash_row.name
            row.compare_to_head = first_head_row.name if first_head_row else None  # e.g. an adapter vs its base
            first_head_row = first_head_row or row
            rows.append(row)
            rows += copy_rows(settings, row, fused)
    if settings.draft_vocab:
        rows += vocab_rows(rows, most_frequent(heads[0].unigram_counts, settings.draft_vocab))
    rows = policy_rows(rows, settings.policies, settings.draft_mode)
    wanted = settings.peer_names
    skipped = [{"row": f"transformers {name}", "reason": "not asked for (peers)"}
               for name in PEERS if name not in wanted]
    if "prompt-lookup" in wanted:
        reason = supports_prompt_lookup()
        if reason is None:
            lookup = prompt_lookup_row(target, block_size, pad)
            for row in rows:
                if row.compare_to_base:  # the copy expert against the peer that does nothing but copy
                    row.compare_to_peer = lookup.name
            rows.append(lookup)
        else:
            skipped.append({"row": "transformers prompt-lookup", "reason": reason})
    if "dflash" in wanted:
        reason = supports_transformers_dflash()
        if reason is None:
            rows.append(transformers_dflash_row(target, drafter, block_size, pad))
        else:
            skipped.append({"row": "transformers DFlash", "reason": reason})
    return rows, skipped


def copy_rows(settings: BenchSettings, base: LoopRow, generator: DeLSGenerator) -> list[LoopRow]:
    """``base`` with the copy expert on, compared with ``base`` paired per prompt; none when it is off."""
    if not settings.copy_ngram:
        return []
    copying = DeLSGenerator(generator.target, generator.drafter, generator.head, generator.tokenizer,
                            copy_ngram=settings.copy_ngram, copy_gamma=settings.copy_gamma)
    row = LoopRow(f"{base.name} + copy", base.kind, copying, base.block_size, base.head, base.alpha, base.beta)
    row.compare_to_base = base.name
    return [row]


def vocab_rows(rows: list[Row], token_ids) -> list[LoopRow]:
    """Each DFlash and DeLS row again with a pruned draft vocabulary, compared with it paired per prompt."""
    pruned = []
    for base in [row for row in rows if row.kind in ("dflash", "dels")]:
        full = base.generator
        generator = DeLSGenerator(full.target, full.drafter, full.head, full.tokenizer, copy_ngram=full.copy.max_ngram,
                                  copy_gamma=full.copy.gamma, draft_vocab=token_ids)
        row = LoopRow(f"{base.name}, vocab {len(token_ids)}", base.kind, generator, base.block_size, base.head,
                      base.alpha, base.beta)
        row.compare_to_full_vocab = base.name
        pruned.append(row)
    return pruned


def policy_rows(rows: list[Row], policies: list[str], draft_mode: str) -> list[Row]:
    """Every speculative row under the first policy (its own name), then again under each other policy (named
    ``"... [policy]"``, compared with twins of the same policy); a cost-aware row is paired with its fixed twin."""
    speculative = [row for row in rows if row.kind in ("dflash", "dels")]
    for row in speculative:
        row.policy, row.draft_mode = policies[0], draft_mode
    twins: dict[str, dict[str, LoopRow]] = {row.name: {policies[0]: row} for row in speculative}
    extra = []
    for policy in policies[1:]:
        renamed = {row.name: f"{row.name} [{policy}]" for row in speculative}
        for row in speculative:
            twin = LoopRow(renamed[row.name], row.kind, row.generator, row.block_size, row.head, row.alpha, row.beta,
                           policy, draft_mode)
            for link in ("compare_to", "compare_to_head", "compare_to_base", "compare_to_full_vocab"):
                setattr(twin, link, renamed.get(getattr(row, link)))
            twins[row.name][policy] = twin
            extra.append(twin)
    for pair in twins.values():
        if "cost-aware" in pair and "fixed" in pair:
            pair["cost-aware"].compare_to_policy = pair["fixed"].name
    return rows + extra


# -- measuring -------------------------------------------------------------------------------------------


@dataclass
class PromptRun:
    """One row on one prompt, all turns: the tokens (concatenated over turns) and per-turn samples."""

    tokens: list[int]
    samples: list[Sample]
    first_input_ids: torch.Tensor
    texts: list[str]

    def record(self, prompt_id: str) -> dict:
        lengths = [n for s in self.samples for n in (s.acceptance_lengths or [])]
        known = all(s.acceptance_lengths is not None for s in self.samples)
        decode_seconds = sum(s.total_seconds - s.time_to_first_token for s in self.samples)
        decode_tokens = sum(max(len(s.new_tokens) - 1, 0) for s in self.samples)
        total = sum(s.total_seconds for s in self.samples)
        peaks = [s.peak_memory_bytes for s in self.samples if s.peak_memory_bytes is not None]
        return {
            "id": prompt_id,
            "prompt_tokens": int(self.first_input_ids.shape[1]),
            "new_tokens": len(self.tokens),
            "tau": stats.tau_per_prompt(lengths) if known else None,
            "acceptance_lengths": lengths if known else None,
            "time_to_first_token": self.samples[0].time_to_first_token,
            "decode_seconds": decode_seconds,
            "total_seconds": total,
            # Time per output token after the first one (DFlash times TPOT from after the first draft call).
            "tpot": decode_seconds / decode_tokens if decode_tokens else None,
            "tokens_per_second": len(self.tokens) / total if total > 0 else None,
            "peak_memory_bytes": max(peaks) if peaks else None,
            "policy": pooled([s.policy for s in self.samples]),
        }


def run_prompt(row: Row, prompt: Prompt, tokenizer, sampling: Sampling, seed: int, device, memory) -> PromptRun:
    """All turns of one prompt; in multi-turn sets each decoded answer becomes the next assistant turn."""
    messages = list(prompt.messages)
    samples, tokens, texts, first_ids = [], [], [], None
    for turn in range(1 + len(prompt.follow_ups)):
        if turn:
            messages.append({"role": "user", "content": prompt.follow_ups[turn - 1]})
        input_ids = encode_chat(tokenizer, messages, device)
        first_ids = input_ids if first_ids is None else first_ids
        memory.start()
        sample = row.generate(input_ids, sampling, seed)
        sample.peak_memory_bytes = memory.stop()
        text = tokenizer.decode(sample.new_tokens, skip_special_tokens=True)
        samples.append(sample)
        tokens.extend(sample.new_tokens)
        texts.append(text)
        messages.append({"role": "assistant", "content": text})
    return PromptRun(tokens=tokens, samples=samples, first_input_ids=first_ids, texts=texts)


def warm_up(rows, prompt, tokenizer, sampling, seed, device, memory, skipped) -> list[Row]:
    """One short untimed call per row (allocator, kernels, lazy imports); peers that fail here are skipped."""
    short = Sampling(min(sampling.max_new_tokens, WARMUP_TOKENS), sampling.temperature, sampling.top_p)
    single = Prompt(id=prompt.id, messages=prompt.messages)
    kept = []
    for row in rows:
        try:
            run_prompt(row, single, tokenizer, short, seed, device, memory)
        except Exception as error:  # a peer that cannot run is reported and skipped, not fatal
            if row.kind != "peer":
                raise
            skipped.append({"row": row.name, "reason": f"failed in warm-up: {type(error).__name__}: {error}"})
            logger.warning("skipping %s: %s", row.name, error)
            continue
        kept.append(row)
    return kept


def measure(rows, prompts, tokenizer, sampling, seed, device, memory, skipped, progress=True) -> dict:
    """``{row name: [PromptRun per prompt]}``, rows interleaved per prompt with a rotating order."""
    runs = {row.name: [] for row in rows}
    active = list(rows)
    bar = tqdm(total=len(prompts) * len(rows), desc="bench", unit="gen", disable=not progress)
    for index, prompt in enumerate(prompts):
        shift = index % len(active) if active else 0
        for row in active[shift:] + active[:shift]:
            bar.set_postfix_str(f"{prompt.id} | {row.name}", refresh=False)
            try:
                runs[row.name].append(run_prompt(row, prompt, tokenizer, sampling, seed + index, device, memory))
            except Exception as error:  # only peers may drop out; our own rows re-raise
                if row.kind != "peer":
                    raise
                skipped.append({"row": row.name, "reason": f"failed on prompt {prompt.id}: {error}"})
                logger.warning("dropping %s: %s", row.name, error)
                active.remove(row)
                runs.pop(row.name)
            bar.update(1)
    bar.close()
    return runs


# -- greedy equality -------------------------------------------------------------------------------------


def first_difference(expected: list[int], got: list[int]) -> int | None:
    for position, (a, b) in enumerate(zip(expected, got)):
        if a != b:
            return position
    return None if len(expected) == len(got) else min(len(expected), len(got))


@torch.inference_mode()
def logit_gap(target, input_ids: torch.Tensor, expected: list[int], position: int, got: int) -> float:
    """Target logit of the expected token minus that of the token the row produced, after the shared prefix.

    A gap near 0 points at a numerical near-tie (batched verify vs single-token forward); a large one at
    a logic bug. Either way the rows differ and the mismatch stands.
    """
    prefix = torch.tensor([expected[:position]], dtype=torch.long, device=input_ids.device)
    logits = target(input_ids=torch.cat([input_ids, prefix], dim=1)).logits[0, -1].float()
    return float(logits[expected[position]] - logits[got])


def check_greedy(runs: dict, prompts: list[Prompt], target) -> dict:
    """Compare every row's tokens with ``target.generate``'s, prompt by prompt."""
    reference = runs[REFERENCE]
    mismatches = {}
    for name, row_runs in runs.items():
        if name == REFERENCE:
            continue
        found = []
        for prompt, ref, run in zip(prompts, reference, row_runs):
            position = first_difference(ref.tokens, run.tokens)
            if position is None:
                continue
            expected = ref.tokens[position] if position < len(ref.tokens) else None
            got = run.tokens[position] if position < len(run.tokens) else None
            entry = {"prompt": prompt.id, "position": position, "expected": expected, "got": got,
                     "reference_length": len(ref.tokens), "row_length": len(run.tokens)}  # fmt: skip
            first_turn = len(ref.samples[0].new_tokens)
            if expected is not None and got is not None and position < first_turn:
                entry["logit_gap"] = logit_gap(target, ref.first_input_ids, ref.tokens, position, got)
            found.append(entry)
        mismatches[name] = found
    bad = sorted(name for name, found in mismatches.items() if found)
    return {"reference": REFERENCE, "ok": not bad, "mismatched_rows": bad, "mismatches": mismatches}


# -- summary ---------------------------------------------------------------------------------------------


def summarize(rows: list[Row], runs: dict, prompts: list[Prompt], greedy: dict | None) -> list[dict]:
    records = {name: [run.record(p.id) for p, run in zip(prompts, row_runs)] for name, row_runs in runs.items()}
    tpot = {name: [r["tpot"] for r in recs] for name, recs in records.items()}
    summaries = []
    for row in rows:
        if row.name not in records:
            continue
        recs = records[row.name]
        per_prompt_lengths = [r["acceptance_lengths"] for r in recs if r["acceptance_lengths"] is not None]
        taus = [r["tau"] for r in recs if r["tau"] is not None]
        peaks = [r["peak_memory_bytes"] for r in recs if r["peak_memory_bytes"] is not None]
        summary = {
            "name": row.name,
            "kind": row.kind,
            "block_size": row.block_size,
            "head": row.head,
            "notes": row.notes,
            "tau": stats.mean_ci95(taus),
            "acceptance_histogram": stats.acceptance_histogram(per_prompt_lengths),
            "acceptance_profile": stats.position_profile(per_prompt_lengths, row.block_size),
            "tpot_median": stats.median([t for t in tpot[row.name] if t is not None]),
            "tokens_per_second_median": stats.median([r["tokens_per_second"] for r in recs if r["tokens_per_second"]]),
            "time_to_first_token_median": stats.median([r["time_to_first_token"] for r in recs]),
            "new_tokens_total": sum(r["new_tokens"] for r in recs),
            "peak_memory_bytes": max(peaks) if peaks else None,
            "speedup": stats.speedup(tpot[BASELINE], tpot[row.name]),
            "speedup_vs_target_generate": stats.speedup(tpot[REFERENCE], tpot[row.name]),
            "greedy_match": None if greedy is None else (row.name == REFERENCE or not greedy["mismatches"][row.name]),
            "policy": pooled([r["policy"] for r in recs]),
            "per_prompt": recs,
        }
        for key, base in (("gain_over_dflash", row.compare_to), ("gain_over_first_head", row.compare_to_head),
                          ("gain_of_copy", row.compare_to_base), ("gain_of_draft_vocab", row.compare_to_full_vocab),
                          ("gain_over_prompt_lookup", row.compare_to_peer),
                          ("gain_over_fixed_blocks", row.compare_to_policy)):
            if base in records:
                summary[key] = gain_over(records[base], recs, tpot[base], tpot[row.name]) | {"baseline": base}
        summaries.append(summary)
    return summaries


def scored_pairs(base_records: list[dict], row_records: list[dict]) -> list[tuple[float, float]]:
    """(baseline tau, row tau) per prompt, over the prompts that both rows scored."""
    return [(b["tau"], r["tau"]) for b, r in zip(base_records, row_records)
            if b["tau"] is not None and r["tau"] is not None]


def gain_over(base_records: list[dict], row_records: list[dict], base_tpot: list, row_tpot: list) -> dict:
    """A row against its baseline row on the same prompts: per-prompt tau differences (mean and 95% interval),
    the relative tau gain of the means, and the speedup (baseline TPOT over row TPOT)."""
    pairs = scored_pairs(base_records, row_records)
    difference = stats.mean_ci95([r - b for b, r in pairs])
    base_mean = stats.mean_ci95([b for b, _ in pairs])["mean"]
    return {
        "tau_difference": difference,
        "tau_gain_relative": difference["mean"] / base_mean if base_mean else None,
        "speedup": stats.speedup(base_tpot, row_tpot),
    }


# -- entry point -----------------------------------------------------------------------------------------


def load_generator(settings: BenchSettings) -> DeLSGenerator:
    device = settings.device
    if device is None and isinstance(settings.target, (str, os.PathLike)) and torch.cuda.is_available():
        device = "cuda"
    generator = DeLSGenerator.from_pretrained(
        settings.target, settings.drafters[0], tokenizer=settings.tokenizer, device=device, **settings.target_kwargs
    )
    if generator.tokenizer is None:
        raise BenchArgumentError(
            "no tokenizer: the target is an in-memory model, so pass tokenizer=... (needed for chat templates)"
        )
    return generator


def run_engine_rows(settings, runs, prompts, generator, block_size: int, greedy: bool) -> dict:
    """The vLLM rows (``engine.py``) on the first turns of the same prompts."""
    from .engine import engine_rows

    prompt_ids = [encode_chat(generator.tokenizer, prompt.messages, "cpu")[0].tolist() for prompt in prompts]
    reference = [run.samples[0].new_tokens for run in runs[REFERENCE]] if greedy and REFERENCE in runs else None
    dtype = str(generator.target.dtype).removeprefix("torch.")
    rows, skipped = engine_rows(settings, prompt_ids, reference, block_size, dtype, generator.device.type)
    return {"python": str(settings.engine), "target": str(settings.engine_target or settings.target),
            "new_tokens": rows[0]["new_tokens"] if rows else 0, "rows": rows, "skipped": skipped}


def run_bench(target, dflash, heads=(), **options) -> dict:
    """Measure target alone, DFlash only, DeLS per head and the transformers peers on one dataset.

    Args:
        target: Hub id, local path or loaded causal LM (``target_kwargs`` such as ``gguf_file`` pass through).
        dflash: Hub id, local path or loaded ``DFlashDraftModel``; or a list of them, one DFlash row and one
            DeLS row per head each (the first also drives the transformers DFlash peer).
        heads: local heads (paths, Hub ids or loaded), one DeLS row each.
        **options: the ``BenchSettings`` fields: dataset, num_prompts, max_new_tokens, temperature, top_p,
            block_size, alpha, beta, copy_ngram, copy_gamma, seed, out (directory for results.json, results.md,
            PNGs; None writes nothing), score, target_kwargs, tokenizer, device, peers, warmup, progress.

    Returns:
        The results dict (also written to ``out/results.json``); ``results["greedy_check"]["ok"]`` is False
        when a greedy row disagreed with the target alone.
    """
    settings = BenchSettings(target=target, dflash=dflash, heads=list(heads), **options)
    settings.validate()
    started, load_at_start = time.perf_counter(), load_average()
    prompts = load_prompts(settings.dataset, settings.num_prompts, settings.seed)

    generator = load_generator(settings)
    place = {"device": generator.device, "dtype": generator.target.dtype}
    drafters = [generator.drafter] + [load_dflash(d, place["dtype"]).to(**place) for d in settings.drafters[1:]]
    largest = min(d.config.block_size for d in drafters)
    block_size = checked_block_size(settings.block_size or largest, largest, minimum=2)  # now, not after a prompt
    tokenizer, device = generator.tokenizer, generator.device
    sampling = settings.sampling
    memory = PeakMemory(device)

    rows, skipped = build_rows(settings, generator, drafters, block_size)
    if settings.batch_size is not None:
        from .batched import run_batched, write_batched

        results = run_batched(settings, generator, rows, prompts, block_size, skipped, started)
        if settings.out is not None:
            results["files"] = write_batched(results, settings.out)
        return results
    if settings.warmup:
        rows = warm_up(rows, prompts[0], tokenizer, sampling, settings.seed, device, memory, skipped)
    runs = measure(rows, prompts, tokenizer, sampling, settings.seed, device, memory, skipped, settings.progress)
    rows = [row for row in rows if row.name in runs]

    greedy = check_greedy(runs, prompts, generator.target) if sampling.greedy else None
    results = {
        "dels_hub_bench": 1,
        "versions": versions(),
        "machine": machine(device, load_at_start),
        "dtype": str(generator.target.dtype).removeprefix("torch."),
        "device": str(device),
        "peak_memory_kind": memory.kind,
        "settings": settings.to_json() | {"block_size": block_size},
        "chat_template": bool(getattr(tokenizer, "chat_template", None)),
        "baseline": BASELINE,
        "prompts": [p.id for p in prompts],
        "rows": summarize(rows, runs, prompts, greedy),
        "skipped_rows": skipped,
        "greedy_check": greedy,
    }
    if greedy is not None and not greedy["ok"]:
        message = (
            f"GREEDY MISMATCH: {', '.join(greedy['mismatched_rows'])} produced tokens different from "
            f"{REFERENCE} at T=0. Speculative decoding must be lossless; this is a bug."
        )
        logger.error(message)
        warnings.warn(message, GreedyMismatchWarning, stacklevel=2)
    if settings.engine is not None:
        results["engine"] = run_engine_rows(settings, runs, prompts, generator, block_size, sampling.greedy)
    if settings.score:
        from .score import score_humaneval

        results["score"] = score_humaneval(runs, prompts)
    results["machine"]["load_average_at_end"] = load_average()
    results["wall_seconds"] = time.perf_counter() - started
    if settings.out is not None:
        from .report import write_report

        results["files"] = write_report(results, runs, prompts, settings.out)
    return results
