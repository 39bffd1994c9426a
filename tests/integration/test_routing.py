"""spec.routing through the operator against the real apiserver with the real CRDs (InferencePool and
InferenceObjective from sigs.k8s.io/gateway-api-inference-extension v1.5.0, HTTPRoute from sigs.k8s.io/gateway-api
v1.5.1: hack/third-party-crds.sh): Stalled with an Event while the cluster does not serve them (the running fleet
untouched), every routing child accepted by server-side apply against the real schemas once it does, nothing
written again through a resync, and everything but the picker's Service pruned when routing is turned off.

No gateway and no endpoint picker run here (the picker's pods are faked by KWOK like the fleet's): what they do
with these objects is upstream's (docs/routing.md, "What is tested, and what is not").
"""

from __future__ import annotations

import copy
import json
import time
from typing import Any

import pytest

from qwen_fleet_dev.cluster import LocalCluster
from tests.invalid_specs import CASES, Case, merged
from tests.support.kube import apply, condition, events_for, get, reconciled, wait_fleet, wait_until
from tests.support.operator_process import OperatorProcess, audit_writes
from tests.support.third_party import crd_name, third_party_crds

pytestmark = pytest.mark.cluster
CRDS = {"inference.networking.k8s.io_inferencepools.yaml": "inferencepools.inference.networking.k8s.io",
        "inference.networking.x-k8s.io_inferenceobjectives.yaml":
            "inferenceobjectives.inference.networking.x-k8s.io",
        "gateway.networking.k8s.io_httproutes.yaml": "httproutes.gateway.networking.k8s.io"}
ROUTING = {"gateway": {"name": "inference-gateway", "sectionName": "http"},
           "priorityClasses": [{"name": "interactive", "priority": 10}, {"name": "batch", "priority": -10}]}
# Every routing child but the picker's Service, ServiceAccount, Role and RoleBinding (KEPT: the operator may not
# delete those kinds) is pruned when routing goes.
KEPT = [("service", "big-epp"), ("serviceaccount", "big-epp"), ("role", "big-epp"), ("rolebinding", "big-epp")]
PRUNED = [("configmap", "big-epp"),
          ("deployment", "big-epp"), ("inferencepool", "big"), ("inferenceobjective", "big-interactive"),
          ("inferenceobjective", "big-batch"), ("httproute", "big")]


def _fleet(routing: dict[str, Any] | None) -> dict[str, Any]:
    spec: dict[str, Any] = {"model": {"name": "Qwen/Qwen3-4B-Instruct-2507"}, "engine": {"maxModelLen": 4096},
                            "gpu": {"product": "NVIDIA-A10G"}}
    if routing is not None:
        spec["routing"] = copy.deepcopy(routing)
    return {"apiVersion": "qwenfleet.io/v1alpha1", "kind": "QwenInference", "metadata": {"name": "big"},
            "spec": spec}


def _install_crds(cluster: LocalCluster) -> None:
    for path in third_party_crds():  # cached by the script
        if path.name in CRDS:
            assert crd_name(path) == CRDS[path.name]
            cluster.install_crd(path, name=CRDS[path.name])


def _crds_present(cluster: LocalCluster) -> list[str]:
    return [name for name in CRDS.values() if cluster.kubectl("get", "crd", name, check=False).returncode == 0]




def _reason(cluster: LocalCluster, ns: str, type_: str) -> tuple[str, str]:
    cond = condition(get(cluster, "qwi", "big", ns), type_) or {}
    return str(cond.get("status")), str(cond.get("reason"))


def _child_writes(cluster: LocalCluster, ns: str, since: float) -> list[tuple[str, str, str]]:
    """(verb, resource, name) of the operator's writes to the fleet's children."""
    return sorted((w["verb"], w["objectRef"]["resource"], w["objectRef"].get("name", ""))
                  for w in audit_writes(cluster, since)
                  if (w.get("objectRef") or {}).get("namespace") == ns
                  and w["objectRef"]["resource"] not in ("qweninferences", "events"))


