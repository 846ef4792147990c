"""``dels-hub bench`` on tiny random models (CPU), and its dataset loaders on the real packaged files."""

import argparse
import dataclasses
import json

import pytest
import torch

from dels_hub import sharegpt
from dels_hub.bench import (
    BenchArgumentError,
    BenchSettings,
    DatasetFileError,
    DatasetUnavailableError,
    GreedyMismatchWarning,
    UnknownDatasetError,
    add_bench_arguments,
    cli,
    lineup,
    load_prompts,
    markdown_table,
    run_bench,
    runner,
    score,
    sharegpt_split,
    stats,
)
from dels_hub.errors import BlockSizeError, DeLSError, FusionScheduleError

from conftest import make_dflash, make_head, make_target, make_tokenizer

CHAT_TEMPLATE = (
    "{% for m in messages %}{{ m['role'] }} {{ m['content'] }} {% endfor %}{% if add_generation_prompt %}t0{% endif %}"
)
PROMPTS = [
    {"prompt": "t1 t2 t3 t4 t1 t2 t3 t4 t1 t2"},
    {"id": "chat", "messages": [{"role": "system", "content": "t7"}, {"role": "user", "content": "t5 t6 t5 t6"}]},
    {"prompt": "t9 t8 t9 t8 t9"},
]


@pytest.fixture(scope="module", autouse=True)
def one_torch_thread():
    """Tiny models gain nothing from threads, and on a shared 2-core machine a second thread that has to wait
    for a busy core makes every step many times slower (OpenMP spinning)."""
    threads = torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(threads)


@pytest.fixture(scope="module")
def chat_tokenizer():
    tokenizer = make_tokenizer()
    tokenizer.chat_template = CHAT_TEMPLATE
    return tokenizer


@pytest.fixture(scope="module")
def jsonl_dataset(tmp_path_factory):
    path = tmp_path_factory.mktemp("data") / "prompts.jsonl"
    path.write_text("\n".join(json.dumps(p) for p in PROMPTS) + "\n")
    return f"jsonl:{path}"


@pytest.fixture(scope="module")
def models(chat_tokenizer):
    return make_target("qwen3"), make_dflash(), make_head(chat_tokenizer)


@pytest.fixture(scope="module")
def greedy_run(models, chat_tokenizer, jsonl_dataset, tmp_path_factory):
    target, drafter, head = models
    out = tmp_path_factory.mktemp("bench")
    results = run_bench(
        target, drafter, [head], tokenizer=chat_tokenizer, dataset=jsonl_dataset, max_new_tokens=20, out=str(out),
        progress=False,
    )  # fmt: skip
    return results, out


# -- end to end --------------------------------------------------------------------------------------------


def test_bench_writes_json_markdown_and_plots(greedy_run):
    results, out = greedy_run
    for name in ("results.json", "results.md", "samples.jsonl", "acceptance_histogram.png", "acceptance_profile.png"):
        assert (out / name).stat().st_size > 0, name
    for name in ("acceptance_histogram.png", "acceptance_profile.png"):
        assert (out / name).read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    saved = json.loads((out / "results.json").read_text())
    assert saved["settings"]["dataset"].startswith("jsonl:") and saved["settings"]["block_size"] == 8
    assert saved["versions"]["torch"] and saved["versions"]["transformers"] and saved["machine"]["cpu_count"]
    assert saved["dtype"] == "float32" and saved["prompts"] == ["0", "chat", "2"]

    names = [row["name"] for row in results["rows"]]
    assert names[:4] == ["target (loop, b=1)", "target.generate", "DFlash (b=8)", "DeLS (b=8, head0)"]
    # The installed transformers has both peers; if one were missing it would be listed with its reason.
    skipped = {s["row"] for s in results["skipped_rows"]}
    assert any(n.startswith("transformers prompt-lookup") for n in names) or "transformers prompt-lookup" in skipped
    assert any(n.startswith("transformers DFlash") for n in names) or "transformers DFlash" in skipped

    for row in results["rows"]:
        assert len(row["per_prompt"]) == 3
        assert row["tau"]["n"] == 3 and 1 <= row["tau"]["mean"] <= row["block_size"]
        assert row["tau"]["low"] <= row["tau"]["mean"] <= row["tau"]["high"]
        assert row["tpot_median"] > 0 and row["tokens_per_second_median"] > 0
        assert row["time_to_first_token_median"] > 0 and row["peak_memory_bytes"] > 0
        assert len(row["speedup"]["paired"]) == 3 and row["speedup"]["ratio_of_medians"] > 0
        assert len(row["acceptance_profile"]) == row["block_size"] - 1
        assert all(p["new_tokens"] == 20 for p in row["per_prompt"])
    baseline = results["rows"][0]
    assert baseline["speedup"]["ratio_of_medians"] == pytest.approx(1.0)
    assert baseline["tau"]["mean"] == 1.0  # block size 1 commits exactly one token per step

    table = (out / "results.md").read_text()
    speculative = [row for row in results["rows"] if row["kind"] in ("dflash", "dels")]
    # header + one line per row, then the policy table: header + one line per speculative row
    assert table.count("\n| ") == len(results["rows"]) + 1 + len(speculative) + 1
    assert "MISMATCH" not in table and "tau (95% CI)" in table and "predicted tok/ms" in table
    for row in speculative:  # the cost-aware default: what it chose, pooled over the prompts
        policy = row["policy"]
        assert policy["policy"] == "cost-aware"
        assert sum(policy["chosen_drafts"].values()) == policy["plain_blocks"] + policy["drafted_blocks"]
        assert policy["plain_blocks"] + policy["drafted_blocks"] == sum(len(p["acceptance_lengths"])
                                                                        for p in row["per_prompt"])
        assert policy["measured_tokens_per_ms"] > 0


