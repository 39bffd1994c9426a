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

$(VENV)/.installed: pyproject.toml requirements.lock
	$(PYTHON) -m venv $(VENV)
	$(PY) -m pip install -q --disable-pip-version-check --upgrade pip==26.3
	$(PY) -m pip install -q --disable-pip-version-check -c requirements.lock -e '.[dev]'
	touch $@

.PHONY: lock
lock: ## re-resolve pyproject.toml's dependencies (today's newest in range) into requirements.lock
	rm -rf .lock-venv && $(PYTHON) -m venv .lock-venv
	.lock-venv/bin/pip install -q --disable-pip-version-check -e '.[dev]'
	{ head -2 requirements.lock; .lock-venv/bin/pip freeze --all --exclude-editable \
	  | grep -vE '^(pip|setuptools|wheel)==|^-e |qwen.fleet' | LC_ALL=C sort -f; } > requirements.lock.new
	mv requirements.lock.new requirements.lock && rm -rf .lock-venv

.PHONY: venv binaries vllm-venv real-node-deps setup
venv: $(VENV)/.installed ## the project's Python venv (.venv)

binaries: ## build the control-plane binaries from the Go module proxy (cached in $QF_CACHE)
	hack/build-binaries.sh

real-node-deps: ## the real node's container runtime from Debian: containerd, runc, CNI plugins (as root)
	hack/real-node-deps.sh

vllm-venv: ## the cached venv with the pinned CPU build of vLLM (for contract and e2e tests)
	hack/vllm-venv.sh >/dev/null

setup: venv ## everything the tests need; the engine venv installs (network-bound) while Go compiles (CPU-bound)
	@hack/real-node-deps.sh
	@hack/vllm-venv.sh >/dev/null & engine=$$!; \
	  hack/build-binaries.sh; built=$$?; \
	  wait $$engine; venv=$$?; \
	  if [ $$built -ne 0 ] || [ $$venv -ne 0 ]; then echo "setup failed (binaries: $$built, vllm venv: $$venv; logs: $(QF_CACHE)/logs)" >&2; exit 1; fi; \
	  echo "[setup] ready in $$SECONDS s (each step's time: $(QF_CACHE)/.timings)" >&2

# --- the two commands ---------------------------------------------------------------------------------------

.PHONY: run test
run: setup ## demo: local cluster with a real node, CRD, operator, a tiny CPU fleet served by vLLM and its first answer (Ctrl-C stops all)
	$(VENV)/bin/qwen-fleet run --real-node

# Lanes: pytest-xdist workers, test groups from tests/support/lanes.py (one real-node cluster, one shared engine,
# each package cluster once); TEST_LANES=0 runs the suite in one process, as before.
TEST_LANES ?= 2
LANE_ARGS = $(if $(filter-out 0,$(TEST_LANES)),-n $(TEST_LANES) --dist loadgroup)

test: setup ## the whole suite in parallel lanes (TEST_LANES=2; 0: one process): unit, integration, contract, e2e, chaos, the real-node fleet (fails if no test ran)
	@set -o pipefail; rc=0; QF_TEST_TIMES=$${QF_TEST_TIMES:-$(QF_CACHE)/make-test-times.json} $(VENV)/bin/pytest -p no:cacheprovider --durations=30 $(LANE_ARGS) $(PYTEST_ARGS) tests || rc=$$?; \
	  if [ $$rc -eq 5 ]; then echo "make test: no tests ran" >&2; exit 1; fi; exit $$rc

# --- pieces -------------------------------------------------------------------------------------------------

.PHONY: test-unit test-integration test-node test-contract test-e2e test-real-fleet test-keda test-keda-http test-scale-to-zero test-picker
test-picker: setup vllm-venv ## the real endpoint picker (built first when missing) choosing among two vLLM CPU servers (also in make test)
	hack/build-binaries.sh epp
	$(VENV)/bin/pytest -p no:cacheprovider -m real_picker tests/integration $(PYTEST_ARGS)

