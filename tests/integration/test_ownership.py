"""The operator never adopts, changes or deletes an object it did not create (issue 38 item 3), and the model-cache
claim outlives its removal from the spec (issue 32 item 3), against the real control plane and the session operator.

Foreign objects: three fleets between them have a child of every kind in the registry (reconcile/kinds.py; the test
fails when a kind is added that none of them renders). Before the fleets exist, someone else creates an object under
every one of their children's names: a copy of what the operator would render, with no owner, other labels and a
Service selecting other pods. Each fleet is then Stalled (ForeignObject) naming every such object and "no owner",
with a Warning Event; through more than one recheck and a resync, the operator writes nothing to any of them (the
audit log) and each keeps its resourceVersion and content. The objects removed, each fleet goes on with children of
its own. The third-party kinds are the projects' own CRDs (hack/third-party-crds.sh); no controller of theirs runs.
"""

from __future__ import annotations

import copy
import dataclasses
import json
import time
from collections.abc import Iterator
from typing import Any

import pytest

from qwen_fleet.api import QwenInference
from qwen_fleet.config import OperatorConfig
from qwen_fleet.plan import make_plan
from qwen_fleet.reconcile.kinds import CHILD_KINDS
from qwen_fleet.render import Capabilities, render_children
from qwen_fleet_dev import binaries
from qwen_fleet_dev.cluster import LocalCluster
from tests.support.kube import apply, condition, events_for, get, reconciled, wait_fleet, wait_until
from tests.support.operator_process import OperatorProcess, audit_writes
from tests.support.third_party import crd_name, third_party_crds

pytestmark = pytest.mark.cluster
MODEL = "Qwen/Qwen3-4B-Instruct-2507"
H100 = "NVIDIA-H100-80GB-HBM3"
ROUTING = {"gateway": {"name": "inference-gateway", "sectionName": "http"},
           "priorityClasses": [{"name": "interactive", "priority": 10}, {"name": "batch", "priority": -10}]}
FLEETS: dict[str, dict[str, Any]] = {
    # Deployment, Service, HPA, PDB, ConfigMaps, ServiceMonitor, PrometheusRule, the picker's identity and Role,
    # InferencePool, InferenceObjectives, HTTPRoute.
    "taken": {"model": {"name": MODEL}, "engine": {"maxModelLen": 4096}, "gpu": {"product": H100},
              "parallelism": {"tensor": 2}, "nccl": {"preflight": {"enabled": True}},
              "autoscaling": {"enabled": True, "minReplicas": 1, "maxReplicas": 3},
              "monitoring": {"serviceMonitor": True, "prometheusRule": True}, "routing": ROUTING},
    # The cache claim and its prefetch Job, ScaledObject, InterceptorRoute and its proxy Service.
    "zero": {"model": {"name": MODEL, "cache": {"size": "1Gi", "prefetch": {"enabled": True}}},
             "engine": {"maxModelLen": 4096}, "gpu": {"product": "NVIDIA-A10G"},
             "autoscaling": {"enabled": True, "engine": "keda", "minReplicas": 0, "maxReplicas": 2,
                             "keda": {"prometheusAddress": "http://prometheus.monitoring.svc:9090"},
                             "scaleToZero": {"hosts": ["zero.example.com"]}}},
    # LeaderWorkerSet.
    "multi": {"model": {"name": MODEL}, "gpu": {"product": H100}, "parallelism": {"pipeline": 2, "nodes": 2}},
    # Envoy Gateway's EnvoyExtensionPolicy and BackendTrafficPolicy (routing.gateway.implementation EnvoyGateway),
    # and the SecurityPolicy of routing.auth.apiKeys (its key Secret envoy-keys made before the fleet).
    "envoy": {"model": {"name": MODEL}, "engine": {"maxModelLen": 4096}, "gpu": {"product": "NVIDIA-A10G"},
              "routing": {"gateway": {"name": "inference-gateway", "implementation": "EnvoyGateway"},
                          "auth": {"apiKeys": {"secretRefs": [{"name": "envoy-keys"}]}}}},
}
# What each fleet makes once the names are free: everything, but a prefetch holds the rest until its Job succeeded
# (no volume binds the claim here).
PROCEEDS = {"zero": {"PersistentVolumeClaim", "Job"}}
THEIRS = {"team.example/app": "someone-else"}
RESOURCES = ",".join(f"{k.plural}.{k.group}" if k.group else k.plural for k in CHILD_KINDS)


def _qwi(name: str, spec: dict[str, Any]) -> dict[str, Any]:
    return {"apiVersion": "qwenfleet.io/v1alpha1", "kind": "QwenInference", "metadata": {"name": name},
            "spec": copy.deepcopy(spec)}


