"""Training recipes on tiny random models (CPU): loss falls, checkpoints generate the target's greedy output,
the peek mask never leaks a label, runs resume exactly after a kill, the unigram prior is right, and bad
input fails before training."""

import argparse
import collections
import json
import os
import random
import re
import shutil
import signal
import subprocess
import sys
import time
import tomllib
from pathlib import Path

import pytest
import torch
from safetensors import safe_open
from transformers import AutoModelForCausalLM

from dels_hub import DeLSGenerator, DeLSLocalHead, DFlashDraftModel
from dels_hub.errors import (
    DamagedFileError,
    IncompatibleTokenizerError,
    OutputFolderError,
    RecipeError,
    ResumeConfigError,
    TrainingDataError,
)
from dels_hub.families import get_family
from dels_hub.fingerprint import tokenizer_fingerprint
from dels_hub.loading import load_head, load_tokenizer
from dels_hub.training import (
    add_regenerate_arguments,
    add_train_dflash_arguments,
    add_train_head_arguments,
    peek,
    regenerate_main,
    train_dflash_main,
    train_head_main,
)
from dels_hub.training.data import load_records, matching_records, normalize_messages, render_chat
from dels_hub.training.head import family_name
from dels_hub.training.loop import latest_checkpoint, read_log
from dels_hub.training.masks import attention_mask_for, dflash_mask
from dels_hub.training.recipe import DFlashTrainConfig, HeadTrainConfig, read_recipe

from conftest import make_dflash, make_target, make_tokenizer

ROOT = Path(__file__).resolve().parents[1]
# user turn: "t0 <words> t1 "; assistant turn: "<words> <eos> " (whitespace word tokens, so offsets are exact)
CHAT_TEMPLATE = (
    "{% for m in messages %}{% if m['role'] == 'user' %}t0 {{ m['content'] }} t1 "
    "{% else %}{{ m['content'] }} <eos> {% endif %}{% endfor %}"
)
SMALL = {"block_size": 8, "gamma": 4.0, "anchors_per_seq": 16, "batch_size": 4, "max_length": 128,
         "eval_examples": 8, "eval_every": 20, "log_every": 10, "save_every": 20, "lr": 1e-2, "warmup_ratio": 0.1}
HEAD_SIZES = {"embedding_rank": 16, "hidden_size": 32, "output_rank": 16}


def chat_tokenizer():
    tokenizer = make_tokenizer()
    tokenizer.chat_template = CHAT_TEMPLATE
    return tokenizer


def patterned_words(rng: random.Random, length: int) -> str:
    """Mostly a fixed walk x -> 7x + 3 (mod 80), so that blocks are predictable and the loss can fall."""
    x, words = rng.randrange(80), []
    for _ in range(length):
        words.append(f"t{x + 2}")
        x = (7 * x + 3) % 80 if rng.random() < 0.85 else rng.randrange(80)
    return " ".join(words)


def write_chat(path: Path, count: int, seed: int) -> Path:
    rng = random.Random(seed)
    with open(path, "w") as f:
        for _ in range(count):
            turns = []
            for _ in range(rng.randrange(1, 3)):
                turns.append({"from": "human", "value": patterned_words(rng, rng.randrange(3, 10))})
                turns.append({"from": "gpt", "value": patterned_words(rng, rng.randrange(20, 40))})
            f.write(json.dumps({"conversations": turns}) + "\n")
    return path


def run(main, add_arguments, **values):
    parser = argparse.ArgumentParser()
    add_arguments(parser)
    argv = []
    for name, value in values.items():
        flag = "--" + name.replace("_", "-")
        if isinstance(value, bool):
            argv.append(flag if value else "--no-" + name.replace("_", "-"))
        elif isinstance(value, list):
            argv += [flag, *map(str, value)]
        else:
            argv += [flag, str(value)]
    return main(parser.parse_args(argv))


def cli_args(**values) -> list[str]:
    argv = []
    for name, value in values.items():
        argv += ["--" + name.replace("_", "-"), str(value)]
    return argv


@pytest.fixture(scope="module", autouse=True)
def one_thread():
    """Tiny models run fastest on one thread, and a busy machine makes idle OpenMP threads spin for nothing."""
    threads = torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(threads)


ONE_THREAD_ENV = {**os.environ, "OMP_NUM_THREADS": "1"}


