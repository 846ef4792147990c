"""Local-head training: only the tokenizer, no target weights and no target forward.

Per sampled anchor a, a zero-state GRU reads the true block tokens ``x[a..a+k-1]`` and predicts ``x[a+k]``
for k = 1..bs-1 (exactly what it does at inference, where it reads the anchor then the drafts), with the
DFlash slot weights ``exp(-(k-1)/gamma)``. The unigram prior is counted over the supervised tokens of the
same training sequences (assistant tokens under the loss mask; every token for plain text) and stored in
the head's ``unigram_counts`` buffer. ``lora_rank > 0`` fine-tunes ``init_from`` with PEFT LoRA.
"""

from pathlib import Path

import torch
from torch import nn

from ..errors import IncompatibleTokenizerError
from ..files import save_pretrained_atomic
from ..fingerprint import tokenizer_fingerprint
from ..heads import DeLSLocalHead, DeLSLocalHeadConfig
from ..heads.context import context_width, tokens_before
from ..loading import FAMILY_PREFIX, load_strict, load_tokenizer
from ..locations import model_location
from .card import write_head_card
from .data import Example, gather_blocks, load_examples, sample_anchors, slot_weights, unigram_counts
from .loop import for_saving
from .losses import block_loss
from .recipe import HeadTrainConfig, add_config_arguments, resolve_config
from .run_folder import claim_output_folder


class HeadObjective(nn.Module):
    """``forward(tokens [M, bs], supervised [M, bs]) -> (loss, stats)`` for a (possibly LoRA-wrapped) head."""

    def __init__(self, head: nn.Module, weights: torch.Tensor):
        super().__init__()
        self.head = head
        self.register_buffer("weights", weights, persistent=False)

    def forward(self, tokens: torch.Tensor, supervised: torch.Tensor, context: torch.Tensor | None = None):
        # Slot t reads tokens 0..t and predicts token t + 1; a head that reads the tokens before the block (an
        # n-gram head's ``context_tokens``) starts from them, as in the decode loop.
        primed = {} if context is None else {"state": self.head.initial_state(len(tokens), context=context)}
        logits = self.head(input_ids=tokens[:, :-1], **primed)
        return block_loss(logits, tokens[:, 1:], supervised[:, 1:], self.weights[1:])


class HeadTask:
    """What the shared loop needs to train a local head."""

    name = "train-head"

    def __init__(self, config: HeadTrainConfig, tokenizer, head: nn.Module, train: list[Example],
                 held_out: list[Example], device):
        self.config = config
        self.tokenizer = tokenizer
        self.head = head  # the DeLSLocalHead, or its PEFT wrapper
        self.trainable = head
        self.model = HeadObjective(head, slot_weights(config.block_size, config.gamma)).to(device)
        self.train_examples, self.eval_examples = train, held_out
        self.device = device

    def make_batch(self, examples: list[Example], generator: torch.Generator, step, eval_batch: int | None = None):
        """All anchored blocks of the micro-batch, flattened: the head sees no sequence context, except the
        tokens just before each anchor for a head that reads them."""
        tokens, supervised, contexts = [], [], []
        width = context_width(self.head)
        for example in examples:
            anchors = sample_anchors(example.loss_mask, self.config.anchors_per_seq, generator)
            block_tokens, block_supervised = gather_blocks(example, anchors, self.config.block_size)
            tokens.append(block_tokens)
            supervised.append(block_supervised)
            if width:
                contexts.append(tokens_before(example.ids.expand(len(anchors), -1), anchors, width))
        batch = {"tokens": torch.cat(tokens).to(self.device), "supervised": torch.cat(supervised).to(self.device)}
        if width:
            batch["context"] = torch.cat(contexts).to(self.device)
        return batch, sum(len(e.ids) for e in examples)

    def after_step(self, stats, step, accelerator):
        pass

    def log(self) -> dict:
        return {}

    def state_dict(self) -> dict:
        return {}

    def load_state_dict(self, state: dict) -> None:
        pass

    def save(self, out: Path, config: HeadTrainConfig, last_eval: dict) -> None:
        """The head (LoRA merged in, so it loads anywhere) with ``save_pretrained``, the adapter alone under
        ``adapter/`` and a model card (the recipe snapshot was written when training started)."""
        head = self.head
        if config.lora_rank:
            save_pretrained_atomic(head, out / "adapter")
            head = head.merge_and_unload()
        save_pretrained_atomic(for_saving(head, config.save_dtype), out)
        write_head_card(out, head, config, last_eval)


