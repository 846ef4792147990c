"""Choose fusion weights (alpha, beta) and the copy expert's (n, gamma) by replaying greedy decoding on target
continuations.

Greedy speculative decoding commits the target's own greedy continuation whatever is drafted, so the
acceptance length of every block follows from that continuation alone. ``replay_acceptance`` computes the
target's hidden states once per sequence, then walks the blocks exactly as the loop does (anchor = last
committed token, context = the features of everything before it) and counts the drafts that match the
continuation, so a grid of (alpha, beta) costs one target forward per sequence, not one generation per
grid point. Drafter outputs are cached per anchor: only the head and the copy expert re-run for each grid
point. The result equals the loop's own ``acceptance_lengths`` up to float rounding of near-ties (tested).
"""

import argparse
import itertools
import json
import random
import sys

import torch
from tqdm.auto import tqdm

from ..arguments import json_object
from ..copy_expert import DEFAULT_GAMMA, CopyChain, CopySettings
from ..errors import BenchArgumentError
from ..files import save_pretrained_atomic, write_text_atomic
from ..fusion import fusion_weights
from ..generation.drafting import context_features, propose
from ..heads.context import head_start
from ..sampling import Warping
from ..verify import accepted_prefix
from .prompts import VALIDATION_SETS, encode_chat, validation_prompts


@torch.inference_mode()
def replay_acceptance(
    target, drafter, head, sequence: torch.Tensor, prompt_len: int, alpha, beta,
    block_size: int | None = None, pure_prefix_len: int = 1, _cache: dict | None = None,
    copy_weights: torch.Tensor | None = None,
) -> list[int]:
    """Acceptance lengths of greedy DeLS (``head=None``: DFlash only) decoding ``sequence [1, N]``, whose
    tokens after ``prompt_len`` are the target's greedy continuation. ``copy_weights`` turns on the copy
    expert, as in the loops. ``_cache`` memoizes drafter logits per anchor across calls on the same sequence."""
    block_size = block_size or drafter.config.block_size
    cache = _cache if _cache is not None else {}
    if "features" not in cache:
        out = target(input_ids=sequence, output_hidden_states=True)
        cache["features"] = context_features(out.hidden_states, drafter.config.target_layer_ids)
    features = cache["features"]
    embed, lm_head = target.get_input_embeddings(), target.get_output_embeddings()
    mask_id = drafter.config.mask_token_id
    alpha_k, beta_k = fusion_weights(alpha, beta, pure_prefix_len, block_size - 1, device=sequence.device)
    log_prior = head.log_prior().to(sequence.device) if head is not None else None
    total = sequence.shape[1]
    lengths, start = [], prompt_len  # start: the anchor, i.e. the token the prefill committed
    while start + 1 < total:
        if start not in cache:
            block = torch.full((1, block_size), mask_id, dtype=torch.long, device=sequence.device)
            block[0, 0] = sequence[0, start]
            hidden = drafter(target_hidden=features[:, :start], noise_embedding=embed(block),
                             position_ids=torch.arange(start + block_size, device=sequence.device).unsqueeze(0))
            cache[start] = lm_head(hidden[:, 1:])
        copy = None if copy_weights is None else CopyChain(sequence, start, copy_weights)
        drafts, _ = propose(cache[start], sequence[:, start], Warping(), None, head, log_prior, alpha_k, beta_k,
                            copy=copy, head_state=None if head is None else head_start(head, sequence, start))
        truth = sequence[0, start + 1 : start + block_size]
        matches = accepted_prefix(drafts[0, : truth.shape[0]], truth).item()
        committed = min(matches + 1, total - start - 1)
        lengths.append(committed)
        start += committed
    return lengths


class Replay:
    """Greedy replay of one drafter over fixed validation sequences, with the target's features and the drafter's
    logits cached per sequence, so that each fusion setting costs only the head and copy-expert loops."""

    def __init__(self, target, drafter, sequences: list[tuple[torch.Tensor, int]], block_size: int | None = None):
        self.target, self.drafter, self.sequences, self.block_size = target, drafter, sequences, block_size
        self.caches = [{} for _ in sequences]

    def taus(self, head, alpha, beta, pure_prefix_len: int = 1, copy_weights: torch.Tensor | None = None
             ) -> list[float]:
        """The mean acceptance length of each sequence (``head=None``: DFlash only)."""
        taus = []
        for (ids, prompt_len), cache in zip(self.sequences, self.caches, strict=True):
            lengths = replay_acceptance(self.target, self.drafter, head, ids, prompt_len, alpha, beta, self.block_size,
                                        pure_prefix_len, cache, copy_weights)
            taus.append(sum(lengths) / max(len(lengths), 1))
        return taus

    def tau(self, head, alpha, beta, pure_prefix_len: int = 1, copy_weights: torch.Tensor | None = None) -> float:
        """Mean over sequences of the per-sequence mean acceptance length (``head=None``: DFlash only)."""
        taus = self.taus(head, alpha, beta, pure_prefix_len, copy_weights)
        return sum(taus) / len(taus)