@pytest.fixture(scope="module")
def files(tmp_path_factory):
    root = tmp_path_factory.mktemp("training")
    target = make_target("llama")
    target.save_pretrained(root / "target")
    chat_tokenizer().save_pretrained(root / "target")  # the target's tokenizer, with its chat template
    return {
        "root": root,
        "target": root / "target",
        "train": write_chat(root / "train.jsonl", 64, seed=0),
        "eval": write_chat(root / "eval.jsonl", 8, seed=1),
    }


@pytest.fixture(scope="module")
def trained_head(files):
    out = files["root"] / "head"
    run(train_head_main, add_train_head_arguments, tokenizer=files["target"], data=files["train"],
        eval_data=files["eval"], output_dir=out, max_steps=40, **SMALL, **HEAD_SIZES)
    return out


@pytest.fixture(scope="module")
def trained_dflash(files):
    out = files["root"] / "dflash"
    run(train_dflash_main, add_train_dflash_arguments, target=files["target"], data=files["train"],
        eval_data=files["eval"], output_dir=out, max_steps=40, num_layers=2, **{**SMALL, "lr": 3e-3})
    return out


def losses(out: Path) -> list[float]:
    return [r["loss"] for r in read_log(out) if "loss" in r]


@pytest.mark.parametrize("kind", ["head", "dflash"])
def test_loss_goes_down(kind, trained_head, trained_dflash):
    out = {"head": trained_head, "dflash": trained_dflash}[kind]
    values = losses(out)
    assert len(values) == 4
    assert values[-1] < 0.9 * values[0], values
    evals = [r for r in read_log(out) if "eval_loss" in r]
    assert [r["step"] for r in evals] == [0, 20, 40]  # step 0: the learning curve starts at the initial weights
    assert evals[-1]["eval_loss"] < evals[0]["eval_loss"]
    assert len(evals[-1]["eval_accuracy"]) == SMALL["block_size"] - 1
    assert (out / "README.md").read_text().startswith("---")


def test_checkpoints_generate_target_greedy(files, trained_head, trained_dflash):
    target = make_target("llama")
    for head in (None, trained_head):
        generator = DeLSGenerator.from_pretrained(files["target"], trained_dflash, head)
        for seed in range(3):
            prompt = torch.randint(2, 80, (1, 8), generator=torch.Generator().manual_seed(seed))
            expected = target.generate(prompt, max_new_tokens=24, do_sample=False)
            assert torch.equal(generator.generate(prompt, max_new_tokens=24), expected)


def test_drafter_is_saved_in_zlab_format(trained_dflash):
    config = json.loads((trained_dflash / "config.json").read_text())
    assert config["architectures"] == ["DFlashDraftModel"] and config["model_type"] == "qwen3"
    assert config["dflash_config"]["mask_token_id"] == 92  # the first embedding row past the tokenizer
    assert config["dflash_config"]["target_layer_ids"] == [1, 3] and config["num_target_layers"] == 6
    assert config["rope_theta"] == config["rope_parameters"]["rope_theta"]  # for readers on transformers 4.x
    with safe_open(str(trained_dflash / "model.safetensors"), "pt") as f:
        keys = set(f.keys())
    layer = {"input_layernorm", "post_attention_layernorm", "self_attn.q_proj", "self_attn.k_proj",
             "self_attn.v_proj", "self_attn.o_proj", "self_attn.q_norm", "self_attn.k_norm", "mlp.gate_proj",
             "mlp.up_proj", "mlp.down_proj"}
    expected = {"fc.weight", "hidden_norm.weight", "norm.weight"}
    expected |= {f"layers.{i}.{name}.weight" for i in range(2) for name in layer}
    assert keys == expected  # no embedding, no lm_head, no prefix


def test_unigram_prior_matches_independent_count(files, trained_head):
    head = DeLSLocalHead.from_pretrained(trained_head)
    tokenizer = chat_tokenizer()
    counts = collections.Counter()
    for line in files["train"].read_text().splitlines():
        for turn in json.loads(line)["conversations"]:
            if turn["from"] == "gpt":  # supervised: the assistant's words and its end-of-turn token
                counts.update(turn["value"].split() + ["<eos>"])
    expected = torch.zeros(head.config.vocab_size)
    for word, count in counts.items():
        expected[tokenizer.convert_tokens_to_ids(word)] = count
    assert torch.equal(head.unigram_counts, expected)
    assert torch.isclose(head.log_prior().exp().sum(), torch.tensor(1.0), atol=1e-5)
    assert head.config.tokenizer_fingerprint["family"] == "target"