def test_both_policies_run_paired_with_the_histogram_of_chosen_drafts(models, chat_tokenizer, jsonl_dataset):
    target, drafter, head = models
    results = run_bench(target, drafter, [head], tokenizer=chat_tokenizer, dataset=jsonl_dataset, max_new_tokens=12,
                        policies=["cost-aware", "fixed"], copy_ngram=3, peers=False, progress=False)
    rows = {row["name"]: row for row in results["rows"]}
    assert {"DFlash (b=8) [fixed]", "DeLS (b=8, head0) + copy [fixed]"} <= rows.keys()
    fixed, adaptive = rows["DeLS (b=8, head0) + copy [fixed]"], rows["DeLS (b=8, head0) + copy"]
    assert fixed["policy"]["policy"] == "fixed" and set(fixed["policy"]["chosen_drafts"]) == {7}
    assert fixed["policy"]["predicted_tokens_per_ms"] is None  # fixed blocks predict nothing
    assert adaptive["policy"]["predicted_tokens_per_ms"] > 0
    assert adaptive["gain_over_fixed_blocks"]["baseline"] == fixed["name"]
    assert fixed["gain_of_copy"]["baseline"] == "DeLS (b=8, head0) [fixed]"  # twins compare with twins
    assert results["greedy_check"]["ok"]
    with pytest.raises(BenchArgumentError, match="policies must be distinct values"):
        run_bench(target, drafter, [head], tokenizer=chat_tokenizer, dataset=jsonl_dataset, policies=["eager"])


def test_greedy_rows_agree_token_for_token(greedy_run):
    results, out = greedy_run
    assert results["greedy_check"]["ok"] and results["greedy_check"]["mismatched_rows"] == []
    assert all(row["greedy_match"] for row in results["rows"])
    samples = [json.loads(line) for line in (out / "samples.jsonl").read_text().splitlines()]
    by_prompt = {}
    for sample in samples:
        by_prompt.setdefault(sample["prompt"], set()).add(tuple(sample["tokens"]))
    assert len(by_prompt) == 3 and all(len(tokens) == 1 for tokens in by_prompt.values())


def accept_everything(draft_ids, target_logits):
    """A broken greedy verifier: accepts every draft, right or wrong, plus the target's bonus token."""
    bonus = target_logits[..., -1:, :].argmax(-1)
    every = torch.full(draft_ids.shape[:-1], draft_ids.shape[-1], device=draft_ids.device)
    return torch.cat([draft_ids, bonus], dim=-1), every