def tune_fusion(target, drafter, head, sequences: list[tuple[torch.Tensor, int]], alphas, betas,
                block_size: int | None = None, pure_prefix_lens=(1,), baseline: bool = False,
                copies=((0, 0.0),), replay: Replay | None = None) -> list[dict]:
    """tau (mean over sequences of the per-sequence mean acceptance length) for every (alpha, beta,
    pure_prefix_len, copy setting), best first. ``copies`` are ``(copy_ngram, copy_gamma)`` pairs, ``(0, ...)``
    meaning no copy expert. ``head=None`` tunes the copy expert over DFlash alone: alpha, beta and
    pure_prefix_len are then None. ``sequences`` are ``(ids [1, N], prompt_len)`` pairs of prompts with target
    greedy continuations, taken from a validation slice (never the benchmark's held-out slice). ``baseline``
    appends DFlash alone as ``{"alpha": None, "beta": None, "pure_prefix_len": None, "copy_ngram": 0,
    "copy_gamma": 0.0, "tau"}``, replayed from the same target features and drafter outputs. ``replay``: the
    drafter's ``Replay`` over ``sequences``, to share its caches with later calls."""
    replay = replay or Replay(target, drafter, sequences, block_size)
    copies = [(n, g, CopySettings(n, g).weights(target.device)) for n, g in copies]  # validated before any work
    fusions = itertools.product(alphas, betas, pure_prefix_lens) if head is not None else [(None, None, None)]
    grid = list(itertools.product(fusions, copies))
    results = [{"alpha": a, "beta": b, "pure_prefix_len": pure, "copy_ngram": n, "copy_gamma": g,
                "tau": replay.tau(head, a or 0.0, b or 0.0, 1 if pure is None else pure, w)}
               for (a, b, pure), (n, g, w) in tqdm(grid, desc="grid", unit="point", disable=len(grid) < 2)]
    results.sort(key=lambda r: -r["tau"])
    if baseline:
        results.append({"alpha": None, "beta": None, "pure_prefix_len": None, "copy_ngram": 0, "copy_gamma": 0.0,
                        "tau": replay.tau(None, 0.0, 0.0)})
    return results


def tune_per_position(replays: list[Replay], head, start: dict, alphas, betas, num_draft_positions: int,
                      copy_weights: torch.Tensor | None = None) -> dict:
    """Refine the scalar best ``start`` (``alpha``, ``beta``, ``pure_prefix_len``) into one (alpha, beta) per
    fused position by coordinate ascent, position by position from the first, for the mean tau over ``replays``.

    A position's weights only matter in blocks whose earlier drafts were all accepted, so going left to right
    tunes each position for the blocks that reach it. A change is kept only if it raises tau: ties keep the
    scalar. Returns ``{"alpha": [..], "beta": [..], "pure_prefix_len", "tau", "scalar_tau"}``.
    """
    pure = start["pure_prefix_len"]
    fused = num_draft_positions - min(pure, num_draft_positions)
    schedule = {"alpha": [start["alpha"]] * fused, "beta": [start["beta"]] * fused}

    def tau(alpha, beta) -> float:
        return sum(r.tau(head, alpha, beta, pure, copy_weights) for r in replays) / len(replays)

    best = scalar = tau(schedule["alpha"], schedule["beta"])
    with tqdm(total=fused * len(alphas) * len(betas), desc="per position", unit="point") as bar:
        for position in range(fused):
            for a, b in itertools.product(alphas, betas):
                alpha, beta = list(schedule["alpha"]), list(schedule["beta"])
                alpha[position], beta[position] = a, b
                value = tau(alpha, beta)
                if value > best:
                    best, schedule = value, {"alpha": alpha, "beta": beta}
                bar.update(1)
    return schedule | {"pure_prefix_len": pure, "tau": best, "scalar_tau": scalar}