def test_chat_loss_mask_covers_assistant_turns_only():
    tokenizer = chat_tokenizer()
    messages = normalize_messages([{"from": "system", "value": "t5"}, {"from": "human", "value": "t3 t4"},
                                   {"from": "gpt", "value": "t7 t8 t9"}, {"role": "user", "content": "t5"},
                                   {"role": "assistant", "content": "t6"}])
    example = render_chat(messages, tokenizer, max_length=64)
    words = tokenizer.convert_ids_to_tokens(example.ids)
    supervised = [w for w, m in zip(words, example.loss_mask.tolist()) if m]
    assert supervised == ["t7", "t8", "t9", "<eos>", "t6", "<eos>"]


def peek_inputs(num_layers=3, block_size=6, blocks=3, context=12):
    drafter = make_dflash(block_size=block_size, layers=num_layers, seed=3).float()
    torch.manual_seed(0)
    hidden = drafter.config.hidden_size
    features = torch.randn(1, context, len(drafter.config.target_layer_ids) * hidden)
    noise = torch.randn(1, blocks * block_size, hidden)
    anchors = torch.tensor([[3, 6, 9]])
    positions = torch.cat([torch.arange(context), (anchors[..., None] + torch.arange(block_size)).flatten()])[None]
    truth = torch.randn(1, blocks, block_size, hidden, requires_grad=True)
    reveal = torch.zeros(1, num_layers, blocks, block_size, dtype=torch.bool)
    reveal[:, 1:, :, 2:] = True  # every revealable slot of every intermediate layer
    return drafter, features, noise, positions, anchors, truth, reveal


def leaks(drafter, features, noise, positions, anchors, truth, reveal) -> tuple[bool, bool]:
    """(some slot's output depends on its own label, some slot's output depends on an earlier label)."""
    block_size = truth.shape[2]
    context_mask = dflash_mask(anchors, features.shape[1], block_size)[..., : features.shape[1]]
    out, _ = peek.peeked_forward(drafter, features, noise, positions, context_mask, reveal, truth)
    out = out.view(*truth.shape)
    own, earlier = False, False
    for k in range(1, block_size):
        (grad,) = torch.autograd.grad(out[:, :, k].sum(), truth, retain_graph=True)
        own |= bool(grad[:, :, k].abs().sum() > 0)
        earlier |= bool(grad[:, :, :k].abs().sum() > 0)
    return own, earlier


def test_peek_mask_never_leaks(monkeypatch):
    inputs = peek_inputs()
    own, earlier = leaks(*inputs)
    assert not own, "a block position saw its own label"
    assert earlier, "peeking revealed nothing"
    # Negative control: without the peek mask (plain bidirectional blocks) the same check catches the leak.
    monkeypatch.setattr(peek, "peek_mask", lambda knows: torch.ones_like(knows))
    monkeypatch.setattr(peek, "check_no_leak", lambda knows: None)  # and without the internal assert
    own, _ = leaks(*inputs)
    assert own


def test_peeked_forward_without_reveals_is_the_drafter_forward():
    drafter, features, noise, positions, anchors, truth, reveal = peek_inputs()
    mask = dflash_mask(anchors, features.shape[1], truth.shape[2])
    expected = drafter(features, noise, positions, attention_mask=attention_mask_for(mask, "sdpa", torch.float32))
    out, _ = peek.peeked_forward(drafter, features, noise, positions, mask[..., : features.shape[1]],
                                 torch.zeros_like(reveal), truth)
    torch.testing.assert_close(out, expected)


def test_peek_schedule_rises_with_depth_and_anneals():
    config = DFlashTrainConfig(data="x", target="y", num_layers=4, peek=True, max_steps=100)
    ratios = peek.reveal_ratios(torch.zeros(4), 0, config)
    assert ratios[0] == 0 and torch.all(ratios[1:] > ratios[:-1]) and ratios[-1] == config.peek_max_ratio
    assert torch.all(peek.reveal_ratios(torch.full((4,), 0.5), 0, config) == ratios / 2)
    assert torch.all(peek.reveal_ratios(torch.zeros(4), 75, config) == 0)


