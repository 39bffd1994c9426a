"""The real LeaderWorkerSet controller (sigs.k8s.io/lws v0.9.0, its manager and webhooks) in a local control plane
of its own: a multi-node QwenInference, through the operator, becomes leader and worker pods on kwok GPU nodes
with the env the LWS pod webhook injects, and the resource turns Ready from the status that controller writes.
"""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import yaml

from qwen_fleet_dev import binaries
from qwen_fleet_dev.cluster import LocalCluster
from tests.support.kube import apply, condition, get, wait_until
from tests.support.operator_process import OperatorProcess

pytestmark = pytest.mark.cluster
ROOT = Path(__file__).resolve().parents[2]
NS = "multi"
MULTI_NODE_EXAMPLES = [p for p in sorted((ROOT / "examples").glob("*.yaml"))
                       if (yaml.safe_load(p.read_text())["spec"].get("parallelism") or {}).get("nodes", 1) > 1]


@pytest.fixture(scope="module")
def lws_cluster(tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[LocalCluster, OperatorProcess]]:
    binaries.ensure()
    local = LocalCluster(workdir=tmp_path_factory.mktemp("lws-cluster"), leader_worker_set=True)
    local.start()
    proc = OperatorProcess(local, tmp_path_factory.mktemp("lws-operator") / "operator.log")
    try:
        local.install_crd(ROOT / "crds" / "qwenfleet.io_qweninferences.yaml")
        local.kubectl("create", "namespace", NS)
        proc.start()
        yield local, proc
    finally:
        proc.stop()
        local.stop()


def _env(pod: dict[str, Any]) -> dict[str, str]:
    container = pod["spec"]["containers"][0]
    return {e["name"]: e.get("value", "") for e in container.get("env") or [] if e["name"].startswith("LWS_")}


def test_the_lws_controller_makes_a_group_with_the_injected_env_and_the_fleet_turns_ready(
        lws_cluster: tuple[LocalCluster, OperatorProcess]) -> None:
    cluster, operator = lws_cluster
    apply(cluster, NS, {"apiVersion": "qwenfleet.io/v1alpha1", "kind": "QwenInference", "metadata": {"name": "big"},
                        "spec": {"model": {"name": "Qwen/Qwen3-4B-Instruct-2507"},
                                 "gpu": {"product": "NVIDIA-H100-80GB-HBM3"},
                                 "parallelism": {"pipeline": 2, "nodes": 2}}})

    def group() -> list[dict[str, Any]] | None:
        out = cluster.kubectl("get", "pods", "-n", NS, "-l", "leaderworkerset.sigs.k8s.io/name=big", "-o", "json")
        pods = json.loads(out.stdout)["items"]
        running = [p for p in pods if (p.get("status") or {}).get("phase") == "Running"]
        return sorted(running, key=lambda p: p["metadata"]["name"]) if len(running) == 2 else None

    try:
        leader, worker = wait_until("a leader and a worker Running", group, 120)
    except AssertionError as err:
        logs = (cluster.workdir / "logs" / "lws-manager.log").read_text(errors="replace").splitlines()[-30:]
        raise AssertionError(f"{err}\n{operator.tail()}\n" + "\n".join(logs)) from None
    assert (leader["metadata"]["name"], worker["metadata"]["name"]) == ("big-0", "big-0-1")
    assert leader["metadata"]["labels"]["qwenfleet.io/role"] == "leader"
    assert worker["metadata"]["labels"]["qwenfleet.io/role"] == "worker"
    leader_env, worker_env = _env(leader), _env(worker)
    assert leader_env["LWS_LEADER_ADDRESS"] == worker_env["LWS_LEADER_ADDRESS"]
    # UniquePerReplica: the group's own headless Service, named after the leader, resolves the leader's name.
    assert leader_env["LWS_LEADER_ADDRESS"] == f"big-0.big-0.{NS}"
    headless = get(cluster, "service", "big-0", NS)
    assert headless is not None and headless["spec"]["clusterIP"] == "None"
    assert leader["spec"]["subdomain"] == "big-0" and leader["spec"]["hostname"] == "big-0"
    assert (leader_env["LWS_GROUP_SIZE"], worker_env["LWS_GROUP_SIZE"]) == ("2", "2")
    assert (leader_env["LWS_WORKER_INDEX"], worker_env["LWS_WORKER_INDEX"]) == ("0", "1")
    for pod in (leader, worker):
        node = get(cluster, "node", pod["spec"]["nodeName"], "")
        assert node is not None and node["metadata"]["labels"]["nvidia.com/gpu.product"] == "NVIDIA-H100-80GB-HBM3"
        assert pod["spec"]["containers"][0]["resources"]["limits"]["nvidia.com/gpu"] == "1"
    # The worker's command resolves the injected env: `$(LWS_WORKER_INDEX)` and `$(LWS_LEADER_ADDRESS)`.
    worker_args = " ".join(worker["spec"]["containers"][0].get("args") or [])
    assert "$(LWS_LEADER_ADDRESS)" in worker_args and "--headless" in worker_args

    def ready() -> bool:
        return (condition(get(cluster, "qwi", "big", NS), "Ready") or {}).get("status") == "True"

    wait_until("the QwenInference Ready from the LWS controller's status", ready, 90)
    lws = get(cluster, "leaderworkerset", "big", NS)
    assert lws is not None and lws["status"]["readyReplicas"] == 1
    qwi = get(cluster, "qwi", "big", NS)
    assert qwi is not None and qwi["status"]["readyReplicas"] == 1


