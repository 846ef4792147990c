"""Training configurations: typed dataclasses, filled from defaults <- a recipe file <- command-line flags.

A recipe is a small TOML file of overrides (``recipes/*.toml``), one value per line with the reason in a
comment (nanoGPT's ``config/*.py``, made declarative). Every field is also a ``--flag`` of the CLI, generated
from the dataclass, so ``--max-steps 50`` overrides the recipe's ``max_steps``. Unknown keys and values of
the wrong type fail before anything is loaded. The final config is snapshotted into every checkpoint.
"""

import argparse
import dataclasses
import math
import re
import tomllib
import typing
from dataclasses import dataclass, field
from pathlib import Path

from ..arguments import add_dataclass_arguments, field_type, option
from ..errors import RecipeError


@dataclass
class TrainConfig:
    """What both training loops share: data, blocks, optimisation, bookkeeping."""

    # I/O
    output_dir: str = option("out", "where checkpoints/, train_log.jsonl and the final model go")
    resume: bool = option(True, "continue from the newest checkpoint in output_dir/checkpoints if there is one (its "
                          "configuration must be this one)")
    overwrite: bool = option(False, "train into an output_dir that holds another run's model, log or checkpoints: "
                             "they are replaced (without it, such a folder is refused)")
    # data
    data: list[str] = field(
        default_factory=list,
        metadata={"help": "training sources, read in order: local files or folders (json, jsonl, parquet, csv, txt), "
                  "Hub dataset ids, sharegpt:train, pysrc:stdlib or pysrc:PACKAGE (Python sources on the machine)"},
    )
    data_split: str = option("train", "split to read from a Hub id or folder")
    data_format: str = option("auto", "auto | chat | text: chat renders a messages column with the chat template")
    text_field: str = option("text", "column holding plain text (text format)")
    messages_field: str = option("", "column holding the conversation; empty = first of messages, conversations")
    eval_data: list[str] = field(
        default_factory=list,
        metadata={"help": "held-out sources (sharegpt:validation, pysrc:stdlib:validation, files); empty = "
                  "sharegpt:validation for sharegpt:train, else the last eval_examples of data (then not trained on)"},
    )
    eval_examples: int = option(32, "held-out sequences used for the periodic evaluation, from each eval_data source")
    max_examples: int = option(0, "read at most this many records of each training source (0 = all)")
    long_chats: str = option("truncate", "truncate | windows: a conversation longer than max_length is cut to it, or "
                             "cut into max_length windows so that every turn is trained on")
    record_pattern: str = option("", "keep only records whose text matches this regular expression, in the "
                                 "training and the eval data (a domain slice: '```python' keeps conversations "
                                 "with Python code)")
    max_length: int = option(2048, "tokens per sequence; chat is truncated, plain text cut into windows")
    # blocks and loss
    block_size: int = option(16, "block size: slot 0 is the anchor, slots 1..bs-1 are supervised")
    gamma: float = option(7.0, "loss weight exp(-(k-1)/gamma) at slot k (DFlash: 7 for bs16, 5 for bs10, 4 for bs8)")
    anchors_per_seq: int = option(64, "anchors sampled per sequence per step, without replacement")
    # optimisation
    batch_size: int = option(4, "sequences per process per micro-step")
    grad_accum: int = option(1, "micro-steps per optimizer step")
    max_steps: int = option(1000, "optimizer steps")
    lr: float = option(6e-4, "peak learning rate (AdamW)")
    warmup_ratio: float = option(0.04, "fraction of max_steps of linear warm-up")
    min_lr_ratio: float = option(0.1, "the cosine decays to lr * min_lr_ratio")
    weight_decay: float = option(0.0, "AdamW weight decay")
    grad_clip: float = option(1.0, "clip the global gradient norm (0 = off)")
    precision: str = option("fp32", "fp32 | bf16 (autocast; master weights stay fp32) | auto (bf16 where the "
                            "hardware has fast bf16 matmuls: a CUDA GPU that supports it, a CPU with AVX512-BF16 or "
                            "AMX; else fp32)")
    save_dtype: str = option("fp32", "fp32 | bf16 weights in the saved model (bf16 halves a Hub repo; buffers such as "
                             "the unigram counts stay fp32)")
    seed: int = option(42, "seeds the init, the data order, the anchors and the peek reveals")
    # bookkeeping
    log_every: int = option(10, "steps between loss/tokens-per-second log lines")
    eval_every: int = option(100, "steps between evaluations of per-position accuracy (0 = only at the end)")
    save_every: int = option(100, "steps between resumable checkpoints")
    keep_checkpoints: int = option(2, "newest checkpoints kept on disk")

    def __post_init__(self):
        choices = {
            "data_format": ("auto", "chat", "text"),
            "long_chats": ("truncate", "windows"),
            "precision": ("fp32", "bf16", "auto"),
            "save_dtype": ("fp32", "bf16"),
        }
        for name, allowed in choices.items():
            if getattr(self, name) not in allowed:
                raise RecipeError(f"`{name}` must be one of {allowed}, got {getattr(self, name)!r}")
        if self.precision == "auto":  # resolved here, so that the saved config says what ran
            self.precision = fast_precision()
        positive = ["block_size", "anchors_per_seq", "batch_size", "grad_accum", "max_steps", "max_length",
                    "log_every", "save_every", "keep_checkpoints"]
        for name in positive:
            if getattr(self, name) < 1:
                raise RecipeError(f"`{name}` must be >= 1, got {getattr(self, name)}")
        if self.block_size < 2:
            raise RecipeError(f"`block_size` must be >= 2 (an anchor and one drafted slot), got {self.block_size}")
        if self.max_length < self.block_size:
            raise RecipeError(f"`max_length` ({self.max_length}) must be >= block_size ({self.block_size})")
        if not self.gamma > 0:
            raise RecipeError(f"`gamma` must be > 0, got {self.gamma}")
        ranges = {  # name: (low, high, whether low itself is allowed); high is always allowed
            "lr": (0.0, math.inf, False),
            "warmup_ratio": (0.0, 1.0, True),
            "min_lr_ratio": (0.0, 1.0, True),
            "weight_decay": (0.0, math.inf, True),
            "grad_clip": (0.0, math.inf, True),
            "eval_examples": (0, math.inf, True),
            "max_examples": (0, math.inf, True),
            "eval_every": (0, math.inf, True),
        }
        for name, (low, high, closed) in ranges.items():
            value = getattr(self, name)
            if not (low <= value <= high if closed else low < value <= high):
                bounds = f"{'[' if closed else '('}{low}, {high}]"
                raise RecipeError(f"`{name}` must be in {bounds}, got {value}")
        for name in ("data", "eval_data"):  # one source may be given as a plain string; "" means none
            value = getattr(self, name)
            setattr(self, name, [s for s in ([value] if isinstance(value, str) else value) if s])
        if not self.data:
            raise RecipeError(f"`data` must name at least one source (a local file, a Hub dataset id, sharegpt:train "
                              f"or pysrc:stdlib), got {self.data!r}")
        try:
            re.compile(self.record_pattern)
        except re.error as error:
            raise RecipeError(
                f"`record_pattern` {self.record_pattern!r} is not a regular expression: {error}"
            ) from None