# -- dels-hub tune-fusion --------------------------------------------------------------------------------------


def validation_sequences(
    target, tokenizer, sets: list[str], num_prompts: int, max_new_tokens: int, seed: int = 0,
    max_prompt_tokens: int = 1024,
) -> tuple[list[tuple], list[str]]:
    """``(ids [1, N], prompt_len)`` of seeded *validation* prompts (data that is neither trained on nor
    benchmarked) with the target's greedy continuations, drawn from ``sets`` in turn so that every leading slice
    mixes them evenly, and the set each came from. Prompts over ``max_prompt_tokens`` are passed over: they cost
    a long prefill and add no blocks."""

    def seeded_order(name: str):
        prompts = validation_prompts(name)
        for index in random.Random(seed).sample(range(len(prompts)), len(prompts)):
            yield name, prompts[index]

    queues = [seeded_order(name) for name in sets]
    sequences, origins = [], []
    with tqdm(total=num_prompts, desc="target continuations", unit="prompt") as bar:
        while len(sequences) < num_prompts and queues:
            queue = queues[len(sequences) % len(queues)]
            for name, prompt in queue:
                input_ids = encode_chat(tokenizer, prompt.messages, target.device)
                if input_ids.shape[1] > max_prompt_tokens:
                    continue
                out = target.generate(input_ids, max_new_tokens=max_new_tokens, do_sample=False)
                if out.shape[1] - input_ids.shape[1] >= 2:  # at least one block to replay
                    sequences.append((out, input_ids.shape[1]))
                    origins.append(name)
                    bar.update(1)
                    break
            else:
                queues.remove(queue)  # this set has no prompt left: the others go on
    return sequences, origins


def add_tune_fusion_arguments(parser: argparse.ArgumentParser) -> argparse.ArgumentParser:
    parser.add_argument("--target", required=True, help="target model: Hub id or local path")
    parser.add_argument("--target-kwargs", type=json_object, default={}, metavar="JSON",
                        help="extra from_pretrained arguments of the target as JSON")
    parser.add_argument("--dflash", action="append", required=True, metavar="DFLASH",
                        help="drafter(s) the head will be fused with; repeat to tune for their mean tau")
    parser.add_argument("--head", default=None,
                        help="the local head to tune (path); without one, only the copy expert is tuned over DFlash")
    parser.add_argument("--validation", nargs="+", choices=VALIDATION_SETS, default=list(VALIDATION_SETS),
                        metavar="SET", help="validation sets to draw prompts from in turn: sharegpt (ShareGPT's "
                        "validation slice), code (HumanEval-shaped problems from the standard library's validation "
                        "files) (default: both)")
    parser.add_argument("--num-prompts", type=int, default=16,
                        help="validation prompts to tune on, over all sets (default: 16)")
    parser.add_argument("--max-new-tokens", type=int, default=128, help="greedy continuation length (default: 128)")
    parser.add_argument("--alphas", type=float, nargs="+", default=[0.1, 0.2, 0.3, 0.5, 0.7, 1.0])
    parser.add_argument("--betas", type=float, nargs="+", default=[0.0, 0.1, 0.2, 0.3, 0.5])
    parser.add_argument("--pure-prefix-lens", type=int, nargs="+", default=[1], metavar="P",
                        help="leading draft positions that take DFlash alone, to try (default: 1; 0 lets the head "
                             "act on the first draft too)")
    parser.add_argument("--per-position", action="store_true",
                        help="then refine the best (alpha, beta) into one pair per fused position, by coordinate "
                             "ascent over the same alphas and betas (needs --head)")
    parser.add_argument("--copy-ngrams", type=int, nargs="+", default=[0], metavar="N",
                        help="copy expert longest match lengths to try; 0 is off (default: 0)")
    parser.add_argument("--copy-gammas", type=float, nargs="+", default=[DEFAULT_GAMMA], metavar="G",
                        help=f"copy expert gamma at a full-length match to try (default: {DEFAULT_GAMMA:g})")
    parser.add_argument("--check-prompts", type=int, default=0, metavar="M",
                        help="M more validation prompts, disjoint from the tuning ones, on which the chosen weights "
                             "are replayed again: an out-of-sample check of what tuning found (default: 0)")
    parser.add_argument("--seed", type=int, default=0, help="which validation prompts (default: 0)")
    parser.add_argument("--write", action="store_true",
                        help="store the best (alpha, beta, pure_prefix_len) as the head's defaults in its "
                             "config.json (per position with --per-position, unless --check-prompts finds the "
                             "scalar weights ahead out of sample; the copy expert's settings are decoding "
                             "settings: they are printed, not stored in the head)")
    parser.add_argument("--json", default=None, help="also write the whole grid here")
    return parser


