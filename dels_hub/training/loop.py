"""The one training loop, shared by drafters and heads.

A *task* (``HeadTask``, ``DFlashTask``) supplies the module that turns a batch into a loss, the batches, and
the final save; this loop owns everything else: seeding, the optimizer and its cosine schedule, gradient
accumulation, ``accelerate`` (several processes, bf16 autocast), the tqdm bar, periodic evaluation of
per-position accuracy, and resumable checkpoints.

What the run may do with its output folder (resume, refuse, overwrite) is decided before anything loads, by
``run_folder.claim_output_folder``; ``train`` is given the checkpoint it chose.

Resumption is exact: a step's batch is a pure function of (seed, step, micro-step, rank) (see
``data.batch_indices``), so restoring the weights, the optimizer and the task state of step s and running
on yields the same model as a run that was never interrupted, with no step lost or repeated.
"""

import contextlib
import json
import math
import os
import shutil
import time
from copy import deepcopy
from pathlib import Path

import torch
from safetensors import SafetensorError, safe_open
from safetensors.torch import save_file
from tqdm.auto import tqdm

from ..errors import DamagedFileError
from ..files import write_text_atomic
from .data import batch_indices, step_generator
from .losses import implied_tau
from .recipe import config_dict
from .run_folder import CHECKPOINTS, CONFIG_FILE, LOG_FILE, checkpoints


def learning_rate(step: int, config) -> float:
    """Linear warm-up then cosine decay to ``lr * min_lr_ratio``."""
    warmup = int(config.warmup_ratio * config.max_steps)
    # 1) warm-up from lr / warmup to lr
    if step < warmup:
        return config.lr * (step + 1) / warmup
    # 2) cosine from lr down to the floor over the remaining steps
    progress = (step - warmup) / max(1, config.max_steps - warmup)
    floor = config.lr * config.min_lr_ratio
    return floor + 0.5 * (config.lr - floor) * (1 + math.cos(math.pi * min(progress, 1.0)))


def autocast(config, accelerator):
    """bf16 autocast when ``precision = "bf16"`` (master weights stay fp32). Done here rather than through
    ``Accelerator(mixed_precision=...)``, whose process-wide state cannot change between two runs in one process."""
    return torch.autocast(accelerator.device.type, dtype=torch.bfloat16, enabled=config.precision == "bf16")


def train(config, task, accelerator, checkpoint: Path | None = None) -> dict:
    """Run ``task`` to ``config.max_steps`` optimizer steps, from ``checkpoint`` if given (chosen by
    ``claim_output_folder``); returns the last evaluation."""
    out = Path(config.output_dir)
    main = accelerator.is_main_process
    rank, world = accelerator.process_index, accelerator.num_processes

    params = [p for p in task.model.parameters() if p.requires_grad]
    optimizer = torch.optim.AdamW(params, lr=config.lr, betas=(0.9, 0.95), weight_decay=config.weight_decay)
    step, tokens_before = 0, 0
    if checkpoint is not None:
        state = read_checkpoint(checkpoint)
        task.trainable.load_state_dict(state["model"])
        optimizer.load_state_dict(state["optimizer"])
        task.load_state_dict(state["task"])
        step, tokens_before = state["step"], state["tokens_seen"]
    if main:
        out.mkdir(parents=True, exist_ok=True)
        if config.overwrite:  # asked for: the previous run's checkpoints must not be resumed or pruned into this one
            shutil.rmtree(out / CHECKPOINTS, ignore_errors=True)
        # the folder names its run from the first step on (claim_output_folder reads it)
        write_text_atomic(out / CONFIG_FILE, json.dumps(config_dict(config), indent=2, default=str) + "\n")
        # steps after the checkpoint will be redone, not logged twice (a fresh start redoes everything)
        truncate_log(out / LOG_FILE, step if checkpoint is not None else -1)
        if checkpoint is not None:
            tqdm.write(f"resuming from {checkpoint} at step {step}")
    model, optimizer = accelerator.prepare(task.model, optimizer)
    model.train()

    bar = tqdm(total=config.max_steps, initial=step, disable=not main, dynamic_ncols=True, desc=task.name)
    loss_sum, steps_since, tokens, since = torch.zeros((), device=accelerator.device), 0, 0, time.perf_counter()
    tokens_here = 0  # tokens of the training sequences this process read since the start (or resume)

    def tokens_seen() -> int:
        """Training tokens read so far by all processes, since step 0 (a collective: every process calls it)."""
        here = torch.tensor(tokens_here, dtype=torch.int64, device=accelerator.device)  # exact past 2**24
        return tokens_before + int(accelerator.reduce(here, reduction="sum").item())

    last_eval: dict = {}
    if step == 0 and config.eval_every:  # the learning curve's first point: the initial (or init_from) weights
        initial = evaluate(model, task, config, accelerator, step, 0)
        if main:
            append_log(out / LOG_FILE, initial)
            bar.write(format_eval(initial))
        since = time.perf_counter()  # the first logged rate is of training steps only
    while step < config.max_steps:
        lr = learning_rate(step, config)
        for group in optimizer.param_groups:
            group["lr"] = lr
        for micro in range(config.grad_accum):
            # The batch depends on (seed, step, micro, rank) only: resuming reproduces it exactly.
            indices = batch_indices(len(task.train_examples), config.seed, step, micro, rank, world,
                                    config.batch_size, config.grad_accum)
            generator = step_generator(config.seed, step, micro, rank)
            batch, n_tokens = task.make_batch([task.train_examples[i] for i in indices], generator, step)
            sync = micro == config.grad_accum - 1
            with contextlib.nullcontext() if sync else accelerator.no_sync(model), autocast(config, accelerator):
                loss, stats = model(**batch)
            accelerator.backward(loss / config.grad_accum)
            loss_sum += loss.detach() / config.grad_accum
            tokens += n_tokens
            tokens_here += n_tokens
        if config.grad_clip > 0:
            accelerator.clip_grad_norm_(params, config.grad_clip)
        optimizer.step()
        optimizer.zero_grad(set_to_none=True)
        task.after_step(stats, step, accelerator)
        step += 1
        steps_since += 1
        bar.update(1)

        if step % config.log_every == 0 or step == config.max_steps:
            # .item() is a host sync: only at log steps.
            loss_value = accelerator.reduce(loss_sum, reduction="mean").item() / steps_since
            rate = tokens * world / (time.perf_counter() - since)  # tokens of the sequences read, all processes
            record = {"step": step, "loss": loss_value, "lr": lr, "tokens_per_s": rate, **task.log()}
            bar.set_postfix(loss=f"{record['loss']:.4f}", tok_s=f"{rate:,.0f}")
            if main:
                append_log(out / LOG_FILE, record)
            loss_sum.zero_()
            steps_since, tokens, since = 0, 0, time.perf_counter()
        if (config.eval_every and step % config.eval_every == 0) or step == config.max_steps:
            last_eval = evaluate(model, task, config, accelerator, step, tokens_seen())
            if main:
                append_log(out / LOG_FILE, last_eval)
                bar.write(format_eval(last_eval))
        if step % config.save_every == 0 or step == config.max_steps:
            save_checkpoint(out, step, task, optimizer, config, accelerator, tokens_seen())
    bar.close()
    if not last_eval:  # resumed from the final checkpoint: evaluate for the model card
        last_eval = evaluate(model, task, config, accelerator, step, tokens_seen())

    accelerator.wait_for_everyone()
    if main:
        task.save(out, config, last_eval)
    accelerator.wait_for_everyone()
    return last_eval


