"""Local head: GRU equations, save/load, remote-code loading without dels_hub, prior, fingerprint."""

import json
import subprocess
import sys

import torch
from transformers import AutoConfig, AutoModel

from dels_hub import DeLSLocalHead, tokenizer_fingerprint
from dels_hub.heads import LinearGRUCell

from conftest import make_head, make_tokenizer


def test_linear_gru_cell_equals_torch_gru_cell_without_bias():
    torch.manual_seed(0)
    reference = torch.nn.GRUCell(8, 12, bias=False)
    ours = LinearGRUCell(8, 12)
    with torch.no_grad():
        ours.input_gates.weight.copy_(reference.weight_ih)
        ours.hidden_gates.weight.copy_(reference.weight_hh)
    x, h = torch.randn(3, 8), torch.randn(3, 12)
    assert torch.allclose(ours(x, h), reference(x, h), atol=1e-6)


def test_step_by_step_equals_forward_from_zero_state():
    head = make_head()
    ids = torch.randint(0, head.config.vocab_size, (2, 6))
    full = head(ids)
    state = head.initial_state(2)
    for t in range(6):
        logits, state = head.step(ids[:, t], state)
        assert torch.allclose(logits, full[:, t], atol=1e-6)


def test_untrained_head_outputs_zero_logits():
    head = make_head(trained_like=False)
    assert head(torch.randint(0, head.config.vocab_size, (1, 4))).abs().max() == 0


def test_log_prior_is_add_k_smoothed_and_normalised():
    head = make_head()
    counts, k = head.unigram_counts, head.config.unigram_smoothing
    expected = torch.log((counts + k) / (counts.sum() + k * counts.numel()))
    assert torch.allclose(head.log_prior(), expected, atol=1e-6)
    assert torch.isclose(head.log_prior().exp().sum(), torch.tensor(1.0), atol=1e-5)


def test_save_and_auto_load_round_trip(tmp_path):
    tokenizer = make_tokenizer()
    head = make_head(tokenizer, alpha=[0.1, 0.2, 0.3], beta=0.05)
    head.config.pure_prefix_len = 2
    head.save_pretrained(tmp_path)
    config = json.loads((tmp_path / "config.json").read_text())
    assert config["model_type"] == "dels_local_head"
    assert config["auto_map"] == {
        "AutoConfig": "configuration_local_head.DeLSLocalHeadConfig",
        "AutoModel": "modeling_local_head.DeLSLocalHead",
    }
    assert {"model.safetensors", "modeling_local_head.py", "configuration_local_head.py"} <= {
        p.name for p in tmp_path.iterdir()
    }
    loaded = AutoModel.from_pretrained(tmp_path)  # registered on `import dels_hub`, no remote code needed
    assert isinstance(loaded, DeLSLocalHead)
    assert AutoConfig.from_pretrained(tmp_path).alpha == [0.1, 0.2, 0.3]
    assert loaded.config.pure_prefix_len == 2
    assert loaded.config.tokenizer_fingerprint == tokenizer_fingerprint(tokenizer)
    for key, value in head.state_dict().items():
        assert torch.equal(value, loaded.state_dict()[key]), key


REMOTE_LOAD = """
import sys
sys.modules["dels_hub"] = None  # importing dels_hub now raises ImportError: prove nothing needs it
import torch
from transformers import AutoModel
model = AutoModel.from_pretrained(sys.argv[1], trust_remote_code=True)
assert type(model).__module__.startswith("transformers_modules"), type(model).__module__
ids = torch.tensor([[1, 2, 3]])
print(repr(model(ids)[0, -1, :4].tolist()))
"""


def test_remote_code_load_without_dels_hub(tmp_path):
    head = make_head()
    head.save_pretrained(tmp_path)
    result = subprocess.run(
        [sys.executable, "-c", REMOTE_LOAD, str(tmp_path)],
        capture_output=True, text=True, cwd=tmp_path, env={"HF_HUB_OFFLINE": "1", "HF_HOME": str(tmp_path / "hf"),
                                                          "PATH": "/usr/bin:/bin"},
    )
    assert result.returncode == 0, result.stderr[-2000:]
    expected = head(torch.tensor([[1, 2, 3]]))[0, -1, :4].tolist()
    remote = eval(result.stdout.strip().splitlines()[-1])
    assert torch.allclose(torch.tensor(remote), torch.tensor(expected), atol=1e-6)


def test_fingerprint_is_stable_and_tells_families_apart():
    a, b = make_tokenizer(), make_tokenizer()
    assert tokenizer_fingerprint(a) == tokenizer_fingerprint(b)
    assert tokenizer_fingerprint(a)["vocab_size"] == len(a)
    assert tokenizer_fingerprint(make_tokenizer(prefix="w")) != tokenizer_fingerprint(a)
    assert tokenizer_fingerprint(make_tokenizer(vocab_size=len(a) + 1)) != tokenizer_fingerprint(a)


def test_peft_lora_reaches_the_gru_gates():
    from peft import LoraConfig, get_peft_model

    head = make_head()
    model = get_peft_model(head, LoraConfig(r=2, target_modules=["input_gates", "hidden_gates", "rank_proj"]))
    names = [name for name, _ in model.named_modules() if name.endswith("lora_A")]
    assert any("input_gates" in n for n in names) and any("hidden_gates" in n for n in names)


def test_peft_adapter_repo_resolves_its_base_head_and_generates_exactly(tmp_path):
    from peft import LoraConfig, get_peft_model

    from dels_hub import DeLSGenerator
    from dels_hub.loading import load_head

    from conftest import make_dflash, make_target

    tokenizer = make_tokenizer()
    base = make_head(tokenizer)
    base.save_pretrained(tmp_path / "base")
    base = DeLSLocalHead.from_pretrained(tmp_path / "base")  # name_or_path is what PEFT records as the base
    adapted = get_peft_model(base, LoraConfig(r=2, target_modules=["input_gates", "hidden_gates", "rank_proj"]))
    with torch.no_grad():  # a trained-looking adapter: LoRA B starts at zero, which would change nothing
        for name, param in adapted.named_parameters():
            if "lora_B" in name:
                param.normal_(0, 0.5)
    adapted.save_pretrained(tmp_path / "adapter")
    config = json.loads((tmp_path / "adapter" / "adapter_config.json").read_text())
    assert config["base_model_name_or_path"] == str(tmp_path / "base")

    loaded = load_head(str(tmp_path / "adapter"))
    ids = torch.tensor([[1, 2, 3, 4]])
    assert torch.allclose(loaded(ids), adapted(ids), atol=1e-5)
    assert not torch.allclose(loaded(ids), DeLSLocalHead.from_pretrained(tmp_path / "base")(ids), atol=1e-3)

    target = make_target("qwen3")
    generator = DeLSGenerator.from_pretrained(target, make_dflash(8), str(tmp_path / "adapter"), tokenizer=tokenizer)
    prompt = torch.randint(0, 90, (1, 6), generator=torch.Generator().manual_seed(0))
    assert torch.equal(generator.generate(prompt, max_new_tokens=20),
                       target.generate(prompt, max_new_tokens=20, do_sample=False))
