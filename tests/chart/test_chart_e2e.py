"""End to end: `helm install` the chart into a real control plane and run the operator as the chart's
ServiceAccount (a bound token from the TokenRequest API), with the chart's own environment.

It shows the RBAC is enough (an example becomes Ready; every child kind is applied and pruned; no request is
refused) and no more (`kubectl auth can-i` negatives; the audit log of the run uses every granted rule), then
Argo CD's health check and kstatus on real objects, namespaced mode, `helm upgrade` and `helm uninstall`.

The tests are the steps of one scenario and run in file order; each docstring says what it leaves behind.
"""

from __future__ import annotations

import json
import shutil
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import pytest
import yaml

from qwen_fleet.reconcile.kinds import CHILD_KINDS
from qwen_fleet_dev.cluster import LocalCluster
from tests.chart.release import chart_env, restricted_namespace, start_operator, wait_condition, wait_ready
from tests.chart.support import (
    CHART,
    Request,
    argocd_health,
    audited_requests,
    can_i,
    helm,
    kstatus,
    rbac_rows,
    refused_requests,
)
from tests.support.kube import apply, condition, get, wait_until
from tests.support.operator_process import OperatorProcess

pytestmark = pytest.mark.cluster

ROOT = Path(__file__).resolve().parents[2]
RELEASE, SYSTEM = "qf", "qwen-fleet-system"
SA = f"{RELEASE}-qwen-fleet"
SA_USER = f"system:serviceaccount:{SYSTEM}:{SA}"
TEAM = "team"
EXAMPLE = ROOT / "examples" / "qwen3-4b-instruct-a10g.yaml"
EXAMPLE_NAME = "qwen3-4b"


@dataclass
class Release:
    cluster: LocalCluster
    workdir: Path
    operator: OperatorProcess

    def restart_operator(self, namespace: str = SYSTEM, release: str = RELEASE) -> OperatorProcess:
        self.operator.stop()
        self.operator = start_operator(self.cluster, self.workdir, namespace, release)
        return self.operator


@pytest.fixture(scope="module")
def release(chart_cluster: LocalCluster, tmp_path_factory: pytest.TempPathFactory) -> Iterator[Release]:
    workdir = tmp_path_factory.mktemp("release")
    restricted_namespace(chart_cluster, SYSTEM)
    helm("install", RELEASE, CHART, "-n", SYSTEM, "--wait", "--timeout", "120s", kubeconfig=chart_cluster.kubeconfig)
    chart_cluster.kubectl("create", "namespace", TEAM)
    state = Release(chart_cluster, workdir, start_operator(chart_cluster, workdir, SYSTEM, RELEASE))
    try:
        yield state
    finally:
        state.operator.stop()
        helm("uninstall", RELEASE, "-n", SYSTEM, kubeconfig=chart_cluster.kubeconfig, check=False)


# --- 1. install and Ready --------------------------------------------------------------------------------------

def test_helm_install_runs_the_operator_under_pod_security_restricted(release: Release) -> None:
    """Leaves: release qf installed in a namespace that enforces the restricted PodSecurity profile."""
    status = json.loads(helm("status", RELEASE, "-n", SYSTEM, "-o", "json",
                             kubeconfig=release.cluster.kubeconfig).stdout)
    assert status["info"]["status"] == "deployed"
    # --wait returned, so the (kwok-run) pod was admitted under `restricted` and became Ready.
    dep = get(release.cluster, "deployment", SA, SYSTEM)
    assert dep is not None and dep["status"]["readyReplicas"] == dep["spec"]["replicas"] == 2
    assert get(release.cluster, "crd", "qweninferences.qwenfleet.io", "") is not None


def test_an_example_becomes_ready_under_the_charts_identity(release: Release) -> None:
    """Leaves: qwi/qwen3-4b Ready in namespace team."""
    release.cluster.kubectl("apply", "-n", TEAM, "-f", str(EXAMPLE))
    obj = wait_ready(release.cluster, TEAM, EXAMPLE_NAME)
    assert obj["status"]["readyReplicas"] == 1
    dep = json.loads(release.cluster.kubectl("get", "deployment", EXAMPLE_NAME, "-n", TEAM, "-o", "json",
                                             "--show-managed-fields").stdout)
    assert {m["manager"] for m in dep["metadata"]["managedFields"] if m["operation"] == "Apply"} == {"qwen-fleet"}
    events = json.loads(release.cluster.kubectl("get", "events", "-n", TEAM, "-o", "json",
                                                f"--field-selector=involvedObject.name={EXAMPLE_NAME}").stdout)
    assert {"Applied", "Ready"} <= {e["reason"] for e in events["items"]}


