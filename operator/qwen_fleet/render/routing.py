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
- With routing.gateway.implementation EnvoyGateway (Envoy Gateway v1.7.0, which has no InferencePool backend),
  the route's backend is the fleet's Service instead, and two Envoy Gateway policies make Envoy honour the
  picker (docs/gateway.md): an EnvoyExtensionPolicy per pool, ``<pool>-epp``, that sends each request through
  the picker (ext_proc, full-duplex bodies as the picker needs, its failure mode), and a BackendTrafficPolicy
  named as the fleet that routes to the endpoint the picker wrote into x-gateway-destination-endpoint
  (loadBalancer.endpointOverride) and, on a connect failure or reset, retries the picker's next fallback.
  The picker then serves plain gRPC (Envoy Gateway would need a Backend with TLS verification turned off for
  its self-signed certificate).
- With routing.canary, the route's backendRefs are this fleet's and the canary fleet's (Service or InferencePool),
  weighted by percent (render/canary.py checks the canary; routing.auth.apiKeys' SecurityPolicy is in
  render/gateway_keys.py).
- With spec.pools (length-aware pools), all of the above but the route once per pool (``Target``): the
  InferencePool ``<fleet>-<pool>`` over that pool's pods, its own picker ``<fleet>-<pool>-epp`` (a v1.5.0 picker
  serves one pool), its objectives ``<fleet>-<pool>-<class>``; the one HTTPRoute has a rule per pool matching
  ``routing.poolHeader: <pool>`` exactly, and the default pool's rule also matches requests without it.

The picker's pods carry none of the fleet's pod labels: the fleet's Service, PDB and pool never select them.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import yaml

from qwen_fleet.api import QwenInference
from qwen_fleet.api.routing import PriorityClass, RoutingSpec, failure_mode, on_envoy_gateway, vllm_priority
from qwen_fleet.config import MANAGED_BY
from qwen_fleet.group import GROUP
from qwen_fleet.render.common import MANAGED_BY_LABEL, common_labels, metadata, selector_labels
from qwen_fleet.render.leaderworkerset import leader_selector

POOL_GROUP = "inference.networking.k8s.io"
OBJECTIVE_GROUP = "inference.networking.x-k8s.io"
EPP_SUFFIX = "-epp"  # the picker's children are <fleet>-epp (reconcile/kinds.py prunes them by it)
EPP_LABEL = f"{GROUP}/endpoint-picker"  # selects the picker's pods (never the fleet's INSTANCE_LABEL)
VLLM_PRIORITY_ANNOTATION = f"{GROUP}/vllm-priority"
CONFIG_FILE = "config.yaml"
CONFIG_DIR = "/config"
# The EPP's ports (pkg/epp/server/options.go defaults, as upstream's chart exposes them).
GRPC_PORT = 9002
GRPC_HEALTH_PORT = 9003
METRICS_PORT = 9090
POOL_LABEL = f"{GROUP}/pool"  # spec.pools: the pool of a pod, its Deployment, InferencePool and picker
GATEWAY_GROUP = "gateway.networking.k8s.io"
ENVOY_GATEWAY_GROUP = "gateway.envoyproxy.io"
# The header the picker names its endpoints in (pkg/epp/metadata/consts.go DestinationEndpointKey): the best
# first, then its fallbacks, comma-separated ip:port.
DESTINATION_HEADER = "x-gateway-destination-endpoint"
# What Envoy retries on behind Envoy Gateway: the replica the picker named refused the connection or reset it
# (a replica that has just died or is draining); override_host takes the next endpoint of the header then.
RETRY_TRIGGERS = ("connect-failure", "reset")
# routing.gateway.routeByModel: the header the Body-Based Router writes the body's model into
# (pkg/bbr/plugins/bodyfieldtoheader ModelHeader, v1.5.0). Gateway API matches header names case-insensitively.
MODEL_HEADER = "X-Gateway-Model-Name"


def model_names(cr: QwenInference) -> list[str]:
    """The names a client reaches this fleet by: the served model name, then each LoRA adapter's."""
    return [cr.spec.model.served_model_name or cr.name, *(a.name for a in cr.spec.serving.adapters)]


@dataclass(frozen=True)
class Target:
    """What one InferencePool and its endpoint picker front: the whole fleet, or one of spec.pools."""

    name: str  # the InferencePool's name; its picker is <name>-epp, its objectives <name>-<class>
    selector: dict[str, str]  # the pods it selects
    pool: str | None = None  # the spec.pools entry


