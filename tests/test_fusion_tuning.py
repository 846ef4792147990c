"""Fusion-weight tuning by replay: it must reproduce the loop's own greedy acceptance lengths."""

import ast
import json

import pytest
import torch

from dels_hub import DeLSGenerator, cli
from dels_hub.bench.fusion_tuning import (
    Replay,
    checked_settings,
    out_of_sample,
    replay_acceptance,
    tune_fusion,
    tune_per_position,
)
from dels_hub.errors import BenchArgumentError
from dels_hub.fingerprint import tokenizer_fingerprint
from dels_hub.heads.ngram import NGramHead
from dels_hub.heads.ngram_head import NGramLocalHead
from dels_hub.loading import load_head

from conftest import make_dflash, make_head, make_target, make_tokenizer

VOCAB = 12


@pytest.mark.parametrize("copy_ngram", [0, 3], ids=["", "copy"])
def test_replay_equals_the_loop_acceptance_lengths(copy_ngram):
    tokenizer = make_tokenizer(VOCAB - 2)
    target = make_target("qwen3", vocab=VOCAB)
    drafter = make_dflash(8, VOCAB - 1, vocab=VOCAB, seed=5)
    head = make_head(tokenizer, vocab=VOCAB - 2)
    generator = torch.Generator().manual_seed(123)
    compared = 0
    # An n-gram head that reads the two tokens before its block, counted on the target's own text.
    texts = [target.generate(torch.randint(0, VOCAB - 2, (1, 6), generator=generator), max_new_tokens=40,
                             do_sample=False)[0].clamp_max(VOCAB - 3) for _ in range(4)]  # the head's ids
    ngram = NGramLocalHead.from_ngram(NGramHead.fit([(t, torch.ones(len(t), dtype=torch.bool)) for t in texts],
                                                    VOCAB - 2, 4), top_k=4, min_count=1, context_tokens=2,
                                      tokenizer_fingerprint=tokenizer_fingerprint(tokenizer))
    for alpha, beta, part in [(0.5, 0.3, head), (1.5, 0.0, head), (0.0, 0.0, None), (3.0, 0.0, ngram)]:
        dels = DeLSGenerator(target, drafter, part, tokenizer, alpha=alpha, beta=beta,
                             copy_ngram=copy_ngram, copy_gamma=4.0, policy="fixed")  # the replay verifies every draft
        for _ in range(4):
            prompt = torch.randint(0, VOCAB - 2, (1, 6), generator=generator)
            out = dels.generate(prompt, max_new_tokens=40, return_dict_in_generate=True)
            replayed = replay_acceptance(target, drafter, part, out.sequences, prompt.shape[1],
                                         alpha, beta, copy_weights=dels.copy.weights())
            assert replayed == out.acceptance_lengths
            compared += len(replayed)
    assert compared > 50


def test_tune_fusion_grids_the_copy_expert_without_a_head():
    target = make_target("llama", vocab=VOCAB)
    drafter = make_dflash(4, VOCAB - 1, vocab=VOCAB, seed=5)
    prompt = torch.randint(0, VOCAB - 2, (1, 5), generator=torch.Generator().manual_seed(0))
    sequences = [(target.generate(prompt, max_new_tokens=24, do_sample=False), prompt.shape[1])]
    results = tune_fusion(target, drafter, None, sequences, alphas=[0.5], betas=[0.0], baseline=True,
                          copies=[(0, 0.0), (2, 1.0), (3, 30.0)])
    assert len(results) == 4 and all(r["alpha"] is None for r in results)
    off = next(r for r in results[:-1] if r["copy_ngram"] == 0)
    assert off["tau"] == results[-1]["tau"]  # no copy expert and no head: DFlash alone, the baseline
    assert {(r["copy_ngram"], r["copy_gamma"]) for r in results[:-1]} == {(0, 0.0), (2, 1.0), (3, 30.0)}


def tiny_tuning_parts():
    """A tiny llama target, a b4 drafter, a head, and three target greedy continuations to replay."""
    tokenizer = make_tokenizer(VOCAB - 2)
    target = make_target("llama", vocab=VOCAB)
    drafter = make_dflash(4, VOCAB - 1, vocab=VOCAB, seed=5)
    sequences = []
    for seed in range(3):
        prompt = torch.randint(0, VOCAB - 2, (1, 5), generator=torch.Generator().manual_seed(seed))
        sequences.append((target.generate(prompt, max_new_tokens=24, do_sample=False), prompt.shape[1]))
    return target, drafter, make_head(tokenizer, vocab=VOCAB - 2), sequences


