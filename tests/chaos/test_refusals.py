"""Refusals by the apiserver, with the operator running under the Helm chart's own RBAC (not system:masters), issue
38 item 4:

- a new fleet one of whose children an admission policy refuses (its HorizontalPodAutoscaler): the Deployment and
  the Service it had just created are deleted again (the undo, which needs `delete` on Services: the chart did
  not grant it, so under its identity the undo failed with 403 and the fleet stayed half-made, retried for ever);
- a QwenBatch whose Job the apiserver refuses (422 from the policy): Stalled with the apiserver's words, the
  output ConfigMap and the runner's ServiceAccount, Role and RoleBinding it had just created deleted again, and
  no retry loop (before: every error was retried with backoff, no status, the runner's RBAC left behind).

Each ends in exactly the desired children (none) with status saying what happened; once the policy goes, the
next resync makes both whole.
"""

from __future__ import annotations

import json
import time
import urllib.parse
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from qwen_fleet_dev.cluster import LocalCluster
from qwen_fleet_dev.rest import Rest
from tests.chaos.helpers import (
    QWI_PATH,
    TRACEBACK,
    LogWindow,
    admin,
    condition,
    get_or_none,
    qwi,
    record,
    small_spec,
)
from tests.chaos.test_least_privilege import _kubeconfig, chart_identity  # noqa: F401 (a fixture)
from tests.support.kube import wait_until
from tests.support.operator_process import OperatorProcess

pytestmark = [pytest.mark.cluster, pytest.mark.slow]

ROOT = Path(__file__).resolve().parents[2]
BATCH_CRD = ROOT / "crds" / "qwenfleet.io_qwenbatches.yaml"
QWB_PATH = "/apis/qwenfleet.io/v1alpha1/namespaces/{ns}/qwenbatches"
RESYNC_SECONDS = 10
POLICY_MESSAGE = "refused by the chaos test's policy"
# Every kind a fleet or a batch of this test may leave behind, labelled or not (the output ConfigMap carries the
# batch's label, not the managed-by one): listed whole, by name.
LEFTOVER_PATHS = {
    "Deployment": "/apis/apps/v1/namespaces/{ns}/deployments",
    "Service": "/api/v1/namespaces/{ns}/services",
    "HorizontalPodAutoscaler": "/apis/autoscaling/v2/namespaces/{ns}/horizontalpodautoscalers",
    "PodDisruptionBudget": "/apis/policy/v1/namespaces/{ns}/poddisruptionbudgets",
    "ConfigMap": "/api/v1/namespaces/{ns}/configmaps",
    "ServiceAccount": "/api/v1/namespaces/{ns}/serviceaccounts",
    "Role": "/apis/rbac.authorization.k8s.io/v1/namespaces/{ns}/roles",
    "RoleBinding": "/apis/rbac.authorization.k8s.io/v1/namespaces/{ns}/rolebindings",
    "Job": "/apis/batch/v1/namespaces/{ns}/jobs",
}
# What a namespace holds of these kinds before anything of ours: its default ServiceAccount and root CA.
BUILT_IN = {("ServiceAccount", "default"), ("ConfigMap", "kube-root-ca.crt"), ("ConfigMap", "prompts")}


def objects(rest: Rest, ns: str) -> set[tuple[str, str]]:
    return {(kind, item["metadata"]["name"]) for kind, path in LEFTOVER_PATHS.items()
            for item in rest.get(path.format(ns=ns))["items"]} - BUILT_IN


@pytest.fixture(scope="module")
def batch_crd(chaos_cluster: LocalCluster) -> LocalCluster:
    """The QwenBatch CRD beside the QwenInference one (kept: removing it would delete every batch)."""
    chaos_cluster.install_crd(BATCH_CRD, name="qwenbatches.qwenfleet.io")
    return chaos_cluster


@pytest.fixture
def refusing(chaos_cluster: LocalCluster, chaos_namespace: str) -> Iterator[str]:
    """A ValidatingAdmissionPolicy refusing HorizontalPodAutoscalers and Jobs in the test's namespace (no reason set:
    the apiserver answers 422 Invalid); removed by the test or at the end."""
    ns, name = chaos_namespace, f"refuse-{chaos_namespace}"
    rules = [{"apiGroups": ["autoscaling"], "apiVersions": ["*"], "operations": ["CREATE", "UPDATE"],
              "resources": ["horizontalpodautoscalers"]},
             {"apiGroups": ["batch"], "apiVersions": ["*"], "operations": ["CREATE", "UPDATE"],
              "resources": ["jobs"]}]
    docs = [
        {"apiVersion": "admissionregistration.k8s.io/v1", "kind": "ValidatingAdmissionPolicy",
         "metadata": {"name": name},
         "spec": {"failurePolicy": "Fail", "matchConstraints": {"resourceRules": rules},
                  "validations": [{"expression": "false", "message": POLICY_MESSAGE}]}},
        {"apiVersion": "admissionregistration.k8s.io/v1", "kind": "ValidatingAdmissionPolicyBinding",
         "metadata": {"name": name},
         "spec": {"policyName": name, "validationActions": ["Deny"],
                  "matchResources": {"namespaceSelector": {"matchLabels": {"kubernetes.io/metadata.name": ns}}}}},
    ]
    chaos_cluster.kubectl("apply", "--server-side", "-f", "-",
                          input=json.dumps({"apiVersion": "v1", "kind": "List", "items": docs}))
    probe = {"apiVersion": "batch/v1", "kind": "Job", "metadata": {"name": "probe"}, "spec": {"template": {"spec": {
        "restartPolicy": "Never", "containers": [{"name": "c", "image": "busybox"}]}}}}
    wait_until("the policy in force", lambda: chaos_cluster.kubectl(
        "create", "--dry-run=server", "-n", ns, "-f", "-", input=json.dumps(probe), check=False).returncode != 0, 30)
    try:
        yield name
    finally:
        chaos_cluster.kubectl("delete", "validatingadmissionpolicybinding,validatingadmissionpolicy", name,
                              "--ignore-not-found", check=False)


