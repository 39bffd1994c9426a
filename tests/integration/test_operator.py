"""The operator against the real control plane with kwok GPU nodes: examples become Ready fleets, changes roll,
drift is undone, the HPA's replicas are left alone, deletion cascades, restarts write nothing, bad specs stall.
"""

from __future__ import annotations

import json
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import pytest
import yaml

from qwen_fleet_dev.cluster import LocalCluster
from tests.support.kube import apply, condition, events_for, get, wait_until
from tests.support.operator_process import OperatorProcess, audit_writes

pytestmark = pytest.mark.cluster
ROOT = Path(__file__).resolve().parents[2]
# Single-node examples: Deployments. Multi-node ones (LeaderWorkerSets) need the LWS controller, which this
# session's cluster does not run: tests/integration/test_lws_controller.py takes them. Autoscaling engine keda
# needs KEDA's CRD, which only tests/integration/test_keda.py installs (and removes): it takes those. Routing (and
# pools, which need it) needs the Inference Extension's CRDs: tests/integration/test_pools.py takes those.
EXAMPLES = [p for p in sorted((ROOT / "examples").glob("*.yaml"))
            if (yaml.safe_load(p.read_text())["spec"].get("parallelism") or {}).get("nodes", 1) == 1
            and (yaml.safe_load(p.read_text())["spec"].get("autoscaling") or {}).get("engine", "hpa") == "hpa"
            and "routing" not in yaml.safe_load(p.read_text())["spec"]]


def _load(path: Path) -> dict[str, Any]:
    return dict(yaml.safe_load(path.read_text()))


def _wait_ready(cluster: LocalCluster, ns: str, name: str, timeout: int = 120) -> dict[str, Any]:
    result = cluster.kubectl("wait", "--for=condition=Ready", f"qwi/{name}", "-n", ns, f"--timeout={timeout}s",
                             check=False, timeout=timeout + 30)
    obj = get(cluster, "qwi", name, ns)
    assert result.returncode == 0, f"{result.stderr}\nstatus: {json.dumps((obj or {}).get('status'), indent=1)}"
    assert obj is not None
    return obj


@contextmanager
def _refusing(cluster: LocalCluster, namespace: str, name: str, rule: dict[str, Any], message: str) -> Iterator[None]:
    """A ValidatingAdmissionPolicy (and its binding) that refuses the requests ``rule`` matches in ``namespace``;
    removed on exit."""
    policy = f"{name}-{namespace}"
    docs = [
        {"apiVersion": "admissionregistration.k8s.io/v1", "kind": "ValidatingAdmissionPolicy",
         "metadata": {"name": policy},
         "spec": {"failurePolicy": "Fail", "matchConstraints": {"resourceRules": [rule]},
                  "validations": [{"expression": "false", "message": message}]}},
        {"apiVersion": "admissionregistration.k8s.io/v1", "kind": "ValidatingAdmissionPolicyBinding",
         "metadata": {"name": policy},
         "spec": {"policyName": policy, "validationActions": ["Deny"],
                  "matchResources": {"namespaceSelector": {
                      "matchLabels": {"kubernetes.io/metadata.name": namespace}}}}},
    ]
    for doc in docs:
        apply(cluster, "", doc)
    try:
        yield
    finally:
        cluster.kubectl("delete", "validatingadmissionpolicybinding,validatingadmissionpolicy", policy,
                        check=False)


def _children(cluster: LocalCluster, ns: str) -> dict[str, dict[str, Any]]:
    kinds = "deployments,services,horizontalpodautoscalers,poddisruptionbudgets,configmaps"
    out = json.loads(cluster.kubectl("get", kinds, "-n", ns, "-l", "app.kubernetes.io/managed-by=qwen-fleet",
                                     "-o", "json").stdout)
    return {f"{i['kind']}/{i['metadata']['name']}": i for i in out["items"]}


def _args(cluster: LocalCluster, ns: str, name: str) -> list[str]:
    dep = get(cluster, "deployment", name, ns) or {}
    return list(dep["spec"]["template"]["spec"]["containers"][0]["args"])


