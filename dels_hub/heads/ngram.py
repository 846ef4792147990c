"""A count-based n-gram model that reads a block as a local head does: the baseline that anchors head quality.

At block slot t it sees only the block's tokens 0..t (the anchor and the drafts so far), so it conditions on the
last ``min(t + 1, order - 1)`` of them: slot 0 is a bigram, slot 1 a trigram, and so on up to ``order``. Its
distribution is interpolated Kneser-Ney (Chen and Goodman, 1998) with one absolute discount per order,
``D = n1 / (n1 + 2 n2)``: the order that the block's context fills is scored by raw counts, each lower order by
continuation counts (how many distinct tokens precede a context), and the unigram level is interpolated with the
uniform distribution so that no token has probability 0.

``forward(input_ids [M, k]) -> [M, k, V]`` returns log-probabilities, the shape of ``DeLSLocalHead``'s logits, so
the training loop's evaluation scores it exactly as it scores a head.
"""

from collections import Counter, defaultdict

import torch
from torch import nn

MIN_ORDER = 2


class NGramCounts:
    """The counts of one order: per context (a tuple of ids), the next tokens' counts, their total and the
    number of distinct next tokens."""

    def __init__(self):
        self.next: dict[tuple, Counter] = defaultdict(Counter)

    def freeze(self) -> None:
        self.next = dict(self.next)
        self.total = {context: sum(counts.values()) for context, counts in self.next.items()}

    def discount(self) -> float:
        """Ney's estimate ``n1 / (n1 + 2 n2)`` from the counts of counts, clipped into (0, 1)."""
        counts_of_counts = Counter(count for counts in self.next.values() for count in counts.values() if count <= 2)
        n1, n2 = counts_of_counts[1], counts_of_counts[2]
        return min(max(n1 / (n1 + 2 * n2), 0.05), 0.95) if n1 else 0.5


class NGramHead(nn.Module):
    """An interpolated Kneser-Ney n-gram model over a tokenizer's ids, scored like a local head."""

    def __init__(self, vocab_size: int, order: int = 4):
        super().__init__()
        if order < MIN_ORDER:
            raise ValueError(f"order must be >= {MIN_ORDER} (a bigram), got {order}")
        self.vocab_size, self.order = vocab_size, order
        self.register_buffer("_device_probe", torch.zeros(0), persistent=False)

    @classmethod
    def fit(cls, sequences, vocab_size: int, order: int = 4) -> "NGramHead":
        """Count every n-gram of ``sequences``: pairs ``(ids [T], supervised [T])``, where only n-grams that end
        on a supervised token count (the tokens a head is trained to predict)."""
        model = cls(vocab_size, order)
        raw = {n: NGramCounts() for n in range(1, order + 1)}  # n: the order, context length n - 1
        for ids, supervised in sequences:
            ids, supervised = ids.tolist(), supervised.tolist()
            for end, token in enumerate(ids):
                if not supervised[end]:
                    continue
                for n in range(1, order + 1):
                    if end - n + 1 < 0:
                        break
                    raw[n].next[tuple(ids[end - n + 1 : end])][token] += 1
        # Continuation counts of order n < order: the distinct tokens seen before (context, token) at order n + 1.
        continuation = {n: NGramCounts() for n in range(1, order)}
        for n in range(1, order):
            for longer_context, counts in raw[n + 1].next.items():
                for token in counts:
                    continuation[n].next[longer_context[1:]][token] += 1
        for table in (*raw.values(), *continuation.values()):
            table.freeze()
        model.raw, model.continuation = raw, continuation
        model.discounts = {n: raw[n].discount() for n in raw} | {-n: continuation[n].discount() for n in continuation}
        model._unigram = model._unigram_probs()
        return model

    def _unigram_probs(self) -> torch.Tensor:
        """``[V]`` continuation unigram, interpolated with the uniform distribution."""
        table, discount = self.continuation.get(1) or self.raw[1], self.discounts.get(-1, self.discounts[1])
        counts = table.next.get((), Counter())
        total = max(table.total.get((), 0), 1)
        probs = torch.zeros(self.vocab_size, dtype=torch.float64)
        if counts:
            ids = torch.tensor(list(counts.keys()))
            probs[ids] = (torch.tensor(list(counts.values()), dtype=torch.float64) - discount).clamp_min(0) / total
        leftover = 1.0 - probs.sum()
        return probs + leftover / self.vocab_size

    def distribution(self, context: tuple) -> torch.Tensor:
        """``[V]`` P(next | context) in float64; ``context`` is at most ``order - 1`` ids."""
        probs = self._unigram
        top = len(context) + 1
        for n in range(2, top + 1):
            table, discount = (self.raw[n], self.discounts[n]) if n == top else (self.continuation[n],
                                                                                self.discounts[-n])
            suffix = context[len(context) - n + 1 :]
            counts = table.next.get(suffix)
            if not counts:
                continue  # an unseen context: the lower order's distribution stands
            total = table.total[suffix]
            ids = torch.tensor(list(counts.keys()))
            seen = (torch.tensor(list(counts.values()), dtype=torch.float64) - discount).clamp_min(0) / total
            probs = probs * (discount * len(counts) / total)
            probs = probs.index_add(0, ids, seen)
        return probs

    def forward(self, input_ids: torch.Tensor) -> torch.Tensor:
        """``[M, k]`` block tokens -> ``[M, k, V]`` log P(token at slot t + 1 | block tokens 0..t)."""
        rows, slots = input_ids.shape
        out = torch.empty(rows, slots, self.vocab_size, dtype=torch.float32)
        ids = input_ids.tolist()
        cache: dict[tuple, torch.Tensor] = {}
        for row in range(rows):
            for slot in range(slots):
                context = tuple(ids[row][max(0, slot + 2 - self.order) : slot + 1])
                if context not in cache:
                    cache[context] = self.distribution(context).log().float()
                out[row, slot] = cache[context]
        return out.to(self._device_probe.device)