def test_tune_fusion_ranks_the_grid():
    target, drafter, head, sequences = tiny_tuning_parts()
    results = tune_fusion(target, drafter, head, sequences, alphas=[0.0, 0.5, 2.0], betas=[0.0, 0.3])
    assert len(results) == 6 and all(1.0 <= r["tau"] <= 4.0 for r in results)
    assert [r["tau"] for r in results] == sorted((r["tau"] for r in results), reverse=True)


def test_per_position_weights_never_lose_to_the_scalar_and_replay_to_their_tau():
    target, drafter, head, sequences = tiny_tuning_parts()
    replay = Replay(target, drafter, sequences)
    grid = tune_fusion(target, drafter, head, sequences, [0.0, 0.5, 2.0], [0.0, 0.3], pure_prefix_lens=(0, 1),
                       replay=replay)
    assert len(grid) == 12 and {r["pure_prefix_len"] for r in grid} == {0, 1}
    improved = []
    for pure in (0, 1):
        start = next(r for r in grid if r["pure_prefix_len"] == pure)
        tuned = tune_per_position([replay], head, start, [0.0, 0.5, 2.0, 4.0], [0.0, 0.3], 3)
        assert len(tuned["alpha"]) == len(tuned["beta"]) == 3 - pure
        assert tuned["scalar_tau"] == pytest.approx(start["tau"]) and tuned["tau"] >= tuned["scalar_tau"]
        # The schedule it returns replays to the tau it reports, through the loop's own fusion weights.
        assert replay.tau(head, tuned["alpha"], tuned["beta"], pure) == pytest.approx(tuned["tau"])
        improved.append(tuned["tau"] > tuned["scalar_tau"])
    assert any(improved)  # on these seeded models a weight per position does beat the best scalar


def test_tune_fusion_cli_writes_the_best_weights_into_the_head(tmp_path, capsys):
    tokenizer = make_tokenizer(VOCAB - 2)
    make_target("qwen3", vocab=VOCAB).save_pretrained(tmp_path / "target")
    tokenizer.save_pretrained(tmp_path / "target")
    make_dflash(4, VOCAB - 1, vocab=VOCAB, seed=5).save_pretrained(tmp_path / "dflash")
    make_head(tokenizer, vocab=VOCAB - 2).save_pretrained(tmp_path / "head")
    args = ["tune-fusion", "--target", str(tmp_path / "target"), "--dflash", str(tmp_path / "dflash"),
            "--head", str(tmp_path / "head"), "--num-prompts", "2", "--max-new-tokens", "12",
            "--alphas", "0.0", "2.0", "--betas", "0.0", "0.5", "--json", str(tmp_path / "grid.json"), "--write"]
    assert cli.main(args) == 0
    grid = json.loads((tmp_path / "grid.json").read_text())
    (name, rows), = grid["grids"].items()
    assert len(rows) == 5 and rows[-1]["alpha"] is None  # the 2 x 2 grid, best first, then DFlash only
    best = grid["best"]
    assert (best["alpha"], best["beta"]) == (rows[0]["alpha"], rows[0]["beta"])
    saved = json.loads((tmp_path / "head" / "config.json").read_text())
    assert (saved["alpha"], saved["beta"]) == (best["alpha"], best["beta"])
    assert "DFlash only" in capsys.readouterr().out

    assert cli.main(args[:-1] + ["--num-prompts", "0"]) == 2  # bad input: a message, before any loading
    assert "--num-prompts must be >= 1" in capsys.readouterr().err
    assert cli.main(args[:-1] + ["--pure-prefix-lens", "-1"]) == 2
    assert "--pure-prefix-lens must be >= 0, got [-1]" in capsys.readouterr().err

    # Per position, over pure prefixes 0 and 1: the head stores one weight per fused position and the prefix.
    assert cli.main(args + ["--pure-prefix-lens", "0", "1", "--per-position", "--check-prompts", "2"]) == 0
    out = capsys.readouterr().out
    assert "out of sample (2 other validation prompts" in out
    assert "  sharegpt (1 prompts): dflash_only" in out and "  code (1 prompts): dflash_only" in out
    grid = json.loads((tmp_path / "grid.json").read_text())
    assert grid["check_sequences"] == 2 and set(grid["check"]) == {"dflash_only", "best", "per_position"}
    assert grid["validation"] == ["sharegpt", "code"] * 2  # the sets take turns, in tuning and check prompts alike
    assert set(grid["check_by_set"]) == {"sharegpt", "code"}
    tuned = grid["per_position"]
    assert tuned["pure_prefix_len"] == grid["best"]["pure_prefix_len"] and tuned["tau"] >= tuned["scalar_tau"]
    saved = json.loads((tmp_path / "head" / "config.json").read_text())
    # The schedule is stored only where it also wins on the check prompts; else the best scalar weights are.
    chosen = tuned if grid["check"]["per_position"] > grid["check"]["best"] else grid["best"]
    assert (saved["alpha"], saved["beta"], saved["pure_prefix_len"]) == (chosen["alpha"], chosen["beta"],
                                                                         chosen["pure_prefix_len"])
    assert cli.main(args + ["--pure-prefix-lens", "0", "1", "--per-position"]) == 0  # no check: the schedule
    saved = json.loads((tmp_path / "head" / "config.json").read_text())
    assert len(saved["alpha"]) == 3 - saved["pure_prefix_len"]


