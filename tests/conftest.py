"""Tiny random targets, drafters, heads and tokenizers built in the tests (no downloads)."""

import pytest
import torch
from tokenizers import Tokenizer, models, pre_tokenizers
from transformers import LlamaConfig, LlamaForCausalLM, PreTrainedTokenizerFast, Qwen3Config, Qwen3ForCausalLM

from dels_hub import DeLSLocalHead, DeLSLocalHeadConfig, DFlashConfig, DFlashDraftModel, tokenizer_fingerprint

# Tiny models run fastest on one thread, and the suite then stays quick on a busy 2-core machine.
torch.set_num_threads(1)



@pytest.fixture(autouse=True, scope="session")
def cost_model_cache(tmp_path_factory):
    """Calibrations (the cost-aware policy's, ``generation/cost_model.py``) go to a folder of this run, not home."""
    folder = tmp_path_factory.mktemp("dels_hub_cache")
    patch = pytest.MonkeyPatch()
    patch.setenv("DELS_HUB_CACHE", str(folder))
    yield folder
    patch.undo()


def load_script(name: str):
    """``scripts/NAME.py`` as a module (the scripts are not a package)."""
    import importlib.util
    from pathlib import Path

    path = Path(__file__).resolve().parent.parent / "scripts" / f"{name}.py"
    spec = importlib.util.spec_from_file_location(name, path)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


VOCAB = 96  # embedding rows of the tiny targets
HIDDEN = 64


def make_tokenizer(vocab_size: int = VOCAB - 4, prefix: str = "t") -> PreTrainedTokenizerFast:
    """A real fast tokenizer: whitespace-split words ``t0 .. tN``; fewer ids than embedding rows, as in Qwen."""
    vocab = {f"{prefix}{i}": i for i in range(vocab_size - 1)}
    vocab["<eos>"] = vocab_size - 1
    backend = Tokenizer(models.WordLevel(vocab=vocab, unk_token="<eos>"))
    backend.pre_tokenizer = pre_tokenizers.WhitespaceSplit()
    return PreTrainedTokenizerFast(tokenizer_object=backend, eos_token="<eos>")


def make_target(kind: str = "qwen3", vocab: int = VOCAB, layers: int = 6, seed: int = 0):
    torch.manual_seed(seed)
    common = dict(
        vocab_size=vocab,
        hidden_size=HIDDEN,
        intermediate_size=128,
        num_hidden_layers=layers,
        num_attention_heads=4,
        num_key_value_heads=2,
        max_position_embeddings=512,
        tie_word_embeddings=False,
    )
    if kind == "qwen3":
        model = Qwen3ForCausalLM(Qwen3Config(head_dim=16, **common))
    else:
        model = LlamaForCausalLM(LlamaConfig(**common))
    # Larger logits make the random model's argmax decisive, so float32 near-ties stay rare.
    with torch.no_grad():
        model.lm_head.weight.mul_(20.0)
    return model.eval()


def make_dflash(
    block_size: int = 8, mask_token_id: int = VOCAB - 1, num_target_layers: int = 6, layers: int = 2, seed: int = 1,
    target_layer_ids=None, vocab: int = VOCAB,
):
    """A drafter with the z-lab key layout and config fields (random weights)."""
    torch.manual_seed(seed)
    dflash_config = {"mask_token_id": mask_token_id}
    if target_layer_ids is not None:
        dflash_config["target_layer_ids"] = target_layer_ids
    config = DFlashConfig(
        vocab_size=vocab,
        hidden_size=HIDDEN,
        intermediate_size=128,
        num_hidden_layers=layers,
        num_attention_heads=4,
        num_key_value_heads=2,
        head_dim=16,
        rope_theta=10000.0,
        block_size=block_size,
        num_target_layers=num_target_layers,
        dflash_config=dflash_config,
    )
    return DFlashDraftModel(config).eval()


def make_head(tokenizer=None, vocab: int = VOCAB - 4, seed: int = 2, alpha=0.5, beta=0.3, trained_like=True):
    """A local head with non-zero output weights and a random unigram prior (an untrained head adds nothing)."""
    torch.manual_seed(seed)
    config = DeLSLocalHeadConfig(
        vocab_size=vocab,
        embedding_rank=16,
        hidden_size=32,
        output_rank=16,
        block_size=16,
        alpha=alpha,
        beta=beta,
        tokenizer_fingerprint=tokenizer_fingerprint(tokenizer) if tokenizer is not None else None,
    )
    head = DeLSLocalHead(config)
    if trained_like:
        with torch.no_grad():
            head.output_proj.weight.normal_(0.0, 1.0)
            head.unigram_counts.copy_(torch.randint(0, 100, (vocab,)).float())
    return head.eval()


@pytest.fixture(scope="session")
def tokenizer():
    return make_tokenizer()


@pytest.fixture(scope="session")
def qwen_target():
    return make_target("qwen3")


@pytest.fixture(scope="session")
def llama_target():
    return make_target("llama")


SMALL_VOCAB = 12  # small enough that random drafts are often accepted, so long acceptances get exercised


def small_prompts(count=4, length=6, seed=123):
    """Fixed random prompts over the small vocabulary (the last two ids, eos and mask, never appear)."""
    generator = torch.Generator().manual_seed(seed)
    return [torch.randint(0, SMALL_VOCAB - 2, (1, length), generator=generator) for _ in range(count)]


@pytest.fixture(scope="session")
def small():
    """Tiny qwen3 and llama targets over SMALL_VOCAB, their tokenizer and a head with real-looking weights."""
    tokenizer = make_tokenizer(SMALL_VOCAB - 2)
    return {
        "tokenizer": tokenizer,
        "qwen3": make_target("qwen3", vocab=SMALL_VOCAB),
        "llama": make_target("llama", vocab=SMALL_VOCAB),
        "head": make_head(tokenizer, vocab=SMALL_VOCAB - 2, alpha=0.8, beta=0.3),
    }
