"""Multi-node fleets through the operator against the real apiserver with LeaderWorkerSet's own CRD (v0.9.0, from
hack/build-binaries.sh lws): Stalled while the cluster does not serve the API, a LeaderWorkerSet once it does, Ready
from the LWS status, no writes when unchanged, and a migration to a Deployment without a half-made fleet.

No LWS controller runs here: the LWS status is written the way that controller writes it (the status
subresource), to see the operator follow it.
"""

from __future__ import annotations

import json
import time
from typing import Any

import pytest

from qwen_fleet_dev.cluster import LocalCluster
from qwen_fleet_dev.lws import lws_home
from tests.support.kube import apply, condition, get, wait_until
from tests.support.operator_process import OperatorProcess, audit_writes

pytestmark = pytest.mark.cluster
# From the cache `hack/build-binaries.sh lws` fills (copied from the sigs.k8s.io/lws module).
LWS_CRD = lws_home() / "crds" / "leaderworkerset.x-k8s.io_leaderworkersets.yaml"
LWS_CRD_NAME = "leaderworkersets.leaderworkerset.x-k8s.io"
ROLE = "qwenfleet.io/role"


def _fleet(nodes: int) -> dict[str, Any]:
    return {"apiVersion": "qwenfleet.io/v1alpha1", "kind": "QwenInference", "metadata": {"name": "big"},
            "spec": {"model": {"name": "Qwen/Qwen3-4B-Instruct-2507"},
                     "gpu": {"product": "NVIDIA-H100-80GB-HBM3"},
                     "parallelism": {"pipeline": 2, "nodes": nodes}}}


def _lws_crd_present(cluster: LocalCluster) -> bool:
    return cluster.kubectl("get", "crd", LWS_CRD_NAME, check=False).returncode == 0


def _set_lws_status(cluster: LocalCluster, ns: str, ready: int) -> None:
    """What the LWS controller reports for one group: its counts and the Available condition."""
    lws = get(cluster, "leaderworkerset", "big", ns)
    assert lws is not None
    status = {"replicas": 1, "readyReplicas": ready, "updatedReplicas": 1,
              "observedGeneration": lws["metadata"]["generation"],
              "conditions": [{"type": "Available", "status": "True" if ready else "False",
                              "reason": "AllGroupsReady" if ready else "GroupsNotReady", "message": "",
                              "lastTransitionTime": "2026-01-01T00:00:00Z"}]}
    cluster.kubectl("patch", "leaderworkerset", "big", "-n", ns, "--subresource=status", "--type=merge",
                    "-p", json.dumps({"status": status}))


def _install_lws_crd(cluster: LocalCluster) -> None:
    cluster.kubectl("apply", "--server-side", "-f", str(LWS_CRD))
    wait_until("the LWS CRD established", lambda: (condition(get(cluster, "crd", LWS_CRD_NAME, ""), "Established")
                                                   or {}).get("status") == "True", 60)


def _reason(cluster: LocalCluster, ns: str, type_: str) -> tuple[str, str]:
    cond = condition(get(cluster, "qwi", "big", ns), type_) or {}
    return str(cond.get("status")), str(cond.get("reason"))


def test_multi_node_fleet_is_stalled_without_the_lws_api_and_a_leaderworkerset_with_it(
        cluster: LocalCluster, operator: OperatorProcess, namespace: str) -> None:
    if _lws_crd_present(cluster):  # another test loaded it: start from a cluster without the API
        cluster.kubectl("delete", "crd", LWS_CRD_NAME, "--wait=true", timeout=120)
        time.sleep(12)  # one resync of the operator (10 s in these tests) refreshes its capabilities
    since = time.time()
    apply(cluster, namespace, _fleet(2))
    wait_until("Stalled LeaderWorkerSetMissing",
               lambda: _reason(cluster, namespace, "Stalled") == ("True", "LeaderWorkerSetMissing"), 30)
    qwi = get(cluster, "qwi", "big", namespace)
    assert "install LeaderWorkerSet" in (condition(qwi, "Stalled") or {})["message"]
    assert [w["objectRef"]["resource"] for w in audit_writes(cluster, since)
            if (w.get("objectRef") or {}).get("namespace") == namespace
            and w["objectRef"]["resource"] not in ("qweninferences", "events")] == []

    _install_lws_crd(cluster)
    lws = wait_until("the LeaderWorkerSet", lambda: get(cluster, "leaderworkerset", "big", namespace), 60)
    assert lws["spec"]["leaderWorkerTemplate"]["size"] == 2
    svc = wait_until("the Service", lambda: get(cluster, "service", "big", namespace), 30)
    assert svc["spec"]["selector"][ROLE] == "leader"
    assert get(cluster, "deployment", "big", namespace) is None
    assert _reason(cluster, namespace, "Stalled")[0] == "False"

    # Ready follows the LWS: not while its group is not ready, Ready once the controller says it is.
    _set_lws_status(cluster, namespace, ready=0)
    time.sleep(2)
    assert _reason(cluster, namespace, "Ready")[0] == "False"
    _set_lws_status(cluster, namespace, ready=1)
    _wait_ready(cluster, namespace, operator)
    qwi = get(cluster, "qwi", "big", namespace)
    assert qwi is not None and qwi["status"]["readyReplicas"] == 1

    # Unchanged, through a resync (10 s) and the LWS API's defaults: no writes, cluster-wide or in this namespace.
    # Other namespaces are left out: an earlier test's namespace may still be terminating, and the operator's attempt
    # to re-create a child the namespace controller removed there (refused 403) is that fleet's write, not this one's.
    time.sleep(2)
    since = time.time()
    time.sleep(14)
    assert [f"{w['verb']} {w['requestURI']}" for w in audit_writes(cluster, since)
            if (w.get("objectRef") or {}).get("namespace") in (None, namespace)] == []