def fleet_target(cr: QwenInference) -> Target:
    return Target(cr.name, leader_selector(cr))


def pool_name(cr: QwenInference, pool: str) -> str:
    """The Deployment and the InferencePool of a pool."""
    return f"{cr.name}-{pool}"


def pool_selector(cr: QwenInference, pool: str) -> dict[str, str]:
    return {**selector_labels(cr), POOL_LABEL: pool}


def targets(cr: QwenInference) -> list[Target]:
    """One per pool with spec.pools (shortest first), else the fleet."""
    if cr.spec.pools:
        return [Target(pool_name(cr, p.name), pool_selector(cr, p.name), p.name) for p in cr.spec.pools]
    return [fleet_target(cr)]


def default_pool(cr: QwenInference) -> str:
    """spec.pools: where a request without the pool header goes (routing.defaultPool, else the longest)."""
    routing = _routing(cr)
    return routing.default_pool if routing.default_pool is not None else cr.spec.pools[-1].name


def _target(cr: QwenInference, target: Target | None) -> Target:
    return target if target is not None else fleet_target(cr)


def epp_name(cr: QwenInference, target: Target | None = None) -> str:
    return _target(cr, target).name + EPP_SUFFIX


def objective_name(cr: QwenInference, cls: PriorityClass, target: Target | None = None) -> str:
    return f"{_target(cr, target).name}-{cls.name}"


def _routing(cr: QwenInference) -> RoutingSpec:
    assert cr.spec.routing is not None, "rendered only with spec.routing"
    return cr.spec.routing


def epp_selector(cr: QwenInference, target: Target | None = None) -> dict[str, str]:
    return {EPP_LABEL: _target(cr, target).name}


def epp_labels(cr: QwenInference, target: Target | None = None) -> dict[str, str]:
    pool = {POOL_LABEL: target.pool} if target is not None and target.pool is not None else {}
    return {"app.kubernetes.io/name": "epp", "app.kubernetes.io/instance": cr.name,
            "app.kubernetes.io/component": "endpoint-picker", "app.kubernetes.io/part-of": "qwen-fleet",
            MANAGED_BY_LABEL: MANAGED_BY, **pool, **epp_selector(cr, target)}


def _epp_meta(cr: QwenInference, target: Target | None) -> dict[str, Any]:
    return metadata(cr, name=epp_name(cr, target), labels=epp_labels(cr, target))


def _labels(cr: QwenInference, target: Target) -> dict[str, str]:
    return {**common_labels(cr), **({POOL_LABEL: target.pool} if target.pool is not None else {})}


def render_inference_pool(cr: QwenInference, target: Target | None = None) -> dict[str, Any]:
    routing = _routing(cr)
    target = _target(cr, target)
    return {
        "apiVersion": f"{POOL_GROUP}/v1",
        "kind": "InferencePool",
        "metadata": metadata(cr, name=target.name, labels=_labels(cr, target)),
        "spec": {
            "selector": {"matchLabels": dict(target.selector)},
            "targetPorts": [{"number": cr.spec.service.port}],
            "appProtocol": "http",
            "endpointPickerRef": {"group": "", "kind": "Service", "name": epp_name(cr, target),
                                  "port": {"number": GRPC_PORT},
                                  "failureMode": failure_mode(routing)},
        },
    }


# How many endpoints the picker names per request (max-score-picker maxNumOfEndpoints; v1.5.0's default is 1):
# the best first, then fallbacks, comma-separated in x-gateway-destination-endpoint (requestcontrol/director.go).
# A gateway with Envoy's override_host load balancing and a connect-failure retry tries them in order, so a
# request picked for a replica that has just died goes to the next one instead of failing (docs/routing.md,
# "Dead, unready and draining replicas"). Fixed rather than the replica count: the pool's size changes under an
# autoscaler without a spec change, and the picker returns min(this, candidates) anyway (max_score_picker.go).
PICKER_ENDPOINTS = 3
PICKER = "max-score-picker"