def _rendered(name: str, ns: str) -> list[dict[str, Any]]:
    cr = QwenInference.model_validate({"metadata": {"name": name, "namespace": ns}, "spec": FLEETS[name]})
    every = Capabilities(**{f.name: True for f in dataclasses.fields(Capabilities)})
    return render_children(cr, make_plan(cr, OperatorConfig()), every)


def _theirs(child: dict[str, Any]) -> dict[str, Any]:
    """What someone else made under a child's name: the same kind and shape, not the operator's."""
    obj = {k: copy.deepcopy(v) for k, v in child.items() if k != "metadata"}
    obj["metadata"] = {"name": child["metadata"]["name"], "labels": dict(THEIRS),
                       "annotations": {"team.example/note": "made by hand"}}
    spec = obj.get("spec") or {}
    if child["kind"] == "Service":
        spec["selector"] = {"app": "someone-else"}
    if child["kind"] in ("Deployment", "LeaderWorkerSet"):
        spec["replicas"] = 0
    if child["kind"] == "Job":
        spec["suspend"] = True
    return obj


def _foreign_view(cluster: LocalCluster, ns: str) -> dict[str, dict[str, Any]]:
    out = json.loads(cluster.kubectl("get", RESOURCES, "-n", ns, "-l", "team.example/app=someone-else", "-o", "json",
                                     "--show-managed-fields").stdout)
    view = {}
    for item in out["items"]:
        meta = item["metadata"]
        view[f"{item['kind']}/{meta['name']}"] = {
            "resourceVersion": meta["resourceVersion"], "uid": meta["uid"],
            "labels": meta.get("labels"), "annotations": meta.get("annotations"),
            "ownerReferences": meta.get("ownerReferences"),
            "managers": sorted({m.get("manager") for m in meta.get("managedFields") or []}),
            "body": {k: v for k, v in item.items() if k not in ("metadata", "status", "apiVersion")}}
    return view


def _settled(cluster: LocalCluster, ns: str, want: int) -> dict[str, dict[str, Any]]:
    """The foreign objects once their own controllers are done with them (Deployment, Job, PDB and HPA status
    writes by kube-controller-manager move their resourceVersion): the same view twice, 4 s apart."""
    def check() -> dict[str, dict[str, Any]] | None:
        first = _foreign_view(cluster, ns)
        hpas = [k for k in first if k.startswith("HorizontalPodAutoscaler/")]
        if len(first) != want or any(not (get(cluster, "hpa", k.split("/")[1], ns) or {}).get("status", {})
                                     .get("conditions") for k in hpas):
            return None
        time.sleep(4)
        return first if _foreign_view(cluster, ns) == first else None

    return wait_until("the foreign objects settled", check, timeout=90, interval=1)


def _held(cluster: LocalCluster, ns: str, fleet: str, named: list[str]) -> dict[str, Any] | None:
    """The fleet's Stalled condition once it is ForeignObject naming every one of ``named``."""
    stalled = condition(get(cluster, "qwi", fleet, ns), "Stalled") or {}
    ok = stalled.get("reason") == "ForeignObject" and all(n in stalled.get("message", "") for n in named)
    return stalled if ok else None


def _ours(obj: dict[str, Any] | None, fleet: str) -> bool:
    refs = (obj or {}).get("metadata", {}).get("ownerReferences") or []
    return any(r.get("controller") and r.get("kind") == "QwenInference" and r.get("name") == fleet for r in refs)


@pytest.fixture(scope="module")
def third_party_apis(cluster: LocalCluster) -> Iterator[None]:
    """Every CRD of an optional child kind; those this module installed are removed after it."""
    wanted = {crd_name(p): p for p in third_party_crds() if not crd_name(p).endswith("cert-manager.io")}
    # Envoy Gateway's policy kinds, from its chart (the module cache): routing.gateway.implementation EnvoyGateway.
    eg_crds = binaries.ensure_gateway().chart / "crds" / "generated"
    for plural in ("envoyextensionpolicies", "backendtrafficpolicies", "securitypolicies"):
        path = eg_crds / f"gateway.envoyproxy.io_{plural}.yaml"
        wanted[crd_name(path)] = path
    installed = [name for name in wanted if cluster.kubectl("get", "crd", name, check=False).returncode != 0]
    for name in installed:
        cluster.install_crd(wanted[name], name=name)
    yield
    if installed:
        cluster.kubectl("delete", "crd", *installed, "--wait=true", check=False, timeout=120)


