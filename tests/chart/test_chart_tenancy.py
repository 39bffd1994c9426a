"""Tenancy (docs/security.md): the namespace-scoped and cluster-wide modes' RBAC, the aggregated edit/view roles,
the policies that keep fleets and the operator out of system namespaces, the guardrails' values, and the docs'
RBAC tables against the rendered chart. The last test installs a namespace-scoped release on the real
control plane of tests/chart (the package's `chart_cluster`)."""

from __future__ import annotations

import re
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from qwen_fleet.config import Guardrails
from qwen_fleet_dev.cluster import LocalCluster
from tests.chart.release import start_operator, wait_ready
from tests.chart.support import CHART, ROOT, by_kind, can_i, helm, one, template
from tests.support.kube import get, wait_until

Triple = tuple[str, str, str]  # (API group, resource, verb)
AGGREGATE = "rbac.authorization.k8s.io/aggregate-to-"
SYSTEM_NAMESPACES = ["kube-system", "kube-public", "kube-node-lease"]
NAMESPACED = {"watchNamespaces": ["team-a", "team-b"]}


def _triples(rules: list[dict[str, Any]]) -> set[Triple]:
    return {(g, r, v) for rule in rules for g in rule["apiGroups"] for r in rule["resources"] for v in rule["verbs"]}


def _aggregated(doc: dict[str, Any]) -> bool:
    return any(k.startswith(AGGREGATE) for k in doc["metadata"].get("labels", {}))


def _operator_roles(docs: list[dict[str, Any]], kind: str) -> list[dict[str, Any]]:
    return [d for d in by_kind(docs, kind) if not _aggregated(d) and not d["metadata"]["name"].endswith("-election")]


# --- the two modes ---------------------------------------------------------------------------------------------

def test_namespaced_mode_grants_workloads_only_through_roles_in_the_watched_namespaces() -> None:
    docs = template(NAMESPACED)
    roles = _operator_roles(docs, "Role")
    assert sorted(r["metadata"]["namespace"] for r in roles) == ["team-a", "team-b"]
    assert {b["metadata"]["namespace"] for b in by_kind(docs, "RoleBinding")} == {"team-a", "team-b",
                                                                                  "qwen-fleet-system"}
    (cluster_role,) = _operator_roles(docs, "ClusterRole")
    # Only cluster-scoped kinds: nothing a workload is made of.
    assert _triples(cluster_role["rules"]) == {("apiextensions.k8s.io", "customresourcedefinitions", v)
                                               for v in ("list", "watch")} | {("", "namespaces", "list"),
                                                                              ("", "namespaces", "watch")}
    (binding,) = by_kind(docs, "ClusterRoleBinding")
    assert binding["roleRef"] == {"apiGroup": "rbac.authorization.k8s.io", "kind": "ClusterRole",
                                  "name": cluster_role["metadata"]["name"]}
    assert ("apps", "deployments", "create") in _triples(roles[0]["rules"])


@pytest.mark.parametrize("values", [{}, NAMESPACED], ids=["cluster-wide", "namespaced"])
def test_no_mode_binds_the_operator_in_a_system_namespace(values: dict[str, Any]) -> None:
    docs = template(values)
    bound = {d["metadata"].get("namespace") for d in docs if d["kind"] in ("Role", "RoleBinding")}
    assert not bound & set(SYSTEM_NAMESPACES), bound


def test_system_namespaces_are_refused_to_everyone_and_to_the_operator_by_admission_policies() -> None:
    docs = template()
    policies = {p["metadata"]["name"]: p["spec"] for p in by_kind(docs, "ValidatingAdmissionPolicy")}
    assert set(policies) == {"qf-qwen-fleet-system-namespaces", "qf-qwen-fleet-operator-out-of-system-namespaces"}
    for spec in policies.values():
        assert spec["failurePolicy"] == "Fail"
        assert spec["matchConstraints"]["namespaceSelector"]["matchExpressions"] == [
            {"key": "kubernetes.io/metadata.name", "operator": "In", "values": SYSTEM_NAMESPACES}]
    (kinds,) = policies["qf-qwen-fleet-system-namespaces"]["matchConstraints"]["resourceRules"]
    assert (kinds["resources"], kinds["operations"]) == (["qweninferences", "qwenbatches"], ["CREATE"])
    (everything,) = policies["qf-qwen-fleet-operator-out-of-system-namespaces"]["matchConstraints"]["resourceRules"]
    assert (everything["resources"], everything["operations"]) == (["*"], ["CREATE", "UPDATE", "DELETE"])
    (who,) = policies["qf-qwen-fleet-operator-out-of-system-namespaces"]["matchConditions"]
    assert who["expression"] == "request.userInfo.username == 'system:serviceaccount:qwen-fleet-system:qf-qwen-fleet'"
    bindings = {b["spec"]["policyName"]: b["spec"] for b in by_kind(docs, "ValidatingAdmissionPolicyBinding")}
    assert set(bindings) == set(policies)
    assert all(b["validationActions"] == ["Deny"] for b in bindings.values())
    assert by_kind(template({"rbac": {"systemNamespaces": []}}), "ValidatingAdmissionPolicy") == []


