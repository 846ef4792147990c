"""Plain model cards (README.md) for what the recipes train; the Jinja cards of ``dels_hub.hub`` can replace
them later. Render only: nothing here touches the network."""

from pathlib import Path


def _front_matter(tags: list[str], extra: dict) -> str:
    lines = ["---", "library_name: dels-hub", "pipeline_tag: text-generation", "tags:"]
    lines += [f"- {tag}" for tag in tags]
    lines += [f"{key}: {value}" for key, value in extra.items() if value]
    return "\n".join(lines + ["---", ""])


def _eval_lines(last_eval: dict) -> list[str]:
    if not last_eval:
        return []
    accuracy = ", ".join(f"{a:.3f}" for a in last_eval["eval_accuracy"])
    return [
        "## Held-out evaluation (teacher-forced, end of training)",
        "",
        f"* loss {last_eval['eval_loss']:.4f}",
        f"* greedy acceptance length implied by per-block hits: {last_eval['eval_tau']:.3f}",
        f"* accuracy per block position 1..{len(last_eval['eval_accuracy'])}: {accuracy}",
        "",
    ]


def write_head_card(out: Path, head, config, last_eval: dict) -> None:
    c = head.config
    fingerprint = c.tokenizer_fingerprint or {}
    family = fingerprint.get("family", "unknown")
    lora = f"; LoRA rank {config.lora_rank} from `{config.init_from}`" if config.lora_rank else ""
    text = _front_matter(["dels-hub", "speculative-decoding", "dels-local-head", f"tokenizer-family:{family}"], {})
    text += f"""# DeLS local head for the `{family}` tokenizer family

The short-context expert of DeLS-Spec: a bias-free GRU (state reset at every block) over the tokens
already drafted in the current block, fused with a DFlash drafter's logits as
`L_i + alpha_i * S_i - beta_i * log p_hat` by `dels_hub.DeLSGenerator`. It needs no target weights.

```python
from dels_hub import DeLSGenerator
gen = DeLSGenerator.from_pretrained(TARGET, DFLASH_DRAFTER, head=THIS_REPO)
```

## Model

* vocabulary {c.vocab_size} (tokenizer sha256 `{fingerprint.get("sha256", "?")[:16]}`), embedding rank \
{c.embedding_rank}, GRU {c.hidden_size}, output rank {c.output_rank}
* block size {c.block_size}; fusion defaults alpha={c.alpha}, beta={c.beta}, pure prefix {c.pure_prefix_len}
* unigram prior: counts of {int(head.unigram_counts.sum())} supervised training tokens,
  add-{c.unigram_smoothing} smoothed

## Training

* data `{config.data}` ({config.data_format}), max length {config.max_length}, {config.anchors_per_seq} anchors \
per sequence, gamma {config.gamma}
* {config.max_steps} steps, batch {config.batch_size} x {config.grad_accum}, lr {config.lr}, seed {config.seed}, \
{config.precision}{lora}

"""
    (out / "README.md").write_text(text + "\n".join(_eval_lines(last_eval)))


def write_dflash_card(out: Path, drafter_config, config, last_eval: dict) -> None:
    c = drafter_config
    text = _front_matter(["dels-hub", "speculative-decoding", "dflash"], {"base_model": config.target})
    text += f"""# DFlash drafter for `{config.target}`

A block drafter in the z-lab DFlash format: it drafts a block of {c.block_size} tokens in one forward pass from
the target's hidden states. It has no embedding and no LM head: both are borrowed, frozen, from the target.
Load it with `dels_hub.DFlashDraftModel.from_pretrained` (never the Auto classes: `model_type` is `qwen3`).

## Model

* {c.num_hidden_layers} draft layers, hidden {c.hidden_size}, target layers {c.target_layer_ids}, \
mask token id {c.mask_token_id}

## Training

* data `{config.data}`, max length {config.max_length}, {config.anchors_per_seq} anchors per sequence, \
gamma {config.gamma}
* {config.max_steps} steps, batch {config.batch_size} x {config.grad_accum}, lr {config.lr}, seed {config.seed}, \
{config.precision}, block-level peeking: {"on" if config.peek else "off"}

"""
    (out / "README.md").write_text(text + "\n".join(_eval_lines(last_eval)))
