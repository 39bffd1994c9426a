"""The chart as `helm template` renders it: security context, RBAC, the CRD and its switches, the values schema,
the optional monitoring objects. No cluster needed (tests/chart/test_chart_cluster.py has the apiserver's view).
"""

from __future__ import annotations

import json
import re
from pathlib import Path
from typing import Any

import pytest
import yaml

from qwen_fleet import versions
from qwen_fleet.reconcile.kinds import CHILD_KINDS, routing_permissions
from qwen_fleet.reconcile.run import REQUIRED
from tests.chart.support import (
    ALL_FEATURES,
    CHART,
    CHART_CRD,
    GENERATED_CRD,
    by_kind,
    helm,
    one,
    template,
    values_file,
)

NAMESPACED = {"watchNamespaces": ["team-a", "team-b"]}
# Kinds the operator may `get`: what a Role it creates grants (a QwenBatch runner's, the endpoint picker's).
GRANTED_GET = {"configmaps", "pods", "inferencepools", "inferenceobjectives", "inferencemodelrewrites"}
VALUES = yaml.safe_load((CHART / "values.yaml").read_text())
SCHEMA = json.loads((CHART / "values.schema.json").read_text())


def _aggregated(doc: dict[str, Any]) -> bool:
    """The ClusterRoles for users (aggregated into edit/view; tests/chart/test_chart_tenancy.py), not the operator's."""
    return any(k.startswith("rbac.authorization.k8s.io/aggregate-to-") for k in doc["metadata"].get("labels", {}))


def rules_of(docs: list[dict[str, Any]]) -> list[tuple[str, str, dict[str, Any]]]:
    """(kind, namespace, rule) for every rule of every Role and ClusterRole of the operator."""
    return [(d["kind"], d["metadata"].get("namespace", ""), rule)
            for d in docs if d["kind"] in ("Role", "ClusterRole") and not _aggregated(d) for rule in d.get("rules", [])]


def grants(rules: list[dict[str, Any]], verb: str, group: str, resource: str, sub: str = "") -> bool:
    name = f"{resource}/{sub}" if sub else resource
    return any(group in r.get("apiGroups", []) and name in r.get("resources", []) and verb in r.get("verbs", [])
               for r in rules)


# --- lint ------------------------------------------------------------------------------------------------------

@pytest.mark.parametrize("values", [{}, ALL_FEATURES, NAMESPACED], ids=["defaults", "all-features", "namespaced"])
def test_helm_lint_strict_passes(values: dict[str, Any]) -> None:
    args: list[str | Path] = ["lint", "--strict", CHART]
    args += ["--values", values_file(values)] if values else []
    out = helm(*args)
    assert "1 chart(s) linted, 0 chart(s) failed" in out.stdout, out.stdout


# --- the operator pod ------------------------------------------------------------------------------------------

def test_operator_deployment_is_two_restricted_replicas_with_leader_election() -> None:
    dep = one(template(), "Deployment")
    spec = dep["spec"]
    assert spec["replicas"] == 2
    assert spec["strategy"] == {"type": "RollingUpdate", "rollingUpdate": {"maxSurge": 1, "maxUnavailable": 0}}
    pod = spec["template"]["spec"]
    assert pod["securityContext"] == {"runAsNonRoot": True, "runAsUser": 65532, "runAsGroup": 65532,
                                      "seccompProfile": {"type": "RuntimeDefault"}}
    (container,) = pod["containers"]
    assert container["securityContext"] == {
        "allowPrivilegeEscalation": False, "readOnlyRootFilesystem": True, "runAsNonRoot": True,
        "capabilities": {"drop": ["ALL"]}, "seccompProfile": {"type": "RuntimeDefault"}}
    assert container["image"] == "ghcr.io/qwen-fleet/operator:0.1.0"
    assert container["resources"] == {"requests": {"cpu": "100m", "memory": "256Mi"}, "limits": {"memory": "512Mi"}}
    ports = {p["name"]: p["containerPort"] for p in container["ports"]}
    assert ports == {"metrics": 8080, "health": 8081}
    for probe in ("startupProbe", "livenessProbe", "readinessProbe"):
        assert container[probe]["httpGet"] == {"path": "/healthz", "port": "health"}, probe
    env = {e["name"]: e["value"] for e in container["env"] if "value" in e}
    env.pop("QWEN_FLEET_GUARDRAILS")  # tests/chart/test_chart_tenancy.py
    assert env == {"QWEN_FLEET_DEFAULT_IMAGE": versions.VLLM_IMAGE, "QWEN_FLEET_NAMESPACES": "",
                   "QWEN_FLEET_LOG_LEVEL": "INFO", "QWEN_FLEET_RESYNC_SECONDS": "300", "QWEN_FLEET_WORKERS": "16",
                   "QWEN_FLEET_METRICS_PORT": "8080", "QWEN_FLEET_LIVENESS_PORT": "8081",
                   "QWEN_FLEET_LEASE_NAME": "qf-qwen-fleet-leader", "QWEN_FLEET_LEASE_DURATION_SECONDS": "15",
                   "QWEN_FLEET_LEASE_RENEW_DEADLINE_SECONDS": "10", "QWEN_FLEET_LEASE_RETRY_SECONDS": "2",
                   "QWEN_FLEET_RUNNER_IMAGE": "ghcr.io/qwen-fleet/operator:0.1.0"}  # QwenBatch Jobs: its own image
    assert pod["serviceAccountName"] == one(template(), "ServiceAccount")["metadata"]["name"] == "qf-qwen-fleet"


