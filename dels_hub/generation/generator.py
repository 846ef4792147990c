"""``DeLSGenerator``: pair a target, a DFlash drafter and (optionally) a local head; generate losslessly."""

import copy
import logging
import numbers
import os

import torch
from transformers import GenerationConfig

from ..checks import check_compatibility
from ..copy_expert import DEFAULT_GAMMA, CopySettings
from ..draft_vocabulary import DraftVocabulary, checked_token_ids, most_frequent
from ..errors import DraftVocabularyError, DtypeMismatchError, GenerationArgumentError, UnsupportedInputError
from ..fusion import fusion_weights
from ..loading import load_dflash, load_head, load_target, tokenizer_for
from ..locations import model_location, with_gguf_file
from ..sampling import Warping
from .cost_model import calibrate, calibration_key, cost_model_for
from .decode import speculative_decode, static_cache_supported
from .graph_steps import Drafting, compiled, draft_step, verify_step
from .output import DeLSGenerateOutput
from .policy import POLICIES, is_policy, make_policy
from .settings import DecodeSettings, checked_block_size

DRAFT_MODES = ("top", "sampled")
logger = logging.getLogger(__name__)

# transformers' own defaults for fields a generation config leaves unset (GenerationConfig
# ._get_default_generation_params); ours must be the same for the drop-in to sample the same distribution.
GENERATION_DEFAULTS = {"max_length": 20, "do_sample": False, "temperature": 1.0, "top_k": 50, "top_p": 1.0}
# Types of the fields the loop reads (transformers does not check them; a string would fail deep inside).
INTEGER, NUMBER, FLAG = (numbers.Integral, "an integer"), (numbers.Real, "a number"), (bool, "True or False")
GENERATION_TYPES = {"max_new_tokens": INTEGER, "max_length": INTEGER, "top_k": INTEGER, "temperature": NUMBER,
                    "top_p": NUMBER, "do_sample": FLAG}
# Logits processors the loop does not apply: a non-default value would change the target's distribution.
UNSUPPORTED = {
    "num_beams": 1,
    "num_return_sequences": 1,
    "repetition_penalty": 1.0,
    "no_repeat_ngram_size": 0,
    "min_length": 0,
    "min_new_tokens": None,
    "min_p": None,
    "typical_p": 1.0,
}


NO_HEAD_TO_COUNT = ("draft_vocab={} keeps the most frequent tokens by a head's unigram counts, and there is no head: "
                    "pass the token ids to keep instead")