def epp_config(routing: RoutingSpec) -> dict[str, Any]:
    """The EPP's EndpointPickerConfig: the three scorers of upstream's default config (pkg/epp/config/loader/
    defaults.go) with our weights, the max-score picker naming PICKER_ENDPOINTS endpoints (best first, then
    fallbacks), and its data layer (vLLM's /metrics on the pool's target port). A scorer of weight 0 is left
    out; the loader adds the profile handler and the prefix scorer's producer (approx-prefix-cache-producer,
    autoTune: block size from vLLM's cache_config_info)."""
    weights = [("queue-scorer", routing.scorers.queue_depth),
               ("kv-cache-utilization-scorer", routing.scorers.kv_cache_usage),
               ("prefix-cache-scorer", routing.scorers.prefix_cache)]
    used = [(name, weight) for name, weight in weights if weight > 0]
    return {
        "apiVersion": f"{OBJECTIVE_GROUP}/v1alpha1",
        "kind": "EndpointPickerConfig",
        "plugins": [{"type": name} for name, _ in used] + [
            {"type": PICKER, "parameters": {"maxNumOfEndpoints": PICKER_ENDPOINTS}},
            {"type": "metrics-data-source", "parameters": {"scheme": "http", "path": "/metrics"}},
            {"type": "core-metrics-extractor"},
        ],
        "schedulingProfiles": [{"name": "default", "plugins": [
            *({"pluginRef": name, "weight": weight} for name, weight in used), {"pluginRef": PICKER}]}],
        "dataLayer": {"sources": [{"pluginRef": "metrics-data-source",
                                   "extractors": [{"pluginRef": "core-metrics-extractor"}]}]},
    }


def render_epp_config_map(cr: QwenInference, target: Target | None = None) -> dict[str, Any]:
    text = yaml.safe_dump(epp_config(_routing(cr)), sort_keys=False)
    return {"apiVersion": "v1", "kind": "ConfigMap", "metadata": _epp_meta(cr, target),
            "data": {CONFIG_FILE: text}}


def epp_args(cr: QwenInference, target: Target | None = None) -> list[str]:
    """cmd/epp flags (pkg/epp/server/options.go, v1.5.0). The metrics endpoint is served without its
    TokenReview check: that needs cluster-wide RBAC, which a namespaced fleet does not hand out."""
    plain = ["--secure-serving=false"] if on_envoy_gateway(_routing(cr)) else []
    return ["--pool-name", _target(cr, target).name, "--pool-namespace", cr.namespace, "--pool-group", POOL_GROUP,
            "--config-file", f"{CONFIG_DIR}/{CONFIG_FILE}", "--grpc-port", str(GRPC_PORT),
            "--grpc-health-port", str(GRPC_HEALTH_PORT), "--metrics-port", str(METRICS_PORT),
            "--zap-encoder", "json", "--tracing=false", "--metrics-endpoint-auth=false",
            "--enable-pprof=false", *plain]


def _probe(period: int) -> dict[str, Any]:
    # A single replica answers the gRPC health service "inference-extension" (upstream chart, replicas 1).
    return {"grpc": {"port": GRPC_HEALTH_PORT, "service": "inference-extension"}, "periodSeconds": period}


def render_epp_deployment(cr: QwenInference, target: Target | None = None) -> dict[str, Any]:
    picker = _routing(cr).endpoint_picker
    container = {
        "name": "epp",
        "image": picker.image,
        "imagePullPolicy": "IfNotPresent",
        "args": epp_args(cr, target),
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
        "metadata": _epp_meta(cr, target),
        "spec": {
            # One picker: its prefix index is in its memory. Recreate, as upstream's chart: a new picker takes
            # over at once instead of two indexes splitting the traffic during a rollout.
            "replicas": 1,
            "strategy": {"type": "Recreate"},
            "selector": {"matchLabels": epp_selector(cr, target)},
            "template": {
                "metadata": {"labels": epp_labels(cr, target)},
                "spec": {
                    "serviceAccountName": epp_name(cr, target),
                    # Upstream: at least the longest grace period of the pool's pods.
                    "terminationGracePeriodSeconds": 130,
                    "securityContext": {"seccompProfile": {"type": "RuntimeDefault"}},
                    "containers": [container],
                    "volumes": [{"name": "config", "configMap": {"name": epp_name(cr, target)}}],
                },
            },
        },
    }