@pytest.mark.parametrize(("args", "message"), [
    (["--namespace", "kube-system"], "the release namespace kube-system is in rbac.systemNamespaces"),
    (["--set", "watchNamespaces={team-a,kube-public}"],
     "watchNamespaces lists kube-public, which rbac.systemNamespaces keeps qwen-fleet out of"),
])
def test_a_system_namespace_for_the_operator_is_refused_at_render(args: list[str], message: str) -> None:
    out = helm("template", "qf", CHART, *args, check=False)
    assert out.returncode != 0 and message in out.stderr, out.stderr


def test_aggregated_roles_let_editors_write_and_viewers_read_the_two_kinds() -> None:
    docs = template()
    edit, view = one(docs, "ClusterRole", "-edit"), one(docs, "ClusterRole", "-view")
    assert {k: v for k, v in edit["metadata"]["labels"].items() if k.startswith(AGGREGATE)} == {
        AGGREGATE + "edit": "true", AGGREGATE + "admin": "true"}
    assert {k: v for k, v in view["metadata"]["labels"].items() if k.startswith(AGGREGATE)} == {
        AGGREGATE + "view": "true"}
    verbs = ("get", "list", "watch", "create", "update", "patch", "delete", "deletecollection")
    assert _triples(edit["rules"]) == {("qwenfleet.io", r, v) for r in ("qweninferences", "qwenbatches")
                                       for v in verbs}
    assert _triples(view["rules"]) == {("qwenfleet.io", r, v) for r in ("qweninferences", "qweninferences/status",
                                                                        "qwenbatches", "qwenbatches/status")
                                       for v in ("get", "list", "watch")}
    assert not [d for d in template({"rbac": {"aggregateToDefaultRoles": False}}) if _aggregated(d)]


# --- guardrails --------------------------------------------------------------------------------------------------

def _guardrails_env(values: dict[str, Any]) -> str:
    env = one(template(values), "Deployment")["spec"]["template"]["spec"]["containers"][0]["env"]
    return str(next(e["value"] for e in env if e["name"] == "QWEN_FLEET_GUARDRAILS"))


def test_the_guardrails_reach_the_operator_as_its_configuration_reads_them() -> None:
    assert Guardrails.from_json(_guardrails_env({})) == Guardrails(service_types=("ClusterIP",), any_secret=False)
    values = {"guardrails": {"imagePrefixes": ["registry.corp.example/"], "priorityClassNames": ["low"],
                             "runtimeClassNames": ["nvidia"], "serviceTypes": ["ClusterIP", "LoadBalancer"],
                             "secretNames": ["hf-token"], "secretNamePrefixes": ["qwen-"], "anySecret": False}}
    assert Guardrails.from_json(_guardrails_env(values)) == Guardrails(
        image_prefixes=("registry.corp.example/",), priority_class_names=("low",), runtime_class_names=("nvidia",),
        service_types=("ClusterIP", "LoadBalancer"), secret_names=("hf-token",), secret_name_prefixes=("qwen-",),
        any_secret=False)


def test_a_misspelled_guardrail_is_refused_by_the_values_schema() -> None:
    out = helm("template", "qf", CHART, "--set", "guardrails.serviceType={ClusterIP}", check=False)
    assert out.returncode != 0 and "additional properties 'serviceType' not allowed" in out.stderr, out.stderr
    out = helm("template", "qf", CHART, "--set", "guardrails.serviceTypes={Ingress}", check=False)
    assert out.returncode != 0 and "/guardrails/serviceTypes/0" in out.stderr, out.stderr


# --- the docs' tables ----------------------------------------------------------------------------------------------

DOCS = {"tenancy": ROOT / "docs" / "security.md", "helm": ROOT / "docs" / "helm.md"}
_MARKER = re.compile(r"<!-- rbac: ([a-z-]+) -->\n((?:\|.*\n)+)")


def doc_tables(text: str) -> dict[str, set[Triple]]:
    """Every table after an `<!-- rbac: NAME -->` marker, as (group, resource, verb); group "" written `""`."""
    tables: dict[str, set[Triple]] = {}
    for name, body in _MARKER.findall(text):
        rows = [[c.strip() for c in line.strip().strip("|").split("|")] for line in body.splitlines()[2:]]
        tables[name] = {("" if g == '""' else g, r.strip(), v.strip())
                        for g, resources, verbs, *_ in rows for r in resources.split(",") for v in verbs.split(",")}
    return tables


