"""Where a speculative block's time goes on this machine, against one step of ``target.generate``.

Times each part of a block with the loop's own functions, on the embedded SmolLM2 target with the staged drafter and
head, at a context of ``--context`` tokens: the verify of k tokens (k = 1..block_size), the draft body, the LM head
(full and pruned), the head, the fusion and choice, the copy expert, the commit. Then it runs each row kind through
``generate`` with fixed blocks and with the cost-aware policy, and prints the measured time per block against the sum
of its parts: what is left is the loop's own overhead.

    OMP_NUM_THREADS=1 python scripts/profile_block.py --json results/smollm2/profile/threads-1.json
    OMP_NUM_THREADS=2 python scripts/profile_block.py --threads 2 --json results/smollm2/profile/threads-2.json
"""

import argparse
import json
import time
from pathlib import Path

import torch

from dels_hub import DeLSGenerator
from dels_hub.bench.prompts import encode_chat, load_prompts
from dels_hub.compat import cache_kwarg_name
from dels_hub.copy_expert import DEFAULT_NGRAM, CopyChain, CopySettings
from dels_hub.draft_vocabulary import DraftVocabulary, most_frequent
from dels_hub.fusion import fuse_logits
from dels_hub.generation import cost_model
from dels_hub.generation.caches import StaticDraftCache, StaticSlotCache
from dels_hub.generation.drafting import context_features
from dels_hub.generation.graph_steps import verify_step
from dels_hub.loading import load_dflash, load_head, load_target, load_tokenizer
from dels_hub.proving_ground import SMOLLM2_DFLASH, SMOLLM2_HEADS, smollm2_location
from dels_hub.sampling import Warping, choose
from dels_hub.verify import committed, to_host, verify_greedy


def median_ms(work, repeats: int) -> float:
    """Median wall milliseconds of ``work()`` over ``repeats`` calls, after one warm-up call (on the CPU)."""
    return cost_model.median_ms(work, torch.device("cpu"), repeats)