def test_dflash_with_peek_trains(files, tmp_path):
    out = tmp_path / "peek"
    run(train_dflash_main, add_train_dflash_arguments, target=files["target"], data=files["train"],
        eval_data=files["eval"], output_dir=out, max_steps=20, num_layers=3, peek=True, **SMALL)
    log = [r for r in read_log(out) if "loss" in r]
    assert log[0]["peek_ratio"][0] == 0 and log[0]["peek_ratio"][-1] > 0  # deepest layer peeks at the start
    assert log[-1]["peek_ratio"] == [0.0, 0.0, 0.0]  # annealed away by 75% of training
    DFlashDraftModel.from_pretrained(out)


def test_resume_after_kill_loses_and_repeats_no_step(files, tmp_path):
    values = dict(tokenizer=files["target"], data=files["train"], eval_data=files["eval"], max_steps=300,
                  **{**SMALL, "save_every": 10, "eval_every": 100, "log_every": 10, "anchors_per_seq": 4,
                     "batch_size": 2}, **HEAD_SIZES)
    killed = tmp_path / "killed"
    command = [sys.executable, "-m", "dels_hub.training", "train-head", *cli_args(output_dir=killed, **values)]
    process = subprocess.Popen(command, cwd=ROOT, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
                               env=ONE_THREAD_ENV)
    try:
        deadline = time.time() + 120
        while latest_checkpoint(killed) is None and process.poll() is None and time.time() < deadline:
            time.sleep(0.05)
        os.kill(process.pid, signal.SIGKILL)
    finally:
        process.wait()
    interrupted_at = int(latest_checkpoint(killed).stem.split("-")[1])
    assert 0 < interrupted_at < 300, "the run was not killed mid-way"

    run(train_head_main, add_train_head_arguments, output_dir=killed, **values)  # resumes
    run(train_head_main, add_train_head_arguments, output_dir=tmp_path / "straight", **values)
    steps = [r["step"] for r in read_log(killed) if "loss" in r]
    assert steps == list(range(10, 301, 10))  # each logged step once: none lost, none repeated
    # the learning curve's x axis (training tokens read) carries across the kill
    evals = [(r["step"], r["train_tokens"]) for r in read_log(killed) if "eval_tau" in r]
    assert evals == [(r["step"], r["train_tokens"]) for r in read_log(tmp_path / "straight") if "eval_tau" in r]
    assert [step for step, _ in evals] == [0, 100, 200, 300] and evals[0][1] == 0 < evals[1][1] < evals[3][1]
    resumed = DeLSLocalHead.from_pretrained(killed).state_dict()
    straight = DeLSLocalHead.from_pretrained(tmp_path / "straight").state_dict()
    for name, value in straight.items():
        torch.testing.assert_close(resumed[name], value, rtol=1e-5, atol=1e-6)


def test_accelerate_launch_two_processes(files, tmp_path):
    out = tmp_path / "ddp"
    values = dict(tokenizer=files["target"], data=files["train"], eval_data=files["eval"], output_dir=out,
                  max_steps=6, **{**SMALL, "eval_every": 3, "log_every": 3, "save_every": 3}, **HEAD_SIZES)
    command = [str(Path(sys.executable).parent / "accelerate"), "launch", "--num_processes", "2", "--cpu",
               "--num_machines", "1", "--mixed_precision", "no", "--dynamo_backend", "no",
               "-m", "dels_hub.training", "train-head", *cli_args(**values)]
    result = subprocess.run(command, cwd=ROOT, capture_output=True, text=True, timeout=240, env=ONE_THREAD_ENV,
                            check=False)
    assert result.returncode == 0, result.stderr[-3000:]
    assert [r["step"] for r in read_log(out) if "loss" in r] == [3, 6]  # logged once, by the main process
    DeLSLocalHead.from_pretrained(out)