def test_two_runs_are_compared_row_by_row_per_prompt(greedy_run, tmp_path):
    """``scripts/compare_bench_runs.py``: a run against itself differs by nothing; against a copy in which one
    row's per-prompt tau rose by 0.5, that row differs by exactly +0.5; runs on other prompts are refused."""
    import subprocess
    import sys
    from pathlib import Path

    script = Path(__file__).resolve().parent.parent / "scripts" / "compare_bench_runs.py"
    results, before = greedy_run
    after = tmp_path / "after"
    after.mkdir()
    changed = json.loads((before / "results.json").read_text())
    dels = next(row for row in changed["rows"] if row["name"].startswith("DeLS"))
    for prompt in dels["per_prompt"]:
        prompt["tau"] += 0.5
    (after / "results.json").write_text(json.dumps(changed))

    def compare(other, *rename):
        done = subprocess.run([sys.executable, str(script), str(before), str(other), "--json", str(tmp_path / "c.json"),
                               *(["--rename", *rename] if rename else [])], capture_output=True, text=True)
        return done, json.loads((tmp_path / "c.json").read_text())["rows"] if done.returncode == 0 else None

    _, itself = compare(before)
    assert itself and all(entry["tau_difference"]["mean"] == 0 for entry in itself)
    _, rows = compare(after)
    moved = {entry["row"]: entry["tau_difference"]["mean"] for entry in rows}
    assert moved.pop(dels["name"]) == pytest.approx(0.5) and set(moved.values()) == {0}
    # Row names hold '=' themselves ("b=8"): --rename OLD=NEW splits where a row name of BEFORE ends.
    old_name, dels["name"] = dels["name"], "DeLS (b=8, renamed)"
    (after / "results.json").write_text(json.dumps(changed))
    _, rows = compare(after, f"{old_name}=DeLS (b=8, renamed)")
    assert {entry["row"]: entry["tau_difference"]["mean"] for entry in rows}["DeLS (b=8, renamed)"] == pytest.approx(0.5)
    changed["prompts"] = changed["prompts"][::-1] + ["another"]
    (after / "results.json").write_text(json.dumps(changed))
    refused, _ = compare(after)
    assert refused.returncode != 0 and "same prompts" in refused.stderr


def test_broken_row_is_reported_as_mismatch(models, chat_tokenizer, jsonl_dataset, tmp_path, monkeypatch):
    target, drafter, head = models
    monkeypatch.setattr("dels_hub.verify.verify_greedy", accept_everything)
    with pytest.warns(GreedyMismatchWarning, match="GREEDY MISMATCH"):
        results = run_bench(
            target, drafter, [head], tokenizer=chat_tokenizer, dataset=jsonl_dataset, max_new_tokens=12,
            out=str(tmp_path), peers=False, progress=False,
        )  # fmt: skip
    check = results["greedy_check"]
    assert not check["ok"]
    # Block size 1 has no drafts to accept wrongly: only the speculative rows break.
    assert check["mismatched_rows"] == ["DFlash (b=8)", "DeLS (b=8, head0)"]
    first = check["mismatches"]["DFlash (b=8)"][0]
    assert first["expected"] != first["got"] and first["logit_gap"] > 0
    match = {row["name"]: row["greedy_match"] for row in results["rows"]}
    assert match == {"target (loop, b=1)": True, "target.generate": True, "DFlash (b=8)": False,
                     "DeLS (b=8, head0)": False}  # fmt: skip
    table = (tmp_path / "results.md").read_text()
    assert "GREEDY MISMATCH" in table and "**MISMATCH (" in table
    assert json.loads((tmp_path / "results.json").read_text())["greedy_check"]["ok"] is False

    # The CLI turns the mismatch into a nonzero exit status.
    monkeypatch.setattr(cli, "run_bench", lambda *args, **kwargs: results)
    args = add_bench_arguments(argparse.ArgumentParser()).parse_args(["--target", "t", "--dflash", "d"])
    assert cli.bench_main(args) == 1