EVERY_CHILD = {
    "apiVersion": "qwenfleet.io/v1alpha1", "kind": "QwenInference", "metadata": {"name": "every-child"},
    # The cache claim is retained by default when model.cache goes (issue 32); Delete keeps its prune, and the
    # chart's delete on claims, in this run.
    "spec": {"model": {"name": "Qwen/Qwen3-4B-Instruct-2507",
                       "cache": {"size": "50Gi", "retentionPolicy": {"whenRemoved": "Delete"}}},
             "gpu": {"product": "NVIDIA-H100-80GB-HBM3"}, "parallelism": {"tensor": 2},
             "nccl": {"preflight": {"enabled": True}},
             "autoscaling": {"enabled": True, "minReplicas": 1, "maxReplicas": 2},
             "monitoring": {"serviceMonitor": True, "prometheusRule": True}},
}
PRUNABLE = ("configmap/every-child-nccl-preflight", "persistentvolumeclaim/every-child-model-cache",
            "horizontalpodautoscaler/every-child", "poddisruptionbudget/every-child",
            "servicemonitor/every-child", "prometheusrule/every-child")


def _exists(cluster: LocalCluster, ref: str) -> bool:
    return cluster.kubectl("get", ref, "-n", TEAM, check=False).returncode == 0


def test_every_child_kind_is_applied_and_pruned(release: Release) -> None:
    """Leaves: nothing (the fleet is deleted at the end)."""
    cluster = release.cluster
    apply(cluster, TEAM, EVERY_CHILD)
    refs = ("deployment/every-child", "service/every-child", *PRUNABLE)
    wait_until("all eight children", lambda: all(_exists(cluster, r) for r in refs), 60)
    cluster.kubectl("patch", "qwi", "every-child", "-n", TEAM, "--type=merge", "-p", json.dumps({"spec": {
        "model": {"cache": None}, "nccl": {"preflight": {"enabled": False}}, "autoscaling": {"enabled": False},
        "monitoring": {"serviceMonitor": False, "prometheusRule": False}}}))
    wait_until("the six prunable children deleted", lambda: not any(_exists(cluster, r) for r in PRUNABLE), 60)
    assert _exists(cluster, "deployment/every-child") and _exists(cluster, "service/every-child")
    cluster.kubectl("delete", "qwi", "every-child", "-n", TEAM, "--wait=true")


# --- 2. and no more than needed ---------------------------------------------------------------------------------

DENIED = [
    # No Secret access at all by default (rbac.keySecrets true adds `get` by name; test_chart_render.py).
    ("get", "secrets", "-n", TEAM), ("get", "secrets", "-n", SYSTEM),
    ("list", "secrets", "-A"), ("watch", "secrets", "-n", TEAM), ("list", "secrets", "-n", SYSTEM),
    ("create", "secrets", "-n", TEAM), ("patch", "secrets", "-n", TEAM), ("delete", "secrets", "-n", TEAM),
    ("delete", "nodes"), ("patch", "nodes"), ("get", "nodes"),
    ("create", "qweninferences.qwenfleet.io", "-n", TEAM), ("patch", "qweninferences.qwenfleet.io", "-n", TEAM),
    ("delete", "qweninferences.qwenfleet.io", "-n", TEAM), ("delete", "pods", "-n", TEAM),
    # Minting tokens: the batch runner's ServiceAccount may be created (and a Role bound to it), never a token
    # asked for. (`serviceaccounts/token` without --subresource would ask about a ServiceAccount named "token".)
    ("create", "pods", "-n", TEAM), ("create", "serviceaccounts", "--subresource=token", "-n", SYSTEM),
    ("create", "serviceaccounts", "--subresource=token", "-n", TEAM),
    ("escalate", "clusterroles"), ("bind", "clusterroles"), ("escalate", "roles", "-n", TEAM),
    ("bind", "roles", "-n", TEAM), ("impersonate", "users"), ("patch", "customresourcedefinitions"),
]
ALLOWED = [
    ("patch", "deployments", "-n", TEAM), ("create", "deployments", "-n", TEAM),
    # A fleet moving to parallelism.nodes > 1 replaces its Deployment with a LeaderWorkerSet once that is Ready.
    ("delete", "deployments", "-n", TEAM),
    ("delete", "horizontalpodautoscalers", "-n", TEAM), ("list", "pods", "-A"),
    ("patch", "qweninferences.qwenfleet.io", "--subresource=status", "-n", TEAM), ("create", "events", "-n", TEAM),
    # A QwenBatch's runner gets a Role of its own; RBAC lets the operator grant only what it holds itself, so it
    # holds get on ConfigMaps (the output ConfigMap's); it could list and watch them before.
    ("create", "serviceaccounts", "-n", TEAM), ("create", "roles", "-n", TEAM), ("create", "rolebindings", "-n", TEAM),
    ("get", "configmaps", "-n", TEAM), ("create", "jobs", "-n", TEAM),
    # A new fleet or batch the apiserver refuses in part is undone: what was just created is deleted again
    # (tests/chaos/test_refusals.py), Services and the runner's RBAC included.
    ("delete", "services", "-n", TEAM), ("delete", "serviceaccounts", "-n", TEAM), ("delete", "roles", "-n", TEAM),
    ("delete", "rolebindings", "-n", TEAM),
]