def render_epp_service(cr: QwenInference, target: Target | None = None) -> dict[str, Any]:
    # Behind Envoy Gateway the picker serves plain gRPC: the ext_proc cluster Envoy Gateway makes for it is
    # always HTTP/2 (translateExtServiceBackendRefs with ir.GRPC), TLS only with a BackendTLSPolicy.
    ext_proc = {"name": "grpc-ext-proc", "port": GRPC_PORT, "targetPort": GRPC_PORT, "protocol": "TCP"}
    return {
        "apiVersion": "v1",
        "kind": "Service",
        "metadata": _epp_meta(cr, target),
        "spec": {
            "type": "ClusterIP",
            "selector": epp_selector(cr, target),
            "ports": [ext_proc, {"name": "http-metrics", "port": METRICS_PORT, "targetPort": METRICS_PORT,
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


def render_epp_rbac(cr: QwenInference, target: Target | None = None) -> list[dict[str, Any]]:
    """The picker's ServiceAccount, Role and RoleBinding (in the fleet's namespace only)."""
    name = epp_name(cr, target)
    rules = [{"apiGroups": [group], "resources": [resource], "verbs": list(verbs)}
             for group, resource, verbs in EPP_RULES]
    return [
        {"apiVersion": "v1", "kind": "ServiceAccount", "metadata": _epp_meta(cr, target)},
        {"apiVersion": "rbac.authorization.k8s.io/v1", "kind": "Role", "metadata": _epp_meta(cr, target),
         "rules": rules},
        {"apiVersion": "rbac.authorization.k8s.io/v1", "kind": "RoleBinding", "metadata": _epp_meta(cr, target),
         "roleRef": {"apiGroup": "rbac.authorization.k8s.io", "kind": "Role", "name": name},
         "subjects": [{"kind": "ServiceAccount", "name": name, "namespace": cr.namespace}]},
    ]


def render_objectives(cr: QwenInference, target: Target | None = None) -> list[dict[str, Any]]:
    """One InferenceObjective per class for this pool: a v1.5.0 picker reads only the objectives whose poolRef
    is its own pool (pkg/epp/controller/inferenceobjective_reconciler.go)."""
    target = _target(cr, target)
    out = []
    for cls in _routing(cr).priority_classes:
        meta = metadata(cr, name=objective_name(cr, cls, target), labels=_labels(cr, target),
                        annotations={VLLM_PRIORITY_ANNOTATION: str(vllm_priority(cls.priority))})
        out.append({"apiVersion": f"{OBJECTIVE_GROUP}/v1alpha2", "kind": "InferenceObjective", "metadata": meta,
                    "spec": {"priority": cls.priority, "poolRef": {"group": POOL_GROUP, "kind": "InferencePool",
                                                                   "name": target.name}}})
    return out


def render_http_route(cr: QwenInference) -> dict[str, Any]:
    gateway = _routing(cr).gateway
    assert gateway is not None, "rendered only with routing.gateway"
    parent: dict[str, Any] = {"group": GATEWAY_GROUP, "kind": "Gateway", "name": gateway.name}
    if gateway.namespace is not None:
        parent["namespace"] = gateway.namespace
    if gateway.section_name is not None:
        parent["sectionName"] = gateway.section_name
    return {
        "apiVersion": "gateway.networking.k8s.io/v1",
        "kind": "HTTPRoute",
        "metadata": metadata(cr, labels=common_labels(cr)),
        "spec": {"parentRefs": [parent], "rules": [_route_rule(cr, t) for t in targets(cr)]},
    }


def _route_rule(cr: QwenInference, target: Target) -> dict[str, Any]:
    """Every path to the target. A pool's rule matches its header value exactly (Gateway API core); the
    default pool's also matches requests without it. Gateway API gives a match with more header matches
    precedence, so a named pool wins over the default's bare match."""
    routing = _routing(cr)
    assert routing.gateway is not None
    every_path = {"path": {"type": "PathPrefix", "value": "/"}}
    matches: list[dict[str, Any]] = [every_path]
    if target.pool is not None:
        header = {"type": "Exact", "name": routing.pool_header, "value": target.pool}
        matches = [{**every_path, "headers": [header]}]
        if target.pool == default_pool(cr):
            matches.append(every_path)
    if routing.gateway.route_by_model:  # each match once per model name (matches are ORed, headers ANDed)
        matches = [{**m, "headers": [*m.get("headers", []), {"type": "Exact", "name": MODEL_HEADER, "value": name}]}
                   for m in matches for name in model_names(cr)]
    if on_envoy_gateway(routing):
        # Envoy Gateway: the fleet's Service, whose endpoints are the pods the picker names (the fleet's
        # Service selects every pool's pods; the picker of a pool names only its own). A pool's rule is named
        # after it, so that pool's EnvoyExtensionPolicy can target that rule alone (sectionName).
        backend: dict[str, Any] = {"group": "", "kind": "Service", "name": cr.name, "port": cr.spec.service.port}
        named = {"name": target.pool} if target.pool is not None else {}
        return {**named, "matches": matches, "backendRefs": _weighted(cr, backend),
                "timeouts": {"request": routing.gateway.request_timeout}}
    backend = {"group": POOL_GROUP, "kind": "InferencePool", "name": target.name}
    return {"matches": matches, "backendRefs": _weighted(cr, backend),
            "timeouts": {"request": routing.gateway.request_timeout}}


def traffic_split(cr: QwenInference) -> list[tuple[str, int]]:
    """routing.canary: (fleet, percent) of the route's backends, this fleet first; without a canary, this fleet
    alone at 100."""
    canary = _routing(cr).canary
    if canary is None:
        return [(cr.name, 100)]
    return [(cr.name, 100 - canary.weight), (canary.fleet, canary.weight)]


def _weighted(cr: QwenInference, backend: dict[str, Any]) -> list[dict[str, Any]]:
    """The rule's backendRefs: this fleet's backend, and with routing.canary the canary fleet's of the same kind
    (its Service on the same port, or its InferencePool, named as the fleet: the reconcile checks both exist and
    match, reconcile/canary.py), each weighted by its percent. Gateway API splits a rule's requests among its
    backendRefs in proportion to their weights; a weight of 0 gets none. Without a canary the backend has no
    weight (Gateway API's default, 1, for a single backend)."""
    if _routing(cr).canary is None:
        return [backend]
    return [{**backend, "name": fleet, "weight": percent} for fleet, percent in traffic_split(cr)]


def route_target(cr: QwenInference, target: Target | None = None) -> dict[str, Any]:
    ref = {"group": GATEWAY_GROUP, "kind": "HTTPRoute", "name": cr.name}
    return {**ref, "sectionName": target.pool} if target is not None and target.pool is not None else ref


def render_extension_policy(cr: QwenInference, target: Target | None = None) -> dict[str, Any]:
    """Envoy Gateway: the ext_proc filter to the target's picker on its route (rule). The picker reads request
    headers and the whole body to choose, and rewrites the response body's model name, so both directions are
    full-duplex streamed (the mode the v1.5.0 picker answers in: StreamedBodyResponse); the message timeout is
    the route's, as the picker may hold a request in its flow-control queue."""
    routing = _routing(cr)
    assert routing.gateway is not None
    target = _target(cr, target)
    def streamed() -> dict[str, Any]:
        return {"body": "FullDuplexStreamed"}

    return {
        "apiVersion": f"{ENVOY_GATEWAY_GROUP}/v1alpha1",
        "kind": "EnvoyExtensionPolicy",
        "metadata": metadata(cr, name=epp_name(cr, target), labels=_labels(cr, target)),
        "spec": {
            "targetRefs": [route_target(cr, target)],
            "extProc": [{
                "backendRefs": [{"group": "", "kind": "Service", "name": epp_name(cr, target), "port": GRPC_PORT}],
                "processingMode": {"request": streamed(), "response": streamed()},
                "messageTimeout": routing.gateway.request_timeout,
                "failOpen": failure_mode(routing) == "FailOpen",
            }],
        },
    }


def render_backend_traffic_policy(cr: QwenInference) -> dict[str, Any]:
    """Envoy Gateway: send each request to the endpoint the picker named, and on a connect failure or reset retry
    the next one it named (override_host walks the header's list); as many retries as the picker names
    fallbacks. Without the header (the picker failed open) Envoy balances by least requests."""
    return {
        "apiVersion": f"{ENVOY_GATEWAY_GROUP}/v1alpha1",
        "kind": "BackendTrafficPolicy",
        "metadata": metadata(cr, labels=common_labels(cr)),
        "spec": {
            "targetRefs": [route_target(cr)],
            "loadBalancer": {"type": "LeastRequest",
                             "endpointOverride": {"extractFrom": [{"header": DESTINATION_HEADER}]}},
            "retry": {"numRetries": PICKER_ENDPOINTS - 1,
                      "retryOn": {"triggers": list(RETRY_TRIGGERS)}},
        },
    }


def render_routing(cr: QwenInference) -> list[dict[str, Any]]:
    """Every routing child, in apply order: per pool (one without spec.pools), what the picker mounts and runs
    as, the picker, then the pool (the picker waits for it) and the objectives that name it; then the route."""
    routing = _routing(cr)
    children: list[dict[str, Any]] = []
    for target in targets(cr):
        children += [render_epp_config_map(cr, target), *render_epp_rbac(cr, target),
                     render_epp_deployment(cr, target), render_epp_service(cr, target),
                     render_inference_pool(cr, target), *render_objectives(cr, target)]
    if routing.gateway is not None:
        children.append(render_http_route(cr))
        if on_envoy_gateway(routing):
            children += [render_extension_policy(cr, t) for t in targets(cr)]
            children.append(render_backend_traffic_policy(cr))
    return children