def test_batched_rows_equal_target_generate_and_a_broken_verifier_is_caught(models, chat_tokenizer, jsonl_dataset,
                                                                            tmp_path, monkeypatch):
    target, drafter, head = models
    common = dict(tokenizer=chat_tokenizer, dataset=jsonl_dataset, max_new_tokens=12, peers=False, progress=False,
                  batch_size=2, copy_ngram=2)
    results = run_bench(target, drafter, [head], out=str(tmp_path), **common)
    rows = {row["name"]: row for row in results["rows"]}
    assert results["mode"] == "batched" and results["batches"] == 2 and results["greedy_check"]["ok"]
    assert set(rows) == {"target.generate", "DFlash (b=8)", "DFlash (b=8) + copy", "DeLS (b=8, head0)",
                         "DeLS (b=8, head0) + copy"}
    assert all(row["greedy_match"] for row in rows.values())
    assert len({row["new_tokens_total"] for row in rows.values()}) == 1 and rows["DFlash (b=8)"]["tau"] >= 1
    assert rows["target.generate"]["tau"] is None and rows["DeLS (b=8, head0)"]["tokens_per_second"] > 0
    assert "target (loop, b=1)" in {skip["row"] for skip in results["skipped_rows"]}
    assert "--batch-size 2" in (tmp_path / "results.md").read_text()
    assert json.loads((tmp_path / "results.json").read_text())["rows"][0]["name"] == "target.generate"

    monkeypatch.setattr("dels_hub.verify.verify_greedy", accept_everything)
    broken = run_bench(target, drafter, [head], **common)
    assert broken["greedy_check"]["mismatched_rows"] == ["DFlash (b=8)", "DFlash (b=8) + copy", "DeLS (b=8, head0)",
                                                         "DeLS (b=8, head0) + copy"]
    with pytest.raises(BenchArgumentError, match="batch_size must be >= 1, got 0"):
        BenchSettings(target="T", dflash="D", batch_size=0).validate()


def test_draft_vocab_adds_a_pruned_row_beside_each_speculative_row(models, chat_tokenizer, jsonl_dataset, tmp_path):
    target, drafter, head = models
    results = run_bench(target, drafter, [head], tokenizer=chat_tokenizer, dataset=jsonl_dataset, num_prompts=2,
                        max_new_tokens=12, peers=False, progress=False, copy_ngram=2, draft_vocab=20,
                        out=str(tmp_path))
    rows = {row["name"]: row for row in results["rows"]}
    pruned = ["DFlash (b=8), vocab 20", "DFlash (b=8) + copy, vocab 20", "DeLS (b=8, head0), vocab 20",
              "DeLS (b=8, head0) + copy, vocab 20"]
    assert set(pruned) <= set(rows) and results["greedy_check"]["ok"]
    assert all(rows[name]["gain_of_draft_vocab"]["baseline"] == name.removesuffix(", vocab 20") for name in pruned)
    assert "`DFlash (b=8), vocab 20` over `DFlash (b=8)`" in (tmp_path / "results.md").read_text()
    with pytest.raises(BenchArgumentError, match="give a head and N >= 1"):
        BenchSettings(target="T", dflash="D", draft_vocab=8).validate()


def test_tree_rows_sit_beside_their_chain_rows_and_are_compared_with_them(models, chat_tokenizer, jsonl_dataset):
    target, drafter, head = models
    results = run_bench(target, drafter, [head], tokenizer=chat_tokenizer, dataset=jsonl_dataset, num_prompts=2,
                        max_new_tokens=12, peers=False, progress=False, policies=["fixed"], tree_budgets=[4, 9])
    rows = {row["name"]: row for row in results["rows"]}
    assert results["greedy_check"]["ok"]
    for budget in (4, 9):
        dflash, dels = f"DFlash (b=8), tree {budget}", f"DeLS (b=8, head0), tree {budget}"
        assert rows[dflash]["gain_of_tree"]["baseline"] == "DFlash (b=8)"
        assert rows[dels]["gain_of_tree"]["baseline"] == "DeLS (b=8, head0)"
        assert rows[dels]["gain_over_dflash"]["baseline"] == dflash  # the head's gain on trees of the same budget
        assert rows[dels]["policy"]["chosen_drafts"].keys() == {budget}
    assert results["settings"]["tree_budgets"] == [4, 9]


def test_sampling_run_skips_the_equality_check(models, chat_tokenizer, jsonl_dataset):
    target, drafter, _ = models
    results = run_bench(
        target, drafter, tokenizer=chat_tokenizer, dataset=jsonl_dataset, num_prompts=1, max_new_tokens=8,
        temperature=0.8, top_p=0.9, block_size=4, peers=False, progress=False,
    )  # fmt: skip
    assert results["greedy_check"] is None and "files" not in results
    assert [row["block_size"] for row in results["rows"]] == [1, 1, 4]
    assert all(row["greedy_match"] is None for row in results["rows"])