def test_the_fleets_between_them_render_every_child_kind() -> None:
    kinds = {c["kind"] for name in FLEETS for c in _rendered(name, "ns")}
    assert kinds == {k.kind for k in CHILD_KINDS}


def test_a_fleet_never_takes_over_a_foreign_object_of_any_kind(
        cluster: LocalCluster, operator: OperatorProcess, namespace: str, third_party_apis: None) -> None:
    rendered = {name: _rendered(name, namespace) for name in FLEETS}
    theirs = [_theirs(c) for children in rendered.values() for c in children]
    cluster.kubectl("create", "-n", namespace, "-f", "-",
                    input=json.dumps({"apiVersion": "v1", "kind": "List", "items": theirs}))
    before = _settled(cluster, namespace, len(theirs))
    # The key Secret routing.auth.apiKeys names (not a child: the user's; without it that fleet is Stalled
    # APIKeySecretNotFound before it looks for foreign objects).
    cluster.kubectl("create", "secret", "generic", "envoy-keys", "-n", namespace, "--from-literal=team-a=sk-own")

    since = time.time()
    for name, spec in FLEETS.items():
        apply(cluster, namespace, _qwi(name, spec))
    for name, children in rendered.items():
        named = [f"{c['kind']}/{c['metadata']['name']} (owner: no owner)" for c in children]
        # Until the operator's resync (10 s here) has seen the CRDs, a fleet may be Stalled for a missing API first.
        stalled = wait_fleet(cluster, namespace, name, operator.tail, f"{name} Stalled ForeignObject naming {named}",
                             lambda n=name, w=named: _held(cluster, namespace, n, w), timeout=90)
        assert stalled["status"] == "True" and "does not adopt, change or delete" in stalled["message"]
        wait_until(f"{name}: a Warning Event ForeignObject", lambda n=name: any(
            e["type"] == "Warning" and e["reason"] == "ForeignObject" for e in events_for(cluster, namespace, n)), 30)
    time.sleep(16)  # more rechecks (1, 2, 4, 8 s ...) and a resync: still nothing

    after = _foreign_view(cluster, namespace)
    assert after == before, {k: (before.get(k), after.get(k)) for k in before if before.get(k) != after.get(k)}
    writes = [(w["verb"], (w.get("objectRef") or {}).get("resource"), (w.get("objectRef") or {}).get("name"))
              for w in audit_writes(cluster, since) if (w.get("objectRef") or {}).get("namespace") == namespace]
    assert all(resource in ("qweninferences", "events") for _, resource, _ in writes), writes

    # The names free again: each fleet goes on, with children of its own.
    cluster.kubectl("delete", RESOURCES, "-n", namespace, "-l", "team.example/app=someone-else", "--wait=true",
                    timeout=120)
    for name, children in rendered.items():
        expected = [c for c in children if c["kind"] in PROCEEDS.get(name, {c["kind"]})]
        for child in expected:
            kind, child_name = child["kind"], child["metadata"]["name"]
            wait_fleet(cluster, namespace, name, operator.tail, f"{kind}/{child_name} of {name}'s own", lambda k=kind,
                       c=child_name, n=name: _ours(get(cluster, k.lower(), c, namespace), n) or None, timeout=60)
        wait_until(f"{name} no longer Stalled", lambda n=name: (condition(get(cluster, "qwi", n, namespace), "Stalled")
                                                                or {}).get("status") == "False", 30)


def _cache_fleet(name: str, cache: dict[str, Any] | None) -> dict[str, Any]:
    model: dict[str, Any] = {"name": MODEL, **({"cache": cache} if cache else {})}
    return _qwi(name, {"model": model, "engine": {"maxModelLen": 4096}, "gpu": {"product": "NVIDIA-A10G"}})


def _claims(dep: dict[str, Any] | None) -> list[str]:
    volumes = ((dep or {}).get("spec", {}).get("template", {}).get("spec", {}).get("volumes")) or []
    return [v["persistentVolumeClaim"]["claimName"] for v in volumes if "persistentVolumeClaim" in v]