def fast_precision() -> str:
    """"bf16" where bf16 matmuls are fast, else "fp32". On a CPU without native bf16 (AVX2 only) autocast is
    slower than fp32, not faster: measured 6x slower for the drafter's LM head on an AVX2 EPYC core."""
    import torch

    if torch.cuda.is_available():  # native bf16 from Ampere on; older GPUs only emulate it
        return "bf16" if torch.cuda.get_device_capability()[0] >= 8 else "fp32"
    try:
        flags = Path("/proc/cpuinfo").read_text()
    except OSError:
        return "fp32"
    return "bf16" if re.search(r"\b(avx512_bf16|amx_bf16)\b", flags) else "fp32"


@dataclass
class HeadTrainConfig(TrainConfig):
    """Local head: tokenizer only, no target weights."""

    KIND: typing.ClassVar[str] = "head"  # a recipe's `kind`, and the `dels-hub train-head` command

    tokenizer: str = option("", "tokenizer path or Hub id, pkg:PACKAGE for a file shipped in a Python package, "
                            "or family:NAME for a family's offline tokenizer (dels-hub families)")
    gguf_file: str = option("", "read the tokenizer from this GGUF file inside `tokenizer`")
    family: str = option("", "tokenizer family name stored in the fingerprint (default: the tokenizer's name)")
    embedding_rank: int = option(256, "width of the factorized input embedding (reference 256)")
    hidden_size: int = option(1024, "GRU state width (reference 1024)")
    output_rank: int = option(256, "width of the low-rank output projection (reference 256)")
    unigram_smoothing: float = option(1.0, "add-k constant of the stored unigram prior")
    alpha: list[float] = field(
        default_factory=lambda: [0.3],
        metadata={"help": "fusion weight of the head's logits (one value or one per fused position)"},
    )
    beta: list[float] = field(
        default_factory=lambda: [0.3], metadata={"help": "fusion weight of the unigram prior correction (idem)"}
    )
    pure_prefix_len: int = option(1, "leading draft positions taken from DFlash alone")
    init_from: str = option("", "start from this head (path or Hub id) instead of random weights")
    lora_rank: int = option(0, "> 0: fine-tune init_from with PEFT LoRA of this rank instead of all weights")
    lora_alpha: float = option(16.0, "LoRA scaling numerator")
    lora_targets: list[str] = field(
        default_factory=lambda: ["input_gates", "hidden_gates", "rank_proj"], metadata={"help": "modules LoRA adapts"}
    )

    def __post_init__(self):
        super().__post_init__()
        if not self.tokenizer:
            raise RecipeError("`tokenizer` is empty: a head is trained for a tokenizer family, name one")
        for name in ("embedding_rank", "hidden_size", "output_rank"):
            if getattr(self, name) < 1:
                raise RecipeError(f"`{name}` must be >= 1, got {getattr(self, name)}")
        for name in ("lora_rank", "pure_prefix_len"):
            if getattr(self, name) < 0:
                raise RecipeError(f"`{name}` must be >= 0, got {getattr(self, name)}")
        if not self.unigram_smoothing > 0:
            raise RecipeError(f"`unigram_smoothing` must be > 0 (add-k counts), got {self.unigram_smoothing}")
        if self.lora_rank and not self.init_from:
            raise RecipeError("`lora_rank` > 0 fine-tunes an existing head: set `init_from` too")
        for name in ("alpha", "beta"):
            if not getattr(self, name):
                raise RecipeError(f"`{name}` needs at least one value")