def test_the_service_account_cannot_list_secrets_touch_nodes_or_delete_fleets(release: Release) -> None:
    allowed = [args for args in ALLOWED if not can_i(release.cluster, SA_USER, *args)]
    assert allowed == [], "the operator needs these"
    denied = [args for args in DENIED if can_i(release.cluster, SA_USER, *args)]
    assert denied == []


def test_can_i_list_has_no_wildcards_beyond_what_every_user_has(release: Release) -> None:
    cluster = release.cluster
    cluster.kubectl("create", "serviceaccount", "nobody", "-n", TEAM)
    baseline = set(rbac_rows(cluster, f"system:serviceaccount:{TEAM}:nobody", TEAM))
    mine = set(rbac_rows(cluster, SA_USER, TEAM))
    extra = mine - baseline
    assert extra, "the chart's ServiceAccount has no permissions of its own"
    assert [row for row in extra if "*" in " ".join(row)] == []
    # The wildcards left are discovery URLs (/api/*, /apis/*, /openapi/*) that every authenticated user has
    # through the built-in system:discovery role; none is a resource.
    wildcards = {row for row in mine if "*" in " ".join(row)}
    assert wildcards <= baseline
    assert all(resource == "" for resource, _, _ in wildcards), wildcards
    assert [row for row in mine if row[0].startswith("secrets")] == [], mine  # rbac.keySecrets is off by default


def _granted(cluster: LocalCluster, role: str, namespace: str = "") -> set[tuple[str, str, str]]:
    where = ["role", role, "-n", namespace] if namespace else ["clusterrole", role]
    rules = json.loads(cluster.kubectl("get", *where, "-o", "json").stdout)["rules"]
    return {(verb, group, resource) for r in rules for verb in r["verbs"] for group in r["apiGroups"]
            for resource in r["resources"]}


def _used(requests: list[Request]) -> set[tuple[str, str, str]]:
    return {(r.verb, r.group, r.resource + (f"/{r.subresource}" if r.subresource else "")) for r in requests}


APPLIED_KINDS = {(child.group, child.plural) for child in CHILD_KINDS}  # the operator's registry
# Granted but never a request of their own: authorisation checks inside other requests, each measured in
# tests/chart/test_chart_cluster.py.
CHECKED_INSIDE_OTHER_REQUESTS = {("create", g, r) for g, r in APPLIED_KINDS} | {
    ("update", "qwenfleet.io", "qweninferences/finalizers")}
