"""autoscaling.engine keda through the operator against the real apiserver with KEDA's own ScaledObject CRD
(v2.21.0, from the github.com/kedacore/keda/v2 module: hack/third-party-crds.sh): Stalled with an Event while the
cluster does not serve the API (the running fleet and its HPA untouched), a ScaledObject accepted by server-side
apply against the real schema once it does and no HPA beside it, the switch back to an HPA and again, the old
autoscaler always deleted before the new one is made, and the replica count an autoscaler set never reset.

No KEDA operator runs here (no admission webhook, no finalizer, no keda-hpa-<name>): the real KEDA, its HPA and
its metrics apiserver are in test_keda_controller.py, on a control plane of their own (docs/autoscaling.md, "What
is tested, and what is not").
"""

from __future__ import annotations

import json
import time
from typing import Any

import pytest

from qwen_fleet.config import FIELD_MANAGER
from qwen_fleet_dev.cluster import LocalCluster
from tests.support.kube import apply, condition, events_for, get, reconciled, wait_fleet, wait_until
from tests.support.operator_process import OperatorProcess, audit_writes
from tests.support.third_party import crd_name, third_party_crds

pytestmark = pytest.mark.cluster
KEDA_CRD_NAME = "scaledobjects.keda.sh"
PROMETHEUS = "http://prometheus-operated.monitoring.svc:9090"


def _fleet(engine: str) -> dict[str, Any]:
    autoscaling: dict[str, Any] = {"enabled": True, "engine": engine, "minReplicas": 1, "maxReplicas": 4,
                                   "queueDepth": {"targetPerReplica": 4}}
    if engine == "keda":
        autoscaling["keda"] = {"prometheusAddress": PROMETHEUS}
    return {"apiVersion": "qwenfleet.io/v1alpha1", "kind": "QwenInference", "metadata": {"name": "big"},
            "spec": {"model": {"name": "Qwen/Qwen3-4B-Instruct-2507"}, "engine": {"maxModelLen": 4096},
                     "gpu": {"product": "NVIDIA-A10G"}, "autoscaling": autoscaling}}


def _install_crd(cluster: LocalCluster) -> None:
    crd = next(p for p in third_party_crds() if p.name == "keda.sh_scaledobjects.yaml")  # cached by the script
    assert crd_name(crd) == KEDA_CRD_NAME
    cluster.install_crd(crd, name=KEDA_CRD_NAME)




def _crd_present(cluster: LocalCluster) -> bool:
    return cluster.kubectl("get", "crd", KEDA_CRD_NAME, check=False).returncode == 0


def _reason(cluster: LocalCluster, ns: str, type_: str) -> tuple[str, str]:
    cond = condition(get(cluster, "qwi", "big", ns), type_) or {}
    return str(cond.get("status")), str(cond.get("reason"))


def _replicas(cluster: LocalCluster, ns: str) -> int:
    dep = get(cluster, "deployment", "big", ns)
    assert dep is not None
    return int(dep["spec"]["replicas"])


def _child_writes(cluster: LocalCluster, ns: str, since: float) -> list[tuple[str, str, str]]:
    """(received, verb, resource) of the operator's writes to the fleet's children, in order."""
    return sorted((w["requestReceivedTimestamp"], w["verb"], w["objectRef"]["resource"])
                  for w in audit_writes(cluster, since)
                  if (w.get("objectRef") or {}).get("namespace") == ns
                  and w["objectRef"]["resource"] not in ("qweninferences", "events"))


def _deleted_before_made(writes: list[tuple[str, str, str]], old: str, new: str) -> None:
    deletes = [w for w in writes if w[2] == old and w[1] == "delete"]
    makes = [w for w in writes if w[2] == new and w[1] in ("create", "patch", "update")]
    assert deletes and makes, writes
    assert max(deletes) < min(makes), f"the new autoscaler was written before the old one was deleted: {writes}"


