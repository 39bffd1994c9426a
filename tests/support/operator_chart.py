"""The operator as a pod: `helm install` of the chart, with the locally built operator image, onto the real node.

This is how users run it: the chart's Deployment, ServiceAccount and RBAC; the pod talks to the apiserver
in-cluster, through the `kubernetes` Service's ClusterIP, with its projected ServiceAccount token. The image
comes from no registry: it is imported into the node's containerd and the chart's ``image.pullPolicy`` is Never.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from typing import Any

from qwen_fleet_dev.cluster import LocalCluster
from qwen_fleet_dev.operator_image import OperatorImage
from qwen_fleet_dev.realnode import NODE_LABEL
from tests.chart.support import CHART, HelmError, helm, values_file

RELEASE = "qf"
NAMESPACE = "qwen-fleet-system"
SERVICE_ACCOUNT = f"{RELEASE}-qwen-fleet"  # the chart's default: the release's full name
POD_SELECTOR = f"app.kubernetes.io/name=qwen-fleet,app.kubernetes.io/instance={RELEASE}"


def chart_values(image: OperatorImage, resync_seconds: int = 10) -> dict[str, Any]:
    """What a user sets to run the chart on this cluster's real node from a local image."""
    return {
        "image": {"repository": image.repository, "tag": image.version, "pullPolicy": "Never"},
        "nodeSelector": {NODE_LABEL[0]: NODE_LABEL[1]},
        # One replica (leader election stays on, the chart's default): a standby would only take memory here.
        "replicaCount": 1,
        "resyncSeconds": resync_seconds,
        # The node has 2 CPUs, and a rollout of a 1-CPU fleet holds two engine pods at once (maxSurge 1): the
        # operator asks for no CPU (null removes the chart's default request), only memory.
        "resources": {"requests": {"cpu": None}},
    }


@dataclass
class OperatorRelease:
    cluster: LocalCluster
    image: OperatorImage

    def pods(self) -> list[dict[str, Any]]:
        out = self.cluster.kubectl("get", "pods", "-n", NAMESPACE, "-l", POD_SELECTOR, "-o", "json").stdout
        return list(json.loads(out)["items"])

    def pod_name(self) -> str:
        running = [p for p in self.pods() if not p["metadata"].get("deletionTimestamp")]
        if len(running) != 1:
            raise AssertionError(f"expected one operator pod, found {[p['metadata']['name'] for p in running]}")
        return str(running[0]["metadata"]["name"])

    def logs(self, tail: int = 200) -> str:
        result = self.cluster.kubectl("logs", "-n", NAMESPACE, "-l", POD_SELECTOR, f"--tail={tail}",
                                      "--all-containers", "--prefix", check=False)
        return result.stdout + result.stderr

    def python(self, code: str) -> str:
        """Run Python in the operator's container (the image has no shell: its interpreter is the tool)."""
        result = self.cluster.kubectl("exec", "-n", NAMESPACE, self.pod_name(), "-c", "operator", "--",
                                      "python", "-c", code, check=False, timeout=60)
        if result.returncode != 0:
            raise AssertionError(f"python in the operator pod failed ({result.returncode}): {result.stderr}")
        return result.stdout

    def uninstall(self) -> None:
        """`helm uninstall --wait`, then until the release's pods are gone: the Deployment goes at once, its pod
        only after its graceful stop, and a release installed next (another module's) must find none but its own."""
        helm("uninstall", RELEASE, "-n", NAMESPACE, "--wait", "--timeout", "120s",
             kubeconfig=self.cluster.kubeconfig, check=False)
        self.cluster.kubectl("wait", "--for=delete", "pod", "-n", NAMESPACE, "-l", POD_SELECTOR, "--timeout=120s",
                             check=False, timeout=150)


def diagnose(cluster: LocalCluster) -> str:
    """Why an install did not become ready: the pods, their events and logs."""
    parts = []
    for args in (("get", "pods", "-n", NAMESPACE, "-o", "wide"),
                 ("get", "events", "-n", NAMESPACE, "--sort-by=.lastTimestamp"),
                 ("logs", "-n", NAMESPACE, "-l", POD_SELECTOR, "--tail=60", "--all-containers")):
        result = cluster.kubectl(*args, check=False)
        parts.append(f"$ kubectl {' '.join(args)}\n{result.stdout}{result.stderr}")
    return "\n".join(parts)


def install_operator(cluster: LocalCluster, image: OperatorImage, resync_seconds: int = 10,
                     timeout_s: int = 300) -> OperatorRelease:
    """`helm install --wait`: returns once the operator's Deployment is available (its pod Ready on its own
    probes). The chart installs the CRD too."""
    values = values_file(chart_values(image, resync_seconds))
    try:
        helm("install", RELEASE, CHART, "-n", NAMESPACE, "--create-namespace", "--values", values, "--wait",
             "--timeout", f"{timeout_s}s", kubeconfig=cluster.kubeconfig, timeout=timeout_s + 60)
    except HelmError as err:
        raise AssertionError(f"{err}\n{diagnose(cluster)}") from None
    for crd in ("qweninferences.qwenfleet.io", "qwenbatches.qwenfleet.io"):
        cluster.kubectl("wait", "--for=condition=Established", f"crd/{crd}", "--timeout=60s", timeout=90)
    return OperatorRelease(cluster, image)