class DeLSGenerator:
    """Speculative decoding with a frozen DFlash drafter, optionally fused with a DeLS local head.

    ``head=None`` is the DFlash-only baseline. Compatibility is checked once, here, before any work.
    ``copy_ngram``/``copy_gamma`` turn on the copy expert (``copy_expert.CopySettings``: longest match up to
    ``copy_ngram`` tokens, gamma a scalar ramp or one value per match length); 0 is off. They are decoding
    settings, not a head's, and work with or without a head.
    ``draft_vocab`` prunes the draft vocabulary (``draft_vocabulary.py``): an int N keeps the head's N most
    frequent tokens (its unigram counts), a tensor of token ids keeps those; None scores every token.
    ``policy`` decides per block whether to draft and how many drafts to verify: ``"cost-aware"`` (the default)
    maximises expected tokens per millisecond from a cost model of this device, calibrated at the first call and
    cached (``generation/cost_model.py``), and may decode plainly; ``"fixed"`` drafts every block and verifies every
    draft. ``draft_mode`` at T > 0: ``"top"`` (default) drafts the fused argmax and keeps it while the target's own
    samples match, ``"sampled"`` samples drafts and rejection-samples them (the cost-aware policy then verifies
    every draft of a drafted block: choosing from sampled drafts would bias the verifier). Every choice is exact.
    """

    def __init__(self, target, drafter, head=None, tokenizer=None, *, alpha=None, beta=None, pure_prefix_len=None,
                 copy_ngram: int = 0, copy_gamma=DEFAULT_GAMMA, draft_vocab=None, policy: str = "cost-aware",
                 draft_mode: str = "top"):
        check_compatibility(target, drafter, head, tokenizer)
        for name, part in (("drafter", drafter), ("head", head)):
            if part is not None and part.dtype != target.dtype:  # else a matmul fails mid-generation
                raise DtypeMismatchError(
                    f"the {name} is {part.dtype} but the target is {target.dtype}: load it with "
                    f"dtype={target.dtype} or call .to({target.dtype}) (from_pretrained does this)"
                )
        self.target = target.eval()
        self.drafter = drafter.eval()
        self.head = head.eval() if head is not None else None
        self.tokenizer = tokenizer
        head_config = head.config if head is not None else None
        self.alpha = alpha if alpha is not None else getattr(head_config, "alpha", 0.0)
        self.beta = beta if beta is not None else getattr(head_config, "beta", 0.0)
        self.pure_prefix_len = (
            pure_prefix_len if pure_prefix_len is not None else getattr(head_config, "pure_prefix_len", 1)
        )
        # Validate the schedules now, not at the first generate call.
        fusion_weights(self.alpha, self.beta, self.pure_prefix_len, self.block_size - 1)
        self.copy = CopySettings(copy_ngram, copy_gamma)
        self.draft_lm_head = self._draft_lm_head(draft_vocab)
        self.policy = policy if is_policy(policy) else _checked_choice("policy", policy, POLICIES)
        self.draft_mode = _checked_choice("draft_mode", draft_mode, DRAFT_MODES)
        self._policies: dict = {}  # one cost-aware policy per calibration key and draft mode: what it learned stays
        # Opt-in: compile the static loop's per-block steps, verify and draft + head (CUDA graphs on CUDA). Off until
        # measured on a GPU. Compiled on CUDA, seeded sampling draws differently from the eager loop (same
        # distribution).
        self.compile = False
        self._workspace: dict = {}  # the static loop's reusable caches (graphs replay against them)
        self._cost_models: dict = {}

    @classmethod
    def from_pretrained(
        cls,
        target,
        dflash,
        head=None,
        *,
        dtype=None,
        device=None,
        tokenizer=None,
        alpha=None,
        beta=None,
        pure_prefix_len=None,
        copy_ngram: int = 0,
        copy_gamma=DEFAULT_GAMMA,
        draft_vocab=None,
        policy: str = "cost-aware",
        draft_mode: str = "top",
        **target_kwargs,
    ) -> "DeLSGenerator":
        """Load or adopt the three parts.

        Args:
            target: Hub id, local path or loaded causal LM. ``target_kwargs`` (e.g. ``gguf_file``) pass
                through to its ``from_pretrained``.
            dflash: Hub id, local path (z-lab format) or loaded ``DFlashDraftModel``.
            head: Hub id, local path or loaded ``DeLSLocalHead``; None for DFlash only.
            dtype: dtype of the target (default: the checkpoint's); drafter and head follow the target.
            device: where to put all three (default: where the target is).
            tokenizer: needed with a head when the target is an in-memory model.
            alpha, beta, pure_prefix_len, copy_ngram, copy_gamma, draft_vocab, policy, draft_mode: decoding
                settings, as in ``DeLSGenerator``.
        """
        if not is_policy(policy):
            _checked_choice("policy", policy, POLICIES)  # before anything loads
        _checked_choice("draft_mode", draft_mode, DRAFT_MODES)
        if head is None and isinstance(draft_vocab, int) and not isinstance(draft_vocab, bool):
            raise DraftVocabularyError(NO_HEAD_TO_COUNT.format(draft_vocab))
        if isinstance(target, (str, os.PathLike)):  # a bad path, or a folder with several GGUF files, fails here
            target_kwargs = with_gguf_file(target, target_kwargs)
            target = model_location(target, "target")
        # The small parts first: a missing or damaged drafter or head fails before the target is loaded.
        drafter = load_dflash(dflash, dtype)
        head = load_head(head, dtype)
        tokenizer = tokenizer_for(target, tokenizer, **target_kwargs)
        target = load_target(target, dtype, **target_kwargs)
        if device is not None:
            target = target.to(device)
        place = {"device": target.device, "dtype": target.dtype}
        drafter = drafter.to(**place)
        if head is not None:
            head = head.to(**place)
        return cls(target, drafter, head, tokenizer, alpha=alpha, beta=beta, pure_prefix_len=pure_prefix_len,
                   copy_ngram=copy_ngram, copy_gamma=copy_gamma, draft_vocab=draft_vocab, policy=policy,
                   draft_mode=draft_mode)

    @property
    def block_size(self) -> int:
        """The block size the drafter was trained for (the default and the maximum)."""
        return self.drafter.config.block_size

    @property
    def device(self) -> torch.device:
        return self.target.device

    @property
    def cost_models(self) -> list:
        """The cost models the cost-aware policy has used so far (one per calibration key), with their online
        ratios: ``verify_ms`` by width and ``draft_ms`` say what a block costs on this device."""
        return list(self._cost_models.values())

    def generate(
        self,
        input_ids=None,
        attention_mask=None,
        generation_config: GenerationConfig | None = None,
        *,
        streamer=None,
        return_dict_in_generate: bool | None = None,
        seed: int | None = None,
        generator: torch.Generator | None = None,
        block_size: int | None = None,
        alpha=None,
        beta=None,
        copy_ngram: int | None = None,
        copy_gamma=None,
        fast: bool | None = None,
        policy: str | None = None,
        draft_mode: str | None = None,
        **kwargs,
    ):
        """Drop-in for ``target.generate``: returns ``LongTensor [B, prompt + new]``, or a
        ``DeLSGenerateOutput`` with ``return_dict_in_generate=True``.

        ``input_ids [B, N]`` (or a tokenizer's ``BatchEncoding``): a batch is left-padded, with its
        ``attention_mask``. Rows accept, stop and end on their own; a row that ends early is filled with
        ``pad_token_id`` (else the EOS token) up to the longest row, as transformers does.

        Generation fields (``max_new_tokens``, ``max_length``, ``do_sample``, ``temperature``, ``top_k``,
        ``top_p``, ``eos_token_id``, ``pad_token_id``, ...) come from ``kwargs``, then ``generation_config``,
        then the target's generation config, then transformers' defaults. Greedy output equals the target's
        greedy output; sampled output is distributed as the target's own sampling.

        ``block_size``, ``alpha``, ``beta``, ``copy_ngram``, ``copy_gamma``, ``policy``, ``draft_mode`` override this
        generator's settings for this call; ``policy`` may also be a policy object (``CostAware`` over a cost model of
        your own, ``FixedBlocks``). What the policy chose is in ``policy_summary`` of the returned dict.

        ``fast``: None keeps the target's KV cache in a static cache when the target allows it
        (``static_cache_supported``), False keeps the target's own DynamicCache, True forces the static cache (and
        fails if it cannot serve the target). The loop is the same, and so are the tokens.
        """
        policy = self.policy if policy is None else policy
        if not is_policy(policy):
            _checked_choice("policy", policy, POLICIES)
        draft_mode = self.draft_mode if draft_mode is None else _checked_choice("draft_mode", draft_mode, DRAFT_MODES)
        copy = self.copy if copy_ngram is None and copy_gamma is None else CopySettings(
            self.copy.max_ngram if copy_ngram is None else copy_ngram,
            self.copy.gamma if copy_gamma is None else copy_gamma,
        )
        input_ids, prompt_lengths = self._validate_input(input_ids, attention_mask)
        config = self._merge_generation_config(generation_config, kwargs)
        max_new_tokens = self._max_new_tokens(config, input_ids.shape[1])
        warping = self._warping(config)
        block_size = self._block_size(block_size)
        stop_ids = self._stop_ids(config.eos_token_id)
        weights = fusion_weights(
            self.alpha if alpha is None else alpha,
            self.beta if beta is None else beta,
            self.pure_prefix_len,
            max(block_size - 1, 0),
            device=self.device,
        )
        settings = DecodeSettings(max_new_tokens, block_size, warping, stop_ids, *weights, copy.weights(self.device),
                                  pad_id=self._pad_id(config), draft_mode=draft_mode)
        static_cache = self._use_static_cache(fast)
        self._check_batch(input_ids.shape[0], streamer, static_cache)
        if generator is None and seed is not None:
            generator = torch.Generator(device=self.device).manual_seed(seed)
        result = speculative_decode(self.target, self.drafter, input_ids, settings, prompt_lengths=prompt_lengths,
                                    head=self.head, generator=generator, streamer=streamer,
                                    static_cache=static_cache, compile=self.compile, workspace=self._workspace,
                                    lm_head=self.draft_lm_head,
                                    policy=self.draft_policy(policy, settings, input_ids.shape[0], static_cache))
        if not (return_dict_in_generate or config.return_dict_in_generate):
            return result.sequences
        return DeLSGenerateOutput(
            sequences=result.sequences,
            acceptance_lengths=result.acceptance_lengths,
            num_new_tokens=sum(1 + sum(row) for row in result.row_acceptance_lengths),
            time_to_first_token=result.time_to_first_token,
            decode_seconds=result.decode_seconds,
            row_acceptance_lengths=result.row_acceptance_lengths,
            policy_summary=result.policy,
        )

    def draft_policy(self, name: str, settings: DecodeSettings, batch: int, static_cache: bool):
        """The policy of a call: a policy object as given, ``"fixed"``, or this generator's cost-aware policy for the
        call's calibration key and draft mode, over a cost model measured once (``cost_model.calibrate``) and cached
        on disk under that key."""
        if is_policy(name):
            blocks = name.cost.block_size if name.cost is not None else settings.block_size
            if blocks != settings.block_size:
                raise GenerationArgumentError(f"the policy's cost model covers blocks of {blocks} tokens but this "
                                              f"call drafts blocks of {settings.block_size}")
            return name
        if name == "fixed" or settings.block_size == 1 or settings.max_new_tokens == 1:  # nothing to draft: no cost
            return make_policy("fixed", None)
        vocab = self.draft_lm_head
        key = calibration_key(self.target, self.drafter, self.head, block_size=settings.block_size, batch=batch,
                              copy=settings.copy_weights is not None,
                              draft_vocab=None if vocab is None else int(vocab.token_ids.numel()),
                              compile=self.compile)
        mode = "greedy" if settings.warping.greedy else settings.draft_mode
        slot = (repr(key), mode)
        if slot not in self._policies:
            # Compiled runs verify at a few fixed widths, one graph each: powers of two and the whole block.
            widths = None
            if self.compile:
                widths = tuple(sorted({w for w in (1, 2, 4, 8, 16, 32) if w < settings.block_size}
                                      | {settings.block_size}))
            cost = self._cost_models.get(repr(key))
            if cost is None:
                cost, cached = cost_model_for(key, lambda: self._calibrate(settings, batch, static_cache, key,
                                                                           widths))
                logger.info("cost model %s: verify %s ms, draft %.1f ms", "read from cache" if cached else
                            "calibrated", [round(ms, 1) for ms in cost.verify_ms], cost.draft_ms)
                self._cost_models[repr(key)] = cost
            self._policies[slot] = make_policy(name, cost, widths)
        return self._policies[slot]

    def _calibrate(self, settings: DecodeSettings, batch: int, static_cache: bool, key: dict, widths):
        logger.info("calibrating the cost model for %s (once; cached)", key["device"])
        head = self.head
        drafting = Drafting(self.drafter, self.target.get_input_embeddings(),
                            self.draft_lm_head or self.target.get_output_embeddings(), Warping(), head,
                            head.log_prior().to(self.device) if head is not None else None, settings.alpha,
                            settings.beta, settings.copy_weights, confidence=True)
        verify = compiled(verify_step, self.device) if self.compile and static_cache else verify_step
        return calibrate(self.target, drafting, block_size=settings.block_size, batch=batch,
                         static_cache=static_cache, verify=verify, draft=draft_step, key=key, widths=widths)

    # -- validation at the boundary -------------------------------------------------------------------

    def _draft_lm_head(self, draft_vocab) -> DraftVocabulary | None:
        if draft_vocab is None:
            return None
        lm_head = self.target.get_output_embeddings()
        if isinstance(draft_vocab, bool) or not isinstance(draft_vocab, int):
            return DraftVocabulary(lm_head, checked_token_ids(draft_vocab, lm_head.weight.shape[0]))
        if self.head is None:
            raise DraftVocabularyError(NO_HEAD_TO_COUNT.format(draft_vocab))
        return DraftVocabulary(lm_head, most_frequent(self.head.unigram_counts, draft_vocab))

    def _validate_input(self, input_ids, attention_mask) -> tuple[torch.Tensor, list[int] | None]:
        """``(input_ids [B, N] on the device, each row's real length or None when no row is padded)``."""
        if hasattr(input_ids, "keys") and "input_ids" in input_ids:  # a BatchEncoding from a tokenizer
            attention_mask = input_ids.get("attention_mask", attention_mask)
            input_ids = input_ids["input_ids"]
        if not isinstance(input_ids, torch.Tensor):
            raise UnsupportedInputError(f"input_ids must be a LongTensor [B, N], got {type(input_ids).__name__}")
        if input_ids.dim() == 1:
            input_ids = input_ids.unsqueeze(0)
        if input_ids.dim() != 2 or input_ids.shape[0] == 0:
            raise UnsupportedInputError(f"input_ids has shape {tuple(input_ids.shape)}; expected [B, N] with B >= 1")
        if input_ids.shape[1] == 0:
            raise UnsupportedInputError("input_ids is empty; the prompt needs at least one token")
        if input_ids.dtype.is_floating_point or input_ids.dtype.is_complex or input_ids.dtype == torch.bool:
            raise UnsupportedInputError(f"input_ids must hold integer token ids (torch.long), got {input_ids.dtype}")
        mask = torch.ones_like(input_ids) if attention_mask is None else torch.as_tensor(attention_mask)
        if mask.shape != input_ids.shape:
            raise UnsupportedInputError(f"attention_mask has shape {tuple(mask.shape)}, input_ids "
                                        f"{tuple(input_ids.shape)}; expected the same")
        mask = mask.to(input_ids.device)
        not_left_padded = ((mask != 0) & (mask != 1)).any(1) | (mask[:, 1:] < mask[:, :-1]).any(1)
        # One host transfer: the id range, each row's length, and whether each row is left-padded 0s then 1s.
        low, high, *facts = torch.cat([torch.stack([input_ids.min(), input_ids.max()]), mask.sum(1),
                                       not_left_padded.long()]).tolist()
        lengths, bad_rows = facts[: input_ids.shape[0]], facts[input_ids.shape[0] :]
        rows = self.target.get_input_embeddings().weight.shape[0]
        if low < 0 or high >= rows:
            bad = low if low < 0 else high
            raise UnsupportedInputError(f"input_ids holds token id {bad}, outside the target's embedding rows "
                                        f"0..{rows - 1}")
        if any(bad_rows):
            row = bad_rows.index(1)
            raise UnsupportedInputError(
                f"attention_mask row {row} is {mask[row].tolist()}: expected left padding, zeros then ones (decoder-"
                "only models generate after the last token; tokenize with padding_side='left')"
            )
        if 0 in lengths:
            raise UnsupportedInputError(f"attention_mask row {lengths.index(0)} is all zeros; every prompt needs at "
                                        "least one token")
        return input_ids.to(self.device), (None if min(lengths) == input_ids.shape[1] else lengths)

    def _check_batch(self, batch: int, streamer, static_cache: bool) -> None:
        if batch == 1:
            return
        if streamer is not None:
            raise UnsupportedInputError(f"a streamer takes one sequence; input_ids has a batch of {batch} "
                                        "(transformers refuses this too)")
        if self.compile:
            raise UnsupportedInputError(f"compiled decoding runs one row at a time for now; input_ids has a batch of "
                                        f"{batch}: set compile = False, or generate row by row")
        if not static_cache:
            reason = static_cache_supported(self.target) or "fast=False"
            raise UnsupportedInputError(f"batches need the static-cache loop, which cannot run here ({reason}); "
                                        f"input_ids has a batch of {batch}: generate row by row")

    @staticmethod
    def _pad_id(config: GenerationConfig) -> int:
        """What fills a batch row after its end: the pad token, else the (first) EOS token, as transformers does."""
        for value in (config.pad_token_id, config.eos_token_id):
            if value is not None:
                return value if isinstance(value, int) else list(value)[0]
        return 0

    def _merge_generation_config(self, generation_config, kwargs) -> GenerationConfig:
        config = copy.deepcopy(generation_config or self.target.generation_config or GenerationConfig())
        _check_types(kwargs)  # before transformers' own validation compares them
        try:
            unused = config.update(**kwargs)
        except ValueError as error:  # transformers' own validation, e.g. max_new_tokens=0
            raise GenerationArgumentError(str(error)) from error
        if unused:
            raise GenerationArgumentError(f"unknown generation arguments {sorted(unused)}")
        for name, default in GENERATION_DEFAULTS.items():
            if getattr(config, name, None) is None:
                setattr(config, name, default)
        _check_types({name: getattr(config, name, None) for name in GENERATION_TYPES})
        for name, neutral in UNSUPPORTED.items():
            value = getattr(config, name, neutral)
            if value is not None and value != neutral:
                raise GenerationArgumentError(
                    f"{name}={value} is not supported by DeLSGenerator (expected {neutral}); "
                    "it would change the target's distribution, which the verifier must preserve"
                )
        return config

    @staticmethod
    def _max_new_tokens(config: GenerationConfig, prompt_len: int) -> int:
        max_new = config.max_new_tokens if config.max_new_tokens is not None else config.max_length - prompt_len
        if max_new < 1:
            raise GenerationArgumentError(
                f"max_new_tokens resolves to {max_new} (max_new_tokens={config.max_new_tokens}, "
                f"max_length={config.max_length}, prompt length {prompt_len}); expected >= 1"
            )
        return max_new

    @staticmethod
    def _warping(config: GenerationConfig) -> Warping:
        if not config.do_sample:
            return Warping()
        if not config.temperature > 0:
            raise GenerationArgumentError(f"temperature must be > 0 when sampling, got {config.temperature}")
        if not 0 < config.top_p <= 1:
            raise GenerationArgumentError(f"top_p must be in (0, 1], got {config.top_p}")
        if config.top_k < 0:
            raise GenerationArgumentError(f"top_k must be >= 0, got {config.top_k}")
        return Warping(temperature=float(config.temperature), top_k=int(config.top_k), top_p=float(config.top_p))

    def _use_static_cache(self, fast: bool | None) -> bool:
        reason = static_cache_supported(self.target)
        if fast and reason is not None:
            raise GenerationArgumentError(f"fast=True but the static-cache loop cannot run this target: {reason}")
        return reason is None if fast is None else fast

    def _block_size(self, block_size: int | None) -> int:
        return self.block_size if block_size is None else checked_block_size(block_size, self.block_size)

    def _stop_ids(self, eos_token_id) -> torch.Tensor:
        ids = [] if eos_token_id is None else [eos_token_id] if isinstance(eos_token_id, int) else list(eos_token_id)
        return torch.tensor(ids, dtype=torch.long, device=self.device)


def _check_types(values: dict) -> None:
    """The generation fields the loop reads must have their types; transformers does not check them, and a string
    ``max_new_tokens`` would fail deep inside."""
    for name, (kind, expected) in GENERATION_TYPES.items():
        value = values.get(name)
        if value is not None and (isinstance(value, bool) != (kind is bool) or not isinstance(value, kind)):
            raise GenerationArgumentError(f"{name} must be {expected}, got {value!r} ({type(value).__name__})")


def _checked_choice(name: str, value, choices: tuple) -> str:
    if value not in choices:
        raise GenerationArgumentError(f"{name} must be one of {choices}, got {value!r}")
    return value