@pytest.mark.parametrize("path", EXAMPLES, ids=[p.stem for p in EXAMPLES])
def test_example_becomes_a_ready_fleet(cluster: LocalCluster, operator: OperatorProcess, namespace: str,
                                       path: Path) -> None:
    doc = _load(path)
    name, spec = doc["metadata"]["name"], doc["spec"]
    cluster.kubectl("apply", "-n", namespace, "-f", str(path))
    qwi = _wait_ready(cluster, namespace, name)
    uid = qwi["metadata"]["uid"]
    children = _children(cluster, namespace)
    expected = {f"Deployment/{name}", f"Service/{name}"}
    autoscaled = spec.get("autoscaling", {}).get("enabled", False)
    if autoscaled:
        expected.add(f"HorizontalPodAutoscaler/{name}")
    if autoscaled or spec.get("replicas", 1) > 1:
        expected.add(f"PodDisruptionBudget/{name}")
    if spec.get("nccl", {}).get("preflight", {}).get("enabled"):
        expected.add(f"ConfigMap/{name}-nccl-preflight")
    assert set(children) == expected
    for child in children.values():
        (ref,) = child["metadata"]["ownerReferences"]
        assert (ref["kind"], ref["name"], ref["uid"], ref["controller"]) == ("QwenInference", name, uid, True)
    pods = json.loads(cluster.kubectl("get", "pods", "-n", namespace, "-l", f"qwenfleet.io/inference={name}",
                                      "-o", "json").stdout)["items"]
    on_cpu = spec.get("device") == "CPU"
    par = spec.get("parallelism", {})  # single-node examples here: every GPU of a replica is in its one pod
    gpus = 0 if on_cpu else par.get("tensor", 1) * par.get("pipeline", 1) * par.get("data", 1)
    assert len(pods) == (spec.get("autoscaling", {}).get("minReplicas", 1) if autoscaled else spec.get("replicas", 1))
    for pod in pods:
        node = get(cluster, "node", pod["spec"]["nodeName"], "")
        assert node is not None
        limits = pod["spec"]["containers"][0]["resources"]["limits"]
        if on_cpu:  # a CPU fleet lands on a node without GPUs and asks for none
            assert "nvidia.com/gpu.present" not in node["metadata"]["labels"]
            assert "nvidia.com/gpu" not in limits
        else:
            assert node["metadata"]["labels"]["nvidia.com/gpu.product"] == spec["gpu"]["product"]
            assert limits["nvidia.com/gpu"] == str(gpus)
    st = qwi["status"]
    assert st["observedGeneration"] == qwi["metadata"]["generation"]
    assert st["endpoint"] == f"http://{name}.{namespace}.svc:8000/v1"
    assert st["gpusPerReplica"] == gpus
    assert st["selector"] == f"qwenfleet.io/inference={name}"
    assert condition(qwi, "Stalled")["status"] == "False"  # type: ignore[index]
    assert condition(qwi, "Reconciling")["status"] == "False"  # type: ignore[index]


def test_engine_change_rolls_the_deployment_and_observed_generation_follows(
        cluster: LocalCluster, operator: OperatorProcess, namespace: str) -> None:
    cluster.kubectl("apply", "-n", namespace, "-f", str(ROOT / "examples" / "qwen3-4b-instruct-a10g.yaml"))
    before = _wait_ready(cluster, namespace, "qwen3-4b")
    assert _args(cluster, namespace, "qwen3-4b")[_args(cluster, namespace, "qwen3-4b").index("--max-num-seqs") + 1] \
        == "256"
    cluster.kubectl("patch", "qwi", "qwen3-4b", "-n", namespace, "--type=merge",
                    "-p", '{"spec":{"engine":{"maxNumSeqs":128}}}')
    wait_until("new --max-num-seqs", lambda: (a := _args(cluster, namespace, "qwen3-4b"))[
        a.index("--max-num-seqs") + 1] == "128", 30)
    gen = before["metadata"]["generation"] + 1

    def caught_up() -> bool:
        obj = get(cluster, "qwi", "qwen3-4b", namespace) or {}
        ready = condition(obj, "Ready") or {}
        return obj.get("status", {}).get("observedGeneration") == gen and ready.get("status") == "True"

    wait_until("observedGeneration and Ready after the rollout", caught_up, 60)