# Granted for paths this run does not take: a migration between the workload kinds (a Deployment deleted,
# tests/integration/test_leaderworkerset.py), and LeaderWorkerSets, used only where their CRD is installed.
NOT_EXERCISED_HERE = {("delete", "apps", "deployments")} | {
    # Undoing a new fleet the apiserver refused in part (tests/chaos/test_refusals.py): nothing is refused here.
    ("delete", "", "services")} | {
    (verb, "leaderworkerset.x-k8s.io", "leaderworkersets") for verb in ("list", "watch", "patch", "delete")} | {
    # KEDA's ScaledObject (autoscaling.engine keda): no keda fleet in this run (tests/integration/test_keda.py
    # writes and deletes them); its CRD is installed here, so it may be listed and watched.
    (verb, "keda.sh", "scaledobjects") for verb in ("list", "watch", "patch", "delete")} | {
    # The KEDA HTTP add-on's InterceptorRoute (autoscaling.scaleToZero): no scale-to-zero fleet in this run
    # (tests/integration/test_keda_http.py makes them); listed and watched only if another test installed its CRD.
    (verb, "http.keda.sh", "interceptorroutes") for verb in ("list", "watch", "patch", "delete")} | {
    # The model prefetch Job is made only with model.cache.prefetch, whose download needs a bound claim
    # (tests/integration/test_prefetch.py): watched here, never written.
    (verb, "batch", "jobs") for verb in ("patch", "delete")} | {
    # QwenBatch: no batch in this run, so none of its writes (tests/integration/test_batch.py makes them, as an
    # admin); its kind is watched here like the other.
    ("patch", "qwenfleet.io", "qwenbatches/status"), ("update", "qwenfleet.io", "qwenbatches/finalizers"),
    ("get", "", "configmaps")} | {
    # The runner's and the endpoint picker's ServiceAccount, Role and RoleBinding: watched here, never written (no
    # batch, no fleet with spec.routing in this run: tests/integration/test_routing.py makes and prunes them).
    (verb, group, resource) for verb in ("patch", "delete") for group, resource in (
        ("", "serviceaccounts"), ("rbac.authorization.k8s.io", "roles"),
        ("rbac.authorization.k8s.io", "rolebindings"))} | {
    # spec.routing: the Inference Extension's and the Gateway API's kinds are watched here (their CRDs are
    # installed), never written; `get` is held only for the picker's Role to grant it, and InferenceModelRewrites
    # (which the picker reads) are never a request of the operator's own.
    ("get", "", "pods"), ("patch", "gateway.networking.k8s.io", "httproutes"),
    ("delete", "gateway.networking.k8s.io", "httproutes")} | {
    (verb, group, resource) for verb in ("get", "patch", "delete") for group, resource in (
        ("inference.networking.k8s.io", "inferencepools"), ("inference.networking.x-k8s.io", "inferenceobjectives"))
    } | {(verb, "inference.networking.x-k8s.io", "inferencemodelrewrites") for verb in ("get", "list", "watch")} | {
    # routing.gateway: no fleet names a Gateway in this run (tests/integration/test_gateway_claims.py looks one up).
    ("list", "gateway.networking.k8s.io", "gateways")} | {
    # routing.auth.apiKeys: no fleet with keys in this run (tests/integration/test_gateway_keys_canary.py applies the
    # SecurityPolicy). Envoy Gateway's CRDs are not installed here, so none of its policy kinds is watched or written
    # (tests/integration/test_envoy_gateway_policies.py writes and prunes them).
    (verb, "gateway.envoyproxy.io", kind) for verb in ("list", "watch", "patch", "delete")
    for kind in ("envoyextensionpolicies", "backendtrafficpolicies", "securitypolicies")}


def test_the_run_used_every_granted_rule_and_nothing_else(release: Release) -> None:
    """The audit log holds every request the chart's identity made so far (reads included)."""
    requests = [r for r in audited_requests(release.cluster, SA_USER)
                # allowed to everyone by system:basic-user; the operator's startup self-check
                if r.resource != "selfsubjectaccessreviews"]
    used = _used(requests)
    # The ClusterRole, and the Role of leader election's Lease (the operator runs with the chart's environment,
    # so it elects itself on that Lease: creates it, reads and renews it).
    granted = _granted(release.cluster, SA) | _granted(release.cluster, f"{SA}-leader-election", SYSTEM)
    assert used - granted == set(), "requests outside the chart's rules"
    assert (granted - used) - NOT_EXERCISED_HERE == CHECKED_INSIDE_OTHER_REQUESTS, "rules the operator did not use"
    assert refused_requests(release.cluster, SA_USER) == []


# --- 3. GitOps health on real objects ---------------------------------------------------------------------------

def _health(release: Release, kstatus_bin: Path, name: str) -> tuple[dict[str, str], dict[str, str]]:
    obj = get(release.cluster, "qwi", name, TEAM)
    assert obj is not None
    return argocd_health(obj), kstatus(kstatus_bin, obj)


