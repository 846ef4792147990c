"""The DFlash block drafter, numerically the z-lab ``DFlashDraftModel``, loaded without remote code.

One forward pass drafts a whole block: the block ``[anchor, MASK x (bs-1)]`` attends, non-causally, to
itself and to context features taken from the target's hidden states. The model owns no embedding and
no LM head; the caller embeds the block with the target's ``embed_tokens`` and reads logits with the
target's ``lm_head``. This file holds modules only, no generation loop.
"""

from collections.abc import Callable

import torch
from torch import nn
from transformers import PreTrainedModel
from transformers.modeling_utils import ALL_ATTENTION_FUNCTIONS
from transformers.models.qwen3.modeling_qwen3 import (
    Qwen3MLP,
    Qwen3RMSNorm,
    Qwen3RotaryEmbedding,
    eager_attention_forward,
    rotate_half,
)

from .configuration_dflash import DFlashConfig


def _rotate(x: torch.Tensor, cos: torch.Tensor, sin: torch.Tensor) -> torch.Tensor:
    """RoPE on ``x [B, heads, T, d]`` with ``cos``/``sin [B, T, d]``."""
    cos, sin = cos.unsqueeze(1), sin.unsqueeze(1)
    return x * cos + rotate_half(x) * sin


class DFlashAttention(nn.Module):
    """Qwen3 attention whose keys/values are ``[context features | block]`` and whose block is bidirectional."""

    def __init__(self, config: DFlashConfig, layer_idx: int):
        super().__init__()
        self.config = config
        self.layer_idx = layer_idx
        self.head_dim = config.head_dim
        self.num_key_value_groups = config.num_attention_heads // config.num_key_value_heads
        self.scaling = self.head_dim**-0.5
        self.attention_dropout = config.attention_dropout
        # Read by transformers' sdpa/flash interfaces: the draft block sees all of itself.
        self.is_causal = False
        layer_type = config.layer_types[layer_idx] if config.layer_types else "full_attention"
        self.sliding_window = config.sliding_window if layer_type == "sliding_attention" else None
        bias = config.attention_bias
        self.q_proj = nn.Linear(config.hidden_size, config.num_attention_heads * self.head_dim, bias=bias)
        self.k_proj = nn.Linear(config.hidden_size, config.num_key_value_heads * self.head_dim, bias=bias)
        self.v_proj = nn.Linear(config.hidden_size, config.num_key_value_heads * self.head_dim, bias=bias)
        self.o_proj = nn.Linear(config.num_attention_heads * self.head_dim, config.hidden_size, bias=bias)
        self.q_norm = Qwen3RMSNorm(self.head_dim, eps=config.rms_norm_eps)
        self.k_norm = Qwen3RMSNorm(self.head_dim, eps=config.rms_norm_eps)

    def forward(
        self,
        hidden_states: torch.Tensor,
        context: torch.Tensor,
        position_embeddings: tuple[torch.Tensor, torch.Tensor],
        attention_mask: torch.Tensor | None = None,
        past_key_values=None,
        **kwargs,
    ) -> torch.Tensor:
        """``hidden_states [B, bs, H]`` (the normed block), ``context [B, C, H]`` -> ``[B, bs, H]``."""
        batch, q_len, _ = hidden_states.shape
        ctx_len = context.shape[1]
        query = self.q_norm(self.q_proj(hidden_states).view(batch, q_len, -1, self.head_dim)).transpose(1, 2)
        kv_input = torch.cat([context, hidden_states], dim=1)
        key = self.k_norm(self.k_proj(kv_input).view(batch, ctx_len + q_len, -1, self.head_dim)).transpose(1, 2)
        value = self.v_proj(kv_input).view(batch, ctx_len + q_len, -1, self.head_dim).transpose(1, 2)

        cos, sin = position_embeddings  # cover context then block positions; queries take the last q_len
        query = _rotate(query, cos[:, -q_len:], sin[:, -q_len:])
        key = _rotate(key, cos, sin)
        if past_key_values is not None:
            key, value = past_key_values.update(key, value, self.layer_idx)

        attention: Callable = eager_attention_forward
        if self.config._attn_implementation != "eager":
            attention = ALL_ATTENTION_FUNCTIONS[self.config._attn_implementation]
        output, _ = attention(
            self,
            query,
            key,
            value,
            attention_mask,
            dropout=self.attention_dropout if self.training else 0.0,
            scaling=self.scaling,
            sliding_window=self.sliding_window,
            **kwargs,
        )
        return self.o_proj(output.reshape(batch, q_len, -1))