def _wait_ready(cluster: LocalCluster, ns: str, operator: OperatorProcess, timeout: float = 90) -> None:
    try:
        wait_until("Ready", lambda: _reason(cluster, ns, "Ready") == ("True", "Ready"), timeout)
    except AssertionError as err:
        qwi = get(cluster, "qwi", "big", ns) or {}
        raise AssertionError(f"{err}\nstatus: {json.dumps(qwi.get('status'), indent=1)}\n{operator.tail()}") from None


def _snapshot(cluster: LocalCluster, ns: str) -> dict[str, Any]:
    out = json.loads(cluster.kubectl("get", "deployments,leaderworkersets,services", "-n", ns, "-o", "json").stdout)
    return {item["kind"]: item for item in out["items"]}


def test_nodes_2_to_1_migrates_to_a_deployment_without_a_half_made_fleet(
        cluster: LocalCluster, operator: OperatorProcess, namespace: str) -> None:
    if not _lws_crd_present(cluster):
        _install_lws_crd(cluster)
    # The operator notices the API at its next resync.
    apply(cluster, namespace, _fleet(2))
    wait_until("the LeaderWorkerSet", lambda: get(cluster, "leaderworkerset", "big", namespace), 60)
    _set_lws_status(cluster, namespace, ready=1)
    _wait_ready(cluster, namespace, operator)

    since = time.time()
    apply(cluster, namespace, _fleet(1))
    seen: list[dict[str, Any]] = []

    def migrated() -> bool:
        snap = _snapshot(cluster, namespace)
        seen.append(snap)
        return "LeaderWorkerSet" not in snap and ROLE not in snap["Service"]["spec"]["selector"]

    wait_until("the migration", migrated, 120, interval=0.2)
    for snap in seen:  # at every moment: a workload that serves behind a Service that selects its pods
        dep, lws, selector = snap.get("Deployment"), snap.get("LeaderWorkerSet"), snap["Service"]["spec"]["selector"]
        dep_ready = dep is not None and (dep.get("status") or {}).get("readyReplicas") == 1
        assert lws is not None or dep_ready, "the LeaderWorkerSet went before the Deployment was ready"
        if ROLE in selector:
            assert lws is not None, "the Service selects leaders of a LeaderWorkerSet that is gone"
        else:
            assert dep_ready, "the Service moved to a Deployment that was not ready"
    # Make before break, from the apiserver's audit log (polled snapshots can miss the overlap on a fast
    # machine): the operator wrote the Deployment before it deleted the LeaderWorkerSet.
    writes = [(w["requestReceivedTimestamp"], w["verb"], w["objectRef"]["resource"])
              for w in audit_writes(cluster, since) if (w.get("objectRef") or {}).get("name") == "big"]
    deployment_writes = [w for w in writes if w[2] == "deployments" and w[1] in ("create", "patch", "update")]
    lws_deletes = [w for w in writes if w[2] == "leaderworkersets" and w[1] == "delete"]
    assert deployment_writes and lws_deletes, writes
    assert min(deployment_writes) < min(lws_deletes), writes
    _wait_ready(cluster, namespace, operator, 60)
    dep = get(cluster, "deployment", "big", namespace)
    assert dep is not None
    assert dep["spec"]["template"]["spec"]["containers"][0]["resources"]["limits"]["nvidia.com/gpu"] == "2"