def test_a_ready_fleet_is_healthy_and_current(release: Release, kstatus_bin: Path) -> None:
    release.cluster.kubectl("apply", "-n", TEAM, "-f", str(EXAMPLE))  # unchanged if the step above ran
    wait_ready(release.cluster, TEAM, EXAMPLE_NAME)
    argo, flux = _health(release, kstatus_bin, EXAMPLE_NAME)
    assert argo == {"status": "Healthy", "message": "Ready: 1/1 replicas ready"}
    assert flux["status"] == "Current", flux


def test_a_fleet_waiting_for_gpus_is_progressing_and_in_progress(release: Release, kstatus_bin: Path) -> None:
    """Leaves: qwi/waiting-for-gpus with a Pending pod (no node has that GPU product)."""
    apply(release.cluster, TEAM, {"apiVersion": "qwenfleet.io/v1alpha1", "kind": "QwenInference",
                                  "metadata": {"name": "waiting-for-gpus"},
                                  "spec": {"model": {"name": "Qwen/Qwen3-4B-Instruct-2507"},
                                           "gpu": {"product": "NVIDIA-A100-SXM4-80GB"}}})
    obj = wait_condition(release.cluster, TEAM, "waiting-for-gpus", "Ready", "False", "PodsPending")
    assert "cannot be scheduled" in (condition(obj, "Ready") or {})["message"]
    argo, flux = _health(release, kstatus_bin, "waiting-for-gpus")
    assert argo["status"] == "Progressing"
    assert argo["message"].startswith("PodsPending: pod waiting-for-gpus-"), argo
    assert flux["status"] == "InProgress", flux


# The capacity planner refuses it: 235B parameters of weights cannot fit one 24 GB GPU.
TOO_BIG = {"apiVersion": "qwenfleet.io/v1alpha1", "kind": "QwenInference", "metadata": {"name": "too-big"},
           "spec": {"model": {"name": "Qwen/Qwen3-235B-A22B-Instruct-2507"}, "gpu": {"product": "NVIDIA-A10G"}}}


def test_a_stalled_fleet_is_degraded_and_failed(release: Release, kstatus_bin: Path) -> None:
    """Leaves: qwi/too-big, Stalled=True (WeightsDoNotFit), with no children."""
    apply(release.cluster, TEAM, TOO_BIG)
    wait_condition(release.cluster, TEAM, "too-big", "Stalled", "True", "WeightsDoNotFit")
    argo, flux = _health(release, kstatus_bin, "too-big")
    assert argo["status"] == "Degraded"
    assert argo["message"].startswith("WeightsDoNotFit: ") and "GiB" in argo["message"], argo
    assert flux["status"] == "Failed", flux
    assert get(release.cluster, "deployment", "too-big", TEAM) is None


def test_a_change_nobody_has_observed_yet_is_progressing(release: Release, kstatus_bin: Path) -> None:
    """Leaves: the operator stopped; qwi/qwen3-4b at generation 2 with status of generation 1."""
    release.operator.stop()
    release.cluster.kubectl("patch", "qwi", EXAMPLE_NAME, "-n", TEAM, "--type=merge",
                            "-p", '{"spec":{"engine":{"maxNumSeqs":128}}}')
    obj = get(release.cluster, "qwi", EXAMPLE_NAME, TEAM)
    assert obj is not None and obj["metadata"]["generation"] == obj["status"]["observedGeneration"] + 1
    assert (condition(obj, "Ready") or {}).get("status") == "True"  # stale: Ready for the old spec
    argo, flux = _health(release, kstatus_bin, EXAMPLE_NAME)
    assert argo == {"status": "Progressing", "message": "Waiting for the operator to observe generation 2"}
    assert flux["status"] == "InProgress", flux


# --- 4. namespaced mode ----------------------------------------------------------------------------------------

