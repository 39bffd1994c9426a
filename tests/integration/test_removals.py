"""What the spec stops asking for leaves the children (issue 14): an env entry, a nodeSelector key, the NCCL
preflight (init container, volume, ConfigMap), a Service annotation, the autoscaling block (the HPA goes and
replicas come back to the operator). After each removal every child is exactly what the render functions
produce for the resource as stored (tests/support/converged.py: field by field, and nothing the operator's
field manager still owns that it no longer renders), while what another field manager added (an annotation
and a sidecar on the Deployment, an annotation on the Service, the replica count under the HPA) stays.
"""

from __future__ import annotations

import json
import time
from typing import Any

import pytest

from qwen_fleet.api import QwenInference
from qwen_fleet.config import OperatorConfig
from qwen_fleet.plan import make_plan
from qwen_fleet.render import Capabilities, render_children
from qwen_fleet_dev.cluster import LocalCluster
from tests.support.converged import child_problems, owned_fields
from tests.support.kube import apply, get, wait_until
from tests.support.operator_process import OperatorProcess, audit_writes

pytestmark = pytest.mark.cluster
NAME = "removals"
OTHER = "other-team"  # the field manager of the foreign fields
SIDECAR = "log-shipper"
FOREIGN_DEPLOYMENT_ANNOTATION = "other.example/owner"
FOREIGN_SERVICE_ANNOTATION = "other.example/lb"
KINDS = "deployments,services,horizontalpodautoscalers,poddisruptionbudgets,configmaps"


def _fleet() -> dict[str, Any]:
    return {"apiVersion": "qwenfleet.io/v1alpha1", "kind": "QwenInference", "metadata": {"name": NAME}, "spec": {
        "model": {"name": "Qwen/Qwen2.5-7B-Instruct"},
        "engine": {"maxModelLen": 8192, "maxNumSeqs": 32,
                   "env": [{"name": "EXTRA_FLAG", "value": "1"}, {"name": "KEEP_ME", "value": "2"}]},
        "parallelism": {"tensor": 2},
        "gpu": {"product": "NVIDIA-H100-80GB-HBM3"},
        "nccl": {"preflight": {"enabled": True}},
        # Both keys are on the kwok nodes, so the fleet schedules with and without the one removed.
        "scheduling": {"nodeSelector": {"type": "kwok", "kubernetes.io/os": "linux"}},
        "service": {"annotations": {"team.example/dashboard": "llm", "team.example/cost-center": "42"}},
        "autoscaling": {"enabled": True, "minReplicas": 1, "maxReplicas": 4},
    }}


def _rendered(cluster: LocalCluster, ns: str) -> dict[str, dict[str, Any]]:
    stored = get(cluster, "qwi", NAME, ns)
    assert stored is not None
    cr = QwenInference.model_validate({"metadata": stored["metadata"], "spec": stored["spec"]})
    plan = make_plan(cr, OperatorConfig())
    assert not plan.problems, plan.problems
    return {f"{c['kind']}/{c['metadata']['name']}": c for c in render_children(cr, plan, Capabilities())}


def _children(cluster: LocalCluster, ns: str) -> dict[str, dict[str, Any]]:
    out = json.loads(cluster.kubectl("get", KINDS, "-n", ns, "-l", "app.kubernetes.io/managed-by=qwen-fleet",
                                     "-o", "json", "--show-managed-fields").stdout)
    return {f"{i['kind']}/{i['metadata']['name']}": i for i in out["items"]}


def _problems(cluster: LocalCluster, ns: str) -> list[str]:
    rendered, children = _rendered(cluster, ns), _children(cluster, ns)
    out = []
    if set(rendered) != set(children):
        out.append(f"children {sorted(children)} != rendered {sorted(rendered)}")
    foreign = {SIDECAR, FOREIGN_DEPLOYMENT_ANNOTATION, FOREIGN_SERVICE_ANNOTATION}
    for key, want in rendered.items():
        out += [f"{key}: {p}" for p in child_problems(want, children.get(key), foreign)]
    return out


def _converged(cluster: LocalCluster, ns: str, what: str) -> dict[str, dict[str, Any]]:
    last: list[str] = []

    def check() -> bool:
        nonlocal last
        last = _problems(cluster, ns)
        return not last

    try:
        wait_until(what, check, 60, interval=0.5)
    except AssertionError:
        raise AssertionError(f"{what}: not converged:\n" + "\n".join(last)) from None
    return _children(cluster, ns)


def _apply_as_other(cluster: LocalCluster, ns: str, doc: dict[str, Any]) -> None:
    cluster.kubectl("apply", "--server-side", f"--field-manager={OTHER}", "-n", ns, "-f", "-",
                    input=json.dumps(doc))


def _add_foreign_fields(cluster: LocalCluster, ns: str) -> None:
    _apply_as_other(cluster, ns, {
        "apiVersion": "apps/v1", "kind": "Deployment",
        "metadata": {"name": NAME, "annotations": {FOREIGN_DEPLOYMENT_ANNOTATION: "platform"}},
        "spec": {"template": {"spec": {"containers": [{"name": SIDECAR, "image": "busybox:1.37"}]}}}})
    _apply_as_other(cluster, ns, {"apiVersion": "v1", "kind": "Service",
                                  "metadata": {"name": NAME, "annotations": {FOREIGN_SERVICE_ANNOTATION: "x"}}})
    cluster.kubectl("scale", "deployment", NAME, "-n", ns, "--replicas=3")  # as the HPA would