def test_several_drafters_each_get_a_dflash_row_and_a_dels_row_per_head(models, chat_tokenizer, jsonl_dataset):
    target, drafter, head = models
    other = make_dflash(block_size=4, seed=7)
    results = run_bench(
        target, [drafter, other], [head], tokenizer=chat_tokenizer, dataset=jsonl_dataset, num_prompts=2,
        max_new_tokens=12, peers=False, progress=False,
    )  # fmt: skip
    names = [row["name"] for row in results["rows"]]
    assert names == [
        lineup.BASELINE, lineup.REFERENCE, "DFlash (b=4, dflash0)", "DeLS (b=4, dflash0, head0)",
        "DFlash (b=4, dflash1)", "DeLS (b=4, dflash1, head0)",
    ]  # fmt: skip
    assert results["greedy_check"]["ok"]  # the largest common block size (4) is the default
    assert len(results["settings"]["dflash"]) == 2

    # Each DeLS row is compared, prompt by prompt, with the DFlash row of its own drafter.
    rows = {row["name"]: row for row in results["rows"]}
    for drafter in ("dflash0", "dflash1"):
        dels, dflash = rows[f"DeLS (b=4, {drafter}, head0)"], rows[f"DFlash (b=4, {drafter})"]
        gain = dels["gain_over_dflash"]
        assert gain["baseline"] == dflash["name"] and gain["tau_difference"]["n"] == 2
        differences = [d["tau"] - f["tau"] for d, f in zip(dels["per_prompt"], dflash["per_prompt"])]
        assert gain["tau_difference"]["mean"] == pytest.approx(sum(differences) / 2)
    assert "over `DFlash (b=4, dflash1)`, paired per prompt: tau" in markdown_table(results)


def test_later_heads_are_compared_with_the_first_on_the_same_drafter(models, chat_tokenizer, jsonl_dataset):
    """How an adapter is judged against its base head: paired per prompt, same drafter, same run."""
    target, drafter, head = models
    other = make_head(chat_tokenizer, seed=9, alpha=1.5)
    results = run_bench(
        target, drafter, [head, other], tokenizer=chat_tokenizer, dataset=jsonl_dataset, num_prompts=2,
        max_new_tokens=12, peers=False, progress=False,
    )  # fmt: skip
    first, second = [row for row in results["rows"] if row["kind"] == "dels"]
    assert (first["head"], second["head"]) == ("head0", "head1")
    assert "gain_over_first_head" not in first
    gain = second["gain_over_first_head"]
    assert gain["baseline"] == first["name"] and gain["tau_difference"]["n"] == 2
    differences = [b["tau"] - a["tau"] for a, b in zip(first["per_prompt"], second["per_prompt"])]
    assert gain["tau_difference"]["mean"] == pytest.approx(sum(differences) / 2)
    assert f"`{second['name']}` over `{first['name']}`, paired per prompt" in markdown_table(results)


def test_copy_rows_sit_beside_their_base_rows_and_are_compared_with_them(models, chat_tokenizer, jsonl_dataset):
    target, drafter, head = models
    results = run_bench(
        target, drafter, [head], tokenizer=chat_tokenizer, dataset=jsonl_dataset, max_new_tokens=20,
        peers=["prompt-lookup"], progress=False, copy_ngram=3, copy_gamma=50.0,
    )  # fmt: skip
    names = [row["name"] for row in results["rows"]]
    lookup = "transformers prompt-lookup (b=8)"
    assert names[2:] == ["DFlash (b=8)", "DFlash (b=8) + copy", "DeLS (b=8, head0)", "DeLS (b=8, head0) + copy",
                         lookup]
    assert results["greedy_check"]["ok"]
    rows = {row["name"]: row for row in results["rows"]}
    for base in ("DFlash (b=8)", "DeLS (b=8, head0)"):
        gain = rows[f"{base} + copy"]["gain_of_copy"]
        assert gain["baseline"] == base and gain["tau_difference"]["n"] == 3
        # Each + copy row is also paired with the peer that only copies; the rows without copy are not.
        peer = rows[f"{base} + copy"]["gain_over_prompt_lookup"]
        differences = [r["tau"] - p["tau"] for r, p in zip(rows[f"{base} + copy"]["per_prompt"],
                                                            rows[lookup]["per_prompt"])]
        assert peer["baseline"] == lookup and peer["tau_difference"]["mean"] == pytest.approx(sum(differences) / 3)
        assert "gain_over_prompt_lookup" not in rows[base]
    # The prompts repeat themselves ("t1 t2 t3 t4 t1 t2 ..."), so a strong copy expert changes what is drafted.
    assert rows["DFlash (b=8) + copy"]["tau"]["mean"] != rows["DFlash (b=8)"]["tau"]["mean"]
    assert results["settings"]["copy_ngram"] == 3
    assert "`DFlash (b=8) + copy` over `DFlash (b=8)`, paired per prompt" in markdown_table(results)
    assert f"`DeLS (b=8, head0) + copy` over `{lookup}`, paired per prompt" in markdown_table(results)