def checked_settings(head, best: dict, per_position: dict | None, copy_weights: torch.Tensor | None) -> dict:
    """name -> ``Replay.taus`` arguments of what the out-of-sample check replays: DFlash alone, the best grid point
    and, if tuned, the per-position weights."""
    chosen = {"dflash_only": (None, 0.0, 0.0, 1, None),  # without a head, alpha, beta and the prefix are None
              "best": (head, best["alpha"] or 0.0, best["beta"] or 0.0,
                       1 if best["pure_prefix_len"] is None else best["pure_prefix_len"], copy_weights)}
    if per_position is not None:
        chosen["per_position"] = (head, per_position["alpha"], per_position["beta"], per_position["pure_prefix_len"],
                                  copy_weights)
    return chosen


def out_of_sample(target, drafters, sequences, origins: list[str], chosen: dict
                  ) -> tuple[dict[str, float], dict[str, dict[str, float]]]:
    """Mean tau over ``drafters`` on ``sequences`` (not used for tuning) of each setting in ``chosen`` (see
    ``checked_settings``): whether what tuning found holds on other prompts. Also the same per validation set
    (``origins``: the set of each sequence)."""
    replays = [Replay(target, drafter, sequences) for drafter in drafters]
    # per sequence, mean over drafters
    taus = {name: [sum(t) / len(t) for t in zip(*(r.taus(*setting) for r in replays))]
            for name, setting in chosen.items()}
    overall = {name: sum(values) / len(values) for name, values in taus.items()}
    by_set = {}  # set -> setting -> tau
    for name, values in taus.items():
        for origin, tau in means_by_set(values, origins).items():
            by_set.setdefault(origin, {})[name] = tau
    return overall, by_set


def means_by_set(taus: list[float], origins: list[str]) -> dict[str, float]:
    """The mean of ``taus`` over the sequences of each validation set (``origins``: the set of each)."""
    return {origin: sum(t for t, o in zip(taus, origins, strict=True) if o == origin) / origins.count(origin)
            for origin in dict.fromkeys(origins)}


def copy_grid(ngrams: list[int], gammas: list[float]) -> list[tuple[int, float]]:
    """``(n, gamma)`` pairs to try; n = 0 (off) appears once, whatever the gammas."""
    grid = [(n, g) for n in dict.fromkeys(ngrams) for g in (gammas if n else [0.0])]
    for n, g in grid:
        CopySettings(n, g)  # a bad value fails here, before any model is loaded
    return grid


