"""``generation.tree.grow_tree`` with four more knobs, patched into its source at import (the package is unchanged).
Set them in ``KNOBS``: ``depth`` (a score added per depth), ``rank`` (per child rank), ``offw`` (DFlash's weight
under a node that is not DFlash's own first choice at its depth), ``mix`` (the weight of the fused distribution in a
mixture with DFlash's alone)."""

import inspect

import dels_hub.generation.tree as tree_module

KNOBS = {"depth": None, "rank": None, "offw": None, "mix": None}


def patched(source: str, old: str, new: str) -> str:
    assert old in source, old
    return source.replace(old, new)


source = inspect.getsource(tree_module.grow_tree).replace("def grow_tree(", "def grow_tree_x(")
source = patched(source, "child_score = (score.unsqueeze(-1) + top_logp.double()).flatten(1)", """\
extra = top_logp.double()
        if KNOBS["rank"] is not None:
            extra = extra + torch.tensor(KNOBS["rank"][:extra.shape[-1]], dtype=torch.float64)
        if KNOBS["depth"] is not None:
            extra = extra + KNOBS["depth"][depth - 1]
        child_score = (score.unsqueeze(-1) + extra).flatten(1)""")
line = "logits = dflash_logits[:, depth - 1].unsqueeze(1).expand(rows, width, -1)"
source = patched(source, line, line + """
        if KNOBS["offw"] is not None and depth > 1:
            logits = logits.float() * torch.where(on_first_choice, 1.0, KNOBS["offw"]).unsqueeze(-1)""")
line = "token = child_ids.gather(1, chosen)"
source = patched(source, line, line + """
        on_first_choice = token == dflash_logits[:, depth - 1].argmax(-1, keepdim=True)""")
source = patched(source, "top_logp, top_ids = logits.log_softmax(-1).topk(wide, dim=-1)", """\
logp = logits.log_softmax(-1)
        if KNOBS["mix"] is not None:
            alone = dflash_logits[:, depth - 1].float().log_softmax(-1).unsqueeze(1)
            weight = torch.tensor(KNOBS["mix"])
            logp = torch.logaddexp(logp + weight.log(), alone + (1 - weight).log())
        top_logp, top_ids = logp.topk(wide, dim=-1)""")
namespace = dict(vars(tree_module), KNOBS=KNOBS)
exec(source, namespace)
grow_tree_x = namespace["grow_tree_x"]
