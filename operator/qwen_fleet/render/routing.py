"""spec.routing: the Gateway API Inference Extension (v1.5.0) in front of the fleet (docs/routing.md).

- The InferencePool (inference.networking.k8s.io/v1), named as the fleet: the pods that serve the API (leaders
  of multi-node groups, as the Service selects them) on the vLLM port, and the endpoint picker that chooses
  among them (endpointPickerRef: its Service, ext-proc port 9002).
- The endpoint picker (EPP), ``<fleet>-epp``: a Deployment of upstream's cmd/epp with the flags of upstream's
  own chart (config/charts/epplib/templates/_deployment.yaml), its config file in a ConfigMap, a Service, and
  a ServiceAccount with the Role upstream's chart gives it (config/charts/inferencepool/templates/rbac.yaml,
  config/charts/epplib/templates/_rbac.yaml): read pods, the pool, InferenceObjectives and
  InferenceModelRewrites (the EPP watches the last two whenever the cluster serves them).
- An InferenceObjective (inference.networking.x-k8s.io/v1alpha2) per routing.priorityClasses entry,
  ``<fleet>-<class>``, that requests name in the x-gateway-inference-objective header. Its annotation says the
  vLLM request priority of the class (api/routing.py vllm_priority: the two run in opposite directions).
- With routing.gateway, an HTTPRoute (gateway.networking.k8s.io/v1) named as the fleet, whose one rule sends
  every path to the pool (upstream chart's config/charts/inferencepool/templates/httproute.yaml).

The picker's pods carry none of the fleet's pod labels: the fleet's Service, PDB and pool never select them.
"""

from __future__ import annotations

from typing import Any

import yaml

from qwen_fleet.api import QwenInference
from qwen_fleet.api.routing import PriorityClass, RoutingSpec, vllm_priority
from qwen_fleet.config import MANAGED_BY
from qwen_fleet.render.common import MANAGED_BY_LABEL, common_labels, metadata
from qwen_fleet.render.leaderworkerset import leader_selector

POOL_GROUP = "inference.networking.k8s.io"
OBJECTIVE_GROUP = "inference.networking.x-k8s.io"
EPP_SUFFIX = "-epp"  # the picker's children are <fleet>-epp (reconcile/kinds.py prunes them by it)
EPP_LABEL = "qwenfleet.io/endpoint-picker"  # selects the picker's pods (never the fleet's INSTANCE_LABEL)
VLLM_PRIORITY_ANNOTATION = "qwenfleet.io/vllm-priority"
CONFIG_FILE = "config.yaml"
CONFIG_DIR = "/config"
# The EPP's ports (pkg/epp/server/options.go defaults, as upstream's chart exposes them).
GRPC_PORT = 9002
GRPC_HEALTH_PORT = 9003
METRICS_PORT = 9090


def epp_name(cr: QwenInference) -> str:
    return cr.name + EPP_SUFFIX


def objective_name(cr: QwenInference, cls: PriorityClass) -> str:
    return f"{cr.name}-{cls.name}"


def _routing(cr: QwenInference) -> RoutingSpec:
    assert cr.spec.routing is not None, "rendered only with spec.routing"
    return cr.spec.routing


def epp_selector(cr: QwenInference) -> dict[str, str]:
    return {EPP_LABEL: cr.name}


def epp_labels(cr: QwenInference) -> dict[str, str]:
    return {"app.kubernetes.io/name": "epp", "app.kubernetes.io/instance": cr.name,
            "app.kubernetes.io/component": "endpoint-picker", "app.kubernetes.io/part-of": "qwen-fleet",
            MANAGED_BY_LABEL: MANAGED_BY, **epp_selector(cr)}


def _epp_meta(cr: QwenInference) -> dict[str, Any]:
    return metadata(cr, name=epp_name(cr), labels=epp_labels(cr))


def render_inference_pool(cr: QwenInference) -> dict[str, Any]:
    routing = _routing(cr)
    return {
        "apiVersion": f"{POOL_GROUP}/v1",
        "kind": "InferencePool",
        "metadata": metadata(cr, labels=common_labels(cr)),
        "spec": {
            "selector": {"matchLabels": leader_selector(cr)},
            "targetPorts": [{"number": cr.spec.service.port}],
            "appProtocol": "http",
            "endpointPickerRef": {"group": "", "kind": "Service", "name": epp_name(cr),
                                  "port": {"number": GRPC_PORT},
                                  "failureMode": routing.endpoint_picker.failure_mode},
        },
    }