@torch.no_grad()
def evaluate(model, task, config, accelerator, step: int, tokens_seen: int) -> dict:
    """Per-position greedy accuracy, loss and the acceptance length it implies, on the held-out examples,
    after ``tokens_seen`` training tokens (the x axis of a learning curve).

    The eval anchors are drawn once from a fixed seed, so every evaluation scores the same blocks.
    """
    model.eval()
    rank, world = accelerator.process_index, accelerator.num_processes
    totals: dict[str, torch.Tensor] = {}
    loss_sum = torch.zeros((), device=accelerator.device)
    n_batches = torch.zeros((), device=accelerator.device)
    examples = task.eval_examples
    for number, first in enumerate(range(0, len(examples), config.batch_size)):
        if number % world != rank:
            continue
        generator = step_generator(config.seed, -1, number)
        batch, _ = task.make_batch(examples[first : first + config.batch_size], generator, None, eval_batch=number)
        with autocast(config, accelerator):
            loss, stats = model(**batch)
        loss_sum += loss.float()
        n_batches += 1
        for key, value in stats.items():
            totals[key] = totals.get(key, 0) + value.float()
    model.train()
    if not totals:  # a process with no eval batch still joins the reductions
        totals = {key: torch.zeros(config.block_size - 1, device=accelerator.device)
                  for key in ("correct", "counted", "reached", "survived")}
    totals = {key: accelerator.reduce(value, reduction="sum") for key, value in totals.items()}
    loss_sum, n_batches = accelerator.reduce(loss_sum, "sum"), accelerator.reduce(n_batches, "sum")
    accuracy = (totals["correct"] / totals["counted"].clamp_min(1)).tolist()
    tau, acceptance = implied_tau(totals["reached"], totals["survived"])
    return {
        "step": step,
        "eval_loss": (loss_sum / n_batches.clamp_min(1)).item(),
        "eval_accuracy": [round(a, 4) for a in accuracy],
        # Greedy acceptance on teacher-forced context: per position given the earlier ones, and the length.
        "eval_acceptance": [round(a, 4) for a in acceptance],
        "eval_tau": tau,
        "train_tokens": tokens_seen,
    }


def for_saving(model, save_dtype: str):
    """``model`` itself for fp32, else a copy whose parameters (not buffers) are cast to bf16."""
    if save_dtype == "fp32":
        return model
    copy = deepcopy(model)
    for parameter in copy.parameters():
        parameter.data = parameter.data.to(torch.bfloat16)
    return copy