def build_head(config: HeadTrainConfig, tokenizer, train_examples: list[Example]) -> nn.Module:
    """A fresh head for the tokenizer, or ``init_from`` (checked to be of the same tokenizer family; it keeps its
    sizes and fusion defaults). ``unigram_counts`` is recounted on this run's training data, the distribution the
    head is being fitted to, except under LoRA: an adapter repo carries no buffers, so the head a user gets with
    ``head=ADAPTER`` (base + adapter) keeps the base prior, and the merged head saved beside it must match it."""
    fingerprint = {**tokenizer_fingerprint(tokenizer), "family": config.family or family_name(config.tokenizer)}
    fusion = {
        "alpha": config.alpha[0] if len(config.alpha) == 1 else list(config.alpha),
        "beta": config.beta[0] if len(config.beta) == 1 else list(config.beta),
        "pure_prefix_len": config.pure_prefix_len,
    }
    if config.init_from:
        head = load_strict(DeLSLocalHead, model_location(config.init_from, "init_from head"), "init_from head",
                           dtype=torch.float32)
        expected = head.config.tokenizer_fingerprint or {}
        if (expected.get("vocab_size"), expected.get("sha256")) != (fingerprint["vocab_size"], fingerprint["sha256"]):
            raise IncompatibleTokenizerError(
                f"init_from head {config.init_from!r} was trained for tokenizer family "
                f"{expected.get('family', 'unknown')!r} (vocab {expected.get('vocab_size')}), but the recipe's "
                f"tokenizer {config.tokenizer!r} is another family (vocab {fingerprint['vocab_size']}, sha256 "
                f"{fingerprint['sha256'][:12]}): fine-tune a head of the same family"
            )
    else:
        head = DeLSLocalHead(DeLSLocalHeadConfig(
            vocab_size=len(tokenizer),
            embedding_rank=config.embedding_rank,
            hidden_size=config.hidden_size,
            output_rank=config.output_rank,
            block_size=config.block_size,
            unigram_smoothing=config.unigram_smoothing,
            tokenizer_fingerprint=fingerprint,
            **fusion,
        ))
    if not config.lora_rank:
        with torch.no_grad():  # the prior of the supervised tokens this run trains on
            head.unigram_counts.copy_(unigram_counts(train_examples, head.config.vocab_size))
    else:
        from peft import LoraConfig, get_peft_model

        lora = LoraConfig(r=config.lora_rank, lora_alpha=config.lora_alpha, target_modules=list(config.lora_targets),
                          lora_dropout=0.0, bias="none")
        head = get_peft_model(head, lora)
    return head


def family_name(tokenizer_location: str) -> str:
    if tokenizer_location.startswith(FAMILY_PREFIX):
        return tokenizer_location[len(FAMILY_PREFIX):]
    return Path(tokenizer_location.rstrip("/")).name or tokenizer_location


# -- command line ---------------------------------------------------------------------------------------------


def add_train_head_arguments(parser) -> None:
    """``dels-hub train-head --recipe recipes/X.head.toml [--field value ...]``."""
    add_config_arguments(parser, HeadTrainConfig)


def train_head_main(args) -> dict:
    """Train a local head from parsed arguments; everything is validated before the first step."""
    from accelerate import Accelerator

    from .loop import train

    config = resolve_config(HeadTrainConfig, args)
    checkpoint = claim_output_folder(config)  # refuses another run's folder before anything loads
    accelerator = Accelerator()
    tokenizer = load_tokenizer(config.tokenizer, **({"gguf_file": config.gguf_file} if config.gguf_file else {}))
    train_examples, held_out = load_examples(config, tokenizer)
    torch.manual_seed(config.seed)
    head = build_head(config, tokenizer, train_examples)
    task = HeadTask(config, tokenizer, head, train_examples, held_out, accelerator.device)
    return train(config, task, accelerator, checkpoint)