@torch.inference_mode()
def parts(target, drafter, head, input_ids, repeats: int) -> dict:
    """Milliseconds of each part of one block at the context of ``input_ids [1, N]``."""
    block_size = drafter.config.block_size
    width = input_ids.shape[1]
    cache = StaticSlotCache(width + 64 + block_size, target.config.num_hidden_layers, target.device, target.dtype)
    cache_arg = cache_kwarg_name(type(target))
    positions = torch.arange(width + block_size).unsqueeze(0)
    _, hidden = verify_step(target, input_ids, positions[:, :width], cache, cache_arg)
    features = context_features(hidden, drafter.config.target_layer_ids)
    timings = {}
    for w in range(1, block_size + 1):
        ids, at = input_ids[:, -w:], positions[:, width : width + w]
        timings[f"verify_{w}"] = median_ms(lambda ids=ids, at=at: verify_step(target, ids, at, cache, cache_arg),
                                           repeats)
    embed, lm_head = target.get_input_embeddings(), target.get_output_embeddings()
    block = torch.full((1, block_size), drafter.config.mask_token_id)
    block[0, 0] = input_ids[0, -1]
    context = features[:, -3:]  # about what a block accepts: the anchor and two drafts

    def draft_body():
        draft_cache = StaticDraftCache(width + 64, drafter.config.num_hidden_layers)
        draft_cache.length = width - 3
        return drafter(target_hidden=context, noise_embedding=embed(block),
                       position_ids=positions[:, width - 3 : width + block_size], past_key_values=draft_cache,
                       use_cache=True)

    timings["draft_body"] = median_ms(draft_body, repeats)
    slot_hidden = draft_body()[:, 1:]
    timings["lm_head_all"] = median_ms(lambda: lm_head(slot_hidden), repeats)
    timings["lm_head_1"] = median_ms(lambda: lm_head(slot_hidden[:, :1]), repeats)
    pruned = DraftVocabulary(lm_head, most_frequent(head.unigram_counts, 8192))
    timings["lm_head_all_vocab_8192"] = median_ms(lambda: pruned(slot_hidden), repeats)
    logits = lm_head(slot_hidden)
    state = head.initial_state(1)
    anchor = block[:, 0]
    timings["head_step"] = median_ms(lambda: head.step(anchor, state), repeats)
    head_logits, _ = head.step(anchor, state)
    log_prior = head.log_prior()
    greedy = Warping()
    timings["fuse_and_choose"] = median_ms(
        lambda: choose(fuse_logits(logits[:, 0], head_logits, log_prior, 0.7, 0.3), greedy), repeats)
    timings["choose_dflash_block"] = median_ms(lambda: choose(logits, greedy), repeats)
    tokens = torch.cat([input_ids, torch.zeros((1, 64 + block_size), dtype=torch.long)], dim=1)
    copy_weights = CopySettings(DEFAULT_NGRAM).weights()
    timings["copy_build"] = median_ms(lambda: CopyChain(tokens, width - 1, copy_weights), repeats)
    chain = CopyChain(tokens, width - 1, copy_weights)

    def copy_position():
        candidate = chain.candidate()
        chain.vote(logits[:, 0].float(), candidate)
        chain.extend(candidate[0][:, 0])

    timings["copy_position"] = median_ms(copy_position, repeats)
    verify_logits, _ = verify_step(target, input_ids[:, -block_size:], positions[:, width : width + block_size],
                                   cache, cache_arg)
    drafts = logits.argmax(-1)
    timings["verify_greedy"] = median_ms(lambda: verify_greedy(drafts, verify_logits), repeats)
    tokens_out, accepted = verify_greedy(drafts, verify_logits)
    index, budget, stops = torch.arange(block_size), torch.tensor([1000]), torch.tensor([2])
    # The loop's commit: the counts and stops on the device, then its one host transfer of both.
    timings["commit"] = median_ms(lambda: to_host(torch.stack(
        [n.long() for n in committed(tokens_out, accepted, stops, index, budget)])), repeats)
    timings["context_features"] = median_ms(lambda: context_features(hidden, drafter.config.target_layer_ids), repeats)
    return timings


def sum_of_parts(timings: dict, block_size: int, head: bool, copy: bool, pruned: bool, verify_width: int) -> float:
    """What a block should cost from its parts: the draft (body, LM head, per-position work) and the verify."""
    k = block_size - 1
    lm = timings["lm_head_all_vocab_8192" if pruned else "lm_head_all"]
    per_position = (timings["head_step"] + timings["fuse_and_choose"] if head else 0.0)
    per_position += timings["copy_position"] if copy else 0.0
    choice = 0.0 if head or copy else timings["choose_dflash_block"]
    draft = timings["draft_body"] + lm + k * per_position + choice + (timings["copy_build"] if copy else 0.0)
    return (draft + timings[f"verify_{verify_width}"] + timings["verify_greedy"] + timings["commit"]
            + timings["context_features"])


