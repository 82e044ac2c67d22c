# neurontools — `make demo` and `make test` work on a fresh machine: they create .venv,
# install CPU PyTorch 2.13.0 first (never the CUDA build), then this package.
PYTHON ?= python3
VENV   ?= .venv
BIN    := $(VENV)/bin
STAMP  := $(VENV)/.installed-stamp
NATIVE := $(VENV)/.native-stamp
# Where the CPU build of torch comes from. Empty = pip's configured sources (this machine has
# the CPU wheel locally). Elsewhere: make TORCH_INDEX=https://download.pytorch.org/whl/cpu test
TORCH_INDEX ?=
TORCH_PIN := torch==2.13.0
# Test processes in parallel (pytest-xdist; a test file stays in one worker). Most tests wait on
# daemons and subprocesses, so three workers keep a 2-vCPU machine busy: on this project's machine
# the suite took 9 min 14 s with 3 workers and 11 min 34 s with 2 (fresh clone, quiet host).
TEST_WORKERS ?= 3

.PHONY: setup demo test lint clean

setup: $(STAMP) $(NATIVE)

$(STAMP): pyproject.toml
	$(PYTHON) -m venv $(VENV)
	$(BIN)/python -m pip install -q --upgrade pip
	$(BIN)/python -m pip install -q $(if $(TORCH_INDEX),--index-url $(TORCH_INDEX)) $(TORCH_PIN)
	$(BIN)/python -m pip install -q -e '.[emulator,dev]'
	$(BIN)/python -m pip install -q --no-deps 'HolisticTraceAnalysis>=0.5,<0.6'  # see pyproject.toml [dev]
	@touch $(STAMP)

# The emulated device's C++ backend, compiled into ~/.cache/neuron-emulator (about 30 s). Without
# a compiler the emulator falls back to its Python device layer (slower per op) and says so.
$(NATIVE): $(STAMP) emulator/capture/native/xla_backend.cpp
	-$(BIN)/python -m emulator.capture.native.build
	@touch $(NATIVE)

# In a terminal: the full demo (daemon + training + neuron-exporter on :8000 + neuron-top; q quits).
# Without one (a pipe, CI): the neuron-ls walkthrough of scripts/demo.sh.
demo: setup
	@if [ -t 1 ]; then PATH="$(CURDIR)/$(BIN):$$PATH" neuron-emulator demo; \
	else PATH="$(CURDIR)/$(BIN):$$PATH" bash scripts/demo.sh; fi

lint: setup
	$(BIN)/ruff check neurontools emulator tests scripts examples $(wildcard benchmarks)
	$(BIN)/mypy  # files and settings: [tool.mypy] in pyproject.toml
	$(BIN)/lint-imports  # the import rules: [tool.importlinter] in pyproject.toml
	$(BIN)/python scripts/check_sizes.py  # modules <= 500 lines, functions <= 60

test: setup lint
	$(BIN)/python -m pytest -q -rs -n $(TEST_WORKERS) --dist loadfile

clean:
	rm -rf $(VENV) .pytest_cache .ruff_cache .mypy_cache *.egg-info