@dataclass
class DFlashTrainConfig(TrainConfig):
    """DFlash drafter for a causal-LM target; the target's embedding and LM head stay frozen."""

    KIND: typing.ClassVar[str] = "dflash"  # a recipe's `kind`, and the `dels-hub train-dflash` command

    target: str = option("", "target causal LM: path, Hub id or pkg:PACKAGE")
    gguf_file: str = option("", "load the target (and its tokenizer) from this GGUF file inside `target`")
    num_layers: int = option(5, "draft decoder layers (paper: 5)")
    target_layer_ids: list[int] = field(
        default_factory=list,
        metadata={"help": "target layers whose outputs feed the drafter; empty = the z-lab spread for num_features"},
    )
    num_features: int = option(0, "with empty target_layer_ids: spread this many layers (0 = num_layers)")
    labels: str = option("text", "text | target: supervise slot k with the text's token, or with the target's greedy "
                         "token from the same teacher-forced forward, where the text agrees with the target at slots "
                         "1..k-1 (exact labels from any text: training/labels.py)")
    mask_token_id: int = option(-1, "id whose (frozen) target embedding fills the masked slots; -1 = the first "
                                "embedding row past the tokenizer, if the embedding is padded")
    intermediate_size: int = option(0, "MLP width of the draft layers (0 = the target's)")
    feature_cache: str = option("", "folder caching target features per training sequence (pays when the data is "
                                "read more than once, and on CPU)")
    peek: bool = option(False, "block-level peeking: reveal ground-truth block tokens to intermediate layers")
    peek_max_ratio: float = option(0.5, "reveal probability at the deepest peeking layer at step 0, before the "
                                   "accuracy factor")
    peek_anneal: float = option(0.75, "the reveal ratio reaches zero at this fraction of max_steps")
    peek_ema: float = option(0.9, "smoothing of the per-layer accuracy that lowers the reveal ratio")
    init_from: str = option("", "continue from this drafter (path or Hub id) instead of random weights: a new "
                            "schedule over its weights; its shape must match the recipe's")
    init_layers: str = option("random", "random | target-top: a fresh drafter's layers start as the target's top "
                              "num_layers decoder layers (training/layer_init.py)")

    def __post_init__(self):
        super().__post_init__()
        if not self.target:
            raise RecipeError("`target` is empty: name the causal LM whose drafter is trained")
        if self.num_layers < 1:
            raise RecipeError(f"`num_layers` must be >= 1, got {self.num_layers}")
        if self.peek and self.num_layers < 2:
            raise RecipeError("`peek` needs num_layers >= 2: only intermediate layers receive reveals")
        if self.labels not in ("text", "target"):
            raise RecipeError(f"`labels` must be text or target, got {self.labels!r}")
        if not 0 <= self.peek_max_ratio <= 1:
            raise RecipeError(f"`peek_max_ratio` must be in [0, 1], got {self.peek_max_ratio}")
        if not 0 < self.peek_anneal <= 1:
            raise RecipeError(f"`peek_anneal` must be in (0, 1], got {self.peek_anneal}")
        if self.init_layers not in ("random", "target-top"):
            raise RecipeError(f"`init_layers` must be random or target-top, got {self.init_layers!r}")
        if self.init_layers == "target-top" and self.intermediate_size:
            raise RecipeError(f"`init_layers` = \"target-top\" copies the target's layers, so the MLP width must be "
                              f"the target's: leave `intermediate_size` at 0, got {self.intermediate_size}")
        if self.init_layers != "random" and self.init_from:
            raise RecipeError(f"`init_layers` = {self.init_layers!r} starts a fresh drafter, and `init_from` "
                              f"continues {self.init_from!r}: set one of them")


