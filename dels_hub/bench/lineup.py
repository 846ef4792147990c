"""The lineup of a bench run: which rows it measures, in table order, and which it skips and why. The target
alone through our loop (``BASELINE``, what speedups are over) and ``target.generate`` (``REFERENCE``, what greedy
tokens must equal), then a DFlash row per drafter and a DeLS row per drafter and head, each optionally beside its
copy-expert, pruned-vocabulary and other-policy twins, then the transformers peers; plus loading the generator
that drives them.
"""

import os
from pathlib import Path

import torch

from ..draft_vocabulary import most_frequent
from ..errors import BenchArgumentError
from ..generation import DeLSGenerator
from ..loading import load_head
from .peers import (
    prompt_lookup_row,
    supports_prompt_lookup,
    supports_transformers_dflash,
    target_generate_row,
    transformers_dflash_row,
)
from .rows import LoopRow, Row, plain_decoding_row
from .settings import PEERS, BenchSettings

BASELINE = "target (loop, b=1)"  # speedups are over plain decoding through the same loop (DFlash's baseline)
REFERENCE = "target.generate"  # greedy tokens must equal transformers' own greedy decoding


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
    chains = [row for row in rows if row.kind in ("dflash", "dels")]
    rows = policy_rows(rows, settings.policies, settings.draft_mode)
    rows += tree_rows(settings, chains)
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


def tree_rows(settings: BenchSettings, chains: list[LoopRow]) -> list[LoopRow]:
    """Each chain row again as a tree of each budget, under the chain row's policy (cost-aware: per block a chain or a
    tree of the budget or one of its halves, whichever pays; fixed: a tree every block), paired with its chain row
    (the tree's gain) and, for a DeLS tree, with the DFlash tree of the same budget (the head's gain on trees)."""
    trees = []
    for budget in settings.tree_budgets:
        by_chain = {}
        for base in chains:
            chain = base.generator
            generator = DeLSGenerator(chain.target, chain.drafter, chain.head, chain.tokenizer,
                                      copy_ngram=chain.copy.max_ngram, copy_gamma=chain.copy.gamma,
                                      tree_budget=budget, tree_branching=settings.tree_branching)
            row = LoopRow(f"{base.name}, tree {budget}", base.kind, generator, base.block_size, base.head, base.alpha,
                          base.beta, base.policy, settings.draft_mode)
            row.compare_to_chain = base.name
            by_chain[base.name] = row
            trees.append(row)
        for base in chains:
            for link in ("compare_to", "compare_to_head", "compare_to_base"):
                if getattr(base, link) in by_chain:
                    setattr(by_chain[base.name], link, by_chain[getattr(base, link)].name)
    return trees


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