@pytest.mark.parametrize("path", MULTI_NODE_EXAMPLES, ids=[p.stem for p in MULTI_NODE_EXAMPLES])
def test_multi_node_example_is_accepted_by_the_lws_controller_and_webhooks(
        lws_cluster: tuple[LocalCluster, OperatorProcess], path: Path) -> None:
    """Each example's LeaderWorkerSet passes LWS' own webhooks and its controller makes the group's pods, each
    asking for its share of GPUs, with the LWS env. The examples' model cache claims are never bound here (no
    provisioner), so the pods stay Pending; with exclusive topology (scheduling.topologyKey) LWS makes the
    workers only once the leader is placed (its pod controller waits for the leader's node), so there the
    leader alone is what can be checked."""
    cluster, _ = lws_cluster
    doc = yaml.safe_load(path.read_text())
    name, spec = doc["metadata"]["name"], doc["spec"]
    ns = f"ex-{path.stem.replace('.', '-')}"[:60]
    cluster.kubectl("create", "namespace", ns)
    doc["metadata"].pop("namespace", None)  # the examples say "default"
    apply(cluster, ns, doc)
    nodes = spec["parallelism"]["nodes"]
    expected = 1 if (spec.get("scheduling") or {}).get("topologyKey") else nodes

    def group() -> list[dict[str, Any]] | None:
        out = cluster.kubectl("get", "pods", "-n", ns, "-l", f"leaderworkerset.sigs.k8s.io/name={name}", "-o", "json")
        pods = json.loads(out.stdout)["items"]
        return pods if len(pods) == expected else None

    try:
        pods = wait_until(f"{expected} pod(s) of {name}", group, 90)
    except AssertionError as err:
        qwi = get(cluster, "qwi", name, ns) or {}
        raise AssertionError(f"{err}\nstatus: {json.dumps(qwi.get('status'), indent=1)}") from None
    qwi = get(cluster, "qwi", name, ns)
    assert qwi is not None
    per_pod = qwi["status"]["gpusPerReplica"] // nodes
    for pod in pods:
        assert pod["spec"]["containers"][0]["resources"]["limits"]["nvidia.com/gpu"] == str(per_pod)
        assert set(_env(pod)) == {"LWS_LEADER_ADDRESS", "LWS_GROUP_SIZE", "LWS_WORKER_INDEX"}
    assert sorted(_env(p)["LWS_WORKER_INDEX"] for p in pods) == [str(i) for i in range(expected)]
    assert all(_env(p)["LWS_GROUP_SIZE"] == str(nodes) for p in pods)