def loop_rows(target, drafter, head, tokenizer, input_ids, new_tokens: int, policies: list[str]) -> list[dict]:
    """Each row kind through ``generate``: decode milliseconds per block and per token, tau."""
    vocab = most_frequent(head.unigram_counts, 8192)
    kinds = [("target", None, 0, None, 1), ("DFlash", None, 0, None, None), ("DFlash + copy", None, 4, None, None),
             ("DeLS", head, 0, None, None), ("DeLS + copy", head, 4, None, None),
             ("DeLS + copy, vocab 8192", head, 4, vocab, None)]
    rows = []
    for name, row_head, copy_ngram, draft_vocab, block_size in kinds:
        generator = DeLSGenerator(target, drafter, row_head, tokenizer, copy_ngram=copy_ngram, draft_vocab=draft_vocab)
        for policy in (policies if block_size is None else ["fixed"]):
            generator.generate(input_ids, max_new_tokens=8, do_sample=False, block_size=block_size, policy=policy)
            out = generator.generate(input_ids, max_new_tokens=new_tokens, do_sample=False, block_size=block_size,
                                     policy=policy, return_dict_in_generate=True)
            blocks = len(out.acceptance_lengths)
            rows.append({"row": name, "policy": policy, "head": row_head is not None, "copy": copy_ngram > 0,
                         "pruned": draft_vocab is not None, "tau": out.tau, "blocks": blocks,
                         "ms_per_block": out.decode_seconds * 1e3 / blocks,
                         "ms_per_token": out.decode_seconds * 1e3 / max(out.num_new_tokens - 1, 1),
                         "chosen_drafts": out.policy_summary["chosen_drafts"]})
    return rows


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--threads", type=int, default=1)
    parser.add_argument("--prompt-index", type=int, default=0, help="which HumanEval prompt")
    parser.add_argument("--new-tokens", type=int, default=128)
    parser.add_argument("--repeats", type=int, default=15)
    parser.add_argument("--policies", nargs="+", default=["fixed", "cost-aware"])
    parser.add_argument("--json", type=Path, help="also write the figures here")
    args = parser.parse_args()
    torch.set_num_threads(args.threads)

    directory, gguf = smollm2_location()
    tokenizer = load_tokenizer(directory, **gguf)
    target = load_target(directory, torch.float32, **gguf).eval()
    drafter = load_dflash(str(SMOLLM2_DFLASH), dtype=torch.float32)
    head = load_head(str(SMOLLM2_HEADS["gru"])).float()  # the head of the committed profiles
    prompt = load_prompts("humaneval")[args.prompt_index]
    input_ids = encode_chat(tokenizer, prompt.messages, "cpu")
    block_size = drafter.config.block_size

    timings = parts(target, drafter, head, input_ids, args.repeats)
    out = target.generate(input_ids, max_new_tokens=8, do_sample=False)  # warm-up
    started = time.perf_counter()
    out = target.generate(input_ids, max_new_tokens=args.new_tokens, min_new_tokens=args.new_tokens, do_sample=False)
    generate_ms = (time.perf_counter() - started) * 1e3 / (out.shape[1] - input_ids.shape[1])
    timings["target_generate_per_token"] = generate_ms
    print(f"{args.threads} thread(s), context {input_ids.shape[1]} tokens; target.generate {generate_ms:.1f} ms/token")
    for name, ms in timings.items():
        print(f"  {name:28s} {ms:7.2f} ms  {ms / generate_ms:5.2f} target steps")

    rows = loop_rows(target, drafter, head, tokenizer, input_ids, args.new_tokens, args.policies)
    for row in rows:
        if row["row"] == "target":
            row["parts_ms"] = timings["verify_1"] + timings["verify_greedy"] + timings["commit"]
        else:
            row["parts_ms"] = sum_of_parts(timings, block_size, row["head"], row["copy"], row["pruned"], block_size)
        row["unaccounted_ms"] = row["ms_per_block"] - row["parts_ms"] if row["policy"] == "fixed" else None
        row["speedup_vs_generate"] = generate_ms / row["ms_per_token"]
        left = ("" if row["unaccounted_ms"] is None
                else f", parts {row['parts_ms']:.1f}, left {row['unaccounted_ms']:.1f}")
        print(f"{row['row']:26s} {row['policy']:10s} tau {row['tau']:.2f}  {row['ms_per_block']:6.1f} ms/block"
              f"{left}; {row['ms_per_token']:5.1f} ms/token = {row['speedup_vs_generate']:.2f}x of target.generate")
    if args.json:
        args.json.parent.mkdir(parents=True, exist_ok=True)
        args.json.write_text(json.dumps({"threads": args.threads, "context_tokens": input_ids.shape[1],
                                         "new_tokens": args.new_tokens, "parts_ms": timings, "rows": rows},
                                        indent=1))


if __name__ == "__main__":
    main()
