"""DFlash drafter training for any transformers causal-LM target.

Per sequence: the frozen target runs once and yields the context features ``cat(hidden_states[l + 1] for l
in target_layer_ids)`` (optionally cached on disk); ``anchors_per_seq`` anchors are drawn among response
tokens; every block ``[x[anchor], MASK x (bs-1)]`` is embedded with the target's frozen embedding, sees the
context strictly before its anchor and itself bidirectionally (``masks.py``), and slot k is trained to
predict ``x[anchor + k]`` (same-position labels) through the target's frozen LM head, with weights
``exp(-(k-1)/gamma)``. Only the drafter (``fc``, ``hidden_norm``, the layers, ``norm``) is trained, and it is
saved in the z-lab format. ``--peek`` adds block-level peeking (``peek.py``).
"""

import hashlib
import inspect
import json
import os
from pathlib import Path

import torch
from safetensors.torch import load_file, save_file
from torch import nn

from ..checks import check_dflash
from ..dflash import DFlashConfig, DFlashDraftModel, build_target_layer_ids
from ..errors import RecipeError
from ..files import save_pretrained_atomic, write_text_atomic
from ..generation.drafting import context_features
from ..loading import load_target, tokenizer_for
from .card import write_dflash_card
from .data import Example, gather_blocks, load_examples, sample_anchors, slot_weights
from .labels import target_blocks
from .layer_init import copy_target_top_layers
from .loop import for_saving
from .losses import supervised_block_loss
from .masks import attention_mask_for, context_mask, dflash_mask
from .peek import peeked_forward, reveal_ratios, sample_reveals
from .recipe import DFlashTrainConfig, add_config_arguments, resolve_config
from .run_folder import claim_output_folder

LENS_BLOCKS = 64  # blocks per step whose intermediate layers are read through the LM head (peek accuracy)


class DFlashObjective(nn.Module):
    """``forward(features, block_tokens, supervised, anchors[, reveal]) -> (loss, stats)``.

    Holds the trainable drafter and the target's frozen embedding and LM head.
    """

    def __init__(self, drafter: DFlashDraftModel, embed: nn.Module, lm_head: nn.Module, weights: torch.Tensor):
        super().__init__()
        self.drafter = drafter
        self.embed = embed
        self.lm_head = lm_head
        self.register_buffer("weights", weights, persistent=False)

    def forward(self, features, block_tokens, supervised, anchors, reveal=None):
        """
        Args:
            features: ``[B, C, F*H]`` target features of the (padded) sequences.
            block_tokens: ``[B, N, bs]`` the anchor at slot 0 and the labels of slots k >= 1 (the text's tokens at
                ``anchor + k``, or the target's greedy ones: ``labels.py``); supervised ``[B, N, bs]`` bool.
            anchors: ``[B, N]`` anchor positions (blocks of padding have anchor 0 and nothing supervised).
            reveal: ``[B, L, N, bs]`` bool peek reveals, or None (plain DFlash training, and evaluation).
        """
        batch, blocks, block_size = block_tokens.shape
        context_len = features.shape[1]
        mask_id = self.drafter.config.mask_token_id
        block_input = torch.full_like(block_tokens, mask_id)
        block_input[:, :, 0] = block_tokens[:, :, 0]
        noise = self.embed(block_input).flatten(1, 2)  # [B, N*bs, H]
        block_positions = (anchors[..., None] + torch.arange(block_size, device=anchors.device)).flatten(1)
        context_positions = torch.arange(context_len, device=anchors.device).expand(batch, -1)
        position_ids = torch.cat([context_positions, block_positions], dim=1)
        features = features.to(noise.dtype)

        layer_states = []
        if reveal is None:
            mask = dflash_mask(anchors, context_len, block_size)
            impl = self.drafter.config._attn_implementation
            hidden = self.drafter(target_hidden=features, noise_embedding=noise, position_ids=position_ids,
                                  attention_mask=attention_mask_for(mask, impl, noise.dtype))
        else:
            truth = self.embed(block_tokens)  # [B, N, bs, H]
            hidden, layer_states = peeked_forward(self.drafter, features, noise, position_ids,
                                                  context_mask(anchors, context_len, block_size), reveal, truth)

        hidden = hidden.view(batch, blocks, block_size, -1)[:, :, 1:].flatten(0, 1)  # slots 1..bs-1
        counted = supervised[:, :, 1:].flatten(0, 1)
        logits = self.lm_head(hidden[counted])  # the LM head on supervised slots only: most of the step's cost
        loss, stats = supervised_block_loss(logits, block_tokens[:, :, 1:].flatten(0, 1), counted, self.weights[1:])
        if layer_states:
            stats.update(self.layer_accuracy(layer_states, block_tokens, supervised))
        return loss, stats

    @torch.no_grad()
    def layer_accuracy(self, layer_states, block_tokens, supervised) -> dict[str, torch.Tensor]:
        """Greedy accuracy of each layer's output read through the final norm and LM head (a logit lens),
        on the first ``LENS_BLOCKS`` blocks."""
        batch, blocks, block_size = block_tokens.shape
        labels = block_tokens[:, :, 1:].flatten(0, 1)[:LENS_BLOCKS]
        counted = supervised[:, :, 1:].flatten(0, 1)[:LENS_BLOCKS]
        correct = []
        for state in layer_states:
            state = state.view(batch, blocks, block_size, -1)[:, :, 1:].flatten(0, 1)[:LENS_BLOCKS]
            hits = (self.lm_head(self.drafter.norm(state)).argmax(-1) == labels) & counted
            correct.append(hits.float().sum())
        return {"layer_correct": torch.stack(correct), "layer_counted": counted.float().sum()}


