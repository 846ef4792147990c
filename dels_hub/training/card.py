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
    head_config = head.config
    fingerprint = head_config.tokenizer_fingerprint or {}
    family = fingerprint.get("family", "unknown")
    text = _front_matter(["dels-hub", "speculative-decoding", "dels-local-head", f"tokenizer-family:{family}"], {})
    text += "\n".join([
        f"# DeLS local head for the `{family}` tokenizer family",
        "",
        "The short-context expert of DeLS-Spec: a bias-free GRU (state reset at every block) over the tokens",
        "already drafted in the current block, fused with a DFlash drafter's logits as",
        "`L_i + alpha_i * S_i - beta_i * log p_hat` by `dels_hub.DeLSGenerator`. It needs no target weights.",
        "",
        "```python",
        "from dels_hub import DeLSGenerator",
        "gen = DeLSGenerator.from_pretrained(TARGET, DFLASH_DRAFTER, head=THIS_REPO)",
        "```",
        "",
        "## Model",
        "",
        f"* vocabulary {head_config.vocab_size} (tokenizer sha256 `{fingerprint.get('sha256', '?')[:16]}`), "
        f"embedding rank {head_config.embedding_rank}, GRU {head_config.hidden_size}, "
        f"output rank {head_config.output_rank}",
        f"* block size {head_config.block_size}; fusion defaults alpha={head_config.alpha}, beta={head_config.beta}, "
        f"pure prefix {head_config.pure_prefix_len}",
        f"* unigram prior: counts of {int(head.unigram_counts.sum())} supervised training tokens, "
        f"add-{head_config.unigram_smoothing} smoothed",
        "",
        "## Training",
        "",
        f"* data `{config.data}` ({config.data_format}), max length {config.max_length}, "
        f"{config.anchors_per_seq} anchors per sequence, gamma {config.gamma}",
        f"* {config.max_steps} steps, batch {config.batch_size} x {config.grad_accum}, lr {config.lr}, "
        f"seed {config.seed}, {config.precision}"
        + (f"; LoRA rank {config.lora_rank} from `{config.init_from}`" if config.lora_rank else ""),
        "",
        *_eval_lines(last_eval),
    ])
    (out / "README.md").write_text(text)


def write_dflash_card(out: Path, drafter_config, config, last_eval: dict) -> None:
    text = _front_matter(["dels-hub", "speculative-decoding", "dflash"], {"base_model": config.target})
    text += "\n".join([
        f"# DFlash drafter for `{config.target}`",
        "",
        "A block drafter in the z-lab DFlash format: it drafts a block of "
        f"{drafter_config.block_size} tokens in one forward pass from the target's hidden states. It has no "
        "embedding and no LM head: both are borrowed, frozen, from the target. Load it with "
        "`dels_hub.DFlashDraftModel.from_pretrained` (never the Auto classes: `model_type` is `qwen3`).",
        "",
        "## Model",
        "",
        f"* {drafter_config.num_hidden_layers} draft layers, hidden {drafter_config.hidden_size}, "
        f"target layers {drafter_config.target_layer_ids}, mask token id {drafter_config.mask_token_id}",
        "",
        "## Training",
        "",
        f"* data `{config.data}`, max length {config.max_length}, {config.anchors_per_seq} anchors per sequence, "
        f"gamma {config.gamma}",
        f"* {config.max_steps} steps, batch {config.batch_size} x {config.grad_accum}, lr {config.lr}, "
        f"seed {config.seed}, {config.precision}, block-level peeking: {'on' if config.peek else 'off'}",
        "",
        *_eval_lines(last_eval),
    ])
    (out / "README.md").write_text(text)
