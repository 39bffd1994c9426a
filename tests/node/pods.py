"""Pods for the real node, built from the busybox image the node imports at start (no registry)."""

from __future__ import annotations

import json
import time
import urllib.request
from typing import Any

from qwen_fleet_dev.cluster import LocalCluster
from qwen_fleet_dev.images import BUSYBOX_IMAGE
from qwen_fleet_dev.realnode import NODE_LABEL

# No proxy from the environment: the addresses are inside this machine's own network namespaces.
_DIRECT = urllib.request.build_opener(urllib.request.ProxyHandler({}))


def http_get(url: str, timeout: float = 5) -> str:
    with _DIRECT.open(url, timeout=timeout) as resp:
        return str(resp.read().decode())


def http_get_eventually(url: str, timeout: float = 30) -> str:
    """Service rules reach kube-proxy a moment after the endpoints: retry until an answer or ``timeout``."""
    deadline = time.monotonic() + timeout
    while True:
        try:
            return http_get(url)
        except OSError:
            if time.monotonic() > deadline:
                raise
            time.sleep(0.5)


def web_pod(name: str, labels: dict[str, str] | None = None) -> dict[str, Any]:
    """busybox httpd serving a page that names the pod; Ready only when the page answers."""
    script = ('mkdir -p /www && echo "hello from $POD_NAME" > /www/index.html && '
              'echo "serving $POD_NAME" && exec httpd -f -vv -p 8080 -h /www')
    return {
        "apiVersion": "v1", "kind": "Pod",
        "metadata": {"name": name, "labels": labels or {"app": name}},
        "spec": {
            "nodeSelector": {NODE_LABEL[0]: NODE_LABEL[1]},
            "terminationGracePeriodSeconds": 5,
            "containers": [{
                "name": "web", "image": BUSYBOX_IMAGE, "imagePullPolicy": "Never",
                "command": ["sh", "-c", script],
                "env": [{"name": "POD_NAME", "valueFrom": {"fieldRef": {"fieldPath": "metadata.name"}}}],
                "ports": [{"containerPort": 8080, "name": "http"}],
                "readinessProbe": {"httpGet": {"path": "/index.html", "port": 8080}, "periodSeconds": 1},
            }],
        },
    }


def apply(cluster: LocalCluster, namespace: str, obj: dict[str, Any]) -> None:
    cluster.kubectl("apply", "-n", namespace, "-f", "-", input=json.dumps(obj))


def get(cluster: LocalCluster, namespace: str, kind: str, name: str) -> dict[str, Any]:
    scope = ["-n", namespace] if namespace else []
    out = cluster.kubectl("get", *scope, kind, name, "-o", "json").stdout
    return dict(json.loads(out))


def wait_ready(cluster: LocalCluster, namespace: str, name: str, timeout: int = 120) -> dict[str, Any]:
    result = cluster.kubectl("wait", "-n", namespace, "--for=condition=Ready", f"pod/{name}",
                             f"--timeout={timeout}s", check=False, timeout=timeout + 10)
    pod = get(cluster, namespace, "pod", name)
    assert result.returncode == 0, (result.stderr, pod.get("status"), describe(cluster, namespace, name))
    return pod


def describe(cluster: LocalCluster, namespace: str, name: str) -> str:
    return cluster.kubectl("describe", "-n", namespace, "pod", name, check=False).stdout[-3000:]


def engine_start_phases(cluster: LocalCluster, namespace: str, selector: str,
                        container: str = "vllm") -> dict[str, dict[str, float]]:
    """Each selected pod's engine start-up, phase by phase (bench/engine_start.py: its status and its
    container's timestamped log), for the record: printed by the tests, never asserted."""
    from bench.engine_start import pod_phases

    pods = json.loads(cluster.kubectl("get", "pods", "-n", namespace, "-l", selector, "-o", "json").stdout)["items"]
    out = {}
    for pod in pods:
        name = pod["metadata"]["name"]
        log = cluster.kubectl("logs", "-n", namespace, "--timestamps", "-c", container, name, check=False).stdout
        try:
            out[name] = pod_phases(pod, log, container)
        except (KeyError, ValueError) as err:  # a pod without the conditions yet: a figure less, not a failure
            out[name] = {"unreadable": 0.0}
            print(f"{name}: no start-up phases ({err!r})")
    return out
