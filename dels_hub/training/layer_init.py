"""Start a fresh drafter from the target's own top decoder layers (issue 14: "worth one measured try").

A DFlash layer has the target's shapes (``build_drafter``: same hidden size, heads and MLP width), so the top
``num_layers`` target layers can seed it: attention projections, MLP and both layer norms, plus the target's final
norm. What has no counterpart stays as initialized: ``fc`` (the projection of the concatenated features),
``hidden_norm``, and the per-head q/k norms of the Qwen3-style attention (weight 1). The layers then see a
different input (the block attends over projected target features, not over its own prefix), so this is an
initialization to measure, not a model that works before training.
"""

import torch

from ..errors import RecipeError

# Names under a decoder layer that both a Llama/Qwen-style target layer and a DFlash layer have.
SHARED = ("self_attn.q_proj", "self_attn.k_proj", "self_attn.v_proj", "self_attn.o_proj", "mlp.gate_proj",
          "mlp.up_proj", "mlp.down_proj", "input_layernorm", "post_attention_layernorm")


@torch.no_grad()
def copy_target_top_layers(drafter, target) -> list[str]:
    """Copy the target's last ``len(drafter.layers)`` decoder layers (and its final norm) into ``drafter``;
    returns the drafter parameter names written. ``RecipeError`` names the first tensor whose shape differs."""
    decoder = target.get_decoder()
    source_layers = decoder.layers[len(decoder.layers) - len(drafter.layers):]
    pairs = [(f"layers.{i}.{name}", layer.get_submodule(name), mine.get_submodule(name))
             for i, (layer, mine) in enumerate(zip(source_layers, drafter.layers)) for name in SHARED]
    pairs.append(("norm", decoder.norm, drafter.norm))
    written = []
    for name, source, destination in pairs:
        for kind, tensor in destination.named_parameters(recurse=False):
            theirs = getattr(source, kind, None)
            if theirs is None or theirs.shape != tensor.shape:
                raise RecipeError(
                    f"init_layers = \"target-top\": drafter {name}.{kind} has shape {tuple(tensor.shape)}, the "
                    f"target's is {None if theirs is None else tuple(theirs.shape)}: the drafter must have the "
                    "target's layer shapes (leave intermediate_size at 0)"
                )
            tensor.copy_(theirs)
            written.append(f"{name}.{kind}")
    return written