def epp_config(routing: RoutingSpec) -> dict[str, Any]:
    """The EPP's EndpointPickerConfig: the three scorers of upstream's default config (pkg/epp/config/loader/
    defaults.go) with our weights, and its data layer (vLLM's /metrics on the pool's target port). A scorer of
    weight 0 is left out; the loader adds the picker, the profile handler, and the prefix scorer's producer
    (approx-prefix-cache-producer, autoTune: block size from vLLM's cache_config_info)."""
    weights = [("queue-scorer", routing.scorers.queue_depth),
               ("kv-cache-utilization-scorer", routing.scorers.kv_cache_usage),
               ("prefix-cache-scorer", routing.scorers.prefix_cache)]
    used = [(name, weight) for name, weight in weights if weight > 0]
    return {
        "apiVersion": f"{OBJECTIVE_GROUP}/v1alpha1",
        "kind": "EndpointPickerConfig",
        "plugins": [{"type": name} for name, _ in used] + [
            {"type": "metrics-data-source", "parameters": {"scheme": "http", "path": "/metrics"}},
            {"type": "core-metrics-extractor"},
        ],
        "schedulingProfiles": [{"name": "default", "plugins": [{"pluginRef": name, "weight": weight}
                                                               for name, weight in used]}],
        "dataLayer": {"sources": [{"pluginRef": "metrics-data-source",
                                   "extractors": [{"pluginRef": "core-metrics-extractor"}]}]},
    }


def render_epp_config_map(cr: QwenInference) -> dict[str, Any]:
    text = yaml.safe_dump(epp_config(_routing(cr)), sort_keys=False)
    return {"apiVersion": "v1", "kind": "ConfigMap", "metadata": _epp_meta(cr), "data": {CONFIG_FILE: text}}


def epp_args(cr: QwenInference) -> list[str]:
    """cmd/epp flags (pkg/epp/server/options.go, v1.5.0). The metrics endpoint is served without its
    TokenReview check: that needs cluster-wide RBAC, which a namespaced fleet does not hand out."""
    return ["--pool-name", cr.name, "--pool-namespace", cr.namespace, "--pool-group", POOL_GROUP,
            "--config-file", f"{CONFIG_DIR}/{CONFIG_FILE}", "--grpc-port", str(GRPC_PORT),
            "--grpc-health-port", str(GRPC_HEALTH_PORT), "--metrics-port", str(METRICS_PORT),
            "--zap-encoder", "json", "--tracing=false", "--metrics-endpoint-auth=false",
            "--enable-pprof=false"]


def _probe(period: int) -> dict[str, Any]:
    # A single replica answers the gRPC health service "inference-extension" (upstream chart, replicas 1).
    return {"grpc": {"port": GRPC_HEALTH_PORT, "service": "inference-extension"}, "periodSeconds": period}


def render_epp_deployment(cr: QwenInference) -> dict[str, Any]:
    picker = _routing(cr).endpoint_picker
    container = {
        "name": "epp",
        "image": picker.image,
        "imagePullPolicy": "IfNotPresent",
        "args": epp_args(cr),
        "env": [{"name": "NAMESPACE", "valueFrom": {"fieldRef": {"fieldPath": "metadata.namespace"}}},
                {"name": "POD_NAME", "valueFrom": {"fieldRef": {"fieldPath": "metadata.name"}}}],
        "ports": [{"name": "grpc", "containerPort": GRPC_PORT, "protocol": "TCP"},
                  {"name": "grpc-health", "containerPort": GRPC_HEALTH_PORT, "protocol": "TCP"},
                  {"name": "metrics", "containerPort": METRICS_PORT, "protocol": "TCP"}],
        "livenessProbe": {**_probe(10), "initialDelaySeconds": 5},
        "readinessProbe": _probe(2),
        "resources": {"requests": {"cpu": str(picker.cpu), "memory": str(picker.memory)},
                      "limits": {"memory": str(picker.memory)}},
        # The image runs as distroless' nonroot user (upstream's Dockerfile).
        "securityContext": {"allowPrivilegeEscalation": False, "runAsNonRoot": True,
                            "capabilities": {"drop": ["ALL"]}},
        "volumeMounts": [{"name": "config", "mountPath": CONFIG_DIR, "readOnly": True}],
    }
    return {
        "apiVersion": "apps/v1",
        "kind": "Deployment",
        "metadata": _epp_meta(cr),
        "spec": {
            # One picker: its prefix index is in its memory. Recreate, as upstream's chart: a new picker takes
            # over at once instead of two indexes splitting the traffic during a rollout.
            "replicas": 1,
            "strategy": {"type": "Recreate"},
            "selector": {"matchLabels": epp_selector(cr)},
            "template": {
                "metadata": {"labels": epp_labels(cr)},
                "spec": {
                    "serviceAccountName": epp_name(cr),
                    # Upstream: at least the longest grace period of the pool's pods.
                    "terminationGracePeriodSeconds": 130,
                    "securityContext": {"seccompProfile": {"type": "RuntimeDefault"}},
                    "containers": [container],
                    "volumes": [{"name": "config", "configMap": {"name": epp_name(cr)}}],
                },
            },
        },
    }


