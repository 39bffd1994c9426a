"""Every kind of child the operator makes, in one place: the watches, the API client's paths, the prune step,
the start-up permission check and the chart's RBAC test all read this registry."""

from __future__ import annotations

from collections.abc import Collection, Mapping
from dataclasses import dataclass

from qwen_fleet.group import GROUP
from qwen_fleet.render import Capabilities
from qwen_fleet.render.routing import EPP_LABEL, EPP_RULES, EPP_SUFFIX, POOL_LABEL


@dataclass(frozen=True)
class ChildKind:
    kind: str
    group: str  # "" for the core API
    version: str
    plural: str
    # Deleted when the spec stops asking for it. Never the fleet's Deployment or Service: those go only with the
    # QwenInference (garbage collection), so a spec mistake cannot take a serving fleet's front door away.
    prunable: bool
    # Of an optional kind, served only where a CRD is installed (the Prometheus Operator's, LeaderWorkerSet's,
    # KEDA's ...): the field of render.Capabilities that says the cluster serves it. Such a kind is rendered only
    # when the cluster has it (or, for a kind the spec cannot do without, Stalled), and is left out of the
    # start-up permission check. Kinds naming one capability need each other (Envoy Gateway's two policies).
    capability: str | None = None
    # The fleet's workload (Deployment or LeaderWorkerSet): deleted only when the spec moves a replica to the
    # other kind, after the new workload is Ready (reconcile/changes.py).
    workload: bool = False
    # Of a kind that is not prunable, the children named ``<fleet><suffix>`` for one of these suffixes are pruned
    # like any other: the endpoint picker's Deployment (spec.routing) is not the fleet's workload.
    prunable_suffixes: tuple[str, ...] = ()
    # Likewise the children that carry one of these labels: a length-aware pool's Deployment (spec.pools; the
    # pool was removed from the spec) and any pool's endpoint picker (<fleet>-<pool>-epp).
    prunable_labels: tuple[str, ...] = ()

    @property
    def api_version(self) -> str:
        return f"{self.group}/{self.version}" if self.group else self.version

    @property
    def optional(self) -> bool:
        return self.capability is not None


CHILD_KINDS: tuple[ChildKind, ...] = (
    ChildKind("Deployment", "apps", "v1", "deployments", prunable=False, workload=True,
              prunable_suffixes=(EPP_SUFFIX,), prunable_labels=(POOL_LABEL, EPP_LABEL)),
    ChildKind("LeaderWorkerSet", "leaderworkerset.x-k8s.io", "v1", "leaderworkersets", prunable=False,
              capability="leader_worker_set", workload=True),
    # The endpoint picker's Service (<fleet>-epp) is kept too when routing is turned off, until the QwenInference
    # goes: pruning it would take `delete` on every Service, which the operator is never given (chart RBAC).
    ChildKind("Service", "", "v1", "services", prunable=False),
    ChildKind("HorizontalPodAutoscaler", "autoscaling", "v2", "horizontalpodautoscalers", prunable=True),
    # The autoscaler of engine keda (render/keda.py): KEDA makes and drives its own HPA from it.
    ChildKind("ScaledObject", "keda.sh", "v1alpha1", "scaledobjects", prunable=True, capability="keda"),
    # Scale to zero (render/scale_to_zero.py): the KEDA HTTP add-on's route to the fleet. Its <fleet>-proxy Service
    # is owned by the route, so pruning the route (scale to zero turned off) lets the garbage collector take the
    # Service too, while the operator keeps no `delete` on Services.
    ChildKind("InterceptorRoute", "http.keda.sh", "v1beta1", "interceptorroutes", prunable=True,
              capability="keda_http"),
    ChildKind("PodDisruptionBudget", "policy", "v1", "poddisruptionbudgets", prunable=True),
    ChildKind("ConfigMap", "", "v1", "configmaps", prunable=True),
    ChildKind("PersistentVolumeClaim", "", "v1", "persistentvolumeclaims", prunable=True),
    # The model prefetch Job (render/prefetch.py): a changed one is a new Job; the old one is pruned.
    ChildKind("Job", "batch", "v1", "jobs", prunable=True),
    ChildKind("ServiceMonitor", "monitoring.coreos.com", "v1", "servicemonitors", prunable=True,
              capability="service_monitor"),
    ChildKind("PrometheusRule", "monitoring.coreos.com", "v1", "prometheusrules", prunable=True,
              capability="prometheus_rule"),
    # spec.routing (render/routing.py): the endpoint picker's identity and its read-only Role, the
    # InferencePool, the request classes' InferenceObjectives, and the HTTPRoute to a named Gateway. The
    # ServiceAccount, Role and RoleBinding are not pruned when routing goes (like the picker's Service: they go
    # with the QwenInference, by garbage collection): `delete` on every Role and ServiceAccount of the cluster
    # is a power the operator is not given (tests/chart/test_chart_e2e.py DENIED).
    ChildKind("ServiceAccount", "", "v1", "serviceaccounts", prunable=False),
    ChildKind("Role", "rbac.authorization.k8s.io", "v1", "roles", prunable=False),
    ChildKind("RoleBinding", "rbac.authorization.k8s.io", "v1", "rolebindings", prunable=False),
    ChildKind("InferencePool", "inference.networking.k8s.io", "v1", "inferencepools", prunable=True,
              capability="inference_pool"),
    ChildKind("InferenceObjective", "inference.networking.x-k8s.io", "v1alpha2", "inferenceobjectives",
              prunable=True, capability="inference_objective"),
    ChildKind("HTTPRoute", "gateway.networking.k8s.io", "v1", "httproutes", prunable=True, capability="http_route"),
    # routing.gateway.implementation EnvoyGateway: Envoy Gateway's policies on the fleet's route.
    ChildKind("EnvoyExtensionPolicy", "gateway.envoyproxy.io", "v1alpha1", "envoyextensionpolicies",
              prunable=True, capability="envoy_gateway"),
    ChildKind("BackendTrafficPolicy", "gateway.envoyproxy.io", "v1alpha1", "backendtrafficpolicies",
              prunable=True, capability="envoy_gateway"),
    # routing.auth.apiKeys: the SecurityPolicy that requires a key on the route (pruned when the keys go).
    ChildKind("SecurityPolicy", "gateway.envoyproxy.io", "v1alpha1", "securitypolicies", prunable=True,
              capability="security_policy"),
)
CHILD_KIND = {k.kind: k for k in CHILD_KINDS}
OPTIONAL_KINDS = tuple(k for k in CHILD_KINDS if k.optional)