def test_routing_stalls_without_the_crds_then_is_accepted_and_pruned(
        cluster: LocalCluster, operator: OperatorProcess, namespace: str) -> None:
    present = _crds_present(cluster)
    if present:  # another run loaded them: start from a cluster without the APIs
        cluster.kubectl("delete", "crd", *present, "--wait=true", timeout=120)
        time.sleep(12)  # one resync of the operator (10 s in these tests) refreshes its capabilities

    apply(cluster, namespace, _fleet(None))
    # The first reconcile done, not only its Deployment: the Service is applied after it (a CI run saw that apply
    # land after `since` below).
    wait_fleet(cluster, namespace, "big", operator.tail, "the fleet's first reconcile",
               lambda: reconciled(cluster, "qwi", "big", namespace))

    # routing without the Inference Extension's CRDs: Stalled with the fix, a Warning Event, nothing written.
    since = time.time()
    apply(cluster, namespace, _fleet(ROUTING))
    wait_until("Stalled InferencePoolMissing",
               lambda: _reason(cluster, namespace, "Stalled") == ("True", "InferencePoolMissing"), 30)
    message = (condition(get(cluster, "qwi", "big", namespace), "Stalled") or {})["message"]
    assert "inference.networking.k8s.io/v1 inferencepools" in message and "gateway-api-inference-extension" in message
    wait_until("an InferencePoolMissing Warning Event", lambda: any(
        e["type"] == "Warning" and e["reason"] == "InferencePoolMissing"
        for e in events_for(cluster, namespace, "big")), 30)
    assert _child_writes(cluster, namespace, since) == []

    # The CRDs installed: at its next resync the operator applies every routing child, each validated by the
    # apiserver against the real schema (server-side apply).
    _install_crds(cluster)
    route = wait_fleet(cluster, namespace, "big", operator.tail, "the HTTPRoute",
                       lambda: get(cluster, "httproute", "big", namespace), timeout=60)
    assert route["spec"]["parentRefs"] == [{"group": "gateway.networking.k8s.io", "kind": "Gateway",
                                            "name": "inference-gateway", "sectionName": "http"}]
    assert route["spec"]["rules"][0]["backendRefs"][0]["kind"] == "InferencePool"
    pool = get(cluster, "inferencepool", "big", namespace)
    assert pool is not None
    assert pool["spec"]["selector"] == {"matchLabels": {"qwenfleet.io/inference": "big"}}
    assert pool["spec"]["endpointPickerRef"]["name"] == "big-epp"
    assert pool["metadata"]["ownerReferences"][0]["kind"] == "QwenInference"
    batch = get(cluster, "inferenceobjective", "big-batch", namespace)
    assert batch is not None and batch["spec"]["priority"] == -10
    assert batch["metadata"]["annotations"]["qwenfleet.io/vllm-priority"] == "10"
    for kind, name in [*PRUNED, *KEPT]:
        assert get(cluster, kind, name, namespace) is not None, f"{kind}/{name} missing"
    dep = get(cluster, "deployment", "big", namespace)
    assert dep is not None
    args = dep["spec"]["template"]["spec"]["containers"][0]["args"]
    assert args[args.index("--scheduling-policy") + 1] == "priority"
    wait_until("Stalled False", lambda: _reason(cluster, namespace, "Stalled")[0] == "False", 30)

    # Unchanged, through a resync (10 s) and the real schemas' defaults: no writes to the children.
    time.sleep(2)
    since = time.time()
    time.sleep(14)
    assert _child_writes(cluster, namespace, since) == []

    # routing turned off: every routing child pruned but the picker's Service and identity; the fleet's own kept.
    apply(cluster, namespace, _fleet(None))
    for kind, name in PRUNED:
        wait_fleet(cluster, namespace, "big", operator.tail, f"{kind}/{name} pruned",
              lambda k=kind, n=name: get(cluster, k, n, namespace) is None or None, timeout=30)
    for kind, name in KEPT:
        assert get(cluster, kind, name, namespace) is not None, f"{kind}/{name} deleted"
    assert get(cluster, "deployment", "big", namespace) is not None
    assert get(cluster, "service", "big", namespace) is not None


def test_the_real_schemas_refuse_what_upstream_would_not_read(cluster: LocalCluster, namespace: str) -> None:
    """The CRDs are upstream's own: a pool without target ports and a route with a misspelt backend field are
    refused, so the acceptance above means something."""
    if len(_crds_present(cluster)) < len(CRDS):
        _install_crds(cluster)
    pool = {"apiVersion": "inference.networking.k8s.io/v1", "kind": "InferencePool", "metadata": {"name": "bad"},
            "spec": {"selector": {"matchLabels": {"a": "b"}}, "targetPorts": [],
                     "endpointPickerRef": {"name": "x", "port": {"number": 9002}}}}
    out = cluster.kubectl("apply", "--server-side", "--field-manager=test", "-n", namespace, "-f", "-",
                          input=json.dumps(pool), check=False)
    assert out.returncode != 0 and "spec.targetPorts" in out.stderr, out.stderr
    route = {"apiVersion": "gateway.networking.k8s.io/v1", "kind": "HTTPRoute", "metadata": {"name": "bad"},
             "spec": {"parentRefs": [{"name": "gw"}], "rules": [{"backendRef": [{"name": "x"}]}]}}
    out = cluster.kubectl("apply", "--server-side", "--field-manager=test", "-n", namespace, "-f", "-",
                          input=json.dumps(route), check=False)
    assert out.returncode != 0 and "backendRef" in out.stderr, out.stderr


ROUTING_CASES = [c for c in CASES if c.id.startswith("routing-")]


@pytest.mark.parametrize("case", ROUTING_CASES, ids=[c.id for c in ROUTING_CASES])
def test_a_bad_routing_spec_is_refused_at_create_with_its_message(cluster: LocalCluster, crd: Any,
                                                                  case: Case) -> None:
    """The routing rows of tests/invalid_specs.py (test_crd_admission.py runs them all), here too."""
    doc = {"apiVersion": "qwenfleet.io/v1alpha1", "kind": "QwenInference", "metadata": {"name": case.name},
           "spec": merged(case.spec)}
    out = cluster.kubectl("create", "--dry-run=server", "-n", "default", "-f", "-", input=json.dumps(doc),
                          check=False)
    assert out.returncode != 0 and case.apiserver in out.stderr, out.stderr


# Routing specs without priorityClasses (a list has no CRD default, so its rules must not read it unguarded: the
# fuzz test found the apiserver refusing these with "no such key: priorityClasses").
MINIMAL = [{}, {"scorers": {"prefixCache": 26}}, {"gateway": {"name": "gw"}},
           {"priorityClasses": [{"name": "interactive", "priority": 10}]}]


@pytest.mark.parametrize("routing", MINIMAL, ids=["empty", "scorers", "gateway", "one-class"])
def test_a_routing_spec_without_every_field_is_accepted(cluster: LocalCluster, crd: Any,
                                                        routing: dict[str, Any]) -> None:
    doc = _fleet(routing)
    out = cluster.kubectl("create", "--dry-run=server", "-n", "default", "-f", "-", input=json.dumps(doc),
                          check=False)
    assert out.returncode == 0, out.stderr