def _foreign_fields_kept(children: dict[str, dict[str, Any]], autoscaled: bool) -> None:
    dep, svc = children[f"Deployment/{NAME}"], children[f"Service/{NAME}"]
    assert dep["metadata"]["annotations"][FOREIGN_DEPLOYMENT_ANNOTATION] == "platform"
    assert SIDECAR in [c["name"] for c in dep["spec"]["template"]["spec"]["containers"]]
    assert svc["metadata"]["annotations"][FOREIGN_SERVICE_ANNOTATION] == "x"
    if autoscaled:
        assert dep["spec"]["replicas"] == 3
        assert "f:replicas" not in owned_fields(dep).get("f:spec", {})


def _patch(cluster: LocalCluster, ns: str, ops: list[dict[str, Any]]) -> None:
    cluster.kubectl("patch", "qwi", NAME, "-n", ns, "--type=json", "-p", json.dumps(ops))


def _pod_spec(children: dict[str, dict[str, Any]]) -> dict[str, Any]:
    return dict(children[f"Deployment/{NAME}"]["spec"]["template"]["spec"])


def _vllm(children: dict[str, dict[str, Any]]) -> dict[str, Any]:
    return next(c for c in _pod_spec(children)["containers"] if c["name"] == "vllm")


def test_removed_fields_leave_the_children_and_foreign_fields_stay(
        cluster: LocalCluster, operator: OperatorProcess, namespace: str) -> None:
    ns = namespace
    apply(cluster, ns, _fleet())
    children = _converged(cluster, ns, "the new fleet")
    assert "EXTRA_FLAG" in [e["name"] for e in _vllm(children)["env"]]
    _add_foreign_fields(cluster, ns)
    wait_until("the scale", lambda: (get(cluster, "deployment", NAME, ns) or {}).get("spec", {})
               .get("replicas") == 3, 20)
    _foreign_fields_kept(_converged(cluster, ns, "foreign fields added"), autoscaled=True)

    _patch(cluster, ns, [{"op": "remove", "path": "/spec/engine/env/0"}])
    children = _converged(cluster, ns, "env entry removed")
    assert [e["name"] for e in _vllm(children)["env"] if e["name"] in ("EXTRA_FLAG", "KEEP_ME")] == ["KEEP_ME"]
    _foreign_fields_kept(children, autoscaled=True)

    _patch(cluster, ns, [{"op": "remove", "path": "/spec/scheduling/nodeSelector/type"}])
    children = _converged(cluster, ns, "nodeSelector key removed")
    assert "type" not in _pod_spec(children)["nodeSelector"]
    _foreign_fields_kept(children, autoscaled=True)

    _patch(cluster, ns, [{"op": "remove", "path": "/spec/nccl/preflight"}])
    children = _converged(cluster, ns, "preflight removed")
    assert "initContainers" not in _pod_spec(children)
    assert "nccl-preflight" not in [v["name"] for v in _pod_spec(children)["volumes"]]
    assert f"ConfigMap/{NAME}-nccl-preflight" not in children
    _foreign_fields_kept(children, autoscaled=True)

    _patch(cluster, ns, [{"op": "remove", "path": "/spec/service/annotations/team.example~1dashboard"}])
    children = _converged(cluster, ns, "Service annotation removed")
    assert "team.example/dashboard" not in children[f"Service/{NAME}"]["metadata"]["annotations"]
    _foreign_fields_kept(children, autoscaled=True)

    _patch(cluster, ns, [{"op": "remove", "path": "/spec/autoscaling"}])
    children = _converged(cluster, ns, "autoscaling removed")
    assert f"HorizontalPodAutoscaler/{NAME}" not in children
    dep = children[f"Deployment/{NAME}"]
    assert dep["spec"]["replicas"] == 1  # the default without autoscaling, sent by the operator again
    assert "f:replicas" in owned_fields(dep)["f:spec"]
    _foreign_fields_kept(children, autoscaled=False)

    # Converged means converged: a resync (10 s in this suite) applies nothing more.
    since = time.time()
    time.sleep(12)
    applies = [w for w in audit_writes(cluster, since) if w["verb"] == "patch"
               and (w.get("objectRef") or {}).get("namespace") == ns and not w.get("objectRef", {}).get("subresource")]
    assert applies == [], [w["requestURI"] for w in applies]
    assert not _problems(cluster, ns)


def test_turning_autoscaling_on_keeps_the_running_replica_count(
        cluster: LocalCluster, operator: OperatorProcess, namespace: str) -> None:
    """The other direction: from then on the operator stops sending replicas (the HPA owns them). Server-side
    apply would reset a field its only manager drops to the default (1 replica); the count is handed over to
    a field manager of its own first, so the running pods stay (this cluster's HPA has no metrics and
    leaves a count within its bounds alone)."""
    ns, doc = namespace, _fleet()
    spec = doc["spec"]
    for key in ("autoscaling", "nccl", "parallelism"):
        spec.pop(key)
    spec["replicas"] = 3
    apply(cluster, ns, doc)
    _converged(cluster, ns, "three replicas")
    _patch(cluster, ns, [{"op": "remove", "path": "/spec/replicas"},
                         {"op": "add", "path": "/spec/autoscaling",
                          "value": {"enabled": True, "minReplicas": 1, "maxReplicas": 4}}])
    seen: set[int] = set()

    def hpa_and_converged() -> bool:
        dep = get(cluster, "deployment", NAME, ns) or {}
        seen.add(int(dep.get("spec", {}).get("replicas", -1)))
        return not _problems(cluster, ns)

    wait_until("autoscaling on", hpa_and_converged, 60, interval=0.2)
    children = _children(cluster, ns)
    assert f"HorizontalPodAutoscaler/{NAME}" in children
    dep = children[f"Deployment/{NAME}"]
    assert "f:replicas" not in owned_fields(dep).get("f:spec", {})
    time.sleep(3)
    assert (get(cluster, "deployment", NAME, ns) or {})["spec"]["replicas"] == 3
    assert seen == {3}, seen