def test_tune_fusion_cli_writes_into_an_ngram_head_and_keeps_it_one(tmp_path):
    """--write rewrites the fusion weights of the head's own config class: an n-gram head stays an n-gram head."""
    tokenizer = make_tokenizer(VOCAB - 2)
    target = make_target("qwen3", vocab=VOCAB)
    target.save_pretrained(tmp_path / "target")
    tokenizer.save_pretrained(tmp_path / "target")
    make_dflash(4, VOCAB - 1, vocab=VOCAB, seed=5).save_pretrained(tmp_path / "dflash")
    texts = [torch.arange(2, 30) % (VOCAB - 2), torch.arange(5, 40) % (VOCAB - 2)]
    NGramLocalHead.from_ngram(NGramHead.fit([(t, torch.ones(len(t), dtype=torch.bool)) for t in texts], VOCAB - 2,
                                            4), top_k=4, min_count=1, context_tokens=2,
                              tokenizer_fingerprint=tokenizer_fingerprint(tokenizer)).save_pretrained(tmp_path / "h")
    before = json.loads((tmp_path / "h" / "config.json").read_text())
    assert cli.main(["tune-fusion", "--target", str(tmp_path / "target"), "--dflash", str(tmp_path / "dflash"),
                     "--head", str(tmp_path / "h"), "--num-prompts", "2", "--max-new-tokens", "12",
                     "--alphas", "2.0", "--betas", "0.5", "--pure-prefix-lens", "0", "--write"]) == 0
    saved = json.loads((tmp_path / "h" / "config.json").read_text())
    assert (saved["alpha"], saved["beta"], saved["pure_prefix_len"]) == (2.0, 0.5, 0)
    assert {key: value for key, value in saved.items() if key not in ("alpha", "beta", "pure_prefix_len")} == \
        {key: value for key, value in before.items() if key not in ("alpha", "beta", "pure_prefix_len")}
    assert isinstance(load_head(str(tmp_path / "h")), NGramLocalHead)


def test_tune_fusion_cli_tunes_the_copy_expert_and_checks_its_flags(tmp_path, capsys):
    tokenizer = make_tokenizer(VOCAB - 2)
    make_target("qwen3", vocab=VOCAB).save_pretrained(tmp_path / "target")
    tokenizer.save_pretrained(tmp_path / "target")
    make_dflash(4, VOCAB - 1, vocab=VOCAB, seed=5).save_pretrained(tmp_path / "dflash")
    args = ["tune-fusion", "--target", str(tmp_path / "target"), "--dflash", str(tmp_path / "dflash"),
            "--num-prompts", "2", "--max-new-tokens", "12", "--copy-ngrams", "0", "2", "--copy-gammas", "1", "8",
            "--json", str(tmp_path / "grid.json")]
    assert cli.main(args + ["--check-prompts", "1"]) == 0
    grid = json.loads((tmp_path / "grid.json").read_text())
    assert set(grid["check"]) == {"dflash_only", "best"}  # without a head there is nothing per position
    (name, rows), = grid["grids"].items()
    assert len(rows) == 4  # off, (2, 1), (2, 8), then DFlash only
    assert {(r["copy_ngram"], r["copy_gamma"]) for r in rows[:-1]} == {(0, 0.0), (2, 1.0), (2, 8.0)}
    best = grid["best"]
    assert (best["copy_ngram"], best["copy_gamma"]) == (rows[0]["copy_ngram"], rows[0]["copy_gamma"])

    for extra, message in [(["--write"], "--write stores alpha and beta in a head"),
                           (["--per-position"], "--per-position tunes a head's weights: give --head"),
                           (["--copy-ngrams", "0"], "nothing to tune"),
                           (["--copy-gammas", "-1"], "copy gamma must be finite and >= 0")]:
        assert cli.main(args + extra) == 2
        assert message in capsys.readouterr().err