def _timed(what: str, check: Any, timeout: float = 30) -> float:
    start = time.monotonic()
    wait_until(what, check, timeout)
    took = time.monotonic() - start
    print(f"{what}: {took:.2f}s")
    return took


def test_deleted_or_edited_children_are_restored(cluster: LocalCluster, operator: OperatorProcess,
                                                 namespace: str) -> None:
    cluster.kubectl("apply", "-n", namespace, "-f", str(ROOT / "examples" / "qwen3-4b-instruct-a10g.yaml"))
    _wait_ready(cluster, namespace, "qwen3-4b")
    old_uid = get(cluster, "deployment", "qwen3-4b", namespace)["metadata"]["uid"]  # type: ignore[index]
    cluster.kubectl("delete", "deployment", "qwen3-4b", "-n", namespace, "--wait=false")
    _timed("Deployment recreated", lambda: (d := get(cluster, "deployment", "qwen3-4b", namespace))
           and d["metadata"]["uid"] != old_uid)
    cluster.kubectl("delete", "service", "qwen3-4b", "-n", namespace, "--wait=false")
    _timed("Service recreated", lambda: get(cluster, "service", "qwen3-4b", namespace))
    good = _args(cluster, namespace, "qwen3-4b")
    patch = [{"op": "replace", "path": "/spec/template/spec/containers/0/args", "value": ["--model", "evil"]}]
    cluster.kubectl("patch", "deployment", "qwen3-4b", "-n", namespace, "--type=json", "-p", json.dumps(patch))
    _timed("args reverted", lambda: _args(cluster, namespace, "qwen3-4b") == good)
    _wait_ready(cluster, namespace, "qwen3-4b")
    reasons = {e["reason"] for e in events_for(cluster, namespace, "qwen3-4b")}
    assert "Applied" in reasons


def test_operator_never_overrides_the_hpa_replica_count(cluster: LocalCluster, operator: OperatorProcess,
                                                        namespace: str) -> None:
    doc = _load(ROOT / "examples" / "qwen3-4b-autoscaling.yaml")
    doc["spec"]["autoscaling"]["maxReplicas"] = 6
    apply(cluster, namespace, doc)
    name = doc["metadata"]["name"]
    _wait_ready(cluster, namespace, name)
    cluster.kubectl("scale", "deployment", name, "-n", namespace, "--replicas=5")
    # a spec change (a reconcile that applies) and a resync tick (the test operator resyncs every 10 s)
    cluster.kubectl("patch", "qwi", name, "-n", namespace, "--type=merge",
                    "-p", '{"spec":{"engine":{"maxNumSeqs":96}}}')
    wait_until("rollout of the spec change", lambda: "96" in _args(cluster, namespace, name), 30)
    time.sleep(12)
    dep = get(cluster, "deployment", name, namespace)
    assert dep is not None and dep["spec"]["replicas"] == 5
    full = json.loads(cluster.kubectl("get", "deployment", name, "-n", namespace, "-o", "json",
                                      "--show-managed-fields").stdout)
    managers = {m["manager"]: m for m in full["metadata"]["managedFields"] if m["operation"] == "Apply"}
    assert "f:replicas" not in json.dumps(managers["qwen-fleet"]["fieldsV1"]["f:spec"])


def test_deleting_the_resource_garbage_collects_the_fleet(cluster: LocalCluster, operator: OperatorProcess,
                                                          namespace: str) -> None:
    cluster.kubectl("apply", "-n", namespace, "-f", str(ROOT / "examples" / "qwen2.5-7b-awq.yaml"))
    _wait_ready(cluster, namespace, "qwen25-7b-awq")
    assert _children(cluster, namespace)
    cluster.kubectl("delete", "qwi", "qwen25-7b-awq", "-n", namespace)
    wait_until("children gone", lambda: not _children(cluster, namespace), 60)
    wait_until("pods gone", lambda: not json.loads(cluster.kubectl(
        "get", "pods", "-n", namespace, "-o", "json").stdout)["items"], 60)


