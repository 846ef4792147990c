"""The n-gram baseline as a local head that needs no training: ``NGramLocalHead``, a ``PreTrainedModel`` of
count tables that the decode loop fuses as it fuses a GRU head.

It holds ``ngram.NGramHead``'s interpolated Kneser-Ney model as tensors, so that a draft step reads it without a host
sync: per order n and per kind (``raw`` counts for the order that the block's context fills, ``cont`` continuation
counts below it), the contexts' exact integer keys (sorted, found with ``searchsorted``), each context's back-off
weight, and its next tokens (at most ``top_k``, the most frequent) with their discounted probabilities. The next
tokens of all contexts lie end to end in one flat list, each context's from ``offsets[i]`` to ``offsets[i + 1]``: most
contexts of a high order were seen once, with one next token, and a fixed ``top_k`` columns per context would be
mostly padding. Contexts seen fewer than ``min_count`` times are dropped (the next lower order stands in for them),
and the discounted mass of the next tokens past ``top_k`` joins the back-off weight, so every distribution still sums
to 1.

The state is the last ``order - 1`` tokens read, -1 where nothing was read that far back; ``step`` returns
log-probabilities, which the fusion takes as the head's logits. A head with ``context_tokens`` > 0 starts each block
from the committed tokens before the anchor (``heads.context``), so its first slots are scored by the full order
instead of a bigram and a trigram; with 0 it reads the block alone, as the n-gram baseline is scored.
"""

import torch
from transformers import PretrainedConfig, PreTrainedModel

from .ngram import NGramHead

KINDS = ("raw", "cont")


class NGramHeadConfig(PretrainedConfig):
    """Sizes of an n-gram head's tables (``table_sizes``: ``"raw3": contexts``, ...; ``table_entries``: their next
    tokens, ``"raw3": entries``), how they were pruned, and what every head carries: fusion defaults (``alpha``,
    ``beta``, ``pure_prefix_len`` for chains, ``tree_fusion`` for trees: ``generation.tree.TreeFusion``) and the
    tokenizer family's fingerprint."""

    model_type = "dels_ngram_head"

    def __init__(self, vocab_size: int = 49152, order: int = 4, kept_next_tokens: int = 8, min_count: int = 2,
                 table_sizes: dict | None = None, table_entries: dict | None = None, block_size: int = 16,
                 unigram_smoothing: float = 1.0,
                 alpha: float | list[float] = 0.3, beta: float | list[float] = 0.3, pure_prefix_len: int = 1,
                 tokenizer_fingerprint: dict | None = None, context_tokens: int = 0, tree_fusion: dict | None = None,
                 **kwargs):
        if not 0 <= context_tokens <= order - 2:
            raise ValueError(f"context_tokens must be between 0 and order - 2 = {order - 2} (the state holds "
                             f"order - 1 tokens, the anchor among them), got {context_tokens}")
        self.context_tokens = context_tokens
        # Not "top_k": transformers refuses a config field that shares a generation parameter's name.
        self.vocab_size, self.order, self.kept_next_tokens = vocab_size, order, kept_next_tokens
        self.min_count = min_count
        self.table_sizes = dict(table_sizes or {})
        self.table_entries = dict(table_entries or {})
        self.block_size, self.unigram_smoothing = block_size, unigram_smoothing
        self.alpha, self.beta, self.pure_prefix_len = alpha, beta, pure_prefix_len
        self.tree_fusion = tree_fusion
        self.tokenizer_fingerprint = tokenizer_fingerprint
        super().__init__(**kwargs)


def table_names(order: int) -> list[str]:
    """``raw2 .. raw{order}`` and ``cont2 .. cont{order - 1}``: the tables an order-``order`` head holds."""
    return [f"raw{n}" for n in range(2, order + 1)] + [f"cont{n}" for n in range(2, order)]


def context_keys(contexts: torch.Tensor, vocab_size: int) -> torch.Tensor:
    """``[..., n]`` ids -> ``[...]`` int64 keys (ids read as digits base V): exact while V^n < 2^63, which
    ``NGramLocalHead.from_ngram`` checks."""
    keys = torch.zeros(contexts.shape[:-1], dtype=torch.long, device=contexts.device)
    for position in range(contexts.shape[-1]):
        keys = keys * vocab_size + contexts[..., position]
    return keys