def test_engine_keda_stalls_without_the_crd_then_switches_cleanly_both_ways(
        cluster: LocalCluster, operator: OperatorProcess, namespace: str) -> None:
    if _crd_present(cluster):  # another run loaded it: start from a cluster without the API
        cluster.kubectl("delete", "crd", KEDA_CRD_NAME, "--wait=true", timeout=120)
        time.sleep(12)  # one resync of the operator (10 s in these tests) refreshes its capabilities

    # A running fleet with the HPA, scaled to 3 as an autoscaler would (through the scale subresource).
    apply(cluster, namespace, _fleet("hpa"))
    # The whole first reconcile, not only the HPA: the PodDisruptionBudget is applied after it.
    wait_fleet(cluster, namespace, "big", operator.tail, "the first reconcile",
               lambda: reconciled(cluster, "qwi", "big", namespace))
    hpa = get(cluster, "hpa", "big", namespace)
    assert hpa is not None
    assert hpa["spec"]["scaleTargetRef"] == {"apiVersion": "apps/v1", "kind": "Deployment", "name": "big"}
    cluster.kubectl("scale", "deployment", "big", "-n", namespace, "--replicas=3")

    # engine keda without KEDA's CRD: Stalled with the fix, a Warning Event, and nothing written to the children.
    since = time.time()
    apply(cluster, namespace, _fleet("keda"))
    wait_until("Stalled KedaMissing", lambda: _reason(cluster, namespace, "Stalled") == ("True", "KedaMissing"), 30)
    qwi = get(cluster, "qwi", "big", namespace)
    assert "install KEDA" in (condition(qwi, "Stalled") or {})["message"]
    wait_until("a KedaMissing Warning Event", lambda: any(
        e["type"] == "Warning" and e["reason"] == "KedaMissing" for e in events_for(cluster, namespace, "big")), 30)
    assert _child_writes(cluster, namespace, since) == []
    assert get(cluster, "hpa", "big", namespace) is not None, "the running fleet's HPA was lost"
    assert _replicas(cluster, namespace) == 3

    # KEDA's CRD installed: at its next resync the operator deletes the HPA, then makes the ScaledObject, which
    # the apiserver validates against KEDA's schema (server-side apply).
    since = time.time()
    _install_crd(cluster)
    scaled = wait_fleet(cluster, namespace, "big", operator.tail, "the ScaledObject",
                   lambda: get(cluster, "scaledobject", "big", namespace))
    assert get(cluster, "hpa", "big", namespace) is None
    assert scaled["spec"]["minReplicaCount"] == 1 and scaled["spec"]["maxReplicaCount"] == 4
    assert scaled["spec"]["scaleTargetRef"]["name"] == "big"
    assert [t["metadata"]["threshold"] for t in scaled["spec"]["triggers"]] == ["4", "0.8"]
    assert scaled["metadata"]["ownerReferences"][0]["kind"] == "QwenInference"
    _deleted_before_made(_child_writes(cluster, namespace, since), "horizontalpodautoscalers", "scaledobjects")
    wait_until("Stalled False", lambda: _reason(cluster, namespace, "Stalled")[0] == "False", 30)
    qwi = wait_until("status.autoscaling of engine keda", lambda: (
        (get(cluster, "qwi", "big", namespace) or {}).get("status", {}).get("autoscaling", {}).get("engine") == "keda"
        and get(cluster, "qwi", "big", namespace)), 30)
    assert qwi["status"]["autoscaling"] == {"engine": "keda", "hpaName": "keda-hpa-big",
                                            "message": "KEDA has not reported on the ScaledObject yet"}
    assert _replicas(cluster, namespace) == 3

    # Unchanged, through a resync (10 s) and the real schema's defaults: no writes to the children.
    time.sleep(2)
    since = time.time()
    time.sleep(14)
    assert _child_writes(cluster, namespace, since) == []

    # KEDA's conditions reach the resource (written here as KEDA's operator writes them, status subresource).
    status = {"hpaName": "keda-hpa-big", "conditions": [
        {"type": "Ready", "status": "True", "reason": "ScaledObjectReady",
         "message": "ScaledObject is defined correctly and is ready for scaling"},
        {"type": "Fallback", "status": "True", "reason": "FallbackExists",
         "message": "At least one trigger is falling back on this scaled object"}]}
    cluster.kubectl("patch", "scaledobject", "big", "-n", namespace, "--subresource=status", "--type=merge",
                    "-p", json.dumps({"status": status}))
    wait_until("ScaledObjectFallback mirrored", lambda: _reason(cluster, namespace, "ScaledObjectFallback") == (
        "True", "FallbackExists"), 30)
    assert _reason(cluster, namespace, "ScaledObjectReady") == ("True", "ScaledObjectReady")
    wait_until("a ScaledObjectFallbackTrue Warning Event", lambda: any(
        e["type"] == "Warning" and e["reason"] == "ScaledObjectFallbackTrue"
        for e in events_for(cluster, namespace, "big")), 30)

    # Back to the HPA: the ScaledObject deleted first, then the HPA; the count still where it was.
    since = time.time()
    apply(cluster, namespace, _fleet("hpa"))
    wait_fleet(cluster, namespace, "big", operator.tail, "the HPA again", lambda: get(cluster, "hpa", "big", namespace))
    assert get(cluster, "scaledobject", "big", namespace) is None
    _deleted_before_made(_child_writes(cluster, namespace, since), "scaledobjects", "horizontalpodautoscalers")
    wait_until("status.autoscaling of engine hpa", lambda: (
        (get(cluster, "qwi", "big", namespace) or {}).get("status", {}).get("autoscaling", {}).get("engine") == "hpa"),
        30)
    assert _replicas(cluster, namespace) == 3
    assert condition(get(cluster, "qwi", "big", namespace), "ScaledObjectReady") is None