def test_operator_configuration_comes_from_values() -> None:
    values = {"defaultEngineImage": "registry.local/vllm:v0.32.0", "logLevel": "DEBUG", "resyncSeconds": 60,
              "workers": 2, "watchNamespaces": ["team-a", "team-b"],
              "image": {"digest": "sha256:" + "a" * 64, "tag": "ignored"},
              "securityContext": {"runAsUser": None, "runAsGroup": None}}
    pod = one(template(values), "Deployment")["spec"]["template"]["spec"]
    (container,) = pod["containers"]
    env = {e["name"]: e["value"] for e in container["env"] if "value" in e}
    assert env["QWEN_FLEET_DEFAULT_IMAGE"] == "registry.local/vllm:v0.32.0"
    assert env["QWEN_FLEET_LOG_LEVEL"] == "DEBUG"
    assert (env["QWEN_FLEET_RESYNC_SECONDS"], env["QWEN_FLEET_WORKERS"]) == ("60", "2")
    assert env["QWEN_FLEET_NAMESPACES"] == "team-a,team-b"
    assert container["image"] == "ghcr.io/qwen-fleet/operator@sha256:" + "a" * 64
    assert env["QWEN_FLEET_RUNNER_IMAGE"] == container["image"]
    # Platform-assigned IDs (OpenShift): the numbers go, non-root stays enforced.
    assert pod["securityContext"] == {"runAsNonRoot": True, "seccompProfile": {"type": "RuntimeDefault"}}


def test_default_engine_image_is_the_pinned_engine() -> None:
    assert VALUES["defaultEngineImage"] == versions.VLLM_IMAGE
    chart = yaml.safe_load((CHART / "Chart.yaml").read_text())
    assert chart["annotations"]["qwenfleet.io/vllm-version"] == versions.VLLM


# --- RBAC ------------------------------------------------------------------------------------------------------

@pytest.mark.parametrize("values", [{}, ALL_FEATURES, NAMESPACED], ids=["defaults", "all-features", "namespaced"])
def test_rbac_has_no_wildcards_no_secrets_no_nodes_and_never_deletes_the_fleet(values: dict[str, Any]) -> None:
    found = rules_of(template(values))
    assert found, "no RBAC rendered"
    allowed_verbs = {"list", "watch", "create", "patch", "delete", "update", "get"}
    for kind, ns, rule in found:
        where = f"{kind} in {ns or 'cluster'}: {rule}"
        for key in ("apiGroups", "resources", "verbs", "resourceNames", "nonResourceURLs"):
            assert not any("*" in item for item in rule.get(key, [])), where
        assert set(rule["verbs"]) <= allowed_verbs, where
        assert not {"nodes", "serviceaccounts/token"} & set(rule["resources"]), where
        if "secrets" in rule["resources"]:  # routing.auth.apiKeys' existence check: get by name, nothing more
            assert rule == {"apiGroups": [""], "resources": ["secrets"], "verbs": ["get"]}, where
            continue
        if "serviceaccounts" in rule["resources"]:  # a QwenBatch runner's, the endpoint picker's: never read or used
            assert rule["resources"] == ["serviceaccounts"] and "get" not in rule["verbs"], where
        if "namespaces" in rule["resources"]:
            assert values.get("watchNamespaces") and rule["verbs"] == ["list", "watch"], where
        assert "nonResourceURLs" not in rule, where
        if rule["resources"] == ["leases"]:  # leader election: its own Lease only (create cannot name it)
            assert ns and (rule.get("resourceNames") or rule["verbs"] == ["create"]), where
            continue
        # `get` only where a Role the operator makes grants it (a QwenBatch runner's on its output ConfigMap, the
        # endpoint picker's reads), since RBAC lets the operator grant only what it holds; it reads nothing new
        # (it lists and watches those kinds already).
        assert "get" not in rule["verbs"] or (set(rule["resources"]) <= GRANTED_GET and "list" in rule["verbs"]), where
        if "update" in rule["verbs"]:
            assert rule["resources"] in (["qweninferences/finalizers"], ["qwenbatches/finalizers"]), where
        if "delete" in rule["verbs"]:
            # Deployments: deleted only once a Ready LeaderWorkerSet replaces one (reconcile/changes.py, its table
            # tests); Services only to undo a new fleet the apiserver refused in part; the resource itself never.
            assert not {"qweninferences", "qwenbatches", "pods"} & set(rule["resources"]), where
        if rule["apiGroups"] == ["qwenfleet.io"] and {"qweninferences", "qwenbatches"} & set(rule["resources"]):
            assert set(rule["verbs"]) == {"list", "watch"}, "the operator never creates or edits its resources"


