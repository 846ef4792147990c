"""Training data: records -> token ids with a loss mask -> anchored blocks.

Records come through ``datasets`` (local json/jsonl/parquet/csv/txt files or folders, Hub ids) or from the
fixed ShareGPT split (``sharegpt:train`` / ``sharegpt:validation``; the held-out slice is refused). Chat
records are rendered with the tokenizer's chat template and supervised on the assistant turns only; plain
text is cut into ``max_length`` windows and supervised everywhere.

Everything random here takes an explicit ``torch.Generator``: a step's batch is a pure function of
``(seed, step, micro-step, rank)``, which is what makes a resumed run identical to an uninterrupted one.
"""

import os
import re
from dataclasses import dataclass
from pathlib import Path

import torch

from ..errors import TrainingDataError
from .corpora import corpus_records, is_corpus, refuse_benchmark

MESSAGE_FIELDS = ("messages", "conversations", "conversation")
ROLE_NAMES = {
    "human": "user", "user": "user", "system": "system",
    "gpt": "assistant", "assistant": "assistant", "chatgpt": "assistant", "bard": "assistant",
    "bing": "assistant", "model": "assistant",
}
FILE_BUILDERS = {".json": "json", ".jsonl": "json", ".parquet": "parquet", ".csv": "csv", ".txt": "text"}


@dataclass
class Example:
    """One training sequence: ``ids [T]`` and ``loss_mask [T]`` (True where the token is supervised)."""

    ids: torch.Tensor
    loss_mask: torch.Tensor


# -- records ----------------------------------------------------------------------------------------------


def load_records(source: str, split: str = "train", max_records: int = 0) -> list[dict]:
    """Records of ``source`` as a list of dicts; fails with a clear message before any training work.

    Named corpora (``sharegpt:...``, ``pysrc:...``) come from ``corpora``; benchmark data is refused there, and
    here for every other source, local paths included."""
    if is_corpus(source):
        records = corpus_records(source)
        return records[:max_records] if max_records else records
    refuse_benchmark(source)

    import datasets

    path = Path(source).expanduser()
    if path.is_file():
        builder = FILE_BUILDERS.get(path.suffix.lower())
        if builder is None:
            raise TrainingDataError(f"data file {source!r} has an unsupported extension; use {sorted(FILE_BUILDERS)}")
        dataset = datasets.load_dataset(builder, data_files=str(path), split="train")
    elif path.is_dir():
        dataset = datasets.load_dataset(str(path), split=split)
    elif looks_like_path(source):
        raise TrainingDataError(f"data file {source!r} does not exist")
    else:
        try:
            dataset = datasets.load_dataset(source, split=split)
        except Exception as error:  # datasets raises many types; name the source and stop before training
            raise TrainingDataError(f"could not load data {source!r} (split {split!r}): {error}") from error
    if max_records:
        dataset = dataset.select(range(min(max_records, len(dataset))))
    return dataset.to_list()


def looks_like_path(source: str) -> bool:
    """A missing local path, rather than a Hub id (``owner/name``)?"""
    return (source.startswith((".", "~", os.sep)) or source.count("/") > 1
            or Path(source).suffix.lower() in FILE_BUILDERS)


def record_kind(record: dict, data_format: str, text_field: str, messages_field: str) -> tuple[str, str]:
    """("chat", column) or ("text", column) for a record, or a TrainingDataError naming the columns seen."""
    columns = sorted(record)
    if data_format in ("auto", "chat"):
        candidates = (messages_field,) if messages_field else MESSAGE_FIELDS
        for name in candidates:
            if name in record:
                return "chat", name
        if data_format == "chat":
            raise TrainingDataError(f"chat data needs a column named one of {list(candidates)}; found {columns}")
    if text_field in record:
        return "text", text_field
    raise TrainingDataError(
        f"records have no {text_field!r} column (text) nor any of {list(MESSAGE_FIELDS)} (chat); found {columns}"
    )


def normalize_messages(turns) -> list[dict]:
    """``[{"from"|"role", "value"|"content"}]`` -> ``[{"role", "content"}]`` with user/assistant/system roles."""
    messages = []
    for turn in turns or []:
        role = ROLE_NAMES.get(str(turn.get("role", turn.get("from", ""))).lower())
        content = turn.get("content", turn.get("value"))
        if role is None or not isinstance(content, str):
            continue
        messages.append({"role": role, "content": content})
    return messages


# -- tokenization -----------------------------------------------------------------------------------------