def test_a_namespaced_release_serves_its_namespaces_with_roles_only(release: Release, kstatus_bin: Path) -> None:
    """A second release (no CRD of its own) watching team-b only. Leaves: it uninstalled, operator stopped."""
    cluster = release.cluster
    restricted_namespace(cluster, "qf-ns-system")
    for ns in ("team-b", "team-c"):
        cluster.kubectl("create", "namespace", ns)
    helm("install", "qfns", CHART, "-n", "qf-ns-system", "--wait", "--timeout", "120s",
         "--set", "crds.install=false", "--set", "watchNamespaces={team-b}", kubeconfig=cluster.kubeconfig)
    user = "system:serviceaccount:qf-ns-system:qfns-qwen-fleet"
    operator = start_operator(cluster, release.workdir, "qf-ns-system", "qfns")
    try:
        cluster.kubectl("apply", "-n", "team-c", "-f", str(EXAMPLE))
        cluster.kubectl("apply", "-n", "team-b", "-f", str(EXAMPLE))
        wait_ready(cluster, "team-b", EXAMPLE_NAME)
        outside = get(cluster, "qwi", EXAMPLE_NAME, "team-c")
        assert outside is not None and "status" not in outside, "the operator touched an unwatched namespace"
        # docs/helm.md: with no status at all, Argo CD waits; kstatus (Flux) calls any such resource Current.
        assert argocd_health(outside)["status"] == "Progressing"
        assert kstatus(kstatus_bin, outside)["status"] == "Current"
        assert can_i(cluster, user, "patch", "deployments", "-n", "team-b")
        for args in (("patch", "deployments", "-n", "team-c"), ("list", "pods", "-A"),
                     ("list", "qweninferences.qwenfleet.io", "-A"), ("list", "pods", "-n", "team-c")):
            assert not can_i(cluster, user, *args), args
        requests = [r for r in audited_requests(cluster, user) if r.resource != "selfsubjectaccessreviews"]
        cluster_scoped = {str(r) for r in requests if not r.namespaced}
        assert cluster_scoped == {"list customresourcedefinitions.apiextensions.k8s.io (cluster)",
                                  "watch customresourcedefinitions.apiextensions.k8s.io (cluster)",
                                  "list namespaces (cluster)", "watch namespaces (cluster)"}, cluster_scoped
        # team-b, and in its own namespace only leader election's Lease.
        assert {r.namespace for r in requests if r.namespaced and r.resource != "leases"} <= {"team-b"}
        assert {(r.verb, r.namespace) for r in requests if r.resource == "leases"} <= {
            ("get", "qf-ns-system"), ("create", "qf-ns-system"), ("update", "qf-ns-system")}
        assert refused_requests(cluster, user) == []
    finally:
        operator.stop()
        helm("uninstall", "qfns", "-n", "qf-ns-system", "--wait", kubeconfig=cluster.kubeconfig)
    cluster.kubectl("delete", "qwi", EXAMPLE_NAME, "-n", "team-c")


# --- 5. upgrade and uninstall ------------------------------------------------------------------------------------

def _changed_chart(workdir: Path) -> Path:
    """The chart with a new version and a changed CRD description: what a release of a newer chart brings."""
    chart = workdir / "qwen-fleet"
    shutil.copytree(CHART, chart)
    meta = yaml.safe_load((chart / "Chart.yaml").read_text())
    meta["version"] = "0.1.1-test"
    (chart / "Chart.yaml").write_text(yaml.safe_dump(meta, sort_keys=False))
    crd = chart / "files" / "crds" / "qwenfleet.io_qweninferences.yaml"
    old = "A fleet of vLLM servers for one Qwen model, with its Service and autoscaler."
    assert old in crd.read_text()
    crd.write_text(crd.read_text().replace(old, "A fleet of vLLM servers for one Qwen model (upgraded)."))
    return chart


def test_helm_upgrade_to_a_changed_chart_updates_the_crd_and_the_operator(release: Release) -> None:
    """Leaves: revision 2 (chart 0.1.1-test, logLevel DEBUG), the operator running again, qwen3-4b Ready."""
    cluster = release.cluster
    chart = _changed_chart(release.workdir)
    helm("upgrade", RELEASE, chart, "-n", SYSTEM, "--reuse-values", "--set", "logLevel=DEBUG", "--wait",
         "--timeout", "120s", kubeconfig=cluster.kubeconfig)
    crd = get(cluster, "crd", "qweninferences.qwenfleet.io", "")
    assert crd is not None
    schema = crd["spec"]["versions"][0]["schema"]["openAPIV3Schema"]
    assert schema["description"] == "A fleet of vLLM servers for one Qwen model (upgraded)."
    assert crd["metadata"]["labels"]["helm.sh/chart"] == "qwen-fleet-0.1.1-test"
    assert chart_env(cluster, SYSTEM, RELEASE)["QWEN_FLEET_LOG_LEVEL"] == "DEBUG"
    history = json.loads(helm("history", RELEASE, "-n", SYSTEM, "-o", "json", kubeconfig=cluster.kubeconfig).stdout)
    assert [h["revision"] for h in history] == [1, 2] and history[-1]["status"] == "deployed"
    # The upgraded operator picks up the change made while it was down.
    release.restart_operator()
    obj = wait_condition(cluster, TEAM, EXAMPLE_NAME, "Ready", "True")
    assert obj["status"]["observedGeneration"] == 2


