"""Configuration of z-lab-format DFlash drafters.

On disk a DFlash drafter is a Qwen3 decoder config (``model_type: "qwen3"``, ``architectures:
["DFlashDraftModel"]``) plus the drafter fields ``block_size`` (top level in older checkpoints, inside
``dflash_config`` in newer ones), ``num_target_layers`` and ``dflash_config.{mask_token_id,
target_layer_ids}``. This class reads both layouts and writes the one z-lab, vLLM and SGLang all read.
It is never registered with AutoConfig: ``model_type "qwen3"`` belongs to plain Qwen3 models.
"""

from transformers import Qwen3Config


def build_target_layer_ids(num_target_layers: int, num_draft_layers: int) -> list[int]:
    """Default target layers whose outputs feed the drafter: an even spread from layer 1 to layer L-3.

    Same rule as z-lab/dflash, SGLang and SpecForge, e.g. (36, 5) -> [1, 9, 17, 25, 33].
    """
    if num_draft_layers == 1:
        return [num_target_layers // 2]
    start, end = 1, num_target_layers - 3
    span = end - start
    return [int(round(start + i * span / (num_draft_layers - 1))) for i in range(num_draft_layers)]


class DFlashConfig(Qwen3Config):
    """Qwen3 decoder hyper-parameters of the draft layers plus the DFlash fields.

    After loading, ``block_size``, ``mask_token_id`` and ``target_layer_ids`` are always plain attributes,
    whichever layout the checkpoint used, and ``dflash_config`` holds ``mask_token_id``,
    ``target_layer_ids`` and ``block_size`` so that every reader finds them.
    """

    # A DFlash config has no meaningful defaults (block size and mask id are required), so transformers must
    # not instantiate it without arguments to compute a diff.
    has_no_defaults_at_init = True

    def __post_init__(self, **kwargs):
        super().__post_init__(**kwargs)
        dflash = dict(getattr(self, "dflash_config", None) or {})
        block_size = getattr(self, "block_size", None) or dflash.get("block_size")
        if block_size is None:
            raise ValueError("DFlash config has no block_size (looked at the top level and in dflash_config)")
        num_target_layers = getattr(self, "num_target_layers", None)
        layer_ids = dflash.get("target_layer_ids")
        if layer_ids is None:
            if num_target_layers is None:
                raise ValueError("DFlash config needs dflash_config.target_layer_ids or num_target_layers")
            layer_ids = build_target_layer_ids(num_target_layers, self.num_hidden_layers)
        if dflash.get("mask_token_id") is None:
            # Checkpoints from before z-lab commit 07b91cad left the mask id to the caller.
            raise ValueError("DFlash config has no dflash_config.mask_token_id; add it to config.json")
        self.block_size = int(block_size)
        self.num_target_layers = num_target_layers
        self.target_layer_ids = [int(i) for i in layer_ids]
        self.mask_token_id = int(dflash["mask_token_id"])
        dflash.update(
            block_size=self.block_size, mask_token_id=self.mask_token_id, target_layer_ids=self.target_layer_ids
        )
        self.dflash_config = dflash
        if not getattr(self, "architectures", None):
            self.architectures = ["DFlashDraftModel"]

    def to_dict(self):
        output = super().to_dict()
        # mask_token_id and target_layer_ids live in dflash_config on disk (the z-lab layout), not twice.
        output.pop("mask_token_id", None)
        output.pop("target_layer_ids", None)
        # transformers 5 keeps RoPE only in rope_parameters; readers on 4.x (z-lab's reference pins 4.57) read
        # rope_theta/rope_scaling and would silently fall back to theta 10000. 5.x reads both forms alike.
        rope = dict(output.get("rope_parameters") or {})
        if "rope_theta" in rope:
            output["rope_theta"] = rope.pop("rope_theta")
            output["rope_scaling"] = None if rope.get("rope_type", "default") == "default" else rope
        return output