# -- validation before any work ----------------------------------------------------------------------------


class Untouchable:
    """A stand-in model that fails the test if the benchmark gets far enough to use it."""

    def __getattr__(self, name):
        raise AssertionError(f"the benchmark used the model ({name}) before validating its inputs")


@pytest.mark.parametrize(
    "options, error",
    [
        ({"dataset": "humaneval-plus"}, UnknownDatasetError),
        ({"dataset": "jsonl:/nonexistent/prompts.jsonl"}, DatasetFileError),
        ({"dataset": "humaneval", "num_prompts": 0}, BenchArgumentError),
        ({"dataset": "humaneval", "max_new_tokens": 0}, BenchArgumentError),
        ({"dataset": "humaneval", "temperature": -1.0}, BenchArgumentError),
        ({"dataset": "humaneval", "top_p": 0.0}, BenchArgumentError),
        ({"dataset": "humaneval", "block_size": 1}, BlockSizeError),
        ({"dataset": "sharegpt", "score": True}, BenchArgumentError),
        ({"dataset": "humaneval", "copy_ngram": -1}, FusionScheduleError),
        ({"dataset": "humaneval", "copy_ngram": 2, "copy_gamma": float("inf")}, FusionScheduleError),
        ({"dataset": "humaneval", "tree_budgets": [0]}, BenchArgumentError),
        ({"dataset": "humaneval", "tree_budgets": [8], "temperature": 0.7, "draft_mode": "sampled"},
         BenchArgumentError),
    ],
)
def test_bad_settings_fail_before_any_work(options, error):
    with pytest.raises(error) as raised:
        run_bench(Untouchable(), Untouchable(), **options)
    assert isinstance(raised.value, DeLSError) and isinstance(raised.value, ValueError)


def test_engine_settings_fail_before_any_work(tmp_path):
    python = tmp_path / "python"
    python.write_text("")
    cases = [
        ({"engine": str(tmp_path / "missing")}, "is not a file"),
        ({"engine_target": "folder"}, "--engine-target needs --engine"),
        ({"engine": str(python), "batch_size": 2}, "does not combine with --batch-size"),
        ({"engine": str(python), "target_kwargs": {"gguf_file": "m.gguf"}}, "give --engine-target"),
    ]
    for options, message in cases:
        with pytest.raises(BenchArgumentError, match=message):
            run_bench("some/target", "some/drafter", dataset="humaneval", **options)
    with pytest.raises(BenchArgumentError, match="as paths or Hub ids"):
        run_bench(Untouchable(), "some/drafter", dataset="humaneval", engine=str(python))


def test_engine_rows_are_summarized_from_vllms_counters():
    from dels_hub.bench.engine import engine_markdown, summarize_row

    result = {"answers": [[1, 2, 3]], "concurrency": {
        "1": {"seconds": 2.0, "new_tokens": 30, "spec_decode": {"vllm:spec_decode_num_drafts": 10,
                                                                "vllm:spec_decode_num_accepted_tokens": 15}},
        "8": {"seconds": 1.0, "new_tokens": 30, "spec_decode": {}},
    }}
    row = summarize_row("vLLM + DFlash", result, [[1, 2, 3]])
    assert row["tau_c1"] == 2.5 and row["tau_c8"] is None
    assert row["tokens_per_second_c1"] == 15.0 and row["tokens_per_second_c8"] == 30.0 and row["greedy_equal"]
    assert summarize_row("vLLM + DFlash", result, [[1, 2, 4]])["greedy_equal"] is False
    table = engine_markdown({"engine": {"python": "py", "target": "t", "new_tokens": 30, "rows": [row],
                                        "skipped": [{"row": "vLLM + DFlash + head", "reason": "no head given"}]}})
    assert "| vLLM + DFlash | 2.50 | 15.0 | 30.0 | yes |" in table and "no head given" in table
    assert engine_markdown({}) == ""