def test_helm_uninstall_keeps_the_crd_the_resources_and_the_running_fleets(release: Release) -> None:
    """docs/helm.md, default crds.keep=true. Leaves: no release; CRD, QwenInferences and fleets in place."""
    cluster = release.cluster
    before = get(cluster, "deployment", EXAMPLE_NAME, TEAM)
    assert before is not None
    release.operator.stop()
    helm("uninstall", RELEASE, "-n", SYSTEM, "--wait", kubeconfig=cluster.kubeconfig)
    assert helm("status", RELEASE, "-n", SYSTEM, kubeconfig=cluster.kubeconfig, check=False).returncode != 0
    for ref, ns in ((f"deployment/{SA}", SYSTEM), (f"serviceaccount/{SA}", SYSTEM), (f"clusterrole/{SA}", ""),
                    (f"clusterrolebinding/{SA}", "")):
        gone = cluster.kubectl("get", ref, *(["-n", ns] if ns else []), check=False)
        assert gone.returncode != 0 and "NotFound" in gone.stderr, ref
    assert get(cluster, "crd", "qweninferences.qwenfleet.io", "") is not None
    assert get(cluster, "qwi", EXAMPLE_NAME, TEAM) is not None
    after = get(cluster, "deployment", EXAMPLE_NAME, TEAM)
    assert after is not None and after["metadata"]["uid"] == before["metadata"]["uid"]
    assert after["status"].get("readyReplicas") == 1
    assert get(cluster, "service", EXAMPLE_NAME, TEAM) is not None


MANAGED_KINDS = ("deployments,services,horizontalpodautoscalers,poddisruptionbudgets,configmaps,jobs,"
                 "persistentvolumeclaims,servicemonitors,prometheusrules")


def _managed(cluster: LocalCluster) -> list[str]:
    out = cluster.kubectl("get", MANAGED_KINDS, "-A", "-l", "app.kubernetes.io/managed-by=qwen-fleet",
                          "-o", "name").stdout
    return out.split()


def test_full_removal_as_documented(release: Release) -> None:
    """docs/helm.md "Removing everything": reinstall (adopting the kept CRD) with crds.keep=false, delete the
    QwenInferences first, uninstall, sweep by label. Leaves: no release, no CRD, no fleet."""
    cluster = release.cluster
    helm("install", RELEASE, CHART, "-n", SYSTEM, "--set", "crds.keep=false", "--wait", "--timeout", "120s",
         kubeconfig=cluster.kubeconfig)
    crd = get(cluster, "crd", "qweninferences.qwenfleet.io", "")
    assert crd is not None and "helm.sh/resource-policy" not in (crd["metadata"].get("annotations") or {})
    assert crd["metadata"]["labels"]["helm.sh/chart"] == "qwen-fleet-0.1.0"
    # 1. Deleting a QwenInference while its CRD exists: garbage collection removes its fleet.
    assert get(cluster, "deployment", "waiting-for-gpus", TEAM) is not None
    cluster.kubectl("delete", "qwi", "waiting-for-gpus", "-n", TEAM, "--wait=true")
    wait_until("waiting-for-gpus garbage-collected", lambda: get(cluster, "deployment", "waiting-for-gpus", TEAM)
               is None and get(cluster, "service", "waiting-for-gpus", TEAM) is None, 90)
    # 2. Uninstalling with crds.keep=false deletes the CRD, and with it every remaining QwenInference.
    assert get(cluster, "qwi", EXAMPLE_NAME, TEAM) is not None
    helm("uninstall", RELEASE, "-n", SYSTEM, "--wait", kubeconfig=cluster.kubeconfig)
    wait_until("the CRD deleted", lambda: get(cluster, "crd", "qweninferences.qwenfleet.io", "") is None, 60)
    gone = cluster.kubectl("get", "qweninferences.qwenfleet.io", "-A", check=False)
    assert gone.returncode != 0 and "doesn't have a resource type" in gone.stderr, gone.stderr
    # 3. Whatever the garbage collector could not attribute once the kind was gone goes by label.
    cluster.kubectl("delete", MANAGED_KINDS, "-A", "-l", "app.kubernetes.io/managed-by=qwen-fleet", "--wait=true")
    assert _managed(cluster) == []