class FeatureCache:
    """Target features of each training sequence, one file per sequence, keyed by a hash of its token ids.

    The folder records which target and layers produced it; a mismatch is an error, never silent reuse.
    """

    def __init__(self, folder: str, signature: dict):
        self.folder = Path(folder)
        self.folder.mkdir(parents=True, exist_ok=True)
        meta = self.folder / "meta.json"
        if meta.exists():
            stored = json.loads(meta.read_text())
            if stored != signature:
                raise RecipeError(f"feature_cache {folder!r} was filled for {stored}, not {signature}; "
                                  "use another folder or empty it")
        else:
            write_text_atomic(meta, json.dumps(signature, indent=2))

    def path(self, ids: torch.Tensor) -> Path:
        return self.folder / (hashlib.sha1(ids.numpy().tobytes()).hexdigest() + ".safetensors")

    def get(self, ids: torch.Tensor, names: tuple[str, ...]) -> dict[str, torch.Tensor] | None:
        """The stored tensors of a sequence, or None if it (or one of ``names``) was never stored."""
        path = self.path(ids)
        if not path.exists():
            return None
        stored = load_file(str(path))
        return stored if all(name in stored for name in names) else None

    def put(self, ids: torch.Tensor, tensors: dict[str, torch.Tensor]) -> dict[str, torch.Tensor]:
        """Store a sequence's ``features [T, F*H]`` as bf16 (half the disk of fp32) and its other tensors as they
        are, and return what was stored."""
        path = self.path(ids)
        stored = {name: (t.to("cpu", torch.bfloat16) if name == "features" else t.cpu()).clone()
                  for name, t in tensors.items()}
        tmp = path.with_name(f"{path.stem}.{os.getpid()}.tmp")  # several processes may fill one cache
        save_file(stored, str(tmp))
        tmp.replace(path)
        return stored


