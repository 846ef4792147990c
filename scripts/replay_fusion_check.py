"""Replay the out-of-sample check of a `dels-hub tune-fusion --json` run again, for named fusion settings.

    python scripts/replay_fusion_check.py GRID_JSON --target T [--target-kwargs JSON] --dflash D --head H \
        [--validation SET ..] [--setting NAME=ALPHA,BETA,PURE ...] [--json OUT]

The check prompts are drawn as tune-fusion drew them (the run's seed, counts and validation sets; give
``--validation`` as that run did), and then replayed with DFlash alone, the run's best (alpha, beta,
pure_prefix_len), its per-position weights if it tuned them, and each ``--setting``. Written because
tune-fusion's check replayed a best ``pure_prefix_len`` of 0 as 1 before the fix in the commit that added this
script: run it on a grid written before that to get the check the run meant.
"""

import argparse
import json
from pathlib import Path

from dels_hub.arguments import json_object
from dels_hub.bench.fusion_tuning import checked_settings, out_of_sample, validation_sequences
from dels_hub.bench.prompts import VALIDATION_SETS
from dels_hub.copy_expert import CopySettings
from dels_hub.files import write_text_atomic
from dels_hub.loading import load_dflash, load_head, load_target, tokenizer_for


def setting(text: str) -> tuple[str, tuple[float, float, int]]:
    name, values = text.split("=", 1)
    alpha, beta, pure = values.split(",")
    return name, (float(alpha), float(beta), int(pure))


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("grid", help="the tune-fusion --json file")
    parser.add_argument("--target", required=True)
    parser.add_argument("--target-kwargs", type=json_object, default={})
    parser.add_argument("--dflash", required=True)
    parser.add_argument("--head", required=True)
    parser.add_argument("--validation", nargs="+", choices=VALIDATION_SETS, default=["sharegpt"])
    parser.add_argument("--setting", nargs="+", type=setting, default=[], metavar="NAME=ALPHA,BETA,PURE")
    parser.add_argument("--json", default=None)
    args = parser.parse_args()
    grid = json.loads(Path(args.grid).read_text())
    tokenizer = tokenizer_for(args.target, None, **args.target_kwargs)
    target = load_target(args.target, None, **args.target_kwargs)
    head = load_head(args.head).to(target.dtype).eval()
    drafter = load_dflash(args.dflash, target.dtype).eval()
    best = grid["best"]
    copy_weights = CopySettings(best.get("copy_ngram", 0), best.get("copy_gamma", 0.0)).weights(target.device)
    chosen = checked_settings(head, best, grid.get("per_position"), copy_weights)
    chosen |= {name: (head, *values, copy_weights) for name, values in args.setting}
    drawn, origins = validation_sequences(target, tokenizer, args.validation,
                                          grid["sequences"] + grid["check_sequences"], grid["max_new_tokens"],
                                          grid["seed"])
    overall, by_set = out_of_sample(target, [drafter], drawn[grid["sequences"] :], origins[grid["sequences"] :],
                                    chosen)
    check = {}
    for name, (_, alpha, beta, pure, _) in chosen.items():
        check[name] = {"alpha": alpha, "beta": beta, "pure_prefix_len": pure, "tau": overall[name],
                       "by_set": {origin: taus[name] for origin, taus in by_set.items()}}
        print(f"{name}: alpha {alpha}, beta {beta}, pure_prefix_len {pure}: tau {overall[name]:.3f} ("
              + ", ".join(f"{origin} {taus[name]:.3f}" for origin, taus in by_set.items()) + ")")
    if args.json:
        write_text_atomic(args.json, json.dumps({"grid": args.grid, "check_sequences": grid["check_sequences"],
                                                 "check": check}, indent=1))


if __name__ == "__main__":
    main()