def capabilities_of(served: Collection[str]) -> Capabilities:
    """The capabilities of a cluster that serves the optional kinds named in ``served``: each one is on when
    every kind naming it is served."""
    needs: dict[str, list[str]] = {}
    for child in OPTIONAL_KINDS:
        needs.setdefault(str(child.capability), []).append(child.kind)
    return Capabilities(**{cap: all(kind in served for kind in kinds) for cap, kinds in needs.items()})


def serves(caps: Capabilities, child: ChildKind) -> bool:
    """Whether children of this kind can be applied: always for a core kind, else as its capability says."""
    return child.capability is None or bool(getattr(caps, child.capability))


def served_groups(caps: Capabilities) -> set[str]:
    """API groups of the optional child kinds the cluster serves now (their children are indexed by kopf)."""
    return {child.group for child in OPTIONAL_KINDS if serves(caps, child)}

# What the operator does to each child kind: kopf lists and watches it; server-side apply patches it, and
# creates it on first apply (authorised as `create`); prunable kinds and replaced workloads are deleted.
CHILD_VERBS = ("list", "watch", "create", "patch")


def may_prune(kind: str, name: str, fleet: str, labels: Mapping[str, str] | None = None) -> bool:
    """Whether a child the spec no longer asks for is deleted (the workload switch aside: changes.py)."""
    child = CHILD_KIND.get(kind)
    return child is not None and (child.prunable or any(name == fleet + s for s in child.prunable_suffixes)
                                  or any(label in (labels or {}) for label in child.prunable_labels))


def child_permissions(include_optional: bool = False) -> tuple[tuple[str, str, str, str], ...]:
    """(verb, group, resource, subresource) for every child kind the operator cannot work without."""
    out = []
    for child in CHILD_KINDS:
        if child.optional and not include_optional:
            continue
        deletes = child.prunable or child.workload or child.prunable_suffixes or child.prunable_labels
        verbs = CHILD_VERBS + (("delete",) if deletes else ())
        out += [(verb, child.group, child.plural, "") for verb in verbs]
    return tuple(out)


def routing_permissions() -> tuple[tuple[str, str, str, str], ...]:
    """(verb, group, resource, subresource) the endpoint picker's Role grants (render/routing.py EPP_RULES):
    RBAC lets the operator grant only what it holds itself (or ``escalate``, which it is not given)."""
    return tuple((verb, group, resource, "") for group, resource, verbs in EPP_RULES for verb in verbs)


# What a QwenBatch owns (render/batch.py): its Job (watched, by the qwenfleet.io/batch label) and the runner's
# ServiceAccount, Role and RoleBinding, applied with the Job and never watched (their content follows from the
# batch's name alone, and the spec is immutable). The output ConfigMap is applied, not owned.
BATCH_WATCHED = ChildKind("Job", "batch", "v1", "jobs", prunable=False)
BATCH_CHILD_KINDS: tuple[ChildKind, ...] = (
    BATCH_WATCHED,
    ChildKind("ServiceAccount", "", "v1", "serviceaccounts", prunable=False),
    ChildKind("Role", "rbac.authorization.k8s.io", "v1", "roles", prunable=False),
    ChildKind("RoleBinding", "rbac.authorization.k8s.io", "v1", "rolebindings", prunable=False),
    ChildKind("ConfigMap", "", "v1", "configmaps", prunable=False),
)


def batch_permissions() -> tuple[tuple[str, str, str, str], ...]:
    """(verb, group, resource, subresource) the QwenBatch controller needs. ``get`` on ConfigMaps: the runner's
    Role grants it, and RBAC lets a Role grant only what its creator holds."""
    from qwen_fleet.api.batch import BATCH_PLURAL

    applied = [(verb, child.group, child.plural, "") for child in BATCH_CHILD_KINDS[1:]
               for verb in ("create", "patch")]
    return (("watch", GROUP, BATCH_PLURAL, ""), ("patch", GROUP, BATCH_PLURAL, "status"),
            *applied, ("get", "", "configmaps", ""), ("list", "", "pods", ""))
