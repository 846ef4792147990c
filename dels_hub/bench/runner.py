"""``run_bench``: validate, load, warm up, then measure every row on every prompt, interleaved.

Rows run one after another on the same prompt before the next prompt starts (their order rotates from
prompt to prompt), so machine drift and thermal state hit all rows alike. Greedy rows are compared token
for token with ``target.generate``; a difference is a bug and is reported loudly, never hidden. Which rows
run is ``lineup.py``, the greedy check ``greedy_check.py`` and the per-row summary ``summary.py``.
"""

import logging
import time
import warnings
from dataclasses import dataclass

import torch
from tqdm.auto import tqdm

from ..generation.policy import pooled
from ..generation.settings import checked_block_size
from ..loading import load_dflash
from . import stats
from .environment import PeakMemory, load_average, machine, versions
from .greedy_check import GreedyMismatchWarning, check_greedy
from .lineup import BASELINE, REFERENCE, build_rows, load_generator
from .prompts import Prompt, encode_chat, load_prompts
from .rows import Row, Sample, Sampling
from .settings import BenchSettings
from .summary import summarize

logger = logging.getLogger(__name__)
WARMUP_TOKENS = 16


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
