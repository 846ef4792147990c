"""The DeLS local head: a tiny recurrent LM over the tokens already drafted inside the current block.

Imports only torch and transformers (plus its sibling configuration file), so that ``save_pretrained``
can ship both files to the Hub for ``AutoModel.from_pretrained(..., trust_remote_code=True)`` users.
No generation loop lives here.
"""

import torch
from torch import nn
from transformers import PreTrainedModel

from .configuration_local_head import DeLSLocalHeadConfig


class LinearGRUCell(nn.Module):
    """Bias-free GRU cell built from ``nn.Linear`` gates, so PEFT LoRA can target them (it cannot reach nn.GRU).

    r = sigmoid(W_ir x + W_hr h), z = sigmoid(W_iz x + W_hz h), n = tanh(W_in x + r * (W_hn h)),
    h' = (1 - z) * n + z * h  -- torch.nn.GRUCell's equations with the biases removed.
    """

    def __init__(self, input_size: int, hidden_size: int):
        super().__init__()
        self.hidden_size = hidden_size
        self.input_gates = nn.Linear(input_size, 3 * hidden_size, bias=False)
        self.hidden_gates = nn.Linear(hidden_size, 3 * hidden_size, bias=False)

    def forward(self, x: torch.Tensor, h: torch.Tensor) -> torch.Tensor:
        """``x [B, input_size]``, ``h [B, hidden_size]`` -> ``[B, hidden_size]``."""
        x_r, x_z, x_n = self.input_gates(x).chunk(3, dim=-1)
        h_r, h_z, h_n = self.hidden_gates(h).chunk(3, dim=-1)
        reset = torch.sigmoid(x_r + h_r)
        update = torch.sigmoid(x_z + h_z)
        candidate = torch.tanh(x_n + reset * h_n)
        # Under bf16 autocast the gates come out bf16 while the zero state is fp32; lerp needs one dtype.
        return torch.lerp(candidate, h.to(candidate.dtype), update)


class DeLSLocalHead(PreTrainedModel):
    """Short-context expert of DeLS-Spec.

    Factorized vocabulary embedding (V x embedding_rank) -> bias-free GRU (state reset to zero at every
    block) -> low-rank SiLU projection -> vocabulary logits. The buffer ``unigram_counts`` holds the counts of
    the supervised training tokens; ``log_prior()`` turns them into the add-k smoothed unigram log-prior used
    by the fusion. The output projection starts at zero, so an untrained head adds nothing to the fusion
    but the prior correction.
    """

    config_class = DeLSLocalHeadConfig
    base_model_prefix = "local_head"
    main_input_name = "input_ids"
    _no_split_modules = []

    def __init__(self, config: DeLSLocalHeadConfig):
        super().__init__(config)
        self.embed_tokens = nn.Embedding(config.vocab_size, config.embedding_rank)
        self.cell = LinearGRUCell(config.embedding_rank, config.hidden_size)
        self.rank_proj = nn.Linear(config.hidden_size, config.output_rank, bias=False)
        self.output_proj = nn.Linear(config.output_rank, config.vocab_size, bias=False)
        self.register_buffer("unigram_counts", torch.zeros(config.vocab_size, dtype=torch.float32))
        self.post_init()

    @torch.no_grad()
    def _init_weights(self, module):
        # The generic 0.02 init leaves the GRU state near 1e-3 and training barely moves for hundreds of steps:
        # unit-scale embeddings and fan-in uniform gates (torch's own GRU init) give O(1) states from step one.
        # The output projection starts at zero, so an untrained head adds nothing to the fusion.
        if module is getattr(self, "embed_tokens", None):
            nn.init.normal_(module.weight, std=1.0)
        elif module is getattr(self, "output_proj", None):
            nn.init.zeros_(module.weight)
        elif isinstance(module, nn.Linear):
            bound = module.in_features**-0.5
            nn.init.uniform_(module.weight, -bound, bound)

    def get_input_embeddings(self) -> nn.Embedding:
        return self.embed_tokens

    def set_input_embeddings(self, value: nn.Embedding) -> None:
        self.embed_tokens = value

    def initial_state(self, batch_size: int, device=None, dtype=None) -> torch.Tensor:
        """Zero GRU state ``[batch_size, hidden_size]``: the head forgets everything at each block."""
        weight = self.output_proj.weight
        device, dtype = device or weight.device, dtype or weight.dtype
        return torch.zeros(batch_size, self.config.hidden_size, device=device, dtype=dtype)

    def log_prior(self) -> torch.Tensor:
        """``[V]`` float32 log p_hat with add-k smoothing: log((c + k) / (sum(c) + k V))."""
        counts = self.unigram_counts.float() + self.config.unigram_smoothing
        return counts.log() - counts.sum().log()

    def step(self, input_ids: torch.Tensor, state: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        """Read one token per row: ``input_ids [B]``, ``state [B, hidden]`` -> ``(logits [B, V], state)``.

        Ids past the head's vocabulary (padding rows of a target embedding, which no tokenizer produces, but a
        random or misbehaving target might emit) are read as the last id instead of failing mid-generation.
        """
        input_ids = input_ids.clamp_max(self.config.vocab_size - 1)
        state = self.cell(self.embed_tokens(input_ids), state)
        return self.output_proj(nn.functional.silu(self.rank_proj(state))), state

    def forward(self, input_ids: torch.LongTensor, state: torch.Tensor | None = None, **kwargs) -> torch.Tensor:
        """Run over ``input_ids [B, T]`` from ``state`` (zero by default): ``logits [B, T, V]``.

        ``logits[:, t]`` predicts the token after ``input_ids[:, t]``, having read ``input_ids[:, :t + 1]``.
        """
        batch, length = input_ids.shape
        if state is None:
            state = self.initial_state(batch, input_ids.device)
        inputs = self.embed_tokens(input_ids)
        states = []
        for t in range(length):
            state = self.cell(inputs[:, t], state)
            states.append(state)
        return self.output_proj(nn.functional.silu(self.rank_proj(torch.stack(states, dim=1))))


DeLSLocalHeadConfig.register_for_auto_class()
DeLSLocalHead.register_for_auto_class("AutoModel")
