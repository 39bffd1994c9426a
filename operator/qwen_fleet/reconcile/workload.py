"""The workload of a fleet, as a Deployment (a replica on one node) or a LeaderWorkerSet (a replica spanning
nodes: one group per replica). Pure.

Status and the change plan read both through one shape: a LeaderWorkerSet is seen as the Deployment-shaped
rollout view below (groups count as replicas), so the rollout rules of reconcile/status.py hold for both.
A LeaderWorkerSet has no ``availableReplicas``: its groups count as available while its ``Available``
condition is True (the LWS controller's "at least the minimum available groups are up").
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from qwen_fleet.api.conditions import is_true
from qwen_fleet.plan import Plan
from qwen_fleet.reconcile.kinds import CHILD_KIND, CHILD_KINDS, serves
from qwen_fleet.reconcile.status import Outcome
from qwen_fleet.render import Capabilities

WORKLOAD_KINDS = tuple(k.kind for k in CHILD_KINDS if k.workload)
LWS = CHILD_KIND["LeaderWorkerSet"]
KEDA = CHILD_KIND["ScaledObject"]
KEDA_HTTP = CHILD_KIND["InterceptorRoute"]
# spec.routing's kinds from other projects (render/routing.py).
INFERENCE_POOL = CHILD_KIND["InferencePool"]
INFERENCE_OBJECTIVE = CHILD_KIND["InferenceObjective"]
HTTP_ROUTE = CHILD_KIND["HTTPRoute"]
ENVOY_EXTENSION_POLICY = CHILD_KIND["EnvoyExtensionPolicy"]
BACKEND_TRAFFIC_POLICY = CHILD_KIND["BackendTrafficPolicy"]
SECURITY_POLICY = CHILD_KIND["SecurityPolicy"]


def workload_kind(nodes: int) -> str:
    return "LeaderWorkerSet" if nodes > 1 else "Deployment"


def missing_capability(plan: Plan, caps: Capabilities) -> Outcome | None:
    """Stalled when the spec needs an API the cluster does not serve; nothing is applied then."""
    routing = missing_routing_api(plan, caps)
    if routing is not None:
        return routing
    if plan.nodes > 1 and not serves(caps, LWS):
        return Outcome.stalled(
            "LeaderWorkerSetMissing",
            f"parallelism.nodes={plan.nodes} makes each replica a LeaderWorkerSet group, but this cluster does "
            f"not serve {LWS.api_version} {LWS.plural}: install LeaderWorkerSet (sigs.k8s.io/lws v0.9.0 or "
            "later: its CRD and controller), or set parallelism.nodes to 1. The operator retries on its next "
            "resync.")
    if plan.autoscaler == "ScaledObject" and not serves(caps, KEDA):
        return Outcome.stalled(
            "KedaMissing",
            f"autoscaling.engine keda makes a KEDA ScaledObject, but this cluster does not serve "
            f"{KEDA.api_version} {KEDA.plural}: install KEDA (v2.21 or later: its CRDs and operator), or set "
            "autoscaling.engine to hpa. Nothing was changed; the operator retries on its next resync.")
    if plan.scale_to_zero and not serves(caps, KEDA_HTTP):
        return Outcome.stalled(
            "KedaHttpAddOnMissing",
            f"autoscaling.scaleToZero routes requests through the KEDA HTTP add-on, but this cluster does not "
            f"serve {KEDA_HTTP.api_version} {KEDA_HTTP.plural}: install the add-on (v0.15 or later: its CRDs, "
            "interceptor, external scaler and operator), or set autoscaling.minReplicas to 1 and remove "
            "scaleToZero. Nothing was changed; the operator retries on its next resync.")
    return None


def missing_routing_api(plan: Plan, caps: Capabilities) -> Outcome | None:
    """spec.routing without the Inference Extension's CRDs (or, with a gateway, the Gateway API's)."""
    needed = [(INFERENCE_POOL, "routing"), (INFERENCE_OBJECTIVE, "routing.priorityClasses"),
              (HTTP_ROUTE, "routing.gateway"),
              (ENVOY_EXTENSION_POLICY, "routing.gateway.implementation EnvoyGateway"),
              (BACKEND_TRAFFIC_POLICY, "routing.gateway.implementation EnvoyGateway"),
              (SECURITY_POLICY, "routing.auth.apiKeys")]
    for kind, field in needed:
        if kind.kind in plan.routing_kinds and not serves(caps, kind):
            if kind is HTTP_ROUTE:
                source = "the Gateway API's standard CRDs (sigs.k8s.io/gateway-api v1.5 or later)"
            elif kind.group == ENVOY_EXTENSION_POLICY.group:
                source = ("Envoy Gateway (v1.7.0: its gateway.envoyproxy.io CRDs and controller; docs/gateway.md), "
                          "or set routing.gateway.implementation to InferencePool for a gateway that implements "
                          "the Inference Extension")
            else:
                source = ("the Gateway API Inference Extension's CRDs (sigs.k8s.io/gateway-api-inference-extension "
                          "v1.5.0: InferencePool and InferenceObjective)")
            return Outcome.stalled(
                f"{kind.kind}Missing",
                f"{field} makes a {kind.kind}, but this cluster does not serve {kind.api_version} {kind.plural}: "
                f"install {source}, or remove {field}. Nothing was changed; the operator retries on its next "
                "resync.")
    return None


def rollout_view(workload: Mapping[str, Any] | None) -> dict[str, Any] | None:
    """The workload as a Deployment-shaped dict (metadata.generation, spec.replicas, status counts)."""
    if workload is None or workload.get("kind") != "LeaderWorkerSet":
        return dict(workload) if workload is not None else None
    st = workload.get("status") or {}
    ready = int(st.get("readyReplicas") or 0)
    view_status = {
        "replicas": int(st.get("replicas") or 0),
        "readyReplicas": ready,
        "updatedReplicas": int(st.get("updatedReplicas") or 0),
        "availableReplicas": ready if is_true(workload, "Available") else 0,
    }
    if "observedGeneration" in st:
        view_status["observedGeneration"] = st["observedGeneration"]
    spec = workload.get("spec") or {}
    view: dict[str, Any] = {"kind": "LeaderWorkerSet", "metadata": dict(workload.get("metadata") or {}),
                            "spec": {}, "status": view_status}
    if "replicas" in spec:
        view["spec"]["replicas"] = spec["replicas"]
    return view


def pools_rollout_view(deployments: list[Mapping[str, Any] | None]) -> dict[str, Any] | None:
    """spec.pools: the pools' Deployments seen as one (status reads one rollout): counts and desired replicas
    summed, behind while any is behind its generation, and every Deployment's conditions (one past its deadline
    stalls the fleet). None while one is missing (being created)."""
    if not deployments or any(d is None for d in deployments):
        return None
    seen = [d for d in deployments if d is not None]
    statuses = [d.get("status") or {} for d in seen]
    behind = any(int(st.get("observedGeneration") or 0) < int((d.get("metadata") or {}).get("generation") or 0)
                 for d, st in zip(seen, statuses, strict=True))
    status: dict[str, Any] = {key: sum(int(st.get(key) or 0) for st in statuses)
                              for key in ("replicas", "readyReplicas", "updatedReplicas", "availableReplicas")}
    status["observedGeneration"] = 0 if behind else 1
    status["conditions"] = [c for st in statuses for c in st.get("conditions") or []]
    desired = sum(int((d.get("spec") or {}).get("replicas", 1)) for d in seen)
    return {"kind": "Deployment", "metadata": {"generation": 1}, "spec": {"replicas": desired}, "status": status}


def workload_ready(workload: Mapping[str, Any] | None) -> bool:
    """Every desired replica (or group) of this workload is updated, ready and available, as its controller
    last reported for its current generation."""
    view = rollout_view(workload)
    if view is None:
        return False
    desired = int((view.get("spec") or {}).get("replicas", 1))
    st = view.get("status") or {}
    generation = int((view.get("metadata") or {}).get("generation") or 0)
    if int(st.get("observedGeneration") or 0) < generation:
        return False
    counts = [int(st.get(k) or 0) for k in ("updatedReplicas", "readyReplicas", "availableReplicas")]
    return all(c >= desired for c in counts) and int(st.get("replicas") or 0) == desired