def render_chat(messages: list[dict], tokenizer, max_length: int | None) -> Example | None:
    """Chat-template the conversation and supervise the assistant turns (including their end-of-turn tokens);
    the first ``max_length`` tokens, or all of them with ``max_length=None``.

    The assistant span of turn i is the text that ``template(messages[:i + 1])`` adds to
    ``template(messages[:i], add_generation_prompt=True)``, when the full rendering starts with both (true
    of ChatML-like templates); otherwise (and for an answer that opens the conversation) the span is the
    content found verbatim in the rendering.
    """
    if not any(m["role"] == "assistant" for m in messages):
        return None
    def render(msgs, **kwargs) -> str:
        return tokenizer.apply_chat_template(msgs, tokenize=False, **kwargs)

    full = render(messages)
    spans, cursor = [], 0
    for i, message in enumerate(messages):
        if message["role"] != "assistant":
            continue
        before = render(messages[:i], add_generation_prompt=True) if i else None  # no prompt, no prefix
        upto = render(messages[: i + 1])
        if before is not None and full.startswith(upto) and upto.startswith(before) and len(before) >= cursor:
            spans.append((len(before), len(upto)))
            cursor = len(upto)
        else:
            start = full.find(message["content"], cursor)
            if start >= 0 and message["content"]:
                spans.append((start, start + len(message["content"])))
                cursor = start + len(message["content"])
    encoding = tokenizer(full, add_special_tokens=False, return_offsets_mapping=True,
                         truncation=max_length is not None, max_length=max_length)
    ids = torch.tensor(encoding["input_ids"], dtype=torch.long)
    starts = torch.tensor([start for start, _ in encoding["offset_mapping"]], dtype=torch.long)
    mask = torch.zeros(len(ids), dtype=torch.bool)
    for lo, hi in spans:
        mask |= (starts >= lo) & (starts < hi)
    return Example(ids, mask)


def text_windows(text: str, tokenizer, max_length: int) -> list[Example]:
    """Plain text: consecutive ``max_length`` windows, every token supervised."""
    ids = torch.tensor(tokenizer(text, add_special_tokens=False)["input_ids"], dtype=torch.long)
    return windows(Example(ids, torch.ones(len(ids), dtype=torch.bool)), max_length)


def windows(example: Example, max_length: int) -> list[Example]:
    """Consecutive ``max_length`` windows of one sequence, each with its slice of the loss mask."""
    pieces = zip(example.ids.split(max_length), example.loss_mask.split(max_length))
    return [Example(ids, mask) for ids, mask in pieces]


def chat_examples(messages: list[dict], tokenizer, config) -> list[Example]:
    """One conversation: truncated to ``max_length``, or cut into windows (``long_chats = "windows"``), so that
    every turn of a long conversation is trained on."""
    if config.long_chats == "truncate":
        example = render_chat(messages, tokenizer, config.max_length)
        return [example] if example is not None else []
    example = render_chat(messages, tokenizer, None)
    return windows(example, config.max_length) if example is not None else []


def tokenize_records(records: list[dict], tokenizer, config, what: str = "data") -> list[Example]:
    """Records -> examples with at least one anchor (two consecutive supervised tokens)."""
    if not records:
        raise TrainingDataError(f"{what} holds no records")
    kind, column = record_kind(records[0], config.data_format, config.text_field, config.messages_field)
    if kind == "chat" and not getattr(tokenizer, "chat_template", None):
        raise TrainingDataError(f"{what} is chat data but the tokenizer has no chat template to render it")
    if not getattr(tokenizer, "is_fast", False):
        raise TrainingDataError("a fast tokenizer is needed (offsets locate the assistant spans)")
    examples = []
    for record in records:
        if kind == "chat":
            examples.extend(chat_examples(normalize_messages(record.get(column)), tokenizer, config))
        elif isinstance(record.get(column), str):
            examples.extend(text_windows(record[column], tokenizer, config.max_length))
    examples = [e for e in examples if len(anchor_candidates(e.loss_mask))]
    if not examples:
        raise TrainingDataError(f"{what} yields no sequence with two consecutive supervised tokens ({kind} "
                                f"data, column {column!r})")
    return examples


def record_text(value) -> str:
    """Every string inside a record (nested turns included), one per line: what ``record_pattern`` searches."""
    if isinstance(value, str):
        return value
    if isinstance(value, dict):
        value = list(value.values())
    return "\n".join(record_text(item) for item in value) if isinstance(value, list) else ""


def matching_records(source: str, config, max_records: int) -> list[dict]:
    """``load_records``, keeping only the records that match ``config.record_pattern`` (if set), then the first
    ``max_records`` of them (0 = all)."""
    if not config.record_pattern:
        return load_records(source, config.data_split, max_records)
    pattern = re.compile(config.record_pattern)
    records = [r for r in load_records(source, config.data_split) if pattern.search(record_text(r))]
    if not records:
        raise TrainingDataError(f"no record of {source!r} matches record_pattern {config.record_pattern!r}")
    return records[:max_records] if max_records else records


