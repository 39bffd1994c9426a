"""The local control plane is real: scheduler, kwok GPU nodes, garbage collector, version, isolation."""

from __future__ import annotations

import json
import subprocess
import sys
import textwrap
import time
from pathlib import Path

import pytest

from qwen_fleet import versions
from qwen_fleet_dev.cluster import LocalCluster
from qwen_fleet_dev.processes import alive

pytestmark = pytest.mark.cluster


def _gpu_deployment(name: str, gpus: int, product: str) -> str:
    return textwrap.dedent(f"""
        apiVersion: apps/v1
        kind: Deployment
        metadata: {{name: {name}}}
        spec:
          replicas: 1
          selector: {{matchLabels: {{app: {name}}}}}
          template:
            metadata: {{labels: {{app: {name}}}}}
            spec:
              nodeSelector: {{nvidia.com/gpu.product: {product}}}
              tolerations: [{{key: nvidia.com/gpu, operator: Exists, effect: NoSchedule}}]
              containers:
              - name: c
                image: registry.invalid/never-pulled:1
                resources:
                  limits: {{nvidia.com/gpu: "{gpus}"}}
                  requests: {{nvidia.com/gpu: "{gpus}"}}
    """)


def _pods(cluster: LocalCluster, ns: str, app: str) -> list[dict]:
    out = cluster.kubectl("get", "pods", "-n", ns, "-l", f"app={app}", "-o", "json").stdout
    return json.loads(out)["items"]


def test_gpu_pod_is_scheduled_on_matching_node_and_becomes_ready(cluster: LocalCluster, namespace: str) -> None:
    cluster.kubectl("apply", "-n", namespace, "-f", "-", input=_gpu_deployment("two-gpus", 2,
                                                                               "NVIDIA-H100-80GB-HBM3"))
    cluster.kubectl("rollout", "status", "-n", namespace, "deployment/two-gpus", "--timeout=90s")
    dep = json.loads(cluster.kubectl("get", "deploy", "two-gpus", "-n", namespace, "-o", "json").stdout)
    assert dep["status"]["readyReplicas"] == 1
    (pod,) = _pods(cluster, namespace, "two-gpus")
    assert pod["spec"]["nodeName"].startswith("gpu-h100-")
    node = json.loads(cluster.kubectl("get", "node", pod["spec"]["nodeName"], "-o", "json").stdout)
    assert node["metadata"]["labels"]["nvidia.com/gpu.product"] == "NVIDIA-H100-80GB-HBM3"
    assert pod["status"]["phase"] == "Running"
    assert any(c["type"] == "Ready" and c["status"] == "True" for c in pod["status"]["conditions"])


def test_pod_asking_for_too_many_gpus_stays_pending_with_scheduler_reason(cluster: LocalCluster,
                                                                          namespace: str) -> None:
    cluster.kubectl("apply", "-n", namespace, "-f", "-", input=_gpu_deployment("nine-gpus", 9,
                                                                               "NVIDIA-H100-80GB-HBM3"))
    deadline = time.monotonic() + 60
    message = ""
    while time.monotonic() < deadline:
        pods = _pods(cluster, namespace, "nine-gpus")
        conds = pods[0]["status"].get("conditions", []) if pods else []
        sched = [c for c in conds if c["type"] == "PodScheduled"]
        if sched and sched[0]["status"] == "False":
            message = sched[0].get("message", "")
            assert sched[0]["reason"] == "Unschedulable"
            break
        time.sleep(0.5)
    assert "Insufficient nvidia.com/gpu" in message, message
    assert pods[0]["status"]["phase"] == "Pending"
    assert not pods[0]["spec"].get("nodeName")


def test_garbage_collector_deletes_children_of_a_deleted_owner(cluster: LocalCluster, namespace: str) -> None:
    cluster.kubectl("create", "configmap", "owner", "-n", namespace)
    uid = cluster.kubectl("get", "configmap", "owner", "-n", namespace, "-o", "jsonpath={.metadata.uid}").stdout
    for i in range(3):
        child = {"apiVersion": "v1", "kind": "ConfigMap", "metadata": {
            "name": f"child-{i}", "ownerReferences": [{"apiVersion": "v1", "kind": "ConfigMap", "name": "owner",
                                                       "uid": uid}]}}
        cluster.kubectl("apply", "-n", namespace, "-f", "-", input=json.dumps(child))
    cluster.kubectl("delete", "configmap", "owner", "-n", namespace)
    deadline = time.monotonic() + 60
    left: list[str] = ["?"]
    while time.monotonic() < deadline:
        out = cluster.kubectl("get", "configmaps", "-n", namespace, "-o", "name").stdout.split()
        left = [n for n in out if "child-" in n]
        if not left:
            break
        time.sleep(0.5)
    assert left == []


