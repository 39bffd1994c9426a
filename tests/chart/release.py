"""Running a chart release's operator in tests: as the release's ServiceAccount, with the release's environment,
in namespaces that enforce the restricted Pod Security Standard; waiting for QwenInference conditions.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from qwen_fleet_dev.cluster import LocalCluster
from tests.chart.support import service_account_kubeconfig
from tests.support.kube import condition, get, wait_until
from tests.support.operator_process import OperatorProcess

# The operator's own ports are free ones chosen by OperatorProcess; everything else comes from the chart.
_LOCAL_ENV = {"QWEN_FLEET_METRICS_PORT", "QWEN_FLEET_LIVENESS_PORT"}


def restricted_namespace(cluster: LocalCluster, name: str) -> None:
    """A namespace where the apiserver's PodSecurity admission enforces the `restricted` profile."""
    cluster.kubectl("create", "namespace", name)
    cluster.kubectl("label", "namespace", name, "pod-security.kubernetes.io/enforce=restricted")


def chart_env(cluster: LocalCluster, namespace: str, release: str) -> dict[str, str]:
    dep = json.loads(cluster.kubectl("get", "deployment", f"{release}-qwen-fleet", "-n", namespace,
                                     "-o", "json").stdout)
    env = dep["spec"]["template"]["spec"]["containers"][0]["env"]
    # What the kubelet would fill in from the pod (the downward API): its namespace and its name.
    pod = {"metadata.namespace": namespace, "metadata.name": f"{release}-qwen-fleet-test-pod"}
    out = {}
    for e in env:
        if e["name"] in _LOCAL_ENV:
            continue
        field = ((e.get("valueFrom") or {}).get("fieldRef") or {}).get("fieldPath")
        # An empty value (QWEN_FLEET_NAMESPACES in cluster-wide mode) comes back from the API without the key.
        out[e["name"]] = pod[field] if field else e.get("value", "")
    return out


def start_operator(cluster: LocalCluster, workdir: Path, namespace: str, release: str) -> OperatorProcess:
    """The operator process as the release's ServiceAccount, configured exactly like the chart's Deployment."""
    kubeconfig = service_account_kubeconfig(cluster, namespace, f"{release}-qwen-fleet",
                                            workdir / f"{release}.kubeconfig")
    proc = OperatorProcess(cluster, workdir / f"{release}-operator.log", kubeconfig=kubeconfig,
                           env=chart_env(cluster, namespace, release))
    proc.start()
    return proc


def wait_ready(cluster: LocalCluster, ns: str, name: str, timeout: int = 90) -> dict[str, Any]:
    result = cluster.kubectl("wait", "--for=condition=Ready", f"qwi/{name}", "-n", ns, f"--timeout={timeout}s",
                             check=False, timeout=timeout + 30)
    obj = get(cluster, "qwi", name, ns)
    assert result.returncode == 0, f"{result.stderr}\nstatus: {json.dumps((obj or {}).get('status'), indent=1)}"
    assert obj is not None
    return obj


def wait_condition(cluster: LocalCluster, ns: str, name: str, type_: str, status: str,
                   reason: str | None = None, timeout: float = 60) -> dict[str, Any]:
    def check() -> dict[str, Any] | None:
        obj = get(cluster, "qwi", name, ns)
        cond = condition(obj, type_) or {}
        if cond.get("status") == status and reason in (None, cond.get("reason")) and obj is not None \
                and obj.get("status", {}).get("observedGeneration") == obj["metadata"]["generation"]:
            return obj
        return None
    try:
        return wait_until(f"{ns}/{name} {type_}={status} ({reason})", check, timeout)
    except AssertionError as err:
        last = (get(cluster, "qwi", name, ns) or {}).get("status")
        raise AssertionError(f"{err}\nstatus: {json.dumps(last, indent=1)}") from None
