"""What a cluster user does with kubectl, against the real apiserver with the operator running and kwok GPU
nodes: `kubectl scale qwi`, `kubectl rollout restart|status|undo` (docs/kubectl.md says what each does).
"""

from __future__ import annotations

import json
import time
from pathlib import Path
from typing import Any

import pytest
import yaml

from qwen_fleet_dev.cluster import LocalCluster
from tests.support.kube import apply, get, wait_until
from tests.support.operator_process import OperatorProcess

pytestmark = pytest.mark.cluster
ROOT = Path(__file__).resolve().parents[2]
RESTARTED_AT = "kubectl.kubernetes.io/restartedAt"
RESYNC_S = 12  # the test operator resyncs every 10 s (tests/conftest.py)


def _example(name: str) -> dict[str, Any]:
    return dict(yaml.safe_load((ROOT / "examples" / name).read_text()))


def _ready(cluster: LocalCluster, ns: str, name: str) -> None:
    result = cluster.kubectl("wait", "--for=condition=Ready", f"qwi/{name}", "-n", ns, "--timeout=120s",
                             check=False, timeout=150)
    assert result.returncode == 0, json.dumps((get(cluster, "qwi", name, ns) or {}).get("status"), indent=1)


def _deployment(cluster: LocalCluster, ns: str, name: str) -> dict[str, Any]:
    dep = get(cluster, "deployment", name, ns)
    assert dep is not None
    return dep


def _args(cluster: LocalCluster, ns: str, name: str) -> list[str]:
    return list(_deployment(cluster, ns, name)["spec"]["template"]["spec"]["containers"][0]["args"])


def _rollout_status(cluster: LocalCluster, ns: str, name: str) -> str:
    result = cluster.kubectl("rollout", "status", f"deployment/{name}", "-n", ns, "--timeout=120s",
                             check=False, timeout=150)
    assert result.returncode == 0, result.stderr
    return str(result.stdout)


def test_kubectl_scale_qwi_reaches_the_deployment(cluster: LocalCluster, operator: OperatorProcess,
                                                  namespace: str) -> None:
    apply(cluster, namespace, _example("qwen3-4b-instruct-a10g.yaml"))
    _ready(cluster, namespace, "qwen3-4b")
    # spec.replicas unset (1 by default): the apiserver cannot read the scale subresource of a CR whose
    # specReplicasPath is missing (docs/kubectl.md); `kubectl scale` still works, it patches.
    unset = cluster.kubectl("get", "qwi", "qwen3-4b", "-n", namespace, "--subresource=scale", check=False)
    assert unset.returncode != 0 and '".spec.replicas" does not exist' in unset.stderr, unset.stderr

    cluster.kubectl("scale", "qwi/qwen3-4b", "-n", namespace, "--replicas=3")
    wait_until("the Deployment at 3 replicas",
               lambda: _deployment(cluster, namespace, "qwen3-4b")["spec"].get("replicas") == 3, 30)
    assert "successfully rolled out" in _rollout_status(cluster, namespace, "qwen3-4b")
    wait_until("the qwi's scale status at 3", lambda: (get(cluster, "qwi", "qwen3-4b", namespace) or {}).get(
        "status", {}).get("replicas") == 3 and get(cluster, "qwi", "qwen3-4b", namespace), 60)
    _ready(cluster, namespace, "qwen3-4b")
    scale = json.loads(cluster.kubectl("get", "qwi", "qwen3-4b", "-n", namespace, "--subresource=scale",
                                       "-o", "json").stdout)
    assert (scale["kind"], scale["spec"]["replicas"], scale["status"]["replicas"]) == ("Scale", 3, 3), scale
    assert scale["status"]["selector"], scale  # what an HPA or KEDA aimed at the qwi would select pods by
    # `--current-replicas` is a precondition on the scale subresource: a stale one is refused.
    stale = cluster.kubectl("scale", "qwi/qwen3-4b", "-n", namespace, "--current-replicas=1", "--replicas=2",
                            check=False)
    assert stale.returncode != 0 and "Expected replicas to be 1, was 3" in stale.stderr, stale.stderr


def test_kubectl_scale_qwi_is_refused_while_autoscaling_owns_replicas(cluster: LocalCluster,
                                                                      operator: OperatorProcess,
                                                                      namespace: str) -> None:
    doc = _example("qwen3-4b-autoscaling.yaml")
    name = doc["metadata"]["name"]
    apply(cluster, namespace, doc)
    _ready(cluster, namespace, name)
    before = _deployment(cluster, namespace, name)["spec"]["replicas"]
    result = cluster.kubectl("scale", f"qwi/{name}", "-n", namespace, "--replicas=3", check=False)
    assert result.returncode != 0
    assert "spec.replicas cannot be set while autoscaling is enabled" in result.stderr, result.stderr
    qwi = get(cluster, "qwi", name, namespace)
    assert qwi is not None and "replicas" not in qwi["spec"]
    assert _deployment(cluster, namespace, name)["spec"]["replicas"] == before


def test_rollout_restart_is_kept_and_rollout_undo_is_reapplied(cluster: LocalCluster, operator: OperatorProcess,
                                                               namespace: str) -> None:
    apply(cluster, namespace, _example("qwen3-4b-instruct-a10g.yaml"))
    _ready(cluster, namespace, "qwen3-4b")
    first = _args(cluster, namespace, "qwen3-4b")

    # restart: a foreign annotation on the pod template, which the operator does not own and must keep
    cluster.kubectl("rollout", "restart", "deployment/qwen3-4b", "-n", namespace)
    stamp = _deployment(cluster, namespace, "qwen3-4b")["spec"]["template"]["metadata"]["annotations"][RESTARTED_AT]
    _rollout_status(cluster, namespace, "qwen3-4b")
    cluster.kubectl("patch", "qwi", "qwen3-4b", "-n", namespace, "--type=merge",
                    "-p", '{"spec":{"engine":{"maxNumSeqs":96}}}')  # a reconcile that applies
    wait_until("the spec change applied", lambda: "96" in _args(cluster, namespace, "qwen3-4b"), 30)
    time.sleep(RESYNC_S)  # and a resync tick
    template = _deployment(cluster, namespace, "qwen3-4b")["spec"]["template"]
    assert template["metadata"]["annotations"].get(RESTARTED_AT) == stamp
    _rollout_status(cluster, namespace, "qwen3-4b")
    current = _args(cluster, namespace, "qwen3-4b")
    assert current != first

    # undo: the Deployment goes back to the previous ReplicaSet's template; the operator re-applies its own
    revision = _revision(cluster, namespace)
    undo = cluster.kubectl("rollout", "undo", "deployment/qwen3-4b", "-n", namespace)
    assert "rolled back" in undo.stdout, undo.stdout
    # Each template change is a new revision: the undo's, then the operator's re-apply (the template of the
    # spec, its ReplicaSet taken back into use).
    wait_until("the operator re-applied the QwenInference's template", lambda: _args(
        cluster, namespace, "qwen3-4b") == current and _revision(cluster, namespace) >= revision + 2, 30)
    _rollout_status(cluster, namespace, "qwen3-4b")
    _ready(cluster, namespace, "qwen3-4b")
    assert _deployment(cluster, namespace, "qwen3-4b")["spec"]["template"]["metadata"]["annotations"].get(
        RESTARTED_AT) == stamp  # the undo's target revision had it as well


def _revision(cluster: LocalCluster, ns: str) -> int:
    return int(_deployment(cluster, ns, "qwen3-4b")["metadata"]["annotations"]["deployment.kubernetes.io/revision"])