def load_examples(config, tokenizer) -> tuple[list[Example], list[Example]]:
    """(train, eval) examples: every source of ``data`` in order (``max_examples`` records of each), and the
    first ``eval_examples`` sequences of each ``eval_data`` source. Without ``eval_data`` (and for data other
    than ``sharegpt:train``, whose eval set is ``sharegpt:validation``), the last ``eval_examples`` training
    sequences are held out instead."""
    train = []
    for source in config.data:
        train.extend(tokenize_records(matching_records(source, config, config.max_examples), tokenizer, config,
                                      source))
    trains_on_sharegpt = config.data in (["sharegpt:train"], ["sharegpt:train-unique"])
    eval_sources = config.eval_data or (["sharegpt:validation"] if trains_on_sharegpt else [])
    if eval_sources:
        held = []
        for source in eval_sources:
            records = matching_records(source, config, config.eval_examples)
            held.extend(tokenize_records(records, tokenizer, config, source)[: config.eval_examples])
        return train, held
    n_eval = min(config.eval_examples, len(train) // 2)
    if n_eval < 1:
        raise TrainingDataError(f"{config.data!r} has too few sequences ({len(train)}) to hold out an eval set")
    return train[:-n_eval], train[-n_eval:]


def unigram_counts(examples: list[Example], vocab_size: int) -> torch.Tensor:
    """``[vocab_size]`` float32 counts of the supervised tokens (DeLS's "loss-mask unigram")."""
    counts = torch.zeros(vocab_size, dtype=torch.float64)
    for example in examples:
        counts += torch.bincount(example.ids[example.loss_mask], minlength=vocab_size)[:vocab_size].double()
    return counts.float()


# -- anchors and blocks -----------------------------------------------------------------------------------


def anchor_candidates(loss_mask: torch.Tensor) -> torch.Tensor:
    """Positions a with ``loss_mask[a]`` and ``loss_mask[a + 1]``: a response token followed by another, as at
    inference, where the anchor is always a committed response token (SpecForge's rule)."""
    return (loss_mask[:-1] & loss_mask[1:]).nonzero().squeeze(1)


def sample_anchors(loss_mask: torch.Tensor, n: int, generator: torch.Generator) -> torch.Tensor:
    """Up to ``n`` anchors drawn uniformly without replacement, sorted."""
    candidates = anchor_candidates(loss_mask)
    pick = torch.randperm(len(candidates), generator=generator)[:n]
    return candidates[pick].sort().values


def gather_blocks(example: Example, anchors: torch.Tensor, block_size: int) -> tuple[torch.Tensor, torch.Tensor]:
    """``(tokens [n, bs], supervised [n, bs])``: the true tokens at ``anchor + k`` (0 past the end) and whether
    slot k is supervised (k >= 1, inside the sequence, under the loss mask)."""
    positions = anchors[:, None] + torch.arange(block_size)
    inside = positions < len(example.ids)
    positions = positions.clamp_max(len(example.ids) - 1)
    tokens = torch.where(inside, example.ids[positions], 0)
    supervised = inside & example.loss_mask[positions]
    supervised[:, 0] = False
    return tokens, supervised


def slot_weights(block_size: int, gamma: float) -> torch.Tensor:
    """``[bs]``: 0 for the anchor slot, ``exp(-(k - 1) / gamma)`` for slot k >= 1 (DFlash Eq. 4)."""
    k = torch.arange(block_size, dtype=torch.float32)
    return torch.where(k > 0, torch.exp(-(k - 1) / gamma), 0.0)


# -- the order of the data --------------------------------------------------------------------------------


def step_generator(seed: int, *keys: int) -> torch.Generator:
    """A generator that depends only on ``seed`` and ``keys`` (step, micro-step, rank, ...)."""
    value = seed
    for key in keys:
        value = (value * 1_000_003 + key + 1) % (2**61 - 1)
    return torch.Generator().manual_seed(value)


def batch_indices(n: int, seed: int, step: int, micro: int, rank: int, world: int, batch_size: int,
                  grad_accum: int) -> list[int]:
    """Example indices of one micro-batch: a fresh seeded permutation per epoch, consumed in order."""
    first = ((step * grad_accum + micro) * world + rank) * batch_size
    indices = []
    for position in range(first, first + batch_size):
        epoch, offset = divmod(position, n)
        indices.append(int(epoch_permutation(n, seed, epoch)[offset]))
    return indices


_permutations: dict[tuple[int, int, int], torch.Tensor] = {}


def epoch_permutation(n: int, seed: int, epoch: int) -> torch.Tensor:
    key = (n, seed, epoch)
    if key not in _permutations:
        if len(_permutations) > 4:
            _permutations.clear()
        _permutations[key] = torch.randperm(n, generator=step_generator(seed, 7, epoch))
    return _permutations[key]


def epochs(n: int, config) -> float:
    """Passes over the training data that ``max_steps`` makes (for the log), with one process."""
    return config.max_steps * config.grad_accum * config.batch_size / max(n, 1)
