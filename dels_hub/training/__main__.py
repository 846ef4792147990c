"""``python -m dels_hub.training train-head|train-dflash|regenerate ...``: the training commands without the CLI, so
that ``accelerate launch -m dels_hub.training train-dflash ...`` runs them on several processes."""

import argparse

from .dflash import add_train_dflash_arguments, train_dflash_main
from .head import add_train_head_arguments, train_head_main
from .regenerate import add_regenerate_arguments, regenerate_main


def main(argv=None) -> None:
    parser = argparse.ArgumentParser(prog="python -m dels_hub.training")
    commands = parser.add_subparsers(dest="command", required=True)
    add_train_head_arguments(commands.add_parser("train-head", help="train a DeLS local head"))
    add_train_dflash_arguments(commands.add_parser("train-dflash", help="train a DFlash drafter"))
    add_regenerate_arguments(commands.add_parser("regenerate", help="rewrite assistant turns with the target"))
    args = parser.parse_args(argv)
    mains = {"train-head": train_head_main, "train-dflash": train_dflash_main, "regenerate": regenerate_main}
    mains[args.command](args)


if __name__ == "__main__":
    main()
