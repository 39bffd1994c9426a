"""The chart's manifests against the real kube-apiserver, and the two measurements behind its RBAC rules.

- `helm template` output (defaults, every optional feature, namespaced mode) passes
  `kubectl apply --dry-run=server --validate=strict`: schema, admission and strict field validation of the real
  apiserver, with stand-in Prometheus Operator CRDs that declare the real field names (monitoring-crds.yaml).
- Server-side apply that creates an object is authorised as `create` as well as `patch`.
- With OwnerReferencesPermissionEnforcement (as on OpenShift), setting blockOwnerDeletion needs `update` on the
  owner's finalizers subresource.
"""

from __future__ import annotations

import json
import time
from pathlib import Path
from typing import Any

import pytest

from qwen_fleet.devcluster.cluster import LocalCluster
from tests.chart.support import ALL_FEATURES, service_account_kubeconfig, template_text
from tests.support.kube import wait_until

pytestmark = pytest.mark.cluster

CASES = {
    "defaults": {},
    "all-features": ALL_FEATURES,
    "namespaced": {**ALL_FEATURES, "watchNamespaces": ["dry-team-a", "dry-team-b"]},
}


def _namespace(cluster: LocalCluster, name: str) -> None:
    if cluster.kubectl("get", "namespace", name, check=False).returncode != 0:
        cluster.kubectl("create", "namespace", name)


@pytest.mark.parametrize("case", list(CASES))
def test_rendered_chart_is_accepted_by_the_apiserver(chart_cluster: LocalCluster, case: str) -> None:
    namespace = f"dry-{case}"
    for ns in [namespace, *CASES[case].get("watchNamespaces", [])]:
        _namespace(chart_cluster, ns)
    text = template_text(CASES[case], namespace=namespace)
    result = chart_cluster.kubectl("apply", "--dry-run=server", "--validate=strict", "-f", "-", input=text,
                                   check=False)
    assert result.returncode == 0, result.stderr
    accepted = [line for line in result.stdout.splitlines() if line.endswith("(server dry run)")]
    documents = [doc for doc in text.split("\n---\n") if "\nkind: " in doc or doc.startswith("kind: ")]
    assert len(accepted) == len(documents), result.stdout
    assert not result.stderr.strip(), result.stderr  # no warnings either (e.g. deprecated APIs, PodSecurity)


def test_a_misspelled_monitoring_field_is_rejected(chart_cluster: LocalCluster) -> None:
    """The dry-run above can fail: strict validation against the stand-in CRDs catches a wrong field name."""
    _namespace(chart_cluster, "dry-typo")
    text = template_text(ALL_FEATURES, namespace="dry-typo").replace("honorLabels:", "honourLabels:")
    result = chart_cluster.kubectl("apply", "--dry-run=server", "--validate=strict", "-f", "-", input=text,
                                   check=False)
    assert result.returncode != 0
    assert 'unknown field "spec.endpoints[0].honourLabels"' in result.stderr, result.stderr


# --- why the rules look the way they do ----------------------------------------------------------------------

def _probe_identity(cluster: LocalCluster, tmp_path: Path, namespace: str) -> Path:
    _namespace(cluster, namespace)
    cluster.kubectl("create", "serviceaccount", "probe", "-n", namespace)
    return service_account_kubeconfig(cluster, namespace, "probe", tmp_path / "probe.kubeconfig", duration="10m")


def _role(cluster: LocalCluster, namespace: str, rules: list[dict[str, Any]]) -> None:
    role = {"apiVersion": "rbac.authorization.k8s.io/v1", "kind": "Role",
            "metadata": {"name": "probe", "namespace": namespace}, "rules": rules}
    binding = {"apiVersion": "rbac.authorization.k8s.io/v1", "kind": "RoleBinding",
               "metadata": {"name": "probe", "namespace": namespace},
               "roleRef": {"apiGroup": "rbac.authorization.k8s.io", "kind": "Role", "name": "probe"},
               "subjects": [{"kind": "ServiceAccount", "name": "probe", "namespace": namespace}]}
    cluster.kubectl("apply", "-f", "-", input=json.dumps({"apiVersion": "v1", "kind": "List",
                                                           "items": [role, binding]}))