def test_a_new_keda_fleet_gets_a_scaled_object_and_no_hpa(
        cluster: LocalCluster, operator: OperatorProcess, namespace: str) -> None:
    if not _crd_present(cluster):
        _install_crd(cluster)
    # The operator notices the API at its next resync, if it had not yet.
    apply(cluster, namespace, _fleet("keda"))
    wait_fleet(cluster, namespace, "big", operator.tail, "the ScaledObject",
               lambda: get(cluster, "scaledobject", "big", namespace))
    wait_until("the Deployment", lambda: get(cluster, "deployment", "big", namespace), 30)
    assert get(cluster, "hpa", "big", namespace) is None
    dep = json.loads(cluster.kubectl("get", "deployment", "big", "-n", namespace, "-o", "json",
                                     "--show-managed-fields").stdout)
    assert dep["spec"]["replicas"] == 1  # the default: never sent by the operator under an autoscaler
    ours = [f.get("fieldsV1", {}).get("f:spec", {}) for f in dep["metadata"].get("managedFields") or []
            if f.get("manager") == FIELD_MANAGER]
    assert ours and all("f:replicas" not in spec for spec in ours), ours


def test_the_real_schema_refuses_what_keda_would_not_read(cluster: LocalCluster, namespace: str) -> None:
    """The CRD is KEDA's own: a misspelled count field is refused, so the acceptance above means something."""
    if not _crd_present(cluster):
        _install_crd(cluster)
    bad = {"apiVersion": "keda.sh/v1alpha1", "kind": "ScaledObject", "metadata": {"name": "bad"},
           "spec": {"scaleTargetRef": {"name": "x"}, "minReplicas": 1,
                    "triggers": [{"type": "prometheus", "metadata": {}}]}}
    out = cluster.kubectl("apply", "--server-side", "--field-manager=test", "-n", namespace, "-f", "-",
                          input=json.dumps(bad), check=False)
    # Server-side apply names it "field not declared in schema"; either way the field is named.
    assert out.returncode != 0 and "spec.minReplicas" in out.stderr, out.stderr