def format_eval(record: dict) -> str:
    accuracy = " ".join(f"{a:.2f}" for a in record["eval_accuracy"])
    return (f"step {record['step']} | eval loss {record['eval_loss']:.4f} | tau {record['eval_tau']:.3f} | "
            f"acc per position {accuracy}")


# -- checkpoints --------------------------------------------------------------------------------------------


# A checkpoint is one safetensors file: tensors under "model.", "optimizer.<param>.<name>" and "task.", and
# everything else (step, config, optimizer hyper-parameters) as JSON in its metadata. Nothing is pickled.


def latest_checkpoint(out: Path) -> Path | None:
    files = checkpoints(out)
    return files[-1] if files else None


def _split_optimizer_state(state: dict) -> tuple[dict, dict]:
    tensors, plain = {}, {}
    for param, values in state["state"].items():
        for name, value in values.items():
            if isinstance(value, torch.Tensor):
                tensors[f"optimizer.{param}.{name}"] = value
            else:
                plain[f"{param}.{name}"] = value
    return tensors, {"param_groups": state["param_groups"], "scalars": plain}


def read_checkpoint(path: Path) -> dict:
    """The dict ``save_checkpoint`` wrote: ``step``, ``tokens_seen``, ``model``, ``optimizer``, ``task``,
    ``config``."""
    try:
        with safe_open(str(path), framework="pt") as f:
            meta = json.loads(f.metadata()["dels_hub"])
            tensors = {key: f.get_tensor(key) for key in f.keys()}
    except (SafetensorError, OSError, KeyError, json.JSONDecodeError) as error:
        raise DamagedFileError(f"checkpoint {path} is damaged: {type(error).__name__}: {error}") from error
    sections = {"model": {}, "task": {}}
    optimizer_state: dict[int, dict] = {}
    for key, value in tensors.items():
        section, name = key.split(".", 1)
        if section == "optimizer":
            param, entry = name.split(".", 1)
            optimizer_state.setdefault(int(param), {})[entry] = value
        else:
            sections[section][name] = value
    for key, value in meta["optimizer"]["scalars"].items():
        param, entry = key.split(".", 1)
        optimizer_state.setdefault(int(param), {})[entry] = value
    optimizer = {"state": optimizer_state, "param_groups": meta["optimizer"]["param_groups"]}
    return {"step": meta["step"], "tokens_seen": meta.get("tokens_seen", 0), "model": sections["model"],
            "optimizer": optimizer, "task": {**meta["task"], **sections["task"]}, "config": meta["config"]}


def save_checkpoint(out: Path, step: int, task, optimizer, config, accelerator, tokens_seen: int = 0) -> None:
    """Weights, optimizer, task state, step and the config; written to a temporary file then renamed, so a
    kill mid-write never leaves a truncated checkpoint behind."""
    accelerator.wait_for_everyone()
    if accelerator.is_main_process:
        folder = out / CHECKPOINTS
        folder.mkdir(parents=True, exist_ok=True)
        optimizer_tensors, optimizer_meta = _split_optimizer_state(optimizer.state_dict())
        task_state = task.state_dict()
        tensors = {f"model.{k}": v for k, v in task.trainable.state_dict().items()}
        tensors |= optimizer_tensors
        tensors |= {f"task.{k}": v for k, v in task_state.items() if isinstance(v, torch.Tensor)}
        meta = {
            "step": step,
            "tokens_seen": tokens_seen,
            "optimizer": optimizer_meta,
            "task": {k: v for k, v in task_state.items() if not isinstance(v, torch.Tensor)},
            "config": config_dict(config),
        }
        path = folder / f"step-{step:08d}.safetensors"
        tmp = path.with_suffix(".tmp")
        # clone: safetensors refuses tensors that share storage (tied or viewed parameters)
        save_file({k: v.detach().cpu().contiguous().clone() for k, v in tensors.items()}, str(tmp),
                  metadata={"dels_hub": json.dumps(meta, default=str)})
        os.replace(tmp, path)
        for old in sorted(folder.glob("step-*.safetensors"))[: -config.keep_checkpoints]:
            old.unlink()
    accelerator.wait_for_everyone()


def append_log(path: Path, record: dict) -> None:
    with open(path, "a", encoding="utf-8") as f:
        f.write(json.dumps(record) + "\n")


def truncate_log(path: Path, step: int) -> None:
    """Drop log lines of steps after ``step`` (done before a kill, about to be redone)."""
    if not path.exists():
        return
    kept = []
    for line in path.read_text().splitlines():
        try:
            if json.loads(line)["step"] <= step:
                kept.append(line)
        except (json.JSONDecodeError, KeyError):
            pass  # a line cut short by the kill
    write_text_atomic(path, "".join(line + "\n" for line in kept))


def read_log(output_dir) -> list[dict]:
    path = Path(output_dir) / LOG_FILE
    return [json.loads(line) for line in path.read_text().splitlines() if line] if path.exists() else []