def test_lora_finetune_of_a_head(files, trained_head, tmp_path):
    out = tmp_path / "lora"
    run(train_head_main, add_train_head_arguments, tokenizer=files["target"], data=files["eval"],
        eval_data=files["train"], output_dir=out, max_steps=10, init_from=trained_head, lora_rank=4, **SMALL)
    assert (out / "adapter" / "adapter_config.json").exists()
    base, tuned = DeLSLocalHead.from_pretrained(trained_head), DeLSLocalHead.from_pretrained(out)
    assert not torch.equal(base.cell.input_gates.weight, tuned.cell.input_gates.weight)  # LoRA merged in
    assert torch.equal(base.embed_tokens.weight, tuned.embed_tokens.weight)  # not adapted
    # The adapter repo carries no buffers, so the prior stays the base's and head=ADAPTER is the merged head.
    assert torch.equal(base.unigram_counts, tuned.unigram_counts)
    from_adapter = load_head(str(out / "adapter"))
    for name, weight in tuned.state_dict().items():
        assert torch.allclose(from_adapter.state_dict()[name], weight, atol=1e-6), name


def test_record_pattern_trains_on_a_domain_slice(files):
    config = HeadTrainConfig(tokenizer="unused", data=str(files["train"]), record_pattern=r"\bt7\b")
    everything = load_records(str(files["train"]))
    expected = [r for r in everything if re.search(r"\bt7\b", json.dumps(r))]
    assert 3 <= len(expected) < len(everything)  # the fixture holds both kinds
    assert matching_records(str(files["train"]), config, 0) == expected
    assert matching_records(str(files["train"]), config, 2) == expected[:2]  # max_examples counts matches
    with pytest.raises(TrainingDataError, match="matches record_pattern 't999'"):
        matching_records(str(files["train"]), HeadTrainConfig(tokenizer="unused", data="x", record_pattern="t999"), 0)
    with pytest.raises(RecipeError, match="not a regular expression"):
        HeadTrainConfig(tokenizer="unused", data="x", record_pattern="(t7")


def test_head_trains_under_bf16_autocast(files, tmp_path):
    out = tmp_path / "bf16-autocast"
    run(train_head_main, add_train_head_arguments, tokenizer=files["target"], data=files["train"],
        eval_data=files["eval"], output_dir=out, max_steps=2, precision="bf16", **SMALL, **HEAD_SIZES)
    assert all(torch.isfinite(torch.tensor(r["loss"])) for r in read_log(out) if "loss" in r)


def test_family_tokenizer_is_built_offline():
    tokenizer = load_tokenizer("family:qwen3")
    assert tokenizer_fingerprint(tokenizer)["sha256"] == get_family("qwen3").sha256
    assert family_name("family:qwen3") == "qwen3"
    with pytest.raises(RecipeError, match="family:llama3.*no offline tokenizer"):
        load_tokenizer("family:llama3")
    with pytest.raises(RecipeError, match="unknown tokenizer family 'qwen9'"):
        load_tokenizer("family:qwen9")


def test_dflash_training_continues_from_a_saved_drafter(files, trained_dflash, tmp_path):
    common = {"target": files["target"], "data": files["train"], "eval_data": files["eval"], "num_layers": 2,
              "init_from": trained_dflash, **SMALL}
    out = tmp_path / "continued"
    run(train_dflash_main, add_train_dflash_arguments, output_dir=out, max_steps=4, **{**common, "lr": 1e-12})
    before, after = DFlashDraftModel.from_pretrained(trained_dflash), DFlashDraftModel.from_pretrained(out)
    for (name, old), new in zip(before.state_dict().items(), after.state_dict().values()):
        assert torch.allclose(old, new, atol=1e-6), name  # it started from the saved weights (lr ~ 0)
    with pytest.raises(RecipeError, match="num_hidden_layers 2 \\(recipe: 3\\)"):
        run(train_dflash_main, add_train_dflash_arguments, output_dir=tmp_path / "never", max_steps=4,
            **{**common, "num_layers": 3})
    assert not (tmp_path / "never").exists()