class NGramLocalHead(PreTrainedModel):
    """An interpolated Kneser-Ney n-gram model over a tokenizer's ids, read as a DeLS local head."""

    config_class = NGramHeadConfig
    base_model_prefix = "ngram_head"
    main_input_name = "input_ids"
    _no_split_modules = []

    def __init__(self, config: NGramHeadConfig):
        super().__init__(config)
        vocab = config.vocab_size
        self.register_buffer("unigram_counts", torch.zeros(vocab))  # supervised tokens: the fusion's prior
        self.register_buffer("unigram", torch.full((vocab,), 1.0 / vocab))  # P_1, continuation-smoothed
        for name in table_names(config.order):
            size, entries = config.table_sizes.get(name, 0), config.table_entries.get(name, 0)
            self.register_buffer(f"{name}_keys", torch.zeros(size, dtype=torch.long))
            self.register_buffer(f"{name}_backoff", torch.ones(size))
            # int32: half of int64's bytes, and the entries of one table stay far below 2^31.
            self.register_buffer(f"{name}_offsets", torch.zeros(size + 1, dtype=torch.int32))
            self.register_buffer(f"{name}_ids", torch.zeros(entries, dtype=torch.int32))
            self.register_buffer(f"{name}_probs", torch.zeros(entries))
        self.post_init()

    def _init_weights(self, module):
        pass  # nothing to initialise: the tables are the model

    # A model of buffers only: transformers reads dtype and device from parameters, and there are none.
    @property
    def dtype(self) -> torch.dtype:
        return self.unigram.dtype

    @property
    def device(self) -> torch.device:
        return self.unigram.device

    @classmethod
    def from_ngram(cls, model: NGramHead, top_k: int = 8, min_count: int = 2, **config) -> "NGramLocalHead":
        """Tensor tables of a fitted ``NGramHead``, pruned to ``top_k`` next tokens per context and to contexts
        seen at least ``min_count`` times."""
        if model.vocab_size ** (model.order - 1) >= 2**63:
            raise ValueError(f"contexts of {model.order - 1} ids of a {model.vocab_size:,}-id vocabulary do not fit "
                             f"an int64 key; order {model.order} is too high for it (4 fits any vocabulary under "
                             f"2,097,152 ids, 5 any under 55,109)")
        tables = {}
        for name in table_names(model.order):
            kind, n = name[:-1], int(name[-1])
            counts = (model.raw if kind == "raw" else model.continuation)[n]
            discount = model.discounts[n if kind == "raw" else -n]
            tables[name] = _pruned_table(counts, discount, top_k, min_count)
        head = cls(NGramHeadConfig(vocab_size=model.vocab_size, order=model.order, kept_next_tokens=top_k,
                                   min_count=min_count,
                                   table_sizes={name: len(table[1]) for name, table in tables.items()},
                                   table_entries={name: len(table[2]) for name, table in tables.items()}, **config))
        with torch.no_grad():
            head.unigram.copy_(model._unigram.float())
            supervised = model.raw[1].next.get((), {})
            if supervised:
                head.unigram_counts[torch.tensor(list(supervised.keys()))] = torch.tensor(
                    list(supervised.values()), dtype=torch.float32)
            for name, (contexts, backoff, ids, probs, lengths) in tables.items():
                keys = context_keys(torch.tensor(contexts, dtype=torch.long).view(len(backoff), int(name[-1]) - 1),
                                    model.vocab_size)
                order = keys.argsort()
                getattr(head, f"{name}_keys").copy_(keys[order])
                getattr(head, f"{name}_backoff").copy_(torch.tensor(backoff)[order])
                # The next tokens follow their contexts into key order (stable: most frequent first within each).
                lengths = torch.tensor(lengths, dtype=torch.long)
                rank = torch.empty_like(order)
                rank[order] = torch.arange(len(order))
                entries = torch.argsort(rank.repeat_interleave(lengths), stable=True)
                getattr(head, f"{name}_offsets")[1:] = torch.cumsum(lengths[order], 0)
                getattr(head, f"{name}_ids").copy_(torch.tensor(ids, dtype=torch.int32)[entries])
                getattr(head, f"{name}_probs").copy_(torch.tensor(probs)[entries])
        return head

    def initial_state(self, batch_size: int, device=None, dtype=None, context: torch.Tensor | None = None
                      ) -> torch.Tensor:
        """``[batch_size, order - 1]`` ids read so far: -1, or the ``context [batch_size, c]`` (c <= order - 2, -1
        where unknown) that the block's anchor follows, in the last c columns."""
        state = torch.full((batch_size, self.config.order - 1), -1, dtype=torch.long,
                           device=device or self.unigram.device)
        width = 0 if context is None else min(context.shape[1], self.config.order - 2)
        if width:
            state[:, -width:] = context[:, -width:]
        return state

    def log_prior(self) -> torch.Tensor:
        """``[V]`` float32 log p_hat with add-k smoothing, as a GRU head's."""
        counts = self.unigram_counts.float() + self.config.unigram_smoothing
        return counts.log() - counts.sum().log()

    def _lookup(self, name: str, contexts: torch.Tensor):
        keys = getattr(self, f"{name}_keys")
        if keys.numel() == 0:
            found = torch.zeros(contexts.shape[0], dtype=torch.bool, device=contexts.device)
            return found, torch.zeros_like(found, dtype=torch.long)
        key = context_keys(contexts.clamp_min(0), self.config.vocab_size)
        index = torch.searchsorted(keys, key).clamp_max(keys.numel() - 1)
        return keys[index] == key, index

    def _table(self, name: str, index: torch.Tensor):
        """Context ``index``'s back-off weight and ``top_k`` (id, probability) columns, padded with (0, 0.0)."""
        backoff, offsets, ids, probs = (getattr(self, f"{name}_{part}") for part in ("backoff", "offsets", "ids",
                                                                                      "probs"))
        columns = (*index.shape, self.config.kept_next_tokens)
        if ids.numel() == 0:  # an empty table (``_lookup`` finds nothing in it): all padding
            return (torch.ones(index.shape, dtype=backoff.dtype, device=index.device),
                    torch.zeros(columns, dtype=torch.long, device=index.device),
                    torch.zeros(columns, dtype=probs.dtype, device=index.device))
        entry = offsets[index].long().unsqueeze(-1) + torch.arange(columns[-1], device=index.device)
        inside = entry < offsets[index + 1].long().unsqueeze(-1)
        entry = entry.clamp_max(ids.numel() - 1)
        return backoff[index], torch.where(inside, ids[entry].long(), 0), torch.where(inside, probs[entry], 0.0)

    def distribution(self, state: torch.Tensor) -> torch.Tensor:
        """``[B, V]`` P(next | the block's tokens in ``state``), float32."""
        order, rows = self.config.order, state.shape[0]
        probs = self.unigram.float().expand(rows, -1)
        for n in range(2, order + 1):
            context = state[:, order - n:]  # the last n - 1 tokens read
            valid = (context >= 0).all(-1)
            found, index = self._lookup(f"raw{n}", context)
            backoff, ids, kept = self._table(f"raw{n}", index)
            if n < order:  # below the top order, continuation counts, unless the block's context ends here
                top = valid & (state[:, order - n - 1] < 0)
                cont_found, cont_index = self._lookup(f"cont{n}", context)
                cont_backoff, cont_ids, cont_kept = self._table(f"cont{n}", cont_index)
                found = torch.where(top, found, cont_found)
                backoff = torch.where(top, backoff, cont_backoff)
                ids = torch.where(top[:, None], ids, cont_ids)
                kept = torch.where(top[:, None], kept, cont_kept)
            mixed = (backoff[:, None] * probs).scatter_add(1, ids, kept.float())
            probs = torch.where((found & valid)[:, None], mixed, probs)
        return probs

    def step(self, input_ids: torch.Tensor, state: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        """Read one token per row: ``input_ids [B]`` -> ``(log-probabilities [B, V], state)``. Ids past the
        vocabulary (a target's padding rows) are read as the last id, as a GRU head reads them."""
        token = input_ids.clamp_max(self.config.vocab_size - 1).to(state.dtype)
        state = torch.cat([state[:, 1:], token[:, None]], dim=1)
        return self.distribution(state).clamp_min(1e-30).log().to(self.unigram.dtype), state

    def forward(self, input_ids: torch.LongTensor, state: torch.Tensor | None = None, **kwargs) -> torch.Tensor:
        """``[B, T]`` block tokens -> ``[B, T, V]``: slot t predicts the token after ``input_ids[:, t]``."""
        if state is None:
            state = self.initial_state(input_ids.shape[0], input_ids.device)
        outputs = []
        for t in range(input_ids.shape[1]):
            logits, state = self.step(input_ids[:, t], state)
            outputs.append(logits)
        return torch.stack(outputs, dim=1)


def _pruned_table(counts, discount: float, top_k: int, min_count: int):
    """Flat lists of one order's table: contexts, back-off weights, each context's (at most ``top_k``) next ids and
    discounted probabilities end to end, and how many each context has."""
    contexts, backoffs, ids, probs, lengths = [], [], [], [], []
    for context, next_counts in counts.next.items():
        total = counts.total[context]
        if total < min_count:
            continue
        ranked = sorted(next_counts.items(), key=lambda item: (-item[1], item[0]))
        kept = ranked[:top_k]
        dropped_mass = sum(max(count - discount, 0.0) for _, count in ranked[top_k:]) / total
        contexts.extend(context)
        backoffs.append(discount * len(next_counts) / total + dropped_mass)
        ids.extend(token for token, _ in kept)
        probs.extend(max(count - discount, 0.0) / total for _, count in kept)
        lengths.append(len(kept))
    return contexts, backoffs, ids, probs, lengths
