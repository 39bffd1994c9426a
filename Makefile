# qwen-fleet. The two commands a new machine needs: `make run` and `make test`; both install what they use.
SHELL := /bin/bash
.DEFAULT_GOAL := help

PYTHON ?= python3
VENV := .venv
PY := $(VENV)/bin/python
export QF_CACHE ?= $(HOME)/.cache/qwen-fleet
PYTEST_ARGS ?=

.PHONY: help
help: ## list the targets
	@grep -E '^[a-z-]+:.*## ' $(MAKEFILE_LIST) | awk -F':.*## ' '{printf "  make %-16s %s\n", $$1, $$2}'

# --- set-up ---------------------------------------------------------------------------------------------------

$(VENV)/.installed: pyproject.toml
	$(PYTHON) -m venv $(VENV)
	$(PY) -m pip install -q --disable-pip-version-check --upgrade pip
	$(PY) -m pip install -q --disable-pip-version-check -e '.[dev]'
	touch $@

.PHONY: venv binaries vllm-venv setup
venv: $(VENV)/.installed ## the project's Python venv (.venv)

binaries: ## build the control-plane binaries from the Go module proxy (cached in $QF_CACHE)
	hack/build-binaries.sh

vllm-venv: ## the cached venv with the pinned CPU build of vLLM (for contract and e2e tests)
	hack/vllm-venv.sh >/dev/null

setup: venv ## everything the tests need; the engine venv installs (network-bound) while Go compiles (CPU-bound)
	@hack/vllm-venv.sh >/dev/null & engine=$$!; \
	  hack/build-binaries.sh; built=$$?; \
	  wait $$engine; venv=$$?; \
	  if [ $$built -ne 0 ] || [ $$venv -ne 0 ]; then echo "setup failed (binaries: $$built, vllm venv: $$venv)" >&2; exit 1; fi

# --- the two commands ---------------------------------------------------------------------------------------

.PHONY: run test
run: venv binaries ## demo: local cluster, CRD, operator, an example QwenInference and its status (Ctrl-C stops all)
	$(VENV)/bin/qwen-fleet run

test: setup ## the whole suite: unit, integration, contract, e2e, chaos (fails if no test ran)
	@set -o pipefail; rc=0; $(VENV)/bin/pytest -p no:cacheprovider $(PYTEST_ARGS) tests || rc=$$?; \
	  if [ $$rc -eq 5 ]; then echo "make test: no tests ran" >&2; exit 1; fi; exit $$rc

# --- pieces -------------------------------------------------------------------------------------------------

.PHONY: test-unit test-integration test-contract test-e2e
test-unit: venv ## fast tests, no cluster, no engine
	$(VENV)/bin/pytest -p no:cacheprovider tests/unit $(PYTEST_ARGS)

test-integration: venv binaries ## against the real local control plane
	$(VENV)/bin/pytest -p no:cacheprovider tests/integration $(PYTEST_ARGS)

test-contract: venv vllm-venv ## against the real vLLM engine on CPU
	$(VENV)/bin/pytest -p no:cacheprovider tests/contract $(PYTEST_ARGS)

test-e2e: setup ## end to end: cluster + operator + metrics + engine
	$(VENV)/bin/pytest -p no:cacheprovider tests/e2e $(PYTEST_ARGS)

.PHONY: generate lint bench cluster-up cluster-down
generate: venv ## regenerate the CRD (and the chart's byte-for-byte copy) from the pydantic models
	$(VENV)/bin/qwen-fleet crd -o crds/qwenfleet.io_qweninferences.yaml
	cp crds/qwenfleet.io_qweninferences.yaml charts/qwen-fleet/files/crds/qwenfleet.io_qweninferences.yaml

lint: venv ## ruff, mypy (strict), hadolint (images/*/Dockerfile), helm lint --strict (the chart)
	$(VENV)/bin/ruff check operator tests bench
	$(VENV)/bin/mypy
	$(VENV)/bin/hadolint images/*/Dockerfile
	@hack/build-binaries.sh helm
	"$$($(PY) -c 'from qwen_fleet.devcluster.binaries import locate; print(locate().helm)')" lint --strict charts/qwen-fleet

bench: venv binaries ## benchmarks; figures go to bench/results/
	$(PY) -m bench.run

cluster-up: venv binaries ## start a local control plane in .dev/cluster (export KUBECONFIG as printed)
	$(VENV)/bin/qwen-fleet dev up --dir .dev/cluster

cluster-down: venv ## stop it
	$(VENV)/bin/qwen-fleet dev down --dir .dev/cluster