def test_score_needs_explicit_permission_to_run_code(monkeypatch):
    monkeypatch.delenv("HF_ALLOW_CODE_EVAL", raising=False)
    with pytest.raises(BenchArgumentError, match="HF_ALLOW_CODE_EVAL=1"):
        run_bench(Untouchable(), Untouchable(), dataset="humaneval", score=True)


def test_jsonl_without_prompt_or_messages_is_rejected(tmp_path):
    path = tmp_path / "bad.jsonl"
    path.write_text('{"prompt": "t1"}\n{"text": "t2"}\n')
    with pytest.raises(DatasetFileError, match=r"bad.jsonl:2.*'prompt'.*'messages'.*\['text'\]"):
        run_bench(Untouchable(), Untouchable(), dataset=f"jsonl:{path}")
    path.write_text("not json\n")
    with pytest.raises(DatasetFileError, match="not valid JSON"):
        load_prompts(f"jsonl:{path}")


def test_hub_datasets_fail_clearly_when_unreachable(monkeypatch):
    import datasets

    def offline(*args, **kwargs):
        raise ConnectionError("Couldn't reach 'openai/gsm8k' on the Hub (LocalEntryNotFoundError)")

    monkeypatch.setattr(datasets, "load_dataset", offline)
    with pytest.raises(DatasetUnavailableError, match=r"gsm8k.*openai/gsm8k.*humaneval, sharegpt, jsonl:PATH"):
        load_prompts("gsm8k")


def test_hub_dataset_templates(monkeypatch):
    import datasets

    rows = {"HuggingFaceH4/MATH-500": [{"problem": "1+1?", "unique_id": "m1"}],
            "HuggingFaceH4/mt_bench_prompts": [{"prompt": ["first", "second"], "prompt_id": 7}]}  # fmt: skip
    monkeypatch.setattr(datasets, "load_dataset", lambda repo, config, split: rows[repo])
    (math,) = load_prompts("math500")
    assert (
        math.messages[0]["content"] == "1+1?\nPlease reason step by step, and put your final answer within \\boxed{}."
    )
    (chat,) = load_prompts("mt-bench")
    assert chat.id == "7" and chat.messages[0]["content"] == "first" and chat.follow_ups == ["second"]


# -- real packaged datasets --------------------------------------------------------------------------------


def test_humaneval_loader_reads_the_packaged_problems():
    problems = load_prompts("humaneval")
    assert len(problems) == 164 and problems[0].id == "HumanEval/0"
    text = problems[0].messages[0]["content"]
    assert text.startswith(
        "Write a solution to the following problem and make sure that it passes the tests:\n```python\n"
    )
    assert "def has_close_elements" in text and text.endswith("\n```")
    assert problems[0].problem["entry_point"] == "has_close_elements"
    subset = load_prompts("humaneval", num_prompts=10, seed=0)
    assert len(subset) == 10 and subset == load_prompts("humaneval", num_prompts=10, seed=0)
    ids = [int(p.id.split("/")[1]) for p in subset]
    assert ids == sorted(ids)


def test_sharegpt_split_of_the_truncated_file():
    records = sharegpt.sharegpt_conversations()
    assert len(records) == 17_671  # the cut-off last record is dropped
    train, validation, heldout = (sharegpt_split(name) for name in ("train", "validation", "heldout"))
    assert (len(train), len(validation), len(heldout)) == (15_671, 1_000, 1_000)
    assert train[-1] is records[15_670] and validation[0] is records[15_671] and heldout[-1] is records[-1]
    with pytest.raises(BenchArgumentError, match="heldout"):
        sharegpt_split("test")

    held = load_prompts("sharegpt")
    heldout_ids = {r["id"] for r in heldout}
    assert 900 < len(held) <= 1000 and all(p.id in heldout_ids for p in held)
    first = heldout[0]
    user = next(t["value"] for t in first["conversations"] if t["from"] in ("human", "user"))
    assert held[0].id == first["id"] and held[0].messages == [{"role": "user", "content": user}]