def test_dflash_training_can_start_from_the_targets_top_layers(files, tmp_path):
    out = tmp_path / "target-top"
    run(train_dflash_main, add_train_dflash_arguments, target=files["target"], data=files["train"],
        eval_data=files["eval"], output_dir=out, max_steps=2, num_layers=2, init_layers="target-top",
        **{**SMALL, "lr": 1e-12})
    drafter = DFlashDraftModel.from_pretrained(out)
    target = AutoModelForCausalLM.from_pretrained(files["target"])
    top = target.model.layers[-2:]
    for mine, theirs in zip(drafter.layers, top):
        for name in ("self_attn.q_proj", "self_attn.o_proj", "mlp.down_proj", "post_attention_layernorm"):
            torch.testing.assert_close(mine.get_submodule(name).weight, theirs.get_submodule(name).weight,
                                       atol=1e-6, rtol=0)
        assert torch.equal(mine.self_attn.q_norm.weight, torch.ones_like(mine.self_attn.q_norm.weight))
    torch.testing.assert_close(drafter.norm.weight, target.model.norm.weight, atol=1e-6, rtol=0)
    # A random start has none of them (the control: the comparison above can fail).
    assert not torch.allclose(DFlashDraftModel(drafter.config).layers[0].self_attn.q_proj.weight,
                              top[0].self_attn.q_proj.weight)
    for options, message in [({"init_layers": "target"}, "`init_layers` must be random or target-top"),
                             ({"init_layers": "target-top", "intermediate_size": 64}, "leave `intermediate_size`"),
                             ({"init_layers": "target-top", "init_from": str(out)}, "set one of them")]:
        with pytest.raises(RecipeError, match=message):
            run(train_dflash_main, add_train_dflash_arguments, target=files["target"], data=files["train"],
                output_dir=tmp_path / "never", max_steps=2, num_layers=2, **{**SMALL, **options})
    assert not (tmp_path / "never").exists()


def test_bad_input_fails_before_training(files, trained_head, tmp_path):
    out = tmp_path / "never"
    common = {"tokenizer": files["target"], "eval_data": files["eval"], "output_dir": out, "max_steps": 5}
    with pytest.raises(TrainingDataError, match="does not exist"):
        run(train_head_main, add_train_head_arguments, data=tmp_path / "missing.jsonl", **common)
    no_field = tmp_path / "nofield.jsonl"
    no_field.write_text(json.dumps({"prompt": "t1 t2"}) + "\n")
    with pytest.raises(TrainingDataError, match="no 'text' column"):
        run(train_head_main, add_train_head_arguments, data=no_field, **common)
    with pytest.raises(TrainingDataError, match="held-out"):
        run(train_head_main, add_train_head_arguments, data="sharegpt:heldout", **common)
    other_family = tmp_path / "other_tokenizer"
    other = make_tokenizer(prefix="w")
    other.chat_template = CHAT_TEMPLATE
    other.save_pretrained(other_family)
    with pytest.raises(IncompatibleTokenizerError, match="family"):
        run(train_head_main, add_train_head_arguments, data=files["train"], init_from=trained_head,
            lora_rank=2, **{**common, "tokenizer": other_family})
    with pytest.raises(RecipeError, match="max_steps"):
        run(train_head_main, add_train_head_arguments, data=files["train"], **{**common, "max_steps": 0})
    recipe = tmp_path / "typo.toml"
    recipe.write_text('kind = "head"\nmax_step = 10\n')
    with pytest.raises(RecipeError, match=r"unknown recipe keys \['max_step'\]"):
        run(train_head_main, add_train_head_arguments, recipe=recipe, data=files["train"], **common)
    with pytest.raises(RecipeError, match=r"`lr` must be in \(0.0, inf\], got -1.0"):
        run(train_head_main, add_train_head_arguments, data=files["train"], **{**common, "lr": -1.0})
    with pytest.raises(RecipeError, match="is for `dels-hub train-dflash` \\(kind = 'dflash'\\), not `dels-hub train-head`"):
        run(train_head_main, add_train_head_arguments, recipe=ROOT / "recipes" / "smollm2-135m.dflash.toml", **common)
    assert not out.exists()


@pytest.mark.parametrize("recipe", sorted((ROOT / "recipes").glob("*.toml")), ids=lambda p: p.name)
def test_recipes_parse(recipe):
    kind = tomllib.loads(recipe.read_text())["kind"]
    config_class = {"head": HeadTrainConfig, "dflash": DFlashTrainConfig}[kind]
    config_class(**read_recipe(config_class, recipe))