def test_the_out_of_sample_check_replays_the_chosen_pure_prefix_and_splits_by_set():
    target, drafter, head, sequences = tiny_tuning_parts()
    replay = Replay(target, drafter, sequences)
    loud = (head, 4.0, 0.3)
    assert replay.tau(*loud, 0) != replay.tau(*loud, 1)  # so the check below can tell the prefixes apart
    origins = ["sharegpt", "code", "sharegpt"]
    chosen = checked_settings(head, {"alpha": 4.0, "beta": 0.3, "pure_prefix_len": 0}, None, None)
    overall, by_set = out_of_sample(target, [drafter], sequences, origins, chosen)
    assert overall["best"] == pytest.approx(replay.tau(*loud, 0))  # a best prefix of 0 is replayed as 0, not 1
    assert overall["dflash_only"] == pytest.approx(replay.tau(None, 0.0, 0.0))
    taus = replay.taus(*loud, 0)
    assert by_set["code"]["best"] == pytest.approx(taus[1])
    assert by_set["sharegpt"]["best"] == pytest.approx((taus[0] + taus[2]) / 2)


def test_code_validation_prompts_come_from_held_out_stdlib_files_only():
    from dels_hub.bench.prompts import code_validation_prompts, validation_prompts
    from dels_hub.training.corpora import corpus_records

    prompts = code_validation_prompts()
    held_out = {record["path"] for record in corpus_records("pysrc:stdlib:validation")}
    trained = {record["path"] for record in corpus_records("pysrc:stdlib")}
    assert len(prompts) >= 32
    for prompt in prompts:
        path, name = prompt.id.rsplit(":", 1)
        assert path in held_out and path not in trained
        code = prompt.messages[0]["content"].split("```python\n", 1)[1].rsplit("\n```", 1)[0]
        function, = ast.parse(code).body  # the signature and docstring only: the body is the target's to write
        assert function.name == name and len(function.body) == 1 and ast.get_docstring(function)
    with pytest.raises(BenchArgumentError, match="'heldout' is not one of"):
        validation_prompts("heldout")


def test_the_replayed_check_script_reproduces_tune_fusions_own_check(tmp_path):
    """``scripts/replay_fusion_check.py`` draws the check prompts as the tuning run did: DFlash alone and the best
    setting replay to the run's own check figures, per set too, and a named setting is replayed as named."""
    import subprocess
    import sys
    from pathlib import Path

    tokenizer = make_tokenizer(VOCAB - 2)
    make_target("qwen3", vocab=VOCAB).save_pretrained(tmp_path / "target")
    tokenizer.save_pretrained(tmp_path / "target")
    make_dflash(4, VOCAB - 1, vocab=VOCAB, seed=5).save_pretrained(tmp_path / "dflash")
    make_head(tokenizer, vocab=VOCAB - 2).save_pretrained(tmp_path / "head")
    parts = ["--target", str(tmp_path / "target"), "--dflash", str(tmp_path / "dflash"), "--head", str(tmp_path / "head")]
    assert cli.main(["tune-fusion", *parts, "--num-prompts", "2", "--check-prompts", "4", "--max-new-tokens", "12",
                     "--alphas", "2.0", "4.0", "--betas", "0.3", "--pure-prefix-lens", "0",
                     "--json", str(tmp_path / "grid.json")]) == 0
    grid = json.loads((tmp_path / "grid.json").read_text())
    script = Path(__file__).resolve().parent.parent / "scripts" / "replay_fusion_check.py"
    done = subprocess.run([sys.executable, str(script), str(tmp_path / "grid.json"), *parts, "--validation", "sharegpt",
                           "code", "--setting", "loud=4.0,0.3,1", "--json", str(tmp_path / "check.json")],
                          capture_output=True, text=True)
    assert done.returncode == 0, done.stderr
    check = json.loads((tmp_path / "check.json").read_text())["check"]
    for name in ("dflash_only", "best"):
        assert check[name]["tau"] == pytest.approx(grid["check"][name])
        for origin in ("sharegpt", "code"):
            assert check[name]["by_set"][origin] == pytest.approx(grid["check_by_set"][origin][name])
    assert (check["loud"]["alpha"], check["loud"]["pure_prefix_len"]) == (4.0, 1)