def test_rbac_grants_what_the_operator_checks_at_startup() -> None:
    """The operator's own startup check (operator/qwen_fleet/reconcile/run.py REQUIRED) passes with the chart."""
    for values in ({}, NAMESPACED):
        rules = [r for _, _, r in rules_of(template(values))]
        missing = [req for req in REQUIRED if not grants(rules, *req)]
        assert missing == [], values


def test_rbac_grants_every_child_kind_what_the_operator_does_to_it() -> None:
    """Every kind in the operator's registry (reconcile/kinds.py), optional ones included: list, watch, patch
    and create (server-side apply that creates an object is authorised as create too; see
    tests/chart/test_chart_cluster.py), and delete: every kind is pruned, replaced (the workloads) or, made by a new
    fleet or batch that the apiserver then refused in part, deleted again (the undo; tests/chaos/test_refusals.py)."""
    for values in ({}, NAMESPACED):
        rules = [r for _, _, r in rules_of(template(values))]
        for child in CHILD_KINDS:
            for verb in ("create", "patch", "list", "watch"):
                assert grants(rules, verb, child.group, child.plural), f"{verb} {child.plural} {values}"
            assert grants(rules, "delete", child.group, child.plural), child.plural


def test_rbac_holds_what_the_endpoint_pickers_role_grants() -> None:
    """The operator creates the picker's Role (spec.routing); the apiserver refuses a Role that grants more than
    its creator holds, so the chart must hold every one of those rules."""
    for values in ({}, NAMESPACED):
        rules = [r for _, _, r in rules_of(template(values))]
        missing = [req for req in routing_permissions() if not grants(rules, *req)]
        assert missing == [], values


def test_namespaced_mode_uses_roles_per_namespace() -> None:
    docs = template({"watchNamespaces": ["team-a", "team-b"]})
    roles = [r for r in by_kind(docs, "Role") if not r["metadata"]["name"].endswith("-leader-election")]
    bindings = [b for b in by_kind(docs, "RoleBinding") if not b["metadata"]["name"].endswith("-leader-election")]
    assert sorted(r["metadata"]["namespace"] for r in roles) == ["team-a", "team-b"]
    assert sorted(b["metadata"]["namespace"] for b in bindings) == ["team-a", "team-b"]
    for binding in bindings:
        assert binding["subjects"] == [{"kind": "ServiceAccount", "name": "qf-qwen-fleet",
                                        "namespace": "qwen-fleet-system"}]
        assert binding["roleRef"]["kind"] == "Role"
    # Cluster-wide, only what kopf watches there: CRDs (new API kinds) and namespaces (which ones exist).
    (cluster_role,) = [r for r in by_kind(docs, "ClusterRole") if not _aggregated(r)]
    assert cluster_role["rules"] == [
        {"apiGroups": ["apiextensions.k8s.io"], "resources": ["customresourcedefinitions"],
         "verbs": ["list", "watch"]},
        {"apiGroups": [""], "resources": ["namespaces"], "verbs": ["list", "watch"]}]
    (crb,) = by_kind(docs, "ClusterRoleBinding")
    assert crb["roleRef"]["name"] == cluster_role["metadata"]["name"]
    env = {e["name"]: e["value"] for e in one(docs, "Deployment")["spec"]["template"]["spec"]["containers"][0]["env"]
           if "value" in e}
    assert env["QWEN_FLEET_NAMESPACES"] == "team-a,team-b"