def test_regenerate_rewrites_assistant_turns_with_target_greedy(tmp_path):
    target = make_target("llama", vocab=92)  # no embedding rows past the tokenizer: every id decodes
    target.save_pretrained(tmp_path / "target")
    tokenizer = chat_tokenizer()
    tokenizer.save_pretrained(tmp_path / "target")
    data = write_chat(tmp_path / "chat.jsonl", 5, seed=3)
    out = tmp_path / "regenerated.jsonl"
    run(regenerate_main, add_regenerate_arguments, target=tmp_path / "target", data=data, output=out,
        batch_size=2, max_new_tokens=6)
    records = [json.loads(line) for line in out.read_text().splitlines()]
    originals = [json.loads(line)["conversations"] for line in data.read_text().splitlines()]
    assert len(records) == 5
    for record, original in zip(records, originals):
        messages = record["messages"]
        assert [m["role"] for m in messages] == ["user" if t["from"] == "human" else "assistant" for t in original]
        prompt = tokenizer.apply_chat_template(messages[:1], tokenize=False, add_generation_prompt=True)
        ids = torch.tensor([tokenizer(prompt, add_special_tokens=False)["input_ids"]])
        expected = target.generate(ids, max_new_tokens=6, do_sample=False, pad_token_id=91)[0, ids.shape[1]:]
        assert messages[1]["content"] == tokenizer.decode(expected, skip_special_tokens=True).strip()


def test_regenerate_resumes_without_breaking_records_that_hold_line_separators(tmp_path):
    target = make_target("llama", vocab=92)
    target.save_pretrained(tmp_path / "target")
    chat_tokenizer().save_pretrained(tmp_path / "target")
    data = write_chat(tmp_path / "chat.jsonl", 4, seed=3)
    out = tmp_path / "regenerated.jsonl"
    kept = [json.dumps({"messages": [{"role": "user", "content": f"a{i}\r b\u2028 c\x85"}]}, ensure_ascii=False) + "\n"
            for i in range(2)]
    out.write_text("".join(kept) + '{"messages": [{"role": "us', encoding="utf-8")  # one batch, then a cut line
    run(regenerate_main, add_regenerate_arguments, target=tmp_path / "target", data=data, output=out,
        batch_size=2, max_new_tokens=4)
    lines = out.read_text(encoding="utf-8").split("\n")[:-1]
    assert [line + "\n" for line in lines[:2]] == kept  # the complete batch is kept byte for byte
    assert len(lines) == 4 and all(json.loads(line)["messages"] for line in lines)


def test_dflash_bf16_with_feature_cache_is_reproducible(files, tmp_path):
    values = dict(target=files["target"], data=files["train"], eval_data=files["eval"], max_steps=4, num_layers=2,
                  precision="bf16", feature_cache=tmp_path / "cache", **{**SMALL, "eval_every": 4, "log_every": 2})
    run(train_dflash_main, add_train_dflash_arguments, output_dir=tmp_path / "first", **values)
    cached = len(list((tmp_path / "cache").glob("*.safetensors")))
    assert 0 < cached <= 4 * SMALL["batch_size"] + SMALL["eval_examples"]
    run(train_dflash_main, add_train_dflash_arguments, output_dir=tmp_path / "second", **values)  # from the cache
    assert len(list((tmp_path / "cache").glob("*.safetensors"))) == cached
    assert read_log(tmp_path / "first")[-1]["eval_loss"] == read_log(tmp_path / "second")[-1]["eval_loss"]
    first = [r["loss"] for r in read_log(tmp_path / "first") if "loss" in r]
    assert first == [r["loss"] for r in read_log(tmp_path / "second") if "loss" in r]
    with pytest.raises(RecipeError, match="feature_cache"):
        run(train_dflash_main, add_train_dflash_arguments, output_dir=tmp_path / "third",
            **{**values, "target_layer_ids": [0, 2]})


def test_save_dtype_bf16_halves_the_weights_and_keeps_the_prior_exact(files, trained_dflash, tmp_path):
    from safetensors.torch import load_file

    out = tmp_path / "bf16"
    run(train_head_main, add_train_head_arguments, tokenizer=files["target"], data=files["train"],
        eval_data=files["eval"], output_dir=out, max_steps=2, save_dtype="bf16", **SMALL, **HEAD_SIZES)
    saved = load_file(out / "model.safetensors")
    assert saved["embed_tokens.weight"].dtype == torch.bfloat16
    assert saved["unigram_counts"].dtype == torch.float32  # counts above 256 are not exact in bf16
    generator = DeLSGenerator.from_pretrained(files["target"], trained_dflash, out)
    prompt = torch.randint(2, 80, (1, 8), generator=torch.Generator().manual_seed(0))
    expected = make_target("llama").generate(prompt, max_new_tokens=16, do_sample=False)
    assert torch.equal(generator.generate(prompt, max_new_tokens=16), expected)


