"""The chart's manifests against the real kube-apiserver, and the two measurements behind its RBAC rules.

- `helm template` output (every values combination the chart tests render: VALUES_CASES) and `qwen-fleet
  render` of every example pass `kubectl apply --dry-run=server --validate=strict`: schema, admission and
  strict field validation of the real apiserver, with the real CRDs of the Prometheus Operator's,
  cert-manager's, LeaderWorkerSet's and KEDA's kinds (hack/third-party-crds.sh).
- Server-side apply that creates an object is authorised as `create` as well as `patch`.
- With OwnerReferencesPermissionEnforcement (as on OpenShift), setting blockOwnerDeletion needs `update` on the
  owner's finalizers subresource.
"""

from __future__ import annotations

import json
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import pytest

from qwen_fleet_dev.cluster import LocalCluster
from tests.chart.support import ALL_FEATURES, ROOT, VALUES_CASES, service_account_kubeconfig, template_text
from tests.support.kube import wait_until

pytestmark = pytest.mark.cluster

EXAMPLES = sorted((ROOT / "examples").glob("*.yaml"))


def _namespace(cluster: LocalCluster, name: str) -> None:
    if cluster.kubectl("get", "namespace", name, check=False).returncode != 0:
        cluster.kubectl("create", "namespace", name)


def _server_dry_run(cluster: LocalCluster, text: str) -> None:
    """Every document accepted by a strict server-side dry-run, without a warning."""
    result = cluster.kubectl("apply", "--dry-run=server", "--validate=strict", "-f", "-", input=text, check=False)
    assert result.returncode == 0, result.stderr
    accepted = [line for line in result.stdout.splitlines() if line.endswith("(server dry run)")]
    documents = [doc for doc in text.split("\n---\n") if "\nkind: " in doc or doc.startswith("kind: ")]
    assert len(accepted) == len(documents), result.stdout
    assert not result.stderr.strip(), result.stderr  # no warnings either (e.g. deprecated APIs, PodSecurity)


@pytest.mark.parametrize("case", list(VALUES_CASES))
def test_rendered_chart_is_accepted_by_the_apiserver(chart_cluster: LocalCluster, case: str) -> None:
    namespace = f"dry-{case}"
    values = VALUES_CASES[case]
    extra = [values["grafanaDashboard"]["namespace"]] if "namespace" in values.get("grafanaDashboard", {}) else []
    for ns in [namespace, *values.get("watchNamespaces", []), *extra]:
        _namespace(chart_cluster, ns)
    _server_dry_run(chart_cluster, template_text(values, namespace=namespace))


@pytest.mark.parametrize("example", EXAMPLES, ids=[p.stem for p in EXAMPLES])
def test_rendered_children_of_every_example_are_accepted_by_the_apiserver(chart_cluster: LocalCluster,
                                                                          example: Path) -> None:
    """What `qwen-fleet render` prints (the operator's children, ServiceMonitor and PrometheusRule included)."""
    namespace = f"dry-render-{example.stem.replace('.', '-')}"
    _namespace(chart_cluster, namespace)
    out = subprocess.run([sys.executable, "-m", "qwen_fleet.cli", "render", "-f", str(example), "-n", namespace],
                         check=True, capture_output=True, text=True)
    assert "\nkind: " in out.stdout, out.stderr
    _server_dry_run(chart_cluster, out.stdout)


def test_a_misspelled_monitoring_field_is_rejected(chart_cluster: LocalCluster) -> None:
    """The dry-run above can fail: strict validation against the real CRDs catches a wrong field name."""
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