class DFlashTask:
    """What the shared loop needs to train a DFlash drafter."""

    name = "train-dflash"

    def __init__(self, config: DFlashTrainConfig, target, drafter: DFlashDraftModel, train: list[Example],
                 held_out: list[Example], device):
        self.config = config
        self.target = target
        self.drafter = drafter
        self.trainable = drafter
        embed, lm_head = target.get_input_embeddings(), target.get_output_embeddings()
        self.model = DFlashObjective(drafter, embed, lm_head, slot_weights(config.block_size, config.gamma))
        self.model.to(device)
        self.train_examples, self.eval_examples = train, held_out
        self.device = device
        self.layer_ids = drafter.config.target_layer_ids
        self.accuracy = torch.zeros(drafter.config.num_hidden_layers)  # peek: EMA of per-layer accuracy
        self.ratios = torch.zeros(drafter.config.num_hidden_layers)
        self.keep_logits = "logits_to_keep" in inspect.signature(target.forward).parameters
        # eval batch number -> (its ids, its target pass on the host): the eval set is re-read at every evaluation
        self.eval_passes: dict[int, tuple] = {}
        self.cache = None
        if config.feature_cache:
            signature = {"target": config.target, "gguf_file": config.gguf_file, "layer_ids": self.layer_ids,
                         "hidden_size": drafter.config.hidden_size}
            self.cache = FeatureCache(config.feature_cache, signature)

    @torch.no_grad()
    def target_pass(self, examples: list[Example]) -> tuple[torch.Tensor, list[torch.Tensor] | None]:
        """``features [B, S, F*H]`` of the right-padded examples and, with ``labels = "target"``, each one's
        ``[T]`` target argmax at every position (``labels.py``); cached ones are read from disk."""
        names = ("features", "greedy") if self.config.labels == "target" else ("features",)
        length = max(len(e.ids) for e in examples)
        found = [self.cache.get(e.ids, names) if self.cache else None for e in examples]
        missing = [i for i, f in enumerate(found) if f is None]
        if missing:
            ids = torch.zeros(len(missing), length, dtype=torch.long)
            attention = torch.zeros(len(missing), length, dtype=torch.long)
            for row, i in enumerate(missing):
                ids[row, : len(examples[i].ids)] = examples[i].ids
                attention[row, : len(examples[i].ids)] = 1
            # Greedy labels need the logits of every position; features alone need none of them.
            extra = {"logits_to_keep": 1} if self.keep_logits and "greedy" not in names else {}
            out = self.target(input_ids=ids.to(self.device), attention_mask=attention.to(self.device),
                              output_hidden_states=True, **extra)
            computed = context_features(out.hidden_states, self.layer_ids)
            greedy = out.logits.argmax(-1) if "greedy" in names else None
            for row, i in enumerate(missing):
                n = len(examples[i].ids)
                found[i] = {"features": computed[row, :n]}
                if greedy is not None:
                    found[i]["greedy"] = greedy[row, :n].to(torch.int32)
                if self.cache:  # train on what the cache will return later: bf16-rounded features
                    found[i] = self.cache.put(examples[i].ids, found[i])
        width = found[0]["features"].shape[-1]
        features = torch.zeros(len(examples), length, width, device=self.device, dtype=self.target.dtype)
        for row, f in enumerate(found):
            features[row, : f["features"].shape[0]] = f["features"].to(self.device, self.target.dtype)
        greedy = [f["greedy"].long().cpu() for f in found] if "greedy" in names else None
        return features, greedy

    def make_batch(self, examples: list[Example], generator: torch.Generator, step, eval_batch: int | None = None):
        bs, n = self.config.block_size, self.config.anchors_per_seq
        if eval_batch is None:
            features, greedy = self.target_pass(examples)
        else:  # kept in host memory: without a feature cache, every evaluation would pay the target again
            ids = [e.ids for e in examples]
            stored = self.eval_passes.get(eval_batch)
            if stored is None or len(stored[0]) != len(ids) or not all(map(torch.equal, stored[0], ids)):
                features, greedy = self.target_pass(examples)
                self.eval_passes[eval_batch] = (ids, features.cpu(), greedy)
            features, greedy = self.eval_passes[eval_batch][1].to(self.device), self.eval_passes[eval_batch][2]
        tokens = torch.zeros(len(examples), n, bs, dtype=torch.long)
        supervised = torch.zeros(len(examples), n, bs, dtype=torch.bool)
        anchors = torch.zeros(len(examples), n, dtype=torch.long)
        picked_count = torch.zeros(len(examples), dtype=torch.long)
        for row, example in enumerate(examples):
            picked = sample_anchors(example.loss_mask, n, generator)
            if greedy is None:
                blocks = gather_blocks(example, picked, bs)
            else:
                blocks = target_blocks(example, greedy[row], picked, bs)
            tokens[row, : len(picked)], supervised[row, : len(picked)] = blocks
            anchors[row, : len(picked)] = picked
            picked_count[row] = len(picked)
        batch = {"features": features, "block_tokens": tokens.to(self.device),
                 "supervised": supervised.to(self.device), "anchors": anchors.to(self.device)}
        if self.config.peek and step is not None:  # evaluation (step None) never peeks
            self.ratios = reveal_ratios(self.accuracy, step, self.config)
            slot = torch.arange(bs)
            lengths = torch.tensor([len(e.ids) for e in examples])
            real_block = torch.arange(n)[None, :] < picked_count[:, None]
            # slots m >= 2 of real blocks whose previous slot is a token of the sequence
            revealable = (slot >= 2) & (anchors[..., None] + slot - 1 < lengths[:, None, None]) & real_block[..., None]
            batch["reveal"] = sample_reveals(self.ratios, revealable, generator).to(self.device)
        return batch, sum(len(e.ids) for e in examples)

    def after_step(self, stats, step, accelerator):
        if "layer_correct" not in stats:
            return
        correct = accelerator.reduce(stats["layer_correct"].detach(), reduction="sum")
        counted = accelerator.reduce(stats["layer_counted"].detach(), reduction="sum")
        if counted.item() > 0:
            decay = self.config.peek_ema
            self.accuracy = decay * self.accuracy + (1 - decay) * (correct / counted).cpu()

    def log(self) -> dict:
        if not self.config.peek:
            return {}
        return {"peek_ratio": [round(r, 4) for r in self.ratios.tolist()],
                "layer_accuracy": [round(a, 4) for a in self.accuracy.tolist()]}

    def state_dict(self) -> dict:
        return {"accuracy": self.accuracy}

    def load_state_dict(self, state: dict) -> None:
        self.accuracy = state.get("accuracy", self.accuracy)

    def save(self, out: Path, config: DFlashTrainConfig, last_eval: dict) -> None:
        save_pretrained_atomic(for_saving(self.drafter, config.save_dtype), out)
        write_dflash_card(out, self.drafter.config, config, last_eval)


