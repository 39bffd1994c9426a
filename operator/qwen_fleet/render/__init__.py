"""Pure rendering: a QwenInference and its plan become the child manifests, as plain dicts."""

from __future__ import annotations

from dataclasses import dataclass, fields
from typing import Any

from qwen_fleet.api import QwenInference
from qwen_fleet.plan import Plan
from qwen_fleet.render.autoscaler import render_hpa
from qwen_fleet.render.deployment import render_deployment
from qwen_fleet.render.disruption import render_pdb
from qwen_fleet.render.extras import render_model_cache_claim, render_preflight_config_map
from qwen_fleet.render.gateway_keys import key_secret_names, render_security_policy
from qwen_fleet.render.keda import render_scaled_object
from qwen_fleet.render.leaderworkerset import render_leader_worker_set
from qwen_fleet.render.monitoring import render_prometheus_rule, render_service_monitor
from qwen_fleet.render.pools import render_pool_deployments
from qwen_fleet.render.prefetch import render_prefetch_job
from qwen_fleet.render.routing import render_routing
from qwen_fleet.render.scale_to_zero import render_interceptor_route, render_proxy_service, scale_to_zero
from qwen_fleet.render.service import render_service
from qwen_fleet.render.stamp import stamped


@dataclass(frozen=True)
class Capabilities:
    """Optional APIs present in the cluster; children of absent kinds are skipped, not failed. Each field is
    named by the optional child kinds it gates (reconcile/kinds.py ``ChildKind.capability``), which is how the
    operator fills it in (``kinds.capabilities_of``)."""

    service_monitor: bool = False
    prometheus_rule: bool = False
    leader_worker_set: bool = False  # multi-node replicas need it; without it such a spec is Stalled
    keda: bool = False  # autoscaling.engine keda needs KEDA's ScaledObject; without it such a spec is Stalled
    # autoscaling.scaleToZero needs the KEDA HTTP add-on's InterceptorRoute; without it such a spec is Stalled.
    keda_http: bool = False
    # spec.routing needs the InferencePool; with a gateway, the HTTPRoute; with priority classes, the
    # InferenceObjective. Without the one it needs, such a spec is Stalled.
    inference_pool: bool = False
    http_route: bool = False
    inference_objective: bool = False
    # routing.gateway.implementation EnvoyGateway needs Envoy Gateway's policy kinds; without them, Stalled.
    envoy_gateway: bool = False
    security_policy: bool = False  # routing.auth.apiKeys: Envoy Gateway's SecurityPolicy


ALL_CAPABILITIES = Capabilities(**{f.name: True for f in fields(Capabilities)})


def render_children(cr: QwenInference, plan: Plan, caps: Capabilities) -> list[dict[str, Any]]:
    """Every child the spec asks for, in apply order (things pods mount come before the Deployment), each
    stamped with the hash of itself (stamp.py: how a removal from the spec reaches the child)."""
    spec = cr.spec
    children: list[dict[str, Any]] = []
    if spec.nccl.preflight.enabled:
        children.append(render_preflight_config_map(cr))
    if spec.model.cache is not None and spec.model.source.pvc is None:
        children.append(render_model_cache_claim(cr))
        if spec.model.cache.prefetch.enabled:
            # Until it has succeeded, nothing after it is applied (reconcile/changes.py, "prefetch").
            children.append(render_prefetch_job(cr, plan))
    # A replica spanning nodes is a LeaderWorkerSet group; a single-node replica keeps its Deployment.
    multi_node = spec.parallelism.nodes > 1
    if spec.pools:  # length-aware pools: a Deployment each (render/pools.py)
        children += render_pool_deployments(cr, plan)
    else:
        children.append(render_leader_worker_set(cr, plan) if multi_node else render_deployment(cr, plan))
    children.append(render_service(cr))
    if spec.autoscaling.enabled:  # one autoscaler, never both (reconcile/changes.py: switching engines)
        children.append(render_scaled_object(cr) if spec.autoscaling.engine == "keda" else render_hpa(cr))
    stz = scale_to_zero(cr)
    if stz is not None:  # the KEDA HTTP add-on's route to the fleet, and the address that works at zero
        children += [render_interceptor_route(cr, stz), render_proxy_service(cr, stz)]
    if plan.max_replicas > 1:
        children.append(render_pdb(cr))
    if spec.monitoring.service_monitor and caps.service_monitor:
        children.append(render_service_monitor(cr))
    if spec.monitoring.prometheus_rule and caps.prometheus_rule:
        children.append(render_prometheus_rule(cr))
    if spec.routing is not None:  # last: the fleet's own children never wait on the routing ones
        children += render_routing(cr)
        if key_secret_names(cr):  # routing.auth.apiKeys (Envoy Gateway only: the CRD's rule)
            children.append(render_security_policy(cr))
    return [stamped(child) for child in children]
