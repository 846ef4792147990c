"""``dels-hub regenerate``: rewrite the assistant turns of chat data with the target's own answers.

Drafters (and heads) trained on text the target itself wrote match the target best (the DFlash and DeLS
recipes both regenerate their data). Conversations are processed in batches: for turn t of every
conversation in the batch, the target answers the conversation so far (earlier answers already
regenerated), left-padded, greedily or sampled. The output is JSONL with a ``messages`` column, written
batch by batch; rerunning with the same output file continues after the last complete batch.
"""

import json
from dataclasses import dataclass
from pathlib import Path

import torch
from tqdm.auto import tqdm

from ..arguments import option
from ..errors import RecipeError
from ..files import write_text_atomic
from ..loading import load_target, tokenizer_for
from .data import load_records, normalize_messages, record_kind
from .recipe import add_config_arguments, resolve_config


@dataclass
class RegenerateConfig:
    target: str = option("", "target causal LM: path, Hub id or pkg:PACKAGE")
    gguf_file: str = option("", "load the target and its tokenizer from this GGUF file inside `target`")
    data: str = option("", "chat data: local file or folder, Hub dataset id, or sharegpt:train")
    data_split: str = option("train", "split to read from a Hub id or folder")
    messages_field: str = option("", "column holding the conversation; empty = first of messages, conversations")
    output: str = option("", "JSONL file to write (appended to, batch by batch)")
    max_examples: int = option(0, "regenerate at most this many conversations (0 = all)")
    batch_size: int = option(8, "conversations answered together")
    max_new_tokens: int = option(512, "longest regenerated answer")
    max_answers: int = option(0, "regenerate at most this many assistant turns per conversation (0 = all)")
    max_prompt_length: int = option(2048, "stop a conversation at the turn whose prompt exceeds this many tokens")
    temperature: float = option(0.0, "0 = greedy; > 0 samples at this temperature")
    seed: int = option(0, "seed of the sampling")
    precision: str = option("fp32", "fp32 | bf16 weights of the target")

    def __post_init__(self):
        for name in ("target", "data", "output"):
            if not getattr(self, name):
                raise RecipeError(f"`{name}` is empty")
        if self.batch_size < 1 or self.max_new_tokens < 1:
            raise RecipeError("`batch_size` and `max_new_tokens` must be >= 1")
        if self.precision not in ("fp32", "bf16"):
            raise RecipeError(f"`precision` must be fp32 or bf16, got {self.precision!r}")


@torch.no_grad()
def regenerate_batch(target, tokenizer, conversations: list[list[dict]], config: RegenerateConfig) -> list[list[dict]]:
    """Answer every assistant turn of each conversation again, turn by turn, all conversations together."""
    results = [[] for _ in conversations]
    active = list(range(len(conversations)))
    for turn in range(max(len(c) for c in conversations)):
        asking = []
        for i in active:
            if turn >= len(conversations[i]):
                continue
            message = conversations[i][turn]
            answers = sum(m["role"] == "assistant" for m in results[i])
            if config.max_answers and answers >= config.max_answers:
                continue  # this conversation is complete
            if message["role"] != "assistant":
                results[i].append(message)
            elif any(m["role"] == "user" for m in results[i]):  # an answer before any question is dropped
                asking.append(i)
        prompts = [tokenizer.apply_chat_template(results[i], tokenize=False, add_generation_prompt=True)
                   for i in asking]
        encoded = [tokenizer(p, add_special_tokens=False)["input_ids"] for p in prompts]
        fits = [(i, ids) for i, ids in zip(asking, encoded) if len(ids) <= config.max_prompt_length]
        too_long = {i for i, ids in zip(asking, encoded) if len(ids) > config.max_prompt_length}
        active = [i for i in active if i not in too_long]  # these conversations end here
        if not fits:
            continue
        width = max(len(ids) for _, ids in fits)
        input_ids = torch.full((len(fits), width), tokenizer.pad_token_id, dtype=torch.long)
        attention = torch.zeros_like(input_ids)
        for row, (_, ids) in enumerate(fits):  # left padding: every prompt ends where generation starts
            input_ids[row, width - len(ids):] = torch.tensor(ids)
            attention[row, width - len(ids):] = 1
        sampling = {"do_sample": True, "temperature": config.temperature} if config.temperature > 0 else \
            {"do_sample": False}
        out = target.generate(input_ids=input_ids.to(target.device), attention_mask=attention.to(target.device),
                              max_new_tokens=config.max_new_tokens, pad_token_id=tokenizer.pad_token_id, **sampling)
        for row, (i, _) in enumerate(fits):
            answer = tokenizer.decode(out[row, width:], skip_special_tokens=True).strip()
            results[i].append({"role": "assistant", "content": answer})
    # A conversation ends with its last regenerated answer (a trailing unanswered user turn is dropped).
    for messages in results:
        while messages and messages[-1]["role"] != "assistant":
            messages.pop()
    return results


def add_regenerate_arguments(parser) -> None:
    """``dels-hub regenerate --target T --data D --output out.jsonl [...]``."""
    add_config_arguments(parser, RegenerateConfig)


def regenerate_main(args) -> Path:
    config = resolve_config(RegenerateConfig, args)
    records = load_records(config.data, config.data_split, config.max_examples)
    if not records:
        raise RecipeError(f"{config.data!r} holds no records")
    _, column = record_kind(records[0], "chat", "text", config.messages_field)
    kwargs = {"gguf_file": config.gguf_file} if config.gguf_file else {}
    tokenizer = tokenizer_for(config.target, **kwargs)
    if not getattr(tokenizer, "chat_template", None):
        raise RecipeError(f"the tokenizer of {config.target!r} has no chat template")
    if tokenizer.pad_token_id is None:
        tokenizer.pad_token = tokenizer.eos_token
    dtype = torch.bfloat16 if config.precision == "bf16" else torch.float32
    device = "cuda" if torch.cuda.is_available() else "cpu"
    target = load_target(config.target, dtype, **kwargs).to(device).eval()
    torch.manual_seed(config.seed)

    output = Path(config.output)
    output.parent.mkdir(parents=True, exist_ok=True)
    # Split on "\n" alone: records are written with ensure_ascii=False, so an answer may hold "\r", "\u2028"
    # or "\x85", which splitlines() would take for line ends (breaking records when the file is rewritten).
    # The last piece is "" after a complete line, or a line cut off by a kill: dropped either way.
    lines = output.read_text(encoding="utf-8").split("\n")[:-1] if output.exists() else []
    done = len(lines) - len(lines) % config.batch_size  # resume after the last complete batch
    if output.exists():
        write_text_atomic(output, "".join(line + "\n" for line in lines[:done]))
    bar = tqdm(total=len(records), initial=done, desc="regenerate")
    for first in range(done, len(records), config.batch_size):
        chunk = [normalize_messages(r.get(column)) for r in records[first : first + config.batch_size]]
        answered = regenerate_batch(target, tokenizer, chunk, config)
        with open(output, "a", encoding="utf-8") as f:
            f.writelines(json.dumps({"messages": messages}, ensure_ascii=False) + "\n" for messages in answered)
        bar.update(len(chunk))
    bar.close()
    return output