# -- an output folder belongs to one run ------------------------------------------------------------------------


def snapshot(folder: Path) -> dict[str, bytes]:
    return {str(p.relative_to(folder)): p.read_bytes() for p in sorted(folder.rglob("*")) if p.is_file()}


def tiny_head_run(files, out, **overrides):
    values = dict(tokenizer=files["target"], data=files["train"], eval_data=files["eval"], output_dir=out,
                  max_steps=4, **{**SMALL, "save_every": 2, "eval_every": 0, "log_every": 2}, **HEAD_SIZES)
    return run(train_head_main, add_train_head_arguments, **{**values, **overrides})


def test_training_refuses_another_runs_folder_and_keeps_every_file(files, trained_head, tmp_path):
    staged = tmp_path / "staged"  # a finished model folder, as under upload/: no checkpoints
    shutil.copytree(trained_head, staged, ignore=shutil.ignore_patterns("checkpoints"))
    (staged / "README.md").write_text((staged / "README.md").read_text() + "\nA line I wrote.\n")
    before = snapshot(staged)
    with pytest.raises(OutputFolderError, match=r"already holds another run's files \['README.md', 'config.json', "
                                                r"'model.safetensors', 'train_log.jsonl', 'training_config.json'\]"):
        tiny_head_run(files, staged)
    assert snapshot(staged) == before  # nothing written, nothing lost
    tiny_head_run(files, staged, overwrite=True)
    assert json.loads((staged / "training_config.json").read_text())["max_steps"] == 4
    assert snapshot(staged)["model.safetensors"] != before["model.safetensors"]  # replaced, as asked
    assert "A line I wrote." in (staged / "README.md").read_text()  # outside the card's markers: still kept


def test_resume_with_another_configuration_names_the_keys(files, trained_head, tmp_path):
    out = tmp_path / "run"
    shutil.copytree(trained_head, out)
    before = snapshot(out)
    common = dict(tokenizer=files["target"], data=files["train"], eval_data=files["eval"], output_dir=out,
                  max_steps=40, **SMALL, **HEAD_SIZES)
    with pytest.raises(ResumeConfigError, match=r"step-00000040.safetensors was trained with another configuration "
                                                r"\(max_steps: 40 -> 80; lr: 0.01 -> 0.02\)"):
        run(train_head_main, add_train_head_arguments, **{**common, "max_steps": 80, "lr": 2e-2})
    with pytest.raises(ResumeConfigError, match=r"hidden_size: 32 -> 48"):  # not a load_state_dict size mismatch
        run(train_head_main, add_train_head_arguments, **{**common, "hidden_size": 48})
    with pytest.raises(OutputFolderError, match="--no-resume would train over them"):
        run(train_head_main, add_train_head_arguments, **common, resume=False)
    assert snapshot(out) == before
    # the same configuration resumes (here at its last step: evaluated and saved again), bookkeeping may differ
    run(train_head_main, add_train_head_arguments, **{**common, "log_every": 5})
    assert [r["step"] for r in read_log(out) if "loss" in r] == list(range(10, 41, 10))


def test_a_damaged_newest_checkpoint_is_named_and_the_previous_one_resumed(files, tmp_path):
    out = tmp_path / "run"
    tiny_head_run(files, out)
    newest, previous = latest_checkpoint(out), sorted((out / "checkpoints").glob("*.safetensors"))[0]
    assert (newest.name, previous.name) == ("step-00000004.safetensors", "step-00000002.safetensors")
    newest.write_bytes(newest.read_bytes()[:-100])  # cut short, as by a full disk on another tool
    with pytest.warns(UserWarning, match=f"skipping a damaged checkpoint: {re.escape(str(newest))} is damaged"):
        tiny_head_run(files, out)
    assert [r["step"] for r in read_log(out) if "loss" in r] == [2, 4]  # step 4 redone from step 2, logged once
    assert safe_open(str(newest), framework="pt").metadata()  # rewritten whole
    for path in (out / "checkpoints").glob("*.safetensors"):
        path.write_bytes(b"garbage")
    with pytest.raises(DamagedFileError, match="every checkpoint in .* is damaged"):
        tiny_head_run(files, out)