# -- statistics, scoring and the CLI -----------------------------------------------------------------------


def test_statistics():
    ci = stats.mean_ci95([1.0, 2.0, 3.0])
    assert ci["mean"] == 2.0 and ci["high"] - 2.0 == pytest.approx(4.303 * 1.0 / 3**0.5)
    assert stats.mean_ci95([2.0])["low"] is None
    assert stats.t_quantile_975(1000) == pytest.approx(1.962, abs=1e-3)
    assert stats.position_profile([[1, 3], [2, 1]], 4) == [0.5, 0.25, 0.0]
    assert stats.acceptance_histogram([[1, 3], [2, 1]]) == {1: 2, 2: 1, 3: 1}
    result = stats.speedup([2.0, 4.0, 6.0], [1.0, 1.0, 2.0])
    assert result["ratio_of_medians"] == 4.0 and result["paired"] == [2.0, 4.0, 3.0]


def test_score_runs_code_and_falls_back_offline(monkeypatch):
    monkeypatch.setattr(score, "_load_code_eval", lambda: (None, "OfflineError: no Hub in tests"))
    problem = load_prompts("humaneval")[0]
    solution = f"Here it is:\n```python\n{problem.problem['prompt']}{problem.problem['canonical_solution']}```\n"
    wrong = "```python\ndef has_close_elements(numbers, threshold):\n    return False\n```"
    runs = {"good": [runner.PromptRun([], [], None, [solution])], "bad": [runner.PromptRun([], [], None, [wrong])]}
    result = score.score_humaneval(runs, [problem])
    assert result["rows"]["good"]["pass@1"] == 1.0 and result["rows"]["bad"]["pass@1"] == 0.0
    assert "offline fallback" in result["backend"] and "OfflineError" in result["backend"]


def test_cli_arguments_match_the_issue():
    parser = add_bench_arguments(argparse.ArgumentParser())
    args = parser.parse_args(
        ["--target", "T", "--target-kwargs", '{"gguf_file": "m.gguf"}', "--dflash", "D", "--head", "H1", "--head",
         "H2", "--dataset", "sharegpt", "--num-prompts", "5", "--max-new-tokens", "32", "--temperature", "0.7",
         "--top-p", "0.9", "--block-size", "4", "--alpha", "0.5", "--beta", "0.25", "--seed", "3", "--out", "o",
         "--score"]
    )  # fmt: skip
    assert args.heads == ["H1", "H2"] and args.num_prompts == 5 and args.block_size == 4 and args.score
    assert args.dflash == ["D"] and args.peers
    both = parser.parse_args(["--target", "T", "--dflash", "D1", "--dflash", "D2", "--no-peers"])
    assert both.dflash == ["D1", "D2"] and not both.peers
    assert parser.parse_args(["--target", "T", "--dflash", "D", "--peers", "prompt-lookup"]).peers == ["prompt-lookup"]
    with pytest.raises(BenchArgumentError, match=r"unknown peers \['lookahead'\]"):
        BenchSettings(target="T", dflash="D", peers=("lookahead",)).validate()
    assert args.target_kwargs == {"gguf_file": "m.gguf"}
    with pytest.raises(SystemExit) as exit_:  # argparse names the flag and exits 2, before anything loads
        parser.parse_args(["--target", "T", "--dflash", "D", "--target-kwargs", "{gguf_file: x}"])
    assert exit_.value.code == 2
    # The flags are the settings' fields: every documented field has one, and the parsed values build the settings.
    documented = {f.name for f in dataclasses.fields(BenchSettings) if "help" in f.metadata}
    assert documented == set(vars(args)) and {"tokenizer", "warmup"}.isdisjoint(vars(args))
    settings = BenchSettings(**vars(args))
    assert (settings.dataset, settings.temperature, settings.alpha, settings.out) == ("sharegpt", 0.7, 0.5, "o")


def test_cli_reports_invalid_settings_without_a_traceback(capsys):
    parser = add_bench_arguments(argparse.ArgumentParser())
    args = parser.parse_args(["--target", "T", "--dflash", "D", "--dataset", "humaneval-plus"])
    assert cli.bench_main(args) == 2
    assert "error: unknown dataset 'humaneval-plus'" in capsys.readouterr().err
