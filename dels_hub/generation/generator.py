"""``DeLSGenerator``: pair a target, a DFlash drafter and (optionally) a local head; generate losslessly."""

import logging
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
from .decode import speculative_decode
from .decode_state import static_cache_supported
from .generate_arguments import (
    checked_choice,
    max_new_tokens_for,
    merged_generation_config,
    pad_id_for,
    validated_input,
    warping_for,
)
from .graph_steps import Drafting, compiled, draft_step, verify_step
from .kernel_choice import onednn_widths
from .output import DeLSGenerateOutput
from .packed_weights import PackedLinears, auto_widths, checked_packed_widths, packed_linears, packing_available
from .policy import POLICIES, is_policy, make_policy
from .settings import DecodeSettings, checked_block_size
from .tree import DEFAULT_BRANCHING, TreeFusion, budget_ladder, checked_tree

DRAFT_MODES = ("top", "sampled")
logger = logging.getLogger(__name__)

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
    cached (``generation/cost_model.py``), and may decode plainly or, with the copy expert on, verify the copy
    expert's own continuation without drafting (a copy block); ``"fixed"`` drafts every block and verifies every
    draft. ``draft_mode`` at T > 0: ``"top"`` (default) drafts the fused argmax and keeps it while the target's own
    samples match, ``"sampled"`` samples drafts and rejection-samples them (the cost-aware policy then verifies
    every draft of a drafted block: choosing from sampled drafts would bias the verifier). Every choice is exact.
    ``tree_budget`` N > 0 drafts a token tree of N nodes per block instead of a chain (``generation/tree.py``),
    each expanded node keeping its ``tree_branching`` most probable children, and verifies it in one target forward;
    at T > 0 trees verify top-token drafts. The tree ranks its nodes by the head's ``tree_fusion`` where it has one
    (``tree.TreeFusion``: alpha, beta and a temperature tuned for trees; ``alpha`` and ``beta`` here set the
    chain's). Under the cost-aware policy each drafted block is a chain or a tree of
    N, N/2, N/4, ... (down to 8) nodes, whichever has committed the most tokens per millisecond so far
    (``policy.py``); the fixed policy drafts trees only.
    """

    def __init__(self, target, drafter, head=None, tokenizer=None, *, alpha=None, beta=None, pure_prefix_len=None,
                 copy_ngram: int = 0, copy_gamma=DEFAULT_GAMMA, draft_vocab=None, policy: str = "cost-aware",
                 draft_mode: str = "top", tree_budget: int | None = None, tree_branching: int = DEFAULT_BRANCHING,
                 packed_widths="auto"):
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
        self.policy = policy if is_policy(policy) else checked_choice("policy", policy, POLICIES)
        self.draft_mode = checked_choice("draft_mode", draft_mode, DRAFT_MODES)
        # Trees rank their nodes by the head's tree_fusion (tree.TreeFusion), tuned for trees as alpha and beta are
        # for chains.
        self.tree_fusion = TreeFusion.of_head(head_config, self.pure_prefix_len, self.block_size - 1)
        self.tree = checked_tree(tree_budget, tree_branching, self.tree_fusion)
        self.packed_widths = checked_packed_widths(packed_widths)
        if self.packed_widths not in ("auto", ()) and not packing_available(target):
            raise UnsupportedInputError(f"packed_widths={packed_widths!r} needs float32 weights on a CPU and a torch "
                                        f"built with MKL; the target is {target.dtype} on {target.device}")
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
        tree_budget: int | None = None,
        tree_branching: int = DEFAULT_BRANCHING,
        packed_widths="auto",
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
            alpha: fusion weight of the head, one value or one per fused position, the draft positions after the
                pure prefix (default: the head's).
            beta: fusion weight of the unigram-prior correction, as ``alpha``.
            pure_prefix_len: leading draft positions that take DFlash alone (default: the head's).
            copy_ngram: the copy expert's longest match; 0 is off.
            copy_gamma: the copy expert's gamma, a scalar ramp or one value per match length.
            draft_vocab: prune the draft vocabulary to the head's N most frequent tokens, or to these token ids.
            policy: ``"cost-aware"`` (default), ``"fixed"``, or a policy object.
            draft_mode: at T > 0, ``"top"`` (default) or ``"sampled"``.
            tree_budget: draft a token tree of this many nodes per block instead of a chain (None or 0: chains).
            tree_branching: children kept per expanded node of the tree.
            packed_widths: step widths (tokens per row: 1 for a plain step) whose linear products run on oneDNN's
                matmul instead of ``F.linear`` (float32 on a CPU, ``packed_weights.py``): ``"auto"`` (default: the
                widths from 1 to the block size, and the tree's, that measured faster on oneDNN on this machine,
                once, cached; ``kernel_choice.py``), a tuple of widths, or None for none.
        """
        if not is_policy(policy):
            checked_choice("policy", policy, POLICIES)  # before anything loads
        checked_choice("draft_mode", draft_mode, DRAFT_MODES)
        checked_tree(tree_budget, tree_branching)
        checked_packed_widths(packed_widths)
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
                   draft_mode=draft_mode, tree_budget=tree_budget, tree_branching=tree_branching,
                   packed_widths=packed_widths)

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
        tree_budget: int | None = None,
        tree_branching: int | None = None,
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
        ``tree_budget`` and ``tree_branching`` override the generator's tree (``tree_budget=0``: chains).

        ``fast``: None keeps the target's KV cache in a static cache when the target allows it
        (``static_cache_supported``), False keeps the target's own DynamicCache, True forces the static cache (and
        fails if it cannot serve the target). The loop is the same, and so are the tokens.
        """
        tree = self.tree if tree_budget is None and tree_branching is None else checked_tree(
            (self.tree.budget if self.tree else 0) if tree_budget is None else tree_budget,
            (self.tree.branching if self.tree else DEFAULT_BRANCHING) if tree_branching is None else tree_branching,
            self.tree_fusion)
        policy = self.policy if policy is None else policy
        if not is_policy(policy):
            checked_choice("policy", policy, POLICIES)
        draft_mode = self.draft_mode if draft_mode is None else checked_choice("draft_mode", draft_mode, DRAFT_MODES)
        copy = self.copy if copy_ngram is None and copy_gamma is None else CopySettings(
            self.copy.max_ngram if copy_ngram is None else copy_ngram,
            self.copy.gamma if copy_gamma is None else copy_gamma,
        )
        input_ids, prompt_lengths = validated_input(self.target, input_ids, attention_mask)
        config = merged_generation_config(self.target, generation_config, kwargs)
        max_new_tokens = max_new_tokens_for(config, input_ids.shape[1])
        warping = warping_for(config)
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
                                  pad_id=pad_id_for(config), draft_mode=draft_mode, tree=tree)
        static_cache = self._use_static_cache(fast)
        self._check_batch(input_ids.shape[0], streamer, static_cache)
        if generator is None and seed is not None:
            generator = torch.Generator(device=self.device).manual_seed(seed)
        packed = self.packed(settings.block_size, tree, input_ids.shape[0], static_cache)
        result = speculative_decode(self.target, self.drafter, input_ids, settings, prompt_lengths=prompt_lengths,
                                    head=self.head, generator=generator, streamer=streamer,
                                    static_cache=static_cache, compile=self.compile, workspace=self._workspace,
                                    lm_head=self.draft_lm_head, packed=packed,
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
                              compile=self.compile,
                              packed=self._packed_widths(settings.block_size, None, batch, static_cache))
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
        packed = self.packed(settings.block_size, None, batch, static_cache)
        if packed is not None:
            verify = packed.wrap(verify)
        return calibrate(self.target, drafting, block_size=settings.block_size, batch=batch,
                         static_cache=static_cache, verify=verify, draft=draft_step, key=key, widths=widths)

    def _packed_widths(self, block_size: int, tree=None, batch: int = 1, static_cache: bool = True) -> tuple[
            int, ...]:
        """The step widths on oneDNN in a call with ``block_size``, ``batch`` rows (and ``tree``: its verifies of up
        to its budget's nodes and the root too, under ``"auto"``): none compiled (inductor has its own kernels).
        ``"auto"`` keeps the widths that measured faster on oneDNN on this machine (``kernel_choice.py``): every
        chain width, and each tree of the call's ladder at its own size."""
        if self.compile:
            return ()
        if self.packed_widths != "auto":
            return self.packed_widths
        trees = budget_ladder(tree) if tree is not None else []
        candidates = auto_widths(self.target, max(block_size, tree.budget + 1 if tree is not None else 0))
        measured = tuple(sorted(set(range(1, block_size + 1)) | {shape.budget + 1 for shape in trees}))
        return onednn_widths(self.target, candidates, measured, batch=batch, static_cache=static_cache)

    def packed(self, block_size: int, tree=None, batch: int = 1, static_cache: bool = True) -> PackedLinears | None:
        """The target's linear layers on oneDNN for a call with ``block_size``, ``tree`` and ``batch`` rows (shared
        with every generator over the same target), or None. The cost model's key names the chain's widths only:
        its calibration times chains."""
        return packed_linears(self.target, self._packed_widths(block_size, tree, batch, static_cache))

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