def test_infeasible_spec_stalls_with_reason_and_event_and_no_children(
        cluster: LocalCluster, operator: OperatorProcess, namespace: str) -> None:
    doc = {"apiVersion": "qwenfleet.io/v1alpha1", "kind": "QwenInference", "metadata": {"name": "too-big"},
           "spec": {"model": {"name": "Qwen/Qwen3-235B-A22B-Instruct-2507"}, "gpu": {"product": "NVIDIA-A10G"}}}
    apply(cluster, namespace, doc)
    obj = wait_until("Stalled", lambda: (o := get(cluster, "qwi", "too-big", namespace))
                     and (condition(o, "Stalled") or {}).get("status") == "True" and o, 30)
    stalled = condition(obj, "Stalled")
    assert stalled is not None and stalled["reason"] == "WeightsDoNotFit"
    assert "GiB" in stalled["message"]
    assert (condition(obj, "Ready") or {}).get("status") == "False"
    assert obj["status"]["observedGeneration"] == obj["metadata"]["generation"]
    wait_until("a Warning event", lambda: any(e["reason"] == "WeightsDoNotFit" and e["type"] == "Warning"
                                              for e in events_for(cluster, namespace, "too-big")), 30)
    assert _children(cluster, namespace) == {}


def test_a_new_fleet_is_never_half_made(cluster: LocalCluster, operator: OperatorProcess, namespace: str) -> None:
    """An admission policy refuses Services in this namespace: the Deployment the operator created first is
    deleted again, and the resource is Stalled with the apiserver's message and no children."""
    services = {"apiGroups": [""], "apiVersions": ["v1"], "operations": ["CREATE", "UPDATE"],
                "resources": ["services"]}
    with _refusing(cluster, namespace, "no-services", services, "Services are not allowed here by policy"):
        probe = {"apiVersion": "v1", "kind": "Service", "metadata": {"name": "probe"},
                 "spec": {"ports": [{"port": 80}]}}
        wait_until("the policy in force", lambda: cluster.kubectl(
            "create", "--dry-run=server", "-n", namespace, "-f", "-", input=json.dumps(probe),
            check=False).returncode != 0, 30)
        cluster.kubectl("apply", "-n", namespace, "-f", str(ROOT / "examples" / "qwen3-4b-instruct-a10g.yaml"))
        obj = wait_until("Stalled", lambda: (o := get(cluster, "qwi", "qwen3-4b", namespace))
                         and (condition(o, "Stalled") or {}).get("status") == "True" and o, 60)
        stalled = condition(obj, "Stalled") or {}
        assert stalled["reason"] == "ApplyRejected", stalled
        assert "Services are not allowed here by policy" in stalled["message"]
        wait_until("no children", lambda: _children(cluster, namespace) == {}, 30)
        # ... and it stays so: deleting its own Deployment does not make the operator try again (a loop). The
        # resync (10 s here) gives a refused spec one more attempt each, so 12 s hold at most 2 attempts.
        since = time.time()
        time.sleep(12)
        attempts = [w for w in audit_writes(cluster, since)
                    if w["verb"] == "patch" and "dryRun" not in w["requestURI"]
                    and (w.get("objectRef") or {}).get("resource") == "deployments"
                    and (w.get("objectRef") or {}).get("namespace") == namespace]
        assert len(attempts) <= 2, [w["requestReceivedTimestamp"] for w in attempts]
        assert (condition(get(cluster, "qwi", "qwen3-4b", namespace), "Stalled") or {}).get("status") == "True"
        # A resync's attempt makes the Deployment for a moment and undoes it when the Service is refused (a get
        # between the two sees it), so what holds is: no children once an attempt is over, none left half made.
        wait_until("no children after the attempts", lambda: _children(cluster, namespace) == {}, 30)


