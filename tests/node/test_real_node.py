"""Pods that really run: a real kubelet node in the local cluster, beside kwok's fake GPU nodes.

Each test proves one thing only a real node can: the container runs, the kubelet's probe reaches it, the
pod IP answers from the host, kube-proxy routes a ClusterIP Service (from the host and from another pod),
a pod finds a Service by name through the node's CoreDNS, the kubelet streams logs and exec, and a deleted
pod gets its preStop hook and SIGTERM before it goes.
"""

from __future__ import annotations

import time
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from qwen_fleet import versions
from qwen_fleet_dev import nodeclean
from qwen_fleet_dev.cluster import LocalCluster
from qwen_fleet_dev.images import BUSYBOX_IMAGE
from qwen_fleet_dev.realnode import NODE_LABEL, NODE_NAME
from tests.node.pods import apply, get, http_get, http_get_eventually, wait_ready, web_pod

pytestmark = pytest.mark.cluster


@pytest.fixture
def ns(real_cluster: LocalCluster) -> Iterator[str]:
    name = f"n-{uuid.uuid4().hex[:8]}"
    real_cluster.kubectl("create", "namespace", name)
    try:
        yield name
    finally:
        real_cluster.kubectl("delete", "namespace", name, "--wait=false", check=False)


def _net(cluster: LocalCluster) -> Any:
    assert cluster.real_node is not None and cluster.real_node.net is not None
    return cluster.real_node.net


def test_the_real_node_registers_beside_the_fake_gpu_nodes(real_cluster: LocalCluster) -> None:
    node = get(real_cluster, "", "node", NODE_NAME)
    info = node["status"]["nodeInfo"]
    assert info["kubeletVersion"] == versions.KUBERNETES
    assert info["containerRuntimeVersion"].startswith("containerd://1.6.20")
    addresses = {a["type"]: a["address"] for a in node["status"]["addresses"]}
    assert addresses["InternalIP"] == _net(real_cluster).node_ip
    assert node["metadata"]["labels"][NODE_LABEL[0]] == NODE_LABEL[1]
    # No GPU is advertised: this node has none.
    assert "nvidia.com/gpu" not in node["status"]["allocatable"]
    kwok = real_cluster.kubectl("get", "nodes", "-l", "type=kwok", "-o", "name").stdout.split()
    assert kwok == ["node/gpu-a10g-0"]


def test_a_pod_runs_passes_its_readiness_probe_and_answers_on_its_ip(real_cluster: LocalCluster, ns: str) -> None:
    apply(real_cluster, ns, web_pod("web"))
    pod = wait_ready(real_cluster, ns, "web")
    assert pod["spec"]["nodeName"] == NODE_NAME
    ip = pod["status"]["podIP"]
    assert ip.startswith(_net(real_cluster).pod_cidr.rsplit(".", 2)[0] + ".")
    assert http_get(f"http://{ip}:8080/index.html") == "hello from web\n"
    status = pod["status"]["containerStatuses"][0]
    assert status["ready"] is True and "running" in status["state"]
    assert status["image"].endswith(BUSYBOX_IMAGE.split("/", 1)[1])


def test_a_cluster_ip_service_routes_from_the_host_and_from_a_pod(real_cluster: LocalCluster, ns: str) -> None:
    for name in ("backend-a", "backend-b"):
        apply(real_cluster, ns, web_pod(name, labels={"app": "backend"}))
    apply(real_cluster, ns, {
        "apiVersion": "v1", "kind": "Service", "metadata": {"name": "backend"},
        "spec": {"selector": {"app": "backend"}, "ports": [{"port": 80, "targetPort": 8080}]},
    })
    for name in ("backend-a", "backend-b"):
        wait_ready(real_cluster, ns, name)
    cluster_ip = get(real_cluster, ns, "service", "backend")["spec"]["clusterIP"]
    assert cluster_ip.startswith(f"10.{_net(real_cluster).block}.")
    # Both backends answer through the one Service address. kube-proxy picks at random, and its rules
    # may hold one endpoint for a moment before the second's update lands: ask until both have answered.
    seen: set[str] = set()
    deadline = time.monotonic() + 30
    while len(seen) < 2 and time.monotonic() < deadline:
        seen.add(http_get_eventually(f"http://{cluster_ip}/index.html"))
    assert seen == {"hello from backend-a\n", "hello from backend-b\n"}
    # From inside a pod on the node (the reply of a backend on the same bridge must be un-NATed too).
    # nc, not wget: Debian's static busybox wget segfaults (its static glibc resolver), nc does not.
    request = "printf 'GET /index.html HTTP/1.0\\r\\n\\r\\n' | nc -w 5 " + cluster_ip + " 80"
    answers: set[str] = set()
    deadline = time.monotonic() + 30
    while len(answers) < 2 and time.monotonic() < deadline:
        out = real_cluster.kubectl("exec", "-n", ns, "backend-a", "--", "sh", "-c", request).stdout
        answers.add(out.rsplit("\n\n", 1)[-1])  # text mode has turned the reply's CRLFs into LFs
    # Both, including backend-a itself: the hairpin case (a pod reaching itself through its Service).
    assert answers == {"hello from backend-a\n", "hello from backend-b\n"}


