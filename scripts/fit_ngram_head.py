"""Fit an n-gram local head (``NGramLocalHead``) on a head recipe's training text, and save it as a head repo.

    python scripts/fit_ngram_head.py --recipe recipes/smollm2-135m.head.toml --order 4 --top-k 8 --min-count 2 \
        --output-dir runs/smollm2-ngram-head

The repo loads wherever a head does (``head=`` of ``DeLSGenerator.from_pretrained``, ``--head`` of the commands);
its fusion defaults and tokenizer fingerprint come from the recipe, as a trained head's do. Beside the weights it
writes ``training_config.json`` (the recipe's settings, and under ``ngram`` this fit's settings and command) and a
first card; ``dels-hub card REPO --baseline ... --results ...`` adds the held-out scores and the measured gain.
"""

import argparse
import json
import shlex
import sys
import time
from pathlib import Path
from types import SimpleNamespace

import torch

from dels_hub.errors import FusionScheduleError
from dels_hub.files import save_pretrained_atomic, write_text_atomic
from dels_hub.fingerprint import tokenizer_fingerprint
from dels_hub.generation.tree import TreeFusion
from dels_hub.heads.ngram import NGramHead
from dels_hub.heads.ngram_head import NGramLocalHead
from dels_hub.hub.card import write_card
from dels_hub.loading import load_tokenizer
from dels_hub.training.data import load_examples
from dels_hub.training.head import family_name
from dels_hub.training.recipe import HeadTrainConfig, config_dict, read_recipe


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--recipe", required=True, help="the head recipe whose data and tokenizer to count")
    parser.add_argument("--order", type=int, default=4, choices=(2, 3, 4, 5),
                        help="5 only where order - 1 ids fit an int64 key (vocabularies under 55,109 ids)")
    parser.add_argument("--context-tokens", type=int, default=None,
                        help="committed tokens before the anchor that the head reads (default: order - 2, all its "
                             "state holds; 0 reads the block alone, as the n-gram baseline is scored)")
    parser.add_argument("--top-k", type=int, default=8, help="next tokens kept per context")
    parser.add_argument("--min-count", type=int, default=2, help="contexts seen fewer times are dropped")
    parser.add_argument("--data", nargs="+", default=None,
                        help="the text to count (default: the recipe's); counting is cheap, so the whole of "
                             "sharegpt:train-unique fits where a GRU head trains on a slice")
    parser.add_argument("--max-examples", type=int, default=None, help="training sequences (default: the recipe's)")
    parser.add_argument("--save-dtype", choices=("bf16", "fp32"), default="bf16",
                        help="of the probabilities and back-off weights (the unigram counts stay fp32, as a GRU "
                             "head's)")
    parser.add_argument("--alpha", type=float, default=None, help="fusion alpha (default: the recipe's)")
    parser.add_argument("--beta", type=float, default=None, help="fusion beta (default: the recipe's)")
    parser.add_argument("--pure-prefix-len", type=int, default=None, help="(default: the recipe's)")
    parser.add_argument("--tree-fusion", type=json.loads, default=None, metavar="JSON",
                        help="how the head's trees rank their nodes, e.g. "
                             "'{\"alpha\": 1.0, \"beta\": 0.5, \"temperature\": 1.6}' (generation.tree.TreeFusion; "
                             "default: none, trees rank by the chain fusion); tune one with scripts/tree_replay.py "
                             "--tree-fusion")
    parser.add_argument("--output-dir", required=True)
    args = parser.parse_args()
    context_tokens = args.order - 2 if args.context_tokens is None else args.context_tokens
    if not 0 <= context_tokens <= args.order - 2:
        parser.error(f"--context-tokens must be between 0 and --order - 2 = {args.order - 2}, got {context_tokens}")
    if args.top_k < 1 or args.min_count < 1:
        parser.error(f"--top-k and --min-count must be >= 1, got {args.top_k} and {args.min_count}")
    out = Path(args.output_dir)
    if out.exists() and any(out.iterdir()):
        parser.error(f"--output-dir {str(out)!r} is not empty")
    given = {"data": args.data, "max_examples": args.max_examples, "pure_prefix_len": args.pure_prefix_len,
             "alpha": None if args.alpha is None else [args.alpha], "beta": None if args.beta is None else [args.beta]}
    overrides = {name: value for name, value in given.items() if value is not None}
    config = HeadTrainConfig(**read_recipe(HeadTrainConfig, args.recipe) | overrides)
    if args.tree_fusion is not None:
        try:  # before the counting, for every depth of the head's block (a per-depth list must cover them all)
            TreeFusion.of_head(SimpleNamespace(tree_fusion=args.tree_fusion), config.pure_prefix_len,
                               config.block_size - 1)
        except FusionScheduleError as error:
            parser.error(f"--tree-fusion: {error}")
    tokenizer = load_tokenizer(config.tokenizer, **({"gguf_file": config.gguf_file} if config.gguf_file else {}))
    started = time.perf_counter()
    train, _ = load_examples(config, tokenizer)
    ngram = NGramHead.fit(((e.ids, e.loss_mask) for e in train), len(tokenizer), args.order)
    fingerprint = {**tokenizer_fingerprint(tokenizer), "family": config.family or family_name(config.tokenizer)}
    head = NGramLocalHead.from_ngram(
        ngram, top_k=args.top_k, min_count=args.min_count, block_size=config.block_size,
        unigram_smoothing=config.unigram_smoothing, tokenizer_fingerprint=fingerprint,
        alpha=config.alpha[0] if len(config.alpha) == 1 else list(config.alpha),
        beta=config.beta[0] if len(config.beta) == 1 else list(config.beta), pure_prefix_len=config.pure_prefix_len,
        context_tokens=context_tokens, tree_fusion=args.tree_fusion,
    )
    if args.save_dtype == "bf16":  # halves the tables; a head only proposes, the target decides every token
        for name, buffer in head.named_buffers():
            if buffer.is_floating_point() and name != "unigram_counts":
                buffer.data = buffer.data.to(torch.bfloat16)
    save_pretrained_atomic(head, out)
    fit = {"order": args.order, "top_k": args.top_k, "min_count": args.min_count, "context_tokens": context_tokens,
           "save_dtype": args.save_dtype,
           "train_sequences": len(train), "train_tokens": sum(len(e.ids) for e in train),
           "command": "python " + shlex.join(sys.argv)}
    training = config_dict(config) | {"ngram": fit}
    write_text_atomic(out / "training_config.json", json.dumps(training, indent=2))
    write_card(out, training=training)
    size = sum(path.stat().st_size for path in out.iterdir())
    print(f"{out}: {len(train)} sequences, {fit['train_tokens']:,} tokens, tables "
          f"{head.config.table_sizes}, {size / 2**20:.1f} MiB [{time.perf_counter() - started:.0f} s]")
    return 0


if __name__ == "__main__":
    sys.exit(main())