def test_leader_election_adds_one_lease_role_in_the_release_namespace_and_nothing_else() -> None:
    docs = template()
    env = {e["name"]: e for e in one(docs, "Deployment")["spec"]["template"]["spec"]["containers"][0]["env"]}
    lease = env["QWEN_FLEET_LEASE_NAME"]["value"]
    assert env["QWEN_FLEET_LEASE_NAMESPACE"]["valueFrom"] == {"fieldRef": {"fieldPath": "metadata.namespace"}}
    assert env["QWEN_FLEET_IDENTITY"]["valueFrom"] == {"fieldRef": {"fieldPath": "metadata.name"}}
    role = one(docs, "Role", "-leader-election")
    assert role["metadata"]["namespace"] == "qwen-fleet-system"
    assert role["rules"] == [
        {"apiGroups": ["coordination.k8s.io"], "resources": ["leases"], "resourceNames": [lease],
         "verbs": ["get", "update"]},
        {"apiGroups": ["coordination.k8s.io"], "resources": ["leases"], "verbs": ["create"]}]
    binding = one(docs, "RoleBinding", "-leader-election")
    assert binding["roleRef"]["name"] == role["metadata"]["name"]
    # Without leader election: no Lease rules anywhere, one replica, Recreate; two replicas are refused.
    off = template({"leaderElection": {"enabled": False}, "replicaCount": 1})
    assert not [r for _, _, r in rules_of(off) if "leases" in r["resources"]]
    assert one(off, "Deployment")["spec"]["strategy"] == {"type": "Recreate"}
    failed = helm("template", "qf", CHART, "--set", "leaderElection.enabled=false", check=False)
    assert failed.returncode != 0 and "needs leaderElection.enabled" in failed.stderr


def test_rbac_create_false_renders_no_rbac() -> None:
    docs = template({"rbac": {"create": False}, "serviceAccount": {"create": False, "name": "mine"}})
    assert not [d for d in docs if d["kind"].endswith(("Role", "RoleBinding"))]
    assert not by_kind(docs, "ServiceAccount")
    assert one(docs, "Deployment")["spec"]["template"]["spec"]["serviceAccountName"] == "mine"


# --- the CRD ---------------------------------------------------------------------------------------------------

CRD_FILES = ("qwenfleet.io_qweninferences.yaml", "qwenfleet.io_qwenbatches.yaml")


@pytest.mark.parametrize("name", CRD_FILES)
def test_chart_crd_file_is_the_generated_crd_byte_for_byte(name: str) -> None:
    assert (CHART_CRD.parent / name).read_bytes() == (GENERATED_CRD.parent / name).read_bytes(), \
        "run `make generate`"


@pytest.mark.parametrize(("index", "name"), enumerate(CRD_FILES))
def test_rendered_crd_is_the_generated_crd_plus_labels_and_keep(index: int, name: str) -> None:
    rendered = by_kind(template(), "CustomResourceDefinition")[index]
    generated = yaml.safe_load((GENERATED_CRD.parent / name).read_text())
    meta = rendered.pop("metadata")
    generated_meta = generated.pop("metadata")
    assert rendered == generated
    assert meta["name"] == generated_meta["name"]
    assert generated_meta["labels"].items() <= meta["labels"].items()
    assert meta["labels"]["app.kubernetes.io/managed-by"] == "Helm"
    assert meta["annotations"] == {"helm.sh/resource-policy": "keep"}


def test_crd_switches() -> None:
    assert not by_kind(template({"crds": {"install": False}}), "CustomResourceDefinition")
    for unkept in by_kind(template({"crds": {"keep": False}}), "CustomResourceDefinition"):
        assert "annotations" not in unkept["metadata"]
    assert not (CHART / "crds").exists(), "a crds/ directory would be installed once and never upgraded"


# --- values schema ---------------------------------------------------------------------------------------------