def _stalled(rest: Rest, path: str) -> dict[str, Any]:
    return condition(get_or_none(rest, path), "Stalled")


def _events(rest: Rest, ns: str, name: str) -> list[tuple[str, str]]:
    selector = urllib.parse.quote(f"involvedObject.name={name}")
    return [(e["type"], e["reason"]) for e in rest.get(f"/api/v1/namespaces/{ns}/events?fieldSelector={selector}")[
        "items"]]


def test_refused_children_are_undone_under_the_charts_rbac(
        batch_crd: LocalCluster, chart_identity: tuple[str, str], chaos_operator: OperatorProcess,  # noqa: F811
        chaos_namespace: str, refusing: str, tmp_path: Path) -> None:
    cluster, rest, ns = batch_crd, admin(batch_crd), chaos_namespace
    chaos_operator.stop()  # only the chart's identity works here
    operator = OperatorProcess(cluster, tmp_path / "operator.log", env={
        "QWEN_FLEET_RESYNC_SECONDS": str(RESYNC_SECONDS)},
        kubeconfig=_kubeconfig(cluster, *chart_identity, tmp_path / "kubeconfig"))
    operator.start()
    try:
        window = LogWindow(operator.log)
        spec = small_spec(64)
        spec["autoscaling"] = {"enabled": True, "minReplicas": 1, "maxReplicas": 2,
                               "queueDepth": {"targetPerReplica": 4}}
        fleet_path, batch_path = f"{QWI_PATH.format(ns=ns)}/fleet", f"{QWB_PATH.format(ns=ns)}/batch"
        rest.request("POST", f"/api/v1/namespaces/{ns}/configmaps", {
            "apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": "prompts"},
            "data": {"input.jsonl": '{"custom_id": "a", "method": "POST", "url": "/v1/completions", '
                                    '"body": {"prompt": "hi", "max_tokens": 4}}\n'}})
        rest.request("POST", QWI_PATH.format(ns=ns), qwi("fleet", spec))
        rest.request("POST", QWB_PATH.format(ns=ns), {
            "apiVersion": "qwenfleet.io/v1alpha1", "kind": "QwenBatch", "metadata": {"name": "batch"},
            "spec": {"fleetRef": {"name": "fleet"}, "input": {"configMap": {"name": "prompts"}},
                     "output": {"configMap": {"name": "results"}}}})

        wait_until("the fleet Stalled", lambda: _stalled(rest, fleet_path).get("status") == "True", 90)
        wait_until("the batch Stalled", lambda: _stalled(rest, batch_path).get("status") == "True", 90)
        wait_until("nothing left of either", lambda: objects(rest, ns) == set(), 60)
        fleet_stalled, batch_stalled = _stalled(rest, fleet_path), _stalled(rest, batch_path)
        # Held: over more than one resync, the refusal stays, nothing comes back, and the batch's Job is tried at
        # most once per resync (the log line of each refusal), not in a backoff loop.
        began = time.monotonic()
        time.sleep(2 * RESYNC_SECONDS + 2)
        held_for = time.monotonic() - began
        log = window.text()
        job_refusals = log.count("QwenBatch: Job ")
        # A resync's attempt may be under way (its Deployment made, then undone): the namespace is empty again
        # once it is over.
        wait_until("nothing left after the hold", lambda: objects(rest, ns) == set(), 30)
        leftover_after_hold = objects(rest, ns)
        batch_obj = get_or_none(rest, batch_path) or {}

        # The policy goes: the next resync makes both whole, under the same identity.
        cluster.kubectl("delete", "validatingadmissionpolicybinding,validatingadmissionpolicy", refusing)
        wait_until("the fleet's children made", lambda: {("Deployment", "fleet"), ("Service", "fleet"),
                                                          ("HorizontalPodAutoscaler", "fleet")} <= objects(rest, ns),
                   3 * RESYNC_SECONDS + 30)
        wait_until("the batch's Job made", lambda: ("Job", "batch-batch") in objects(rest, ns), 3 * RESYNC_SECONDS + 30)
        log = window.text()
        events = {"fleet": _events(rest, ns, "fleet"), "batch": _events(rest, ns, "batch")}
    finally:
        operator.stop()

    record("refusals-under-chart-rbac", {
        "fleet_stalled": fleet_stalled, "batch_stalled": batch_stalled, "held_seconds": round(held_for, 1),
        "job_refusals_logged": job_refusals, "leftover_after_hold": sorted(leftover_after_hold),
        "events": events, "undo_refused_in_log": log.count("cannot delete")})
    assert fleet_stalled["reason"] == "ApplyRejected" and POLICY_MESSAGE in fleet_stalled["message"], fleet_stalled
    assert batch_stalled["reason"] == "ApplyRejected" and POLICY_MESSAGE in batch_stalled["message"], batch_stalled
    assert (batch_obj.get("status") or {}).get("state") == "Stalled", batch_obj.get("status")
    assert leftover_after_hold == set()
    # One try at creation, one per resync after it (two or three resyncs in the hold), never a loop.
    assert 1 <= job_refusals <= 2 + int(held_for // RESYNC_SECONDS), log[-4000:]
    assert ("Warning", "ApplyRejected") in events["batch"] and ("Warning", "ApplyRejected") in events["fleet"]
    assert "cannot delete" not in log, log[-4000:]  # the undo is allowed to the chart's identity
    assert TRACEBACK not in log, log[-4000:]