test-keda: setup ## the real KEDA operator and metrics apiserver alone (built first when missing: ~25 min cold; also in make test)
	hack/build-binaries.sh keda
	$(VENV)/bin/pytest -p no:cacheprovider -m keda_controller tests/integration $(PYTEST_ARGS)

test-keda-http: setup ## scale to zero with the real KEDA HTTP add-on and KEDA alone (built first when missing: KEDA ~25 min cold, then the add-on; also in make test)
	hack/build-binaries.sh keda keda-http
	$(VENV)/bin/pytest -p no:cacheprovider -m keda_http tests/integration $(PYTEST_ARGS)

test-scale-to-zero: setup ## scale to zero on the real node: a real vLLM pod woken by held requests through the KEDA HTTP add-on (builds KEDA ~25 min cold, then the add-on; also in make test)
	hack/build-binaries.sh keda keda-http
	$(VENV)/bin/pytest -p no:cacheprovider -m keda_http tests/node $(PYTEST_ARGS)

.PHONY: test-gateway
test-gateway: setup ## Envoy Gateway and its Envoy proxy as pods on the real node, requests through them (builds envoy-gateway first when missing; also in make test)
	hack/build-binaries.sh envoy-gateway envoy
	$(VENV)/bin/pytest -p no:cacheprovider -m real_gateway tests/node $(PYTEST_ARGS)

test-real-fleet: setup ## a vLLM CPU fleet on the real node: operator pod via helm, probes, ClusterIP, EngineFailed, rollout, NCCL preflight
	$(VENV)/bin/pytest -p no:cacheprovider -m real_fleet tests/node $(PYTEST_ARGS)

test-unit: venv ## fast tests, no cluster, no engine
	$(VENV)/bin/pytest -p no:cacheprovider tests/unit $(PYTEST_ARGS)

test-integration: venv binaries ## against the real local control plane
	$(VENV)/bin/pytest -p no:cacheprovider tests/integration $(PYTEST_ARGS)

test-node: venv real-node-deps ## a real node (kubelet, containerd, kube-proxy) in the local cluster: pods that run
	hack/build-binaries.sh k8s etcd kwok node
	$(VENV)/bin/pytest -p no:cacheprovider tests/node $(PYTEST_ARGS)

test-contract: venv vllm-venv ## against the real vLLM engine on CPU
	$(VENV)/bin/pytest -p no:cacheprovider tests/contract $(PYTEST_ARGS)

test-e2e: setup ## end to end: cluster + operator + metrics + engine
	$(VENV)/bin/pytest -p no:cacheprovider tests/e2e $(PYTEST_ARGS)

.PHONY: generate vllm-flags lint kube-schemas validate-manifests bench bench-keda bench-scale-to-zero bench-scale-to-zero-node bench-serving bench-batch bench-batch-node bench-routing cluster-up cluster-down
vllm-flags: vllm-venv ## regenerate vLLM's flag table (engine.extraArgs is checked against it) from its parser
	VLLM_TARGET_DEVICE=cpu "$$(hack/vllm-venv.sh)" hack/vllm-flags.py > operator/qwen_fleet/catalog/vllm_flags.json.tmp
	mv operator/qwen_fleet/catalog/vllm_flags.json.tmp operator/qwen_fleet/catalog/vllm_flags.json

generate: venv ## regenerate the CRD (and the chart's byte-for-byte copy) from the pydantic models
	$(VENV)/bin/qwen-fleet crd -o crds/qwenfleet.io_qweninferences.yaml
	cp crds/qwenfleet.io_qweninferences.yaml charts/qwen-fleet/files/crds/qwenfleet.io_qweninferences.yaml
	$(VENV)/bin/qwen-fleet crd --kind QwenBatch -o crds/qwenfleet.io_qwenbatches.yaml
	cp crds/qwenfleet.io_qwenbatches.yaml charts/qwen-fleet/files/crds/qwenfleet.io_qwenbatches.yaml