def _server_side_apply(cluster: LocalCluster, kubeconfig: Path, obj: dict[str, Any]) -> tuple[int, str]:
    # kubectl --server-side sends exactly the operator's request: one PATCH application/apply-patch+yaml.
    result = cluster.kubectl("apply", "--server-side", "--field-manager=qwen-fleet", "--force-conflicts",
                             "-f", "-", input=json.dumps(obj), kubeconfig=kubeconfig, check=False)
    return result.returncode, result.stderr.strip()


def _retry_until_allowed(cluster: LocalCluster, kubeconfig: Path, obj: dict[str, Any]) -> None:
    """RBAC changes reach the authorizer through an informer: allow it a moment."""
    def allowed() -> bool:
        code, err = _server_side_apply(cluster, kubeconfig, obj)
        if code != 0 and "forbidden" not in err:
            raise AssertionError(err)
        return code == 0
    wait_until("the new rule to take effect", allowed, 15, interval=0.3)


def test_server_side_apply_that_creates_needs_create_as_well_as_patch(chart_cluster: LocalCluster,
                                                                      tmp_path: Path) -> None:
    ns = "probe-ssa"
    kubeconfig = _probe_identity(chart_cluster, tmp_path, ns)
    cm = {"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": "child", "namespace": ns},
          "data": {"k": "v"}}
    _role(chart_cluster, ns, [{"apiGroups": [""], "resources": ["configmaps"], "verbs": ["patch"]}])
    time.sleep(1)
    code, err = _server_side_apply(chart_cluster, kubeconfig, cm)
    assert code != 0
    assert 'cannot create resource "configmaps"' in err, err
    _role(chart_cluster, ns, [{"apiGroups": [""], "resources": ["configmaps"], "verbs": ["patch", "create"]}])
    _retry_until_allowed(chart_cluster, kubeconfig, cm)
    # Once the object exists, patch alone is enough to apply changes to it.
    _role(chart_cluster, ns, [{"apiGroups": [""], "resources": ["configmaps"], "verbs": ["patch"]}])
    time.sleep(1)
    code, err = _server_side_apply(chart_cluster, kubeconfig, {**cm, "data": {"k": "changed"}})
    assert code == 0, err


def test_block_owner_deletion_needs_update_on_the_owners_finalizers(chart_cluster: LocalCluster,
                                                                    tmp_path: Path) -> None:
    """The operator's children point at their QwenInference with blockOwnerDeletion: true. Shown here with a
    ConfigMap as the owner (the admission plugin treats every kind alike); the end-to-end test shows the
    chart's qweninferences/finalizers rule suffices for the real owner."""
    ns = "probe-owner"
    kubeconfig = _probe_identity(chart_cluster, tmp_path, ns)
    chart_cluster.kubectl("create", "configmap", "owner", "-n", ns)
    owner = json.loads(chart_cluster.kubectl("get", "configmap", "owner", "-n", ns, "-o", "json").stdout)
    child = {"apiVersion": "v1", "kind": "ConfigMap", "metadata": {
        "name": "child", "namespace": ns,
        "ownerReferences": [{"apiVersion": "v1", "kind": "ConfigMap", "name": "owner",
                             "uid": owner["metadata"]["uid"], "controller": True, "blockOwnerDeletion": True}]}}
    _role(chart_cluster, ns, [{"apiGroups": [""], "resources": ["configmaps"], "verbs": ["patch", "create"]}])
    time.sleep(1)
    code, err = _server_side_apply(chart_cluster, kubeconfig, child)
    assert code != 0
    assert "cannot set blockOwnerDeletion if an ownerReference refers to a resource you can't set finalizers on" \
        in err, err
    _role(chart_cluster, ns, [{"apiGroups": [""], "resources": ["configmaps"], "verbs": ["patch", "create"]},
                              {"apiGroups": [""], "resources": ["configmaps/finalizers"], "verbs": ["update"]}])
    _retry_until_allowed(chart_cluster, kubeconfig, child)