def render_epp_service(cr: QwenInference) -> dict[str, Any]:
    return {
        "apiVersion": "v1",
        "kind": "Service",
        "metadata": _epp_meta(cr),
        "spec": {
            "type": "ClusterIP",
            "selector": epp_selector(cr),
            "ports": [{"name": "grpc-ext-proc", "port": GRPC_PORT, "targetPort": GRPC_PORT, "protocol": "TCP"},
                      {"name": "http-metrics", "port": METRICS_PORT, "targetPort": METRICS_PORT,
                       "protocol": "TCP"}],
        },
    }


# What the picker reads (upstream's chart, v1.5.0): the pool's pods, the pool, and the objectives and model
# rewrites that name it (watched whenever the cluster serves their CRD). The operator holds each of these
# itself: RBAC lets it grant only what it has (reconcile/kinds.py routing_permissions).
EPP_RULES: tuple[tuple[str, str, tuple[str, ...]], ...] = (
    ("", "pods", ("get", "watch", "list")),
    (POOL_GROUP, "inferencepools", ("get", "watch", "list")),
    (OBJECTIVE_GROUP, "inferenceobjectives", ("get", "watch", "list")),
    (OBJECTIVE_GROUP, "inferencemodelrewrites", ("get", "watch", "list")),
)


def render_epp_rbac(cr: QwenInference) -> list[dict[str, Any]]:
    """The picker's ServiceAccount, Role and RoleBinding (in the fleet's namespace only)."""
    name = epp_name(cr)
    rules = [{"apiGroups": [group], "resources": [resource], "verbs": list(verbs)}
             for group, resource, verbs in EPP_RULES]
    return [
        {"apiVersion": "v1", "kind": "ServiceAccount", "metadata": _epp_meta(cr)},
        {"apiVersion": "rbac.authorization.k8s.io/v1", "kind": "Role", "metadata": _epp_meta(cr), "rules": rules},
        {"apiVersion": "rbac.authorization.k8s.io/v1", "kind": "RoleBinding", "metadata": _epp_meta(cr),
         "roleRef": {"apiGroup": "rbac.authorization.k8s.io", "kind": "Role", "name": name},
         "subjects": [{"kind": "ServiceAccount", "name": name, "namespace": cr.namespace}]},
    ]


def render_objectives(cr: QwenInference) -> list[dict[str, Any]]:
    out = []
    for cls in _routing(cr).priority_classes:
        meta = metadata(cr, name=objective_name(cr, cls), labels=common_labels(cr),
                        annotations={VLLM_PRIORITY_ANNOTATION: str(vllm_priority(cls.priority))})
        out.append({"apiVersion": f"{OBJECTIVE_GROUP}/v1alpha2", "kind": "InferenceObjective", "metadata": meta,
                    "spec": {"priority": cls.priority, "poolRef": {"group": POOL_GROUP, "kind": "InferencePool",
                                                                   "name": cr.name}}})
    return out


def render_http_route(cr: QwenInference) -> dict[str, Any]:
    gateway = _routing(cr).gateway
    assert gateway is not None, "rendered only with routing.gateway"
    parent: dict[str, Any] = {"group": "gateway.networking.k8s.io", "kind": "Gateway", "name": gateway.name}
    if gateway.namespace is not None:
        parent["namespace"] = gateway.namespace
    if gateway.section_name is not None:
        parent["sectionName"] = gateway.section_name
    return {
        "apiVersion": "gateway.networking.k8s.io/v1",
        "kind": "HTTPRoute",
        "metadata": metadata(cr, labels=common_labels(cr)),
        "spec": {
            "parentRefs": [parent],
            "rules": [{
                "matches": [{"path": {"type": "PathPrefix", "value": "/"}}],
                "backendRefs": [{"group": POOL_GROUP, "kind": "InferencePool", "name": cr.name}],
                "timeouts": {"request": gateway.request_timeout},
            }],
        },
    }


def render_routing(cr: QwenInference) -> list[dict[str, Any]]:
    """Every routing child, in apply order: what the picker mounts and runs as, the picker, then the pool
    (the picker waits for it), the objectives that name the pool, and the route to it."""
    routing = _routing(cr)
    children = [render_epp_config_map(cr), *render_epp_rbac(cr), render_epp_deployment(cr),
                render_epp_service(cr), render_inference_pool(cr), *render_objectives(cr)]
    if routing.gateway is not None:
        children.append(render_http_route(cr))
    return children