REJECTED = [
    ({"logLevl": "DEBUG"}, "at '': additional properties 'logLevl' not allowed"),
    ({"crds": {"instal": False}}, "at '/crds': additional properties 'instal' not allowed"),
    ({"metrics": {"serviceMonitor": {"enable": True}}},
     "at '/metrics/serviceMonitor': additional properties 'enable' not allowed"),
    ({"logLevel": "VERBOSE"}, "at '/logLevel': value must be one of 'DEBUG', 'INFO', 'WARNING', 'ERROR'"),
    ({"workers": 0}, "at '/workers': minimum: got 0, want 1"),
    ({"image": {"digest": "latest"}}, "at '/image/digest': 'latest' does not match pattern"),
    ({"watchNamespaces": ["Team_A"]}, "at '/watchNamespaces/0': 'Team_A' does not match pattern"),
    ({"watchNamespaces": ["a", "a"]}, "at '/watchNamespaces': items at 0 and 1 are equal"),
    ({"prometheusRule": {"kvCacheUsage": 95}}, "at '/prometheusRule/kvCacheUsage': maximum: got 95, want 1"),
    ({"resources": {"limits": {"gpu": 1}}}, "at '/resources/limits': additional properties 'gpu' not allowed"),
]


@pytest.mark.parametrize(("values", "message"), REJECTED, ids=[m.split(":")[0] + str(v) for v, m in REJECTED])
def test_values_outside_the_schema_are_rejected_with_the_key_named(values: dict[str, Any], message: str) -> None:
    result = helm("template", "qf", CHART, "--values", values_file(values), check=False)
    assert result.returncode != 0
    assert "values don't meet the specifications of the schema" in result.stderr
    assert message in result.stderr, result.stderr


def _walk_values(node: Any, path: str = "") -> list[str]:
    out = []
    if isinstance(node, dict):
        for key, value in node.items():
            out.append(f"{path}/{key}")
            out.extend(_walk_values(value, f"{path}/{key}"))
    return out


def _schema_at(path: str) -> dict[str, Any] | None:
    node: dict[str, Any] = SCHEMA
    for key in path.strip("/").split("/"):
        props = node.get("properties")
        if props is not None and key in props:
            node = props[key]
        elif isinstance(node.get("additionalProperties"), dict):
            node = node["additionalProperties"]
        else:
            return None
    return node


# Maps whose keys are the user's (labels, annotations, node labels) or Kubernetes' (affinity): not closed.
OPEN_MAPS = {"/serviceAccount/annotations", "/podAnnotations", "/podLabels", "/nodeSelector", "/affinity",
             "/metrics/service/annotations", "/metrics/serviceMonitor/labels", "/grafanaDashboard/labels",
             "/grafanaDashboard/annotations", "/prometheusRule/labels", "/global"}


def test_schema_covers_every_value_and_closes_every_object() -> None:
    uncovered = [p for p in _walk_values(VALUES) if _schema_at(p) is None]
    assert uncovered == []

    def closed(node: dict[str, Any], path: str) -> list[str]:
        bad = []
        if node.get("type") == "object" and path not in OPEN_MAPS and node.get("additionalProperties") is not False:
            bad.append(path or "/")
        for key, sub in (node.get("properties") or {}).items():
            if not sub.get("description"):
                bad.append(f"{path}/{key} (no description)")
            bad += closed(sub, f"{path}/{key}")
        if isinstance(node.get("items"), dict):
            bad += closed(node["items"], f"{path}[]")
        return bad

    assert closed(SCHEMA, "") == []


def test_adapter_rules_serve_each_latency_percentile_the_crd_admits_with_engine_hpa() -> None:
    """spec.autoscaling.latency with engine hpa: the CRD admits percentiles 50, 90, 95, 99 (api/scaling.py), and the
    HPA asks the custom metrics API for vllm_<histogram>_p<N>; each must be a rule of the rendered chart."""
    from qwen_fleet.api.scaling import HPA_LATENCY_PERCENTILES

    config = one(template({"metrics": {"adapterRules": {"enabled": True}}}), "ConfigMap",
                 "-prometheus-adapter-rules")["data"]["config.yaml"]
    rules = {r["name"]["as"]: r for r in yaml.safe_load(config)["rules"]}
    latency = {name for name in rules if "_seconds_p" in name}
    assert latency == {f"vllm_{h}_seconds_p{p}" for h in ("time_to_first_token", "inter_token_latency")
                       for p in HPA_LATENCY_PERCENTILES}
    p90 = rules["vllm_time_to_first_token_seconds_p90"]
    assert p90["seriesQuery"] == ('{__name__="vllm:time_to_first_token_seconds_bucket",namespace!="",pod!="",'
                                  'qwenfleet_io_inference!=""}')
    assert p90["name"]["matches"] == "^vllm:time_to_first_token_seconds_bucket$"
    assert p90["resources"] == {"overrides": {"namespace": {"resource": "namespace"}, "pod": {"resource": "pod"}}}
    assert p90["metricsQuery"] == (
        "histogram_quantile(0.9, sum by (le, <<.GroupBy>>) (rate(vllm:time_to_first_token_seconds_bucket"
        "{<<.LabelMatchers>>}[2m]))) >= 0 or 0 * sum by (<<.GroupBy>>) (vllm:num_requests_running{<<.LabelMatchers>>})")
    assert rules["vllm_inter_token_latency_seconds_p99"]["metricsQuery"].startswith(
        "histogram_quantile(0.99, sum by (le, <<.GroupBy>>) (rate(vllm:inter_token_latency_seconds_bucket{")