# -- building the parts ---------------------------------------------------------------------------------------


def load_target_and_tokenizer(config: DFlashTrainConfig, dtype: torch.dtype):
    kwargs = {"gguf_file": config.gguf_file} if config.gguf_file else {}
    return load_target(config.target, dtype, **kwargs), tokenizer_for(config.target, **kwargs)


def build_drafter(config: DFlashTrainConfig, target, tokenizer) -> DFlashDraftModel:
    """A fresh drafter shaped after the target (same hidden size, heads and RoPE), checked against it."""
    text = target.config.get_text_config()
    rows = target.get_input_embeddings().weight.shape[0]
    mask_token_id = config.mask_token_id
    if mask_token_id < 0:
        if rows <= len(tokenizer):
            raise RecipeError(
                f"the target's embedding has no row past the tokenizer ({rows} rows, {len(tokenizer)} tokens): set "
                "`mask_token_id` to a special token that never occurs in the data"
            )
        mask_token_id = len(tokenizer)  # as z-lab's <|MASK|> = 151669 for Qwen3: the first unused row
    layer_ids = list(config.target_layer_ids) or build_target_layer_ids(
        text.num_hidden_layers, config.num_features or config.num_layers)
    rope = getattr(text, "rope_parameters", None)
    drafter_config = DFlashConfig(
        vocab_size=rows,
        hidden_size=text.hidden_size,
        intermediate_size=config.intermediate_size or text.intermediate_size,
        num_hidden_layers=config.num_layers,
        num_attention_heads=text.num_attention_heads,
        num_key_value_heads=getattr(text, "num_key_value_heads", None) or text.num_attention_heads,
        head_dim=getattr(text, "head_dim", None) or text.hidden_size // text.num_attention_heads,
        rms_norm_eps=getattr(text, "rms_norm_eps", 1e-6),
        max_position_embeddings=text.max_position_embeddings,
        rope_parameters=dict(rope) if rope else None,
        block_size=config.block_size,
        num_target_layers=text.num_hidden_layers,
        dflash_config={"mask_token_id": mask_token_id, "target_layer_ids": layer_ids},
        tie_word_embeddings=False,
        bos_token_id=getattr(text, "bos_token_id", None),
        eos_token_id=getattr(text, "eos_token_id", None),
    )
    drafter = DFlashDraftModel(drafter_config)
    check_dflash(target, drafter)  # layer ids in range, mask id in the embedding, sizes: before any training
    return drafter


def continued_drafter(config: DFlashTrainConfig, fresh: DFlashDraftModel) -> DFlashDraftModel:
    """The drafter at ``config.init_from``, in float32, after checking it has the shape the recipe builds
    (``fresh``): continuing a run must not silently change the layers, block size, features or mask id."""
    from ..loading import load_dflash

    previous = load_dflash(config.init_from, torch.float32)  # resolves pkg: locations itself
    fields = ("num_hidden_layers", "hidden_size", "intermediate_size", "block_size", "target_layer_ids",
              "mask_token_id", "vocab_size")
    differ = {f: (getattr(previous.config, f), getattr(fresh.config, f)) for f in fields
              if getattr(previous.config, f) != getattr(fresh.config, f)}
    if differ:
        details = ", ".join(f"{f} {old!r} (recipe: {new!r})" for f, (old, new) in differ.items())
        raise RecipeError(f"init_from {config.init_from!r} does not have the recipe's shape: {details}")
    return previous


# -- command line ---------------------------------------------------------------------------------------------


def add_train_dflash_arguments(parser) -> None:
    """``dels-hub train-dflash --recipe recipes/X.dflash.toml [--field value ...]``."""
    add_config_arguments(parser, DFlashTrainConfig)


def train_dflash_main(args) -> dict:
    """Train a DFlash drafter from parsed arguments; everything is validated before the first step."""
    from accelerate import Accelerator

    from .loop import train

    config = resolve_config(DFlashTrainConfig, args)
    checkpoint = claim_output_folder(config)  # refuses another run's folder before anything loads
    accelerator = Accelerator()
    dtype = torch.bfloat16 if config.precision == "bf16" else torch.float32
    target, tokenizer = load_target_and_tokenizer(config, dtype)
    target.requires_grad_(False).eval().to(accelerator.device)
    train_examples, held_out = load_examples(config, tokenizer)
    torch.manual_seed(config.seed)
    drafter = build_drafter(config, target, tokenizer)
    if config.init_from:
        drafter = continued_drafter(config, drafter)
    elif config.init_layers == "target-top":
        copy_target_top_layers(drafter, target)
    task = DFlashTask(config, target, drafter, train_examples, held_out, accelerator.device)
    return train(config, task, accelerator, checkpoint)