def test_a_namespace_being_deleted_is_left_alone(cluster: LocalCluster, operator: OperatorProcess,
                                                 namespace: str) -> None:
    """While a namespace is being deleted, the namespace controller removes the children before the resource
    itself; the operator must not fight it (each removed child is an event asking to recreate it, and every
    create is refused with 403 NamespaceTerminating). A policy that refuses to delete QwenInferences in this
    namespace holds that window open so the test can look at it."""
    deletes = {"apiGroups": ["qwenfleet.io"], "apiVersions": ["*"], "operations": ["DELETE"],
               "resources": ["qweninferences"]}
    with _refusing(cluster, namespace, "hold-qwi", deletes, "held by the test"):
        cluster.kubectl("apply", "-n", namespace, "-f", str(ROOT / "examples" / "qwen3-4b-instruct-a10g.yaml"))
        _wait_ready(cluster, namespace, "qwen3-4b")
        wait_until("the policy in force", lambda: cluster.kubectl(
            "delete", "--dry-run=server", "-n", namespace, "qwi", "qwen3-4b", check=False).returncode != 0, 30)
        offset = operator.log.stat().st_size
        cluster.kubectl("delete", "namespace", namespace, "--wait=false")
        wait_until("the children removed by the namespace controller",
                   lambda: _children(cluster, namespace) == {}, 90)
        assert get(cluster, "qwi", "qwen3-4b", namespace) is not None  # the window is open
        time.sleep(8)  # a fighting operator would recreate and be refused many times over in this time
        with operator.log.open("rb") as f:
            f.seek(offset)
            log = f.read().decode(errors="replace")
        mine = [ln for ln in log.splitlines() if f"{namespace}/qwen3-4b" in ln or f"namespace {namespace}" in ln]
        assert any("is being deleted; leaving the fleet to it" in ln for ln in mine), log[-4000:]
        assert not [ln for ln in mine if " WARNING " in ln or " ERROR " in ln], "\n".join(mine)
        assert sum("leaving the fleet to it" in ln for ln in mine) == 1, "\n".join(mine)


def test_infeasible_change_keeps_the_running_fleet(cluster: LocalCluster, operator: OperatorProcess,
                                                   namespace: str) -> None:
    cluster.kubectl("apply", "-n", namespace, "-f", str(ROOT / "examples" / "qwen3-4b-instruct-a10g.yaml"))
    _wait_ready(cluster, namespace, "qwen3-4b")
    before = get(cluster, "deployment", "qwen3-4b", namespace)
    # 3 does not divide Qwen3-4B's 32 attention heads: vLLM would crash-loop; the operator refuses instead
    cluster.kubectl("patch", "qwi", "qwen3-4b", "-n", namespace, "--type=merge",
                    "-p", '{"spec":{"parallelism":{"tensor":3}}}')
    wait_until("Stalled", lambda: (condition(get(cluster, "qwi", "qwen3-4b", namespace), "Stalled") or {})
               .get("status") == "True", 30)
    after = get(cluster, "deployment", "qwen3-4b", namespace)
    assert before is not None and after is not None
    assert after["metadata"]["generation"] == before["metadata"]["generation"]
    assert after["status"].get("readyReplicas") == 1


def test_restart_with_unchanged_resources_makes_zero_writes(cluster: LocalCluster, operator: OperatorProcess,
                                                            namespace: str) -> None:
    base = _load(ROOT / "examples" / "qwen3-4b-instruct-a10g.yaml")
    n = 10
    for i in range(n):
        doc = json.loads(json.dumps(base))
        doc["metadata"]["name"] = f"fleet-{i}"
        doc["spec"]["gpu"] = {}  # any GPU node: ten fleets need ten GPUs
        apply(cluster, namespace, doc)
    for i in range(n):
        _wait_ready(cluster, namespace, f"fleet-{i}")
    time.sleep(3)  # let status writes of the last rollouts settle
    operator.stop()
    since = time.time()
    operator.start()

    def verified() -> bool:
        text = operator.metrics()
        total = sum(float(line.rsplit(" ", 1)[1]) for line in text.splitlines()
                    if line.startswith("qwen_fleet_reconcile_total{") and 'result="unchanged"' in line)
        return total >= n

    wait_until("every resource verified after the restart", verified, 60)
    time.sleep(5)
    # Cluster-wide and in the fleets' namespace; not in others (an earlier test's namespace may still be terminating,
    # and the operator's refused re-create of a child there is that fleet's write, not these fleets').
    writes = [w for w in audit_writes(cluster, since)
              if (w.get("objectRef") or {}).get("namespace") in (None, namespace)]
    assert [f"{w['verb']} {w['requestURI']}" for w in writes] == []