class DFlashDecoderLayer(nn.Module):
    """Pre-norm Qwen3 block; the context features bypass ``input_layernorm`` and are never updated."""

    def __init__(self, config: DFlashConfig, layer_idx: int):
        super().__init__()
        self.self_attn = DFlashAttention(config, layer_idx)
        self.mlp = Qwen3MLP(config)
        self.input_layernorm = Qwen3RMSNorm(config.hidden_size, eps=config.rms_norm_eps)
        self.post_attention_layernorm = Qwen3RMSNorm(config.hidden_size, eps=config.rms_norm_eps)

    def forward(self, hidden_states, context, position_embeddings, attention_mask=None, past_key_values=None, **kw):
        hidden_states = hidden_states + self.self_attn(
            self.input_layernorm(hidden_states), context, position_embeddings, attention_mask, past_key_values, **kw
        )
        return hidden_states + self.mlp(self.post_attention_layernorm(hidden_states))


class DFlashDraftModel(PreTrainedModel):
    """z-lab-format DFlash drafter: ``fc``, ``hidden_norm``, ``layers.N.*``, ``norm``; no embedding or head.

    Load with ``DFlashDraftModel.from_pretrained(path_or_hub_id)``, never through the Auto classes (its
    ``model_type`` is "qwen3", which would build a plain Qwen3 model). Loading is strict; see
    ``dels_hub.loading.load_dflash``.
    """

    config_class = DFlashConfig
    base_model_prefix = "model"
    main_input_name = "noise_embedding"
    supports_gradient_checkpointing = False
    _no_split_modules = ["DFlashDecoderLayer"]
    _supports_sdpa = True
    _supports_flash_attn = True
    _supports_flex_attn = True
    _supports_attention_backend = True

    def __init__(self, config: DFlashConfig):
        super().__init__(config)
        hidden = config.hidden_size
        self.layers = nn.ModuleList(DFlashDecoderLayer(config, i) for i in range(config.num_hidden_layers))
        self.fc = nn.Linear(len(config.target_layer_ids) * hidden, hidden, bias=False)
        self.hidden_norm = Qwen3RMSNorm(hidden, eps=config.rms_norm_eps)
        self.norm = Qwen3RMSNorm(hidden, eps=config.rms_norm_eps)
        self.rotary_emb = Qwen3RotaryEmbedding(config)
        self.post_init()

    @property
    def block_size(self) -> int:
        return self.config.block_size

    @property
    def mask_token_id(self) -> int:
        return self.config.mask_token_id

    @property
    def target_layer_ids(self) -> list[int]:
        return self.config.target_layer_ids

    def project_context(self, target_hidden: torch.Tensor) -> torch.Tensor:
        """``[B, C, F*H]`` concatenated target features -> ``[B, C, H]`` context shared by every layer."""
        return self.hidden_norm(self.fc(target_hidden))

    def forward(
        self,
        target_hidden: torch.Tensor,
        noise_embedding: torch.Tensor,
        position_ids: torch.LongTensor,
        past_key_values=None,
        use_cache: bool = False,
        attention_mask: torch.Tensor | None = None,
        **kwargs,
    ) -> torch.Tensor:
        """Draft one block.

        Args:
            target_hidden: ``[B, C, F*H]`` target features ``cat(hidden_states[l + 1] for l in
                target_layer_ids)`` of the C context tokens not yet in ``past_key_values``.
            noise_embedding: ``[B, bs, H]`` target embeddings of ``[anchor, MASK x (bs-1)]``.
            position_ids: ``[B, C + bs]`` absolute positions of the context tokens then of the block.
            past_key_values: a cache with ``update(key, value, layer_idx)`` (e.g. ``DynamicCache``) that
                holds earlier context keys/values; the caller crops the block back out after the call.
            attention_mask: optional ``[B, 1, bs, kv]`` mask (training); None means "see everything".

        Returns:
            ``[B, bs, H]`` final normed hidden states; slot k predicts the token AT block position k.
        """
        context = self.project_context(target_hidden)
        hidden_states = noise_embedding
        position_embeddings = self.rotary_emb(hidden_states, position_ids)
        cache = past_key_values if (use_cache or past_key_values is not None) else None
        for layer in self.layers:
            hidden_states = layer(hidden_states, context, position_embeddings, attention_mask, cache, **kwargs)
        return self.norm(hidden_states)