# -- building a config from a recipe and flags ---------------------------------------------------------------


def add_config_arguments(parser: argparse.ArgumentParser, config_class) -> None:
    """``--recipe`` plus one ``--field-name`` per dataclass field (default: absent, so the recipe wins)."""
    parser.add_argument("--recipe", help="TOML recipe file (see recipes/); flags override its values")
    add_dataclass_arguments(parser, config_class, defaults=False)


def resolve_config(config_class, args: argparse.Namespace):
    """Defaults <- ``args.recipe`` <- flags given on the command line."""
    values = read_recipe(config_class, args.recipe) if getattr(args, "recipe", None) else {}
    names = {f.name for f in dataclasses.fields(config_class)}
    values.update({k: v for k, v in vars(args).items() if k in names})
    return config_class(**values)


def read_recipe(config_class, path) -> dict:
    """Read a TOML recipe, checking every key and value type against ``config_class``."""
    path = Path(path)
    if not path.is_file():
        raise RecipeError(f"recipe file {str(path)!r} does not exist")
    with open(path, "rb") as f:
        try:
            values = tomllib.load(f)
        except tomllib.TOMLDecodeError as error:
            raise RecipeError(f"recipe {str(path)!r} is not valid TOML: {error}") from None
    kind = values.pop("kind", config_class.KIND)  # which loop the recipe is for
    if kind not in ("head", "dflash"):
        raise RecipeError(f"recipe {str(path)!r} has kind = {kind!r}; expected 'head' or 'dflash'")
    if kind != config_class.KIND:
        raise RecipeError(f"recipe {str(path)!r} is for `dels-hub train-{kind}` (kind = {kind!r}), not "
                          f"`dels-hub train-{config_class.KIND}`")
    fields = {f.name: f for f in dataclasses.fields(config_class)}
    unknown = sorted(set(values) - set(fields))
    if unknown:
        raise RecipeError(f"unknown recipe keys {unknown} in {str(path)!r} for {config_class.__name__}")
    for name, value in values.items():
        kind, item = field_type(fields[name].type)
        if kind is list and not isinstance(value, list):
            value = values[name] = [value]
        if kind is float and isinstance(value, int) and not isinstance(value, bool):
            value = values[name] = float(value)
        if kind is list and item is float:
            value = values[name] = [float(v) for v in value]
        ok = isinstance(value, kind) and (kind is not int or not isinstance(value, bool))
        if kind is list:
            ok = ok and all(isinstance(v, item) for v in value)
        if not ok:
            raise RecipeError(f"recipe key `{name}` expects {fields[name].type}, got {value!r} in {str(path)!r}")
    return values


def config_dict(config) -> dict:
    return dataclasses.asdict(config)