def test_adapter_rules_switch_exists_and_is_off() -> None:
    # The rest of the adapterRules block belongs to templates/prometheus-adapter-rules.yaml.
    assert VALUES["metrics"]["adapterRules"]["enabled"] is False
    assert _schema_at("/metrics/adapterRules/enabled") == {
        "type": "boolean", "description": "Ship prometheus-adapter rules for the fleets' HorizontalPodAutoscalers."}


# --- optional monitoring objects -------------------------------------------------------------------------------

def test_defaults_render_only_the_operator_and_its_crd() -> None:
    kinds = sorted(d["kind"] for d in template())
    # The Role: leader election's Lease. From tenancy.yaml: the aggregated edit and view ClusterRoles, and the two
    # policies that keep fleets and the operator out of system namespaces.
    assert kinds == ["ClusterRole", "ClusterRole", "ClusterRole", "ClusterRoleBinding", "CustomResourceDefinition",
                     "CustomResourceDefinition", "Deployment", "Role", "RoleBinding", "ServiceAccount",
                     "ValidatingAdmissionPolicy", "ValidatingAdmissionPolicy", "ValidatingAdmissionPolicyBinding",
                     "ValidatingAdmissionPolicyBinding"]


def test_metrics_service_and_service_monitor_select_the_operator() -> None:
    docs = template(ALL_FEATURES)
    svc = one(docs, "Service")
    monitor = one(docs, "ServiceMonitor")
    pod_labels = one(docs, "Deployment")["spec"]["template"]["metadata"]["labels"]
    assert svc["spec"]["selector"].items() <= pod_labels.items()
    assert monitor["spec"]["selector"]["matchLabels"].items() <= svc["metadata"]["labels"].items()
    assert monitor["spec"]["endpoints"][0]["port"] == svc["spec"]["ports"][0]["name"] == "metrics"
    assert svc["spec"]["ports"][0]["targetPort"] == "metrics"
    assert monitor["metadata"]["labels"]["release"] == "prom"
    # A ServiceMonitor alone brings its Service along.
    only_monitor = template({"metrics": {"serviceMonitor": {"enabled": True}}})
    assert one(only_monitor, "Service")["metadata"]["name"] == svc["metadata"]["name"]


DASHBOARD_TOPICS = {
    "request rate": "vllm:request_success_total",
    "queue depth": "vllm:num_requests_waiting",
    "running requests": "vllm:num_requests_running",
    "KV-cache usage": "vllm:kv_cache_usage_perc",
    "TTFT": "vllm:time_to_first_token_seconds_bucket",
    "ITL": "vllm:inter_token_latency_seconds_bucket",
    "e2e latency": "vllm:e2e_request_latency_seconds_bucket",
    "tokens/s": "vllm:generation_tokens_total",
    "preemptions": "vllm:num_preemptions_total",
    "GPU utilisation": "DCGM_FI_DEV_GPU_UTIL",
}


def dashboard_exprs(docs: list[dict[str, Any]]) -> list[str]:
    cm = one(docs, "ConfigMap", "-dashboard")
    dashboard = json.loads(cm["data"]["qwen-fleet.json"])
    return [t["expr"] for p in dashboard["panels"] for t in p.get("targets", [])]


