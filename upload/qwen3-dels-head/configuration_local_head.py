"""Configuration of the DeLS local head. Imports only transformers: this file ships to the Hub as remote code."""

from transformers import PreTrainedConfig


class DeLSLocalHeadConfig(PreTrainedConfig):
    """Sizes of the local head, its fusion defaults and the tokenizer family it was trained for.

    Args:
        vocab_size: rows of the head's own vocabulary embedding and output (the tokenizer's ids).
        embedding_rank: width of the factorized input embedding fed to the GRU (reference: 256).
        hidden_size: GRU state width (reference: 1024).
        output_rank: width of the low-rank output projection (reference: 256).
        block_size: block size the head was trained for (it reads at most block_size - 1 tokens).
        unigram_smoothing: add-k constant of the unigram log-prior.
        alpha: fusion weight of the head, a scalar or one value per fused position.
        beta: fusion weight of the unigram-prior correction, as ``alpha``.
        pure_prefix_len: leading draft positions that take the DFlash logits alone.
        tree_fusion: how token trees rank their nodes, ``{"alpha", "beta", "temperature"}`` (each optional; None:
            the chain's alpha and beta at temperature 1), tuned for trees as alpha and beta are for chains.
        tokenizer_fingerprint: ``{"vocab_size", "sha256", ...}`` of the tokenizer family, checked against
            the target's tokenizer before generation.
    """

    model_type = "dels_local_head"

    def __init__(
        self,
        vocab_size: int = 49152,
        embedding_rank: int = 256,
        hidden_size: int = 1024,
        output_rank: int = 256,
        block_size: int = 16,
        unigram_smoothing: float = 1.0,
        alpha: float | list[float] = 0.3,
        beta: float | list[float] = 0.3,
        pure_prefix_len: int = 1,
        tree_fusion: dict | None = None,
        tokenizer_fingerprint: dict | None = None,
        initializer_range: float = 0.02,
        **kwargs,
    ):
        self.vocab_size = vocab_size
        self.embedding_rank = embedding_rank
        self.hidden_size = hidden_size
        self.output_rank = output_rank
        self.block_size = block_size
        self.unigram_smoothing = unigram_smoothing
        self.alpha = alpha
        self.beta = beta
        self.pure_prefix_len = pure_prefix_len
        self.tree_fusion = tree_fusion
        self.tokenizer_fingerprint = tokenizer_fingerprint
        self.initializer_range = initializer_range
        kwargs.setdefault("tie_word_embeddings", False)
        super().__init__(**kwargs)