def test_the_model_cache_claim_survives_the_removal_of_model_cache(
        cluster: LocalCluster, operator: OperatorProcess, namespace: str) -> None:
    """Retain (the default): the claim stays, owned by the fleet, and model.cache added back mounts the same one.
    Delete: the claim goes once no pod of the fleet mounts it."""
    retain, delete = {"size": "1Gi"}, {"size": "1Gi", "retentionPolicy": {"whenRemoved": "Delete"}}
    apply(cluster, namespace, _cache_fleet("keep", retain))
    apply(cluster, namespace, _cache_fleet("drop", delete))
    for name in ("keep", "drop"):
        wait_fleet(cluster, namespace, name, operator.tail, f"{name}: its Deployment mounting the cache claim",
                   lambda n=name: _claims(get(cluster, "deployment", n, namespace)) == [f"{n}-model-cache"], 60)
    claim = get(cluster, "pvc", "keep-model-cache", namespace)
    assert claim is not None and claim["metadata"]["annotations"]["qwenfleet.io/when-removed"] == "Retain"

    since = time.time()
    apply(cluster, namespace, _cache_fleet("keep", None))
    apply(cluster, namespace, _cache_fleet("drop", None))
    wait_fleet(cluster, namespace, "drop", operator.tail, "drop's claim deleted (Delete)",
               lambda: get(cluster, "pvc", "drop-model-cache", namespace) is None or None, timeout=90)
    wait_fleet(cluster, namespace, "keep", operator.tail, "keep reconciled without the cache", lambda: (
        reconciled(cluster, "qwi", "keep", namespace) and not _claims(get(cluster, "deployment", "keep", namespace))),
        60)
    time.sleep(12)  # a resync (10 s here) more
    kept = get(cluster, "pvc", "keep-model-cache", namespace)
    assert kept is not None and kept["metadata"]["uid"] == claim["metadata"]["uid"]
    assert not kept["metadata"].get("deletionTimestamp")
    assert _ours(kept, "keep")  # still the fleet's: deleting the QwenInference takes it
    deletes = [(w["objectRef"]["resource"], w["objectRef"].get("name")) for w in audit_writes(cluster, since)
               if w["verb"] == "delete" and w["objectRef"].get("namespace") == namespace]
    assert ("persistentvolumeclaims", "keep-model-cache") not in deletes
    assert ("persistentvolumeclaims", "drop-model-cache") in deletes

    apply(cluster, namespace, _cache_fleet("keep", retain))  # back: the same claim, the same weights
    wait_fleet(cluster, namespace, "keep", operator.tail, "keep mounting its claim again",
               lambda: _claims(get(cluster, "deployment", "keep", namespace)) == ["keep-model-cache"], 60)
    again = get(cluster, "pvc", "keep-model-cache", namespace)
    assert again is not None and again["metadata"]["uid"] == claim["metadata"]["uid"]


def test_a_batch_whose_output_names_someones_configmap_leaves_it_alone(
        cluster: LocalCluster, operator: OperatorProcess, namespace: str) -> None:
    """The output ConfigMap a QwenBatch applies (no owner: results outlive the batch) must not be someone's."""
    theirs = {"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": "results", "labels": dict(THEIRS)},
              "data": {"keep": "me"}}
    cluster.kubectl("create", "-n", namespace, "-f", "-", input=json.dumps(theirs))
    before = get(cluster, "configmap", "results", namespace)
    apply(cluster, namespace, _qwi("qwen", {"model": {"name": MODEL}, "gpu": {"product": "NVIDIA-A10G"}}))
    since = time.time()
    apply(cluster, namespace, {"apiVersion": "qwenfleet.io/v1alpha1", "kind": "QwenBatch", "metadata": {"name": "sums"},
                               "spec": {"input": {"configMap": {"name": "prompts"}},
                                        "output": {"configMap": {"name": "results"}}, "fleetRef": {"name": "qwen"}}})
    stalled = wait_until("the batch Stalled ForeignObject", lambda: (
        c if (c := condition(get(cluster, "qwb", "sums", namespace), "Stalled") or {}).get("reason") == "ForeignObject"
        else None), 60)
    assert stalled["status"] == "True" and "ConfigMap/results (owner: no owner)" in stalled["message"], stalled
    wait_until("a Warning Event ForeignObject", lambda: any(
        e["type"] == "Warning" and e["reason"] == "ForeignObject" for e in events_for(cluster, namespace, "sums")), 30)
    after = get(cluster, "configmap", "results", namespace)
    assert after is not None and before is not None
    assert after["metadata"]["resourceVersion"] == before["metadata"]["resourceVersion"]
    assert after.get("data") == {"keep": "me"} and not after["metadata"].get("ownerReferences")
    assert get(cluster, "job", "sums-batch", namespace) is None  # nothing of the batch was made either
    touched = [w for w in audit_writes(cluster, since) if (w.get("objectRef") or {}).get("namespace") == namespace
               and (w.get("objectRef") or {}).get("resource") not in ("qwenbatches", "qweninferences", "events")]
    assert not [w for w in touched if (w.get("objectRef") or {}).get("name") in ("results", "sums-batch",
                                                                              "sums-batch-runner")], touched