def test_grafana_dashboard_configmap_covers_the_fleet() -> None:
    docs = template(ALL_FEATURES)
    cm = one(docs, "ConfigMap", "-dashboard")
    assert cm["metadata"]["labels"]["grafana_dashboard"] == "1"
    assert cm["metadata"]["annotations"] == {"grafana_folder": "LLM"}
    exprs = dashboard_exprs(docs)
    text = "\n".join(exprs)
    missing = [topic for topic, metric in DASHBOARD_TOPICS.items() if metric not in text]
    assert missing == []
    for hist in ("time_to_first_token", "inter_token_latency", "e2e_request_latency"):
        quantiles = {q for e in exprs if hist in e for q in re.findall(r"histogram_quantile\((0\.\d+)", e)}
        assert quantiles == {"0.5", "0.9", "0.99"}, hist
    # Every fleet query is scoped by the dashboard's namespace and fleet variables.
    for expr in exprs:
        if "vllm:" in expr:
            assert 'qwenfleet_io_inference=~"$inference"' in expr, expr
    moved = template({"grafanaDashboard": {"enabled": True, "namespace": "grafana"}})
    assert one(moved, "ConfigMap", "-dashboard")["metadata"]["namespace"] == "grafana"


def test_prometheus_rule_has_the_alerts_and_the_thresholds_from_values() -> None:
    values = {"prometheusRule": {"enabled": True, "queueDepthPerReplica": 7, "kvCacheUsage": 0.9,
                                 "podRestarts": 5, "silentGaugesMinConcurrency": 2, "severity": "critical"}}
    rule = one(template(values), "PrometheusRule")
    alerts = {r["alert"]: r for g in rule["spec"]["groups"] for r in g["rules"]}
    assert set(alerts) == {"QwenFleetQueueBackingUp", "QwenFleetKVCacheSaturated", "QwenFleetAtMaxReplicas",
                           "QwenFleetQueueGaugesSilent", "QwenFleetPodRestarting", "QwenInferenceStalled",
                           "QwenInferenceNotReady"}
    assert alerts["QwenFleetQueueGaugesSilent"]["expr"].rstrip().endswith("> 2\n)")
    assert alerts["QwenFleetQueueBackingUp"]["expr"].rstrip().endswith("> 7")
    assert alerts["QwenFleetKVCacheSaturated"]["expr"].rstrip().endswith("> 0.9")
    assert ">= 5" in alerts["QwenFleetPodRestarting"]["expr"]
    assert alerts["QwenInferenceStalled"]["expr"] == "qwen_fleet_inference_stalled == 1"
    assert {a["labels"]["severity"] for a in alerts.values()} == {"critical"}
    # Prometheus templates survive Helm's: $labels reaches Prometheus verbatim.
    assert "{{ $labels.namespace }}" in alerts["QwenInferenceStalled"]["annotations"]["summary"]
    with_monitor = one(template(ALL_FEATURES), "PrometheusRule")
    names = {r["alert"] for g in with_monitor["spec"]["groups"] for r in g["rules"]}
    assert {"QwenFleetOperatorDown", "QwenFleetWebhookCertificateExpiring"} <= names


def test_notes_tell_the_user_what_to_do_next() -> None:
    out = helm("install", "qf", CHART, "--namespace", "ops", "--dry-run=client",
               "--values", values_file({"watchNamespaces": ["team-a"], "crds": {"keep": False}})).stdout
    notes = out.split("NOTES:", 1)[1]
    assert "kubectl -n ops rollout status deployment/qf-qwen-fleet" in notes
    assert "kubectl apply -n team-a -f -" in notes
    assert "kubectl -n team-a wait --for=condition=Ready qwi/qwen3-4b" in notes
    assert "crds.keep=false: `helm uninstall` deletes the CRD" in notes


def test_no_rule_names_secrets_unless_rbac_key_secrets_adds_get_by_name() -> None:
    """By default no rule of the chart names Secrets; rbac.keySecrets true (routing.auth.apiKeys' existence check)
    adds `get` on Secrets (no list, no watch, nothing else of theirs) to every operator (Cluster)Role."""
    for values in ({}, NAMESPACED):
        assert [r for _, _, r in rules_of(template(values)) if "secrets" in r["resources"]] == [], values
        on = template({**values, "rbac": {"keySecrets": True}})
        secret_rules = [rule for _, _, rule in rules_of(on) if "secrets" in rule["resources"]]
        expected = 1 if not values else len(NAMESPACED["watchNamespaces"])
        assert secret_rules == [{"apiGroups": [""], "resources": ["secrets"], "verbs": ["get"]}] * expected, values