def test_kubectl_version_reports_the_real_server_version(cluster: LocalCluster) -> None:
    out = json.loads(cluster.kubectl("version", "-o", "json").stdout)
    assert out["serverVersion"]["gitVersion"] == versions.KUBERNETES
    assert out["clientVersion"]["gitVersion"] == versions.KUBERNETES
    assert out["serverVersion"]["minor"] == versions.KUBERNETES.split(".")[1]


def test_two_clusters_on_one_machine_do_not_collide(cluster: LocalCluster, tmp_path: Path) -> None:
    with LocalCluster(workdir=tmp_path / "second", node_pools=cluster.node_pools[:1]) as second:
        assert second.ports.apiserver != cluster.ports.apiserver
        assert second.workdir != cluster.workdir
        second.kubectl("create", "namespace", "only-in-second")
        assert "only-in-second" in second.kubectl("get", "ns", "-o", "name").stdout
        assert "only-in-second" not in cluster.kubectl("get", "ns", "-o", "name").stdout
        pids = list(second.pids().values())
    assert pids and not any(alive(p) for p in pids)


FAILING_SESSION = """
import json, os
from pathlib import Path
from qwen_fleet_dev.cluster import LocalCluster

def test_fails_with_a_running_cluster(tmp_path):
    with LocalCluster(workdir=tmp_path / "c", node_pools=()) as c:
        Path(os.environ["PIDS_FILE"]).write_text(json.dumps(c.pids()))
        assert False, "deliberate failure"
"""

KILLED_SESSION = """
import json, os, signal, sys
from pathlib import Path
from qwen_fleet_dev.cluster import LocalCluster

c = LocalCluster(workdir=Path(os.environ["CLUSTER_DIR"]), node_pools=()).start()
Path(os.environ["PIDS_FILE"]).write_text(json.dumps(c.pids()))
os.kill(os.getpid(), signal.SIGKILL)
"""


def _wait_all_gone(pids: list[int], timeout: float = 30) -> list[int]:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        left = [p for p in pids if alive(p)]
        if not left:
            return []
        time.sleep(0.2)
    return [p for p in pids if alive(p)]


def test_a_failing_test_does_not_leak_processes(tmp_path: Path, cluster: LocalCluster) -> None:
    (tmp_path / "test_inner.py").write_text(FAILING_SESSION)
    pids_file = tmp_path / "pids.json"
    result = subprocess.run([sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", str(tmp_path)],
                            capture_output=True, text=True, env={**_env(), "PIDS_FILE": str(pids_file)},
                            timeout=300)
    assert result.returncode == 1, result.stdout + result.stderr
    assert "deliberate failure" in result.stdout
    pids = list(json.loads(pids_file.read_text()).values())
    assert len(pids) == 5  # etcd, apiserver, controller-manager, scheduler, kwok
    assert _wait_all_gone(pids) == []


def test_a_killed_test_process_does_not_leak_processes(tmp_path: Path, cluster: LocalCluster) -> None:
    script = tmp_path / "killed.py"
    script.write_text(KILLED_SESSION)
    pids_file = tmp_path / "pids.json"
    # The workdir under tmp_path: a SIGKILLed session cannot remove a temporary directory of its own.
    result = subprocess.run([sys.executable, str(script)], capture_output=True, text=True,
                            env={**_env(), "PIDS_FILE": str(pids_file), "CLUSTER_DIR": str(tmp_path / "c")},
                            timeout=300)
    assert result.returncode == -9
    pids = list(json.loads(pids_file.read_text()).values())
    assert len(pids) == 5
    assert _wait_all_gone(pids) == []  # PR_SET_PDEATHSIG: the kernel killed them with their parent


def _env() -> dict[str, str]:
    import os

    return dict(os.environ)