def rendered_tables() -> dict[str, set[Triple]]:
    wide, narrow = template(), template(NAMESPACED)
    return {
        "operator": _triples([r for d in _operator_roles(wide, "ClusterRole") for r in d["rules"]]),
        "namespaced-cluster": _triples([r for d in _operator_roles(narrow, "ClusterRole") for r in d["rules"]]),
        "leader-election": _triples(one(wide, "Role", "-leader-election")["rules"]),
        "edit": _triples(one(wide, "ClusterRole", "-edit")["rules"]),
        "view": _triples(one(wide, "ClusterRole", "-view")["rules"]),
        # What rbac.keySecrets true adds to the operator's ClusterRole (off by default).
        "key-secrets": _triples([r for d in _operator_roles(template({"rbac": {"keySecrets": True}}), "ClusterRole")
                                 for r in d["rules"]]) - _triples([r for d in _operator_roles(wide, "ClusterRole")
                                                                   for r in d["rules"]]),
    }


def test_docs_tables_are_the_charts_rbac_in_both_modes() -> None:
    rendered = rendered_tables()
    tenancy, helm_md = doc_tables(DOCS["tenancy"].read_text()), doc_tables(DOCS["helm"].read_text())
    assert set(tenancy) == set(rendered) and set(helm_md) == {"operator"}
    for name, granted in rendered.items():
        assert tenancy[name] == granted, (name, "granted, not in docs/security.md:", granted - tenancy[name],
                                          "in the docs, not granted:", tenancy[name] - granted)
    assert helm_md["operator"] == rendered["operator"], (helm_md["operator"] ^ rendered["operator"])
    # Namespaced mode: each watched namespace's Role is the operator's table less its cluster-scoped kinds.
    for role in _operator_roles(template(NAMESPACED), "Role"):
        assert _triples(role["rules"]) == {t for t in rendered["operator"] if t[1] != "customresourcedefinitions"}


def test_the_docs_check_sees_a_missing_row_and_an_extra_verb() -> None:
    text = DOCS["tenancy"].read_text()
    operator = rendered_tables()["operator"]
    row = next(line for line in text.splitlines() if line.startswith("| batch | jobs |"))
    assert doc_tables(text.replace(row + "\n", ""))["operator"] == operator - {
        ("batch", "jobs", v) for v in ("list", "watch", "create", "patch", "delete")}
    extra = text.replace("| \"\" | events | create |", "| \"\" | events | create, delete |")
    assert doc_tables(extra)["operator"] == operator | {("", "events", "delete")}


# --- a namespace-scoped release on the real control plane ---------------------------------------------------------

RELEASE, SYSTEM = "qft", "qft-system"
WATCHED, UNWATCHED = ("qft-a", "qft-b"), "qft-c"
SA_USER = f"system:serviceaccount:{SYSTEM}:{RELEASE}-qwen-fleet"
EXAMPLE = ROOT / "examples" / "qwen3-4b-instruct-a10g.yaml"


@pytest.fixture(scope="module")
def namespaced_release(chart_cluster: LocalCluster, tmp_path_factory: pytest.TempPathFactory) -> Iterator[Path]:
    """The chart installed watching two namespaces, and its operator running as the chart's ServiceAccount. The
    CRD comes with it unless an earlier module's release left one, and goes with it (crds.keep=false)."""
    cluster, workdir = chart_cluster, tmp_path_factory.mktemp("tenancy")
    for ns in (SYSTEM, *WATCHED, UNWATCHED):
        cluster.kubectl("create", "namespace", ns)
    crd_there = get(cluster, "crd", "qweninferences.qwenfleet.io", "") is not None
    helm("install", RELEASE, CHART, "-n", SYSTEM, "--wait", "--timeout", "120s",
         "--set", f"watchNamespaces={{{','.join(WATCHED)}}}", "--set", f"crds.install={str(not crd_there).lower()}",
         "--set", "crds.keep=false", kubeconfig=cluster.kubeconfig)
    operator = start_operator(cluster, workdir, SYSTEM, RELEASE)
    try:
        yield workdir
    finally:
        operator.stop()
        helm("uninstall", RELEASE, "-n", SYSTEM, "--wait", kubeconfig=cluster.kubeconfig, check=False)


