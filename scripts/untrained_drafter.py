"""Write a randomly initialised drafter with the staged SmolLM2 drafter's shape: the "speculation that does not pay"
case of the cost-aware policy's bench (it must switch itself off and run at the target's speed).

    python scripts/untrained_drafter.py runs/untrained-b8
"""

import argparse

import torch

from dels_hub import DFlashConfig, DFlashDraftModel
from dels_hub.proving_ground import SMOLLM2_DFLASH


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("output", help="folder to write (z-lab format: config.json and model.safetensors)")
    parser.add_argument("--seed", type=int, default=0)
    args = parser.parse_args()
    torch.manual_seed(args.seed)
    config = DFlashConfig.from_pretrained(SMOLLM2_DFLASH)
    DFlashDraftModel(config).save_pretrained(args.output)
    print(f"wrote an untrained {config.num_hidden_layers}-layer drafter (seed {args.seed}) to {args.output}")


if __name__ == "__main__":
    main()