def test_a_pod_resolves_services_by_name_through_the_cluster_dns(real_cluster: LocalCluster, ns: str) -> None:
    apply(real_cluster, ns, web_pod("named", labels={"app": "named"}))
    apply(real_cluster, ns, {
        "apiVersion": "v1", "kind": "Service", "metadata": {"name": "named"},
        "spec": {"selector": {"app": "named"}, "ports": [{"port": 80, "targetPort": 8080}]},
    })
    wait_ready(real_cluster, ns, "named")
    cluster_ip = get(real_cluster, ns, "service", "named")["spec"]["clusterIP"]
    node_ip = _net(real_cluster).node_ip
    resolv = real_cluster.kubectl("exec", "-n", ns, "named", "--", "cat", "/etc/resolv.conf").stdout
    assert f"nameserver {node_ip}" in resolv.splitlines()
    assert f"{ns}.svc.cluster.local svc.cluster.local cluster.local" in resolv

    def lookup(name: str) -> tuple[int, str]:
        out = real_cluster.kubectl("exec", "-n", ns, "named", "--", "nslookup", name, node_ip, check=False)
        return out.returncode, out.stdout + out.stderr

    code, answer = lookup(f"named.{ns}.svc.cluster.local")
    assert code == 0 and f"Address: {cluster_ip}" in answer, answer
    # A Service in another namespace, by its FQDN; and a name that does not exist is refused, not invented.
    code, answer = lookup("kubernetes.default.svc.cluster.local")
    kubernetes_ip = get(real_cluster, "default", "service", "kubernetes")["spec"]["clusterIP"]
    assert code == 0 and f"Address: {kubernetes_ip}" in answer, answer
    code, answer = lookup(f"absent.{ns}.svc.cluster.local")
    assert code != 0 and "NXDOMAIN" in answer, answer
    # Through the search path and the Service address, as an HTTP client in a pod would (nc resolves the short name).
    request = f"printf 'GET /index.html HTTP/1.0\\r\\n\\r\\n' | nc -w 5 named.{ns}.svc 80"
    out = real_cluster.kubectl("exec", "-n", ns, "named", "--", "sh", "-c", request).stdout
    assert out.rsplit("\n\n", 1)[-1] == "hello from named\n"


def test_kubectl_logs_and_exec_reach_the_container(real_cluster: LocalCluster, ns: str) -> None:
    apply(real_cluster, ns, web_pod("talk"))
    wait_ready(real_cluster, ns, "talk")
    assert "serving talk" in real_cluster.kubectl("logs", "-n", ns, "talk").stdout
    out = real_cluster.kubectl("exec", "-n", ns, "talk", "--", "sh", "-c", "echo $POD_NAME; cat /www/index.html")
    assert out.stdout == "talk\nhello from talk\n"
    failed = real_cluster.kubectl("exec", "-n", ns, "talk", "--", "sh", "-c", "exit 7", check=False)
    assert failed.returncode == 7


def test_deleting_a_pod_runs_pre_stop_then_sigterm_and_the_container_is_gone(
        real_cluster: LocalCluster, ns: str, tmp_path: Path) -> None:
    token = uuid.uuid4().hex
    events = tmp_path / "events"
    events.mkdir()
    events.chmod(0o777)
    main = (f': {token}; trap "echo sigterm >> /shared/events; exit 0" TERM; echo started >> /shared/events; '
            "while true; do sleep 0.2; done")
    apply(real_cluster, ns, {
        "apiVersion": "v1", "kind": "Pod", "metadata": {"name": "graceful"},
        "spec": {
            "nodeSelector": {NODE_LABEL[0]: NODE_LABEL[1]},
            "terminationGracePeriodSeconds": 30,
            "volumes": [{"name": "shared", "hostPath": {"path": str(events), "type": "Directory"}}],
            "containers": [{
                "name": "main", "image": BUSYBOX_IMAGE, "imagePullPolicy": "Never",
                "command": ["sh", "-c", main],
                "volumeMounts": [{"name": "shared", "mountPath": "/shared"}],
                "lifecycle": {"preStop": {"exec": {"command": ["sh", "-c", "echo prestop >> /shared/events"]}}},
            }],
        },
    })
    wait_ready(real_cluster, ns, "graceful")
    running = nodeclean.processes_naming(token)
    assert running, "the container's shell should be visible from the host"
    real_cluster.kubectl("delete", "-n", ns, "pod", "graceful", "--wait=true", "--timeout=60s", timeout=90)
    # The trap exits at once, well inside the 30 s grace period: a SIGKILL would have left no "sigterm" line.
    assert (events / "events").read_text().split() == ["started", "prestop", "sigterm"]
    assert nodeclean.processes_naming(token) == []