@pytest.mark.cluster
def test_a_namespace_scoped_release_serves_its_two_namespaces_and_cannot_write_elsewhere(
        chart_cluster: LocalCluster, namespaced_release: Path) -> None:
    cluster = chart_cluster
    for ns in (UNWATCHED, *WATCHED):
        cluster.kubectl("apply", "-n", ns, "-f", str(EXAMPLE))
    for ns in WATCHED:
        assert wait_ready(cluster, ns, "qwen3-4b")["status"]["readyReplicas"] == 1
    ignored = get(cluster, "qwi", "qwen3-4b", UNWATCHED)
    assert ignored is not None and "status" not in ignored, "the operator touched an unwatched namespace"
    assert get(cluster, "deployment", "qwen3-4b", UNWATCHED) is None
    for ns in WATCHED:
        assert can_i(cluster, SA_USER, "create", "deployments", "-n", ns)
    for args in (("create", "deployments", "-n", UNWATCHED), ("create", "deployments", "-n", "kube-system"),
                 ("create", "jobs", "-n", UNWATCHED), ("create", "rolebindings", "-n", UNWATCHED),
                 ("create", "serviceaccounts", "-n", "kube-system"), ("list", "deployments", "-A")):
        assert not can_i(cluster, SA_USER, *args), args


def _refused(cluster: LocalCluster, *args: str, text: str | None = None) -> str:
    result = cluster.kubectl(*args, input=text, check=False)
    return result.stderr if result.returncode != 0 else ""


@pytest.mark.cluster
def test_system_namespaces_are_closed_even_to_a_cluster_wide_grant(chart_cluster: LocalCluster,
                                                                   namespaced_release: Path) -> None:
    """The policies hold whatever RBAC says: the operator's ServiceAccount, given configmaps cluster-wide here,
    still writes nothing in kube-system; and no one (the admin here) creates a fleet there."""
    cluster = chart_cluster
    fleet = EXAMPLE.read_text()
    message = wait_until("the policy in force", lambda: _refused(cluster, "apply", "--dry-run=server", "-n",
                                                                 "kube-system", "-f", "-", text=fleet), 30)
    assert ("qwen-fleet does not run in system namespace kube-system (the chart value rbac.systemNamespaces lists "
            "it): create the QwenInference in a namespace of your own") in message, message
    cluster.kubectl("create", "clusterrole", "qft-probe", "--verb=create", "--resource=configmaps")
    cluster.kubectl("create", "clusterrolebinding", "qft-probe", "--clusterrole=qft-probe",
                    f"--serviceaccount={SYSTEM}:{RELEASE}-qwen-fleet")
    try:
        wait_until("the grant in force", lambda: can_i(cluster, SA_USER, "create", "configmaps", "-n", UNWATCHED), 30)
        create = ("create", "configmap", "probe", "--dry-run=server", f"--as={SA_USER}")
        assert _refused(cluster, *create, "-n", UNWATCHED) == ""
        refused = wait_until("the operator policy in force",
                             lambda: _refused(cluster, *create, "-n", "kube-system"), 30)
        assert ("the qwen-fleet operator writes nothing in system namespace kube-system (the chart value "
                "rbac.systemNamespaces lists it)") in refused, refused
    finally:
        cluster.kubectl("delete", "clusterrolebinding,clusterrole", "qft-probe", check=False)


@pytest.mark.cluster
def test_a_namespaces_editors_manage_fleets_and_its_viewers_read_them(chart_cluster: LocalCluster,
                                                                      namespaced_release: Path) -> None:
    cluster, ns = chart_cluster, WATCHED[0]
    cluster.kubectl("create", "rolebinding", "alice-edit", "--clusterrole=edit", "--user=alice", "-n", ns)
    cluster.kubectl("create", "rolebinding", "bob-view", "--clusterrole=view", "--user=bob", "-n", ns)
    # The controller-manager's aggregation controller folds the chart's roles into edit and view.
    wait_until("edit aggregated", lambda: can_i(cluster, "alice", "create", "qweninferences.qwenfleet.io", "-n", ns)
               and can_i(cluster, "bob", "get", "qwenbatches.qwenfleet.io", "-n", ns), 30)
    assert can_i(cluster, "alice", "delete", "qwenbatches.qwenfleet.io", "-n", ns)
    assert not can_i(cluster, "alice", "patch", "qweninferences.qwenfleet.io", "--subresource=status", "-n", ns)
    assert not can_i(cluster, "alice", "create", "qweninferences.qwenfleet.io", "-n", UNWATCHED)
    assert can_i(cluster, "bob", "get", "qweninferences.qwenfleet.io", "--subresource=status", "-n", ns)
    for verb in ("create", "patch", "delete"):
        assert not can_i(cluster, "bob", verb, "qweninferences.qwenfleet.io", "-n", ns), verb