def tune_fusion_main(args: argparse.Namespace) -> int:
    """Grid-search (alpha, beta) and the copy expert's (n, gamma) on validation continuations; print the ranking;
    optionally save the best (alpha, beta) into the head."""
    from ..loading import load_dflash, load_head, load_target, tokenizer_for

    checks = [(args.num_prompts >= 1, f"--num-prompts must be >= 1, got {args.num_prompts}"),
              (args.max_new_tokens >= 2, f"--max-new-tokens must be >= 2, got {args.max_new_tokens}"),
              (args.check_prompts >= 0, f"--check-prompts must be >= 0, got {args.check_prompts}"),
              (all(a >= 0 for a in args.alphas + args.betas), "alphas and betas must be >= 0"),
              (all(p >= 0 for p in args.pure_prefix_lens),
               f"--pure-prefix-lens must be >= 0, got {args.pure_prefix_lens}"),
              (args.head is not None or not args.per_position, "--per-position tunes a head's weights: give --head"),
              (args.head is not None or any(args.copy_ngrams),
               "nothing to tune: give --head (alpha, beta) or --copy-ngrams above 0 (the copy expert)"),
              (args.head is not None or not args.write, "--write stores alpha and beta in a head: give --head")]
    for ok, message in checks:
        if not ok:
            raise BenchArgumentError(message)
    copies = copy_grid(args.copy_ngrams, args.copy_gammas)
    kwargs = args.target_kwargs
    tokenizer = tokenizer_for(args.target, None, **kwargs)
    target = load_target(args.target, None, **kwargs)
    head = load_head(args.head).to(target.dtype).eval() if args.head is not None else None
    drafters = [load_dflash(d, target.dtype).eval() for d in args.dflash]
    drawn, origins = validation_sequences(target, tokenizer, list(dict.fromkeys(args.validation)),
                                          args.num_prompts + args.check_prompts, args.max_new_tokens, args.seed)
    sequences, check_sequences = drawn[: args.num_prompts], drawn[args.num_prompts :]
    replays = [Replay(target, drafter, sequences) for drafter in drafters]
    grids = {}
    for name, drafter, replay in tqdm(list(zip(args.dflash, drafters, replays)), desc="drafters", unit="drafter"):
        grids[name] = tune_fusion(target, drafter, head, sequences, args.alphas, args.betas, baseline=True,
                                  copies=copies, pure_prefix_lens=args.pure_prefix_lens, replay=replay)
    keys = ("alpha", "beta", "pure_prefix_len", "copy_ngram", "copy_gamma")
    table, baseline = {}, {}  # (alpha, beta, pure_prefix_len, n, gamma) -> {drafter: tau}; DFlash alone apart
    for name, grid in grids.items():
        baseline[name] = grid[-1]["tau"]
        for row in grid[:-1]:
            table.setdefault(tuple(row[key] for key in keys), {})[name] = row["tau"]
    ranked = sorted(table.items(), key=lambda item: -sum(item[1].values()) / len(item[1]))
    print("alpha  beta   pure copy_n copy_gamma  " + "  ".join(f"tau[{n}]" for n in args.dflash))
    print("DFlash only                           " + "  ".join(f"{baseline[n]:.3f}" for n in args.dflash))
    for (alpha, beta, pure, ngram, gamma), taus in ranked[:10]:
        fusion = "-      -      -   " if alpha is None else f"{alpha:<6g} {beta:<6g} {pure:<4d}"
        print(f"{fusion} {ngram:<6d} {gamma:<10g}  " + "  ".join(f"{taus[n]:.3f}" for n in args.dflash))
    best = dict(zip(keys, ranked[0][0]))
    weights = CopySettings(best["copy_ngram"], best["copy_gamma"]).weights(target.device)
    per_position = None
    if args.per_position:
        per_position = tune_per_position(replays, head, best, args.alphas, args.betas,
                                         min(d.config.block_size for d in drafters) - 1, weights)
        print(f"per position: alpha {per_position['alpha']}, beta {per_position['beta']}: tau "
              f"{per_position['tau']:.3f} (scalar {per_position['scalar_tau']:.3f}, mean over drafters)")
    check_origins = origins[args.num_prompts :]
    check, check_by_set = (out_of_sample(target, drafters, check_sequences, check_origins,
                                         checked_settings(head, best, per_position, weights))
                           if check_sequences else (None, None))
    if check:
        print("out of sample (" + f"{len(check_sequences)} other validation prompts, mean over drafters): "
              + ", ".join(f"{name} {tau:.3f}" for name, tau in check.items()))
        for origin, taus in check_by_set.items():
            print(f"  {origin} ({check_origins.count(origin)} prompts): "
                  + ", ".join(f"{name} {tau:.3f}" for name, tau in taus.items()))
    if args.json:
        write_text_atomic(args.json, json.dumps({"sequences": len(sequences), "max_new_tokens": args.max_new_tokens,
                                                 "seed": args.seed, "best": best, "per_position": per_position,
                                                 "check_sequences": len(check_sequences), "check": check,
                                                 "validation": origins, "check_by_set": check_by_set,
                                                 "grids": grids}, indent=1))
    if best["copy_ngram"]:
        print(f"best copy expert: --copy-ngram {best['copy_ngram']} --copy-gamma {best['copy_gamma']:g} (decoding "
              "settings of generate and bench)", file=sys.stderr)
    if args.write:
        from transformers import AutoConfig  # dels_hub registers both head configs: a GRU's and an n-gram's

        # A weight per position is more weights fitted to the same prompts: with a check, it must win there too.
        wins_out_of_sample = check is None or check["per_position"] > check["best"]
        chosen = per_position if per_position and wins_out_of_sample else best
        config = AutoConfig.from_pretrained(args.head)
        config.alpha, config.beta, config.pure_prefix_len = chosen["alpha"], chosen["beta"], chosen["pure_prefix_len"]
        save_pretrained_atomic(config, args.head)
        print(f"wrote alpha={config.alpha}, beta={config.beta}, pure_prefix_len={config.pure_prefix_len} to "
              f"{args.head}/config.json", file=sys.stderr)
    return 0
