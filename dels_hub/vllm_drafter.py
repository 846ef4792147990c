"""vLLM's DFlash drafter with the DeLS head fused into its logits (imported by vLLM only; see ``vllm_plugin``).

vLLM's DFlash proposer runs one forward over each request's query block, the anchor (the block's bonus token)
then k mask tokens, and calls ``compute_logits`` on the k mask rows only. The head reads the anchor first, so the
forward keeps its ``input_ids``: the anchors are every (k + 1)-th of them. The proposer then takes the argmax of
each returned row (greedy drafting, vLLM's default), which is exactly the fused greedy chain of our loop.

Verification is vLLM's, and stays lossless: a greedy draft is a point mass, which its rejection sampler accepts with
the target's probability of the drafted token. With ``draft_sample_method="probabilistic"`` vLLM samples from the
fused rows instead; that is lossless too (each row is the distribution its draft is drawn from) but the rows are
conditioned on the argmax chain, not on the drafts vLLM sampled, so greedy drafting is the one to use.
"""

import torch
from vllm.model_executor.models.qwen3_dflash import DFlashQwen3ForCausalLM

from .vllm_plugin import BlockFusion, fused_draft_logits


class DFlashDeLSDraftModel(DFlashQwen3ForCausalLM):
    def __init__(self, *, vllm_config, prefix: str = ""):
        speculative = vllm_config.speculative_config
        if speculative.num_speculative_tokens_per_batch_size is not None:
            # compute_logits groups its rows into blocks of the configured k; a k that changes per step would
            # group them wrongly without any error.
            raise ValueError("the DeLS head needs a fixed number of speculative tokens; "
                             "num_speculative_tokens_per_batch_size (dynamic speculation) is not supported")
        super().__init__(vllm_config=vllm_config, prefix=prefix)
        self.num_drafts = speculative.num_speculative_tokens
        # A plain attribute, not a submodule: vLLM's weight loader and graph capture see only the DFlash drafter.
        self.fusion: BlockFusion | None = None
        self.block_ids: torch.Tensor | None = None

    def load_weights(self, weights):
        loaded = super().load_weights(weights)  # vLLM's DFlash drafter returns None; passed on as it is
        self.fusion = BlockFusion.from_folder(self.draft_model_config.model, self.num_drafts,
                                              self.lm_head.weight.device)
        return loaded

    def forward(self, input_ids: torch.Tensor, positions: torch.Tensor, inputs_embeds=None) -> torch.Tensor:
        self.block_ids = input_ids
        return super().forward(input_ids, positions, inputs_embeds)

    def compute_logits(self, hidden_states: torch.Tensor) -> torch.Tensor | None:
        logits = super().compute_logits(hidden_states)
        rows = hidden_states.shape[0]
        if logits is None or self.fusion is None or self.block_ids is None or rows % self.num_drafts:
            return logits  # not rows of drafted blocks (no forward yet, or not k rows per request): nothing to fuse
        requests, stride = rows // self.num_drafts, self.num_drafts + 1
        ids = self.block_ids
        if ids.numel() < requests * stride and ids._base is not None:
            # With VLLM_USE_BREAKABLE_CUDAGRAPH a replayed drafter forward may skip this class's Python, leaving the
            # view of the last capture; it views the proposer's persistent input buffer, which holds this call's ids.
            ids = ids._base.view(-1)
        anchors = ids[: requests * stride : stride]
        return fused_draft_logits(self.fusion, logits, anchors)

    def get_top_tokens(self, hidden_states: torch.Tensor) -> torch.Tensor:
        """vLLM's ``use_local_argmax_reduction`` path: the argmax of the fused logits, not the drafter's alone."""
        return self.compute_logits(hidden_states).argmax(dim=-1)