lint: venv ## ruff, mypy (strict), hadolint, helm lint --strict, kubeconform of every manifest we ship
	$(VENV)/bin/ruff check operator devtools tests bench hack
	$(VENV)/bin/mypy
	$(VENV)/bin/hadolint images/*/Dockerfile
	@hack/build-binaries.sh helm
	"$$($(PY) -c 'from qwen_fleet_dev.binaries import locate; print(locate().helm)')" lint --strict charts/qwen-fleet
	@$(MAKE) --no-print-directory validate-manifests

kube-schemas: venv ## kubeconform's schemas from the local kube-apiserver's OpenAPI (cached in $QF_CACHE/kube-schemas)
	@hack/build-binaries.sh k8s etcd kwok helm
	$(PY) hack/kube-schemas.py

validate-manifests: venv ## kubeconform -strict: helm template (every tested values case), qwen-fleet render, examples
	@hack/build-binaries.sh k8s etcd kwok helm kubeconform
	$(PY) hack/validate-manifests.py "$(QF_CACHE)/kubeconform/$$(sed -n 's/^KUBECONFORM_VERSION=//p' hack/versions.env)/bin/kubeconform" \
	  "$$($(PY) hack/kube-schemas.py)"

bench: venv binaries ## benchmarks; figures go to bench/results/
	$(PY) -m bench.run

bench-scale-to-zero: venv binaries ## (builds KEDA and its HTTP add-on first when missing) cold starts from zero through the add-on, ~9 min; bench/results/scale-to-zero.{md,json}
	$(PY) -m bench.scale_to_zero

bench-scale-to-zero-node: setup ## (builds KEDA and its HTTP add-on first when missing) the same with a real vLLM pod on the real node; bench/results/scale-to-zero-real-node.{md,json}
	hack/build-binaries.sh keda keda-http
	$(PY) -m bench.scale_to_zero_node

bench-keda: venv binaries ## (builds KEDA first when missing) the same queue surge through the HPA path and the real KEDA, side by side, ~2 min; bench/results/keda-vs-hpa.{md,json}
	$(PY) -m bench.keda_vs_hpa

BENCH_SERVING_ARGS ?=
bench-serving: venv vllm-venv ## serving sweep (vllm bench serve) on the tiny model, CPU engines; bench/results/serving-cpu-tiny.{md,json}
	$(PY) -m bench.serving $(BENCH_SERVING_ARGS)

BENCH_BATCH_ARGS ?=
bench-batch-node: setup ## interactive TTFT beside QwenBatches (priority 10 vs 0, default and saturating concurrency) on the real node: operator pod, fleet pod, batch Jobs; bench/results/batch-real-node.{md,json}
	$(PY) -m bench.batch_real_node $(BENCH_BATCH_NODE_ARGS)

bench-batch: venv vllm-venv ## interactive TTFT during a QwenBatch (priority 10 vs 0) on one tiny CPU engine, ~10 min; bench/results/batch-priority.{md,json}
	$(PY) -m bench.batch_priority $(BENCH_BATCH_ARGS)

BENCH_ROUTING_ARGS ?=
bench-routing: venv vllm-venv ## the real endpoint picker vs a plain Service on two tiny CPU engines: prefix-cache hit rate and TTFT, short TTFT under a long flood with and without priority, a replica killed mid-run under two gateway retry policies (connect-failure; connect-failure,reset); ~6.5 min; bench/results/routing.{md,json,png}
	$(PY) -m bench.routing $(BENCH_ROUTING_ARGS)

.PHONY: docs image
docs: venv ## the docs site (MkDocs, Material) into build/site with --strict; the API reference is generated from crds/ on the way
	NO_MKDOCS_2_WARNING=1 $(VENV)/bin/mkdocs build --strict --site-dir build/site

image: venv ## the operator image without a container engine: build/operator-image.tar (docker-archive) and the commands to push it
	$(PY) hack/operator-image.py build/operator-image.tar

cluster-up: venv binaries ## start a local control plane in .dev/cluster (export KUBECONFIG as printed)
	$(VENV)/bin/qwen-fleet dev up --dir .dev/cluster

cluster-down: venv ## stop it
	$(VENV)/bin/qwen-fleet dev down --dir .dev/cluster
