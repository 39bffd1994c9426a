"""spec.pools (length-aware pools) against the real apiserver with the real CRDs (InferencePool and
InferenceObjective of gateway-api-inference-extension v1.5.0, HTTPRoute of gateway-api v1.5.1): the operator makes a
Deployment, an InferencePool and an endpoint picker per pool and one HTTPRoute with a header rule per pool, every
child accepted by server-side apply; status.pools reports each pool; a removed pool's Deployment and picker are
pruned; and pools cannot be switched on or off for an existing resource (a transition rule only the apiserver
evaluates). The pods are KWOK's; no engine and no picker run here (tests/integration/test_epp_picks.py runs both).
"""

from __future__ import annotations

import copy
import json
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
import yaml

from qwen_fleet.api.pools import POOLS_SWITCH_MESSAGE
from qwen_fleet_dev.cluster import LocalCluster
from tests.support.kube import apply, get, wait_fleet
from tests.support.operator_process import OperatorProcess
from tests.support.third_party import crd_name, third_party_crds

pytestmark = pytest.mark.cluster
ROOT = Path(__file__).resolve().parents[2]
CRDS = ("inferencepools.inference.networking.k8s.io", "inferenceobjectives.inference.networking.x-k8s.io",
        "httproutes.gateway.networking.k8s.io")
POOLS = [{"name": "short", "maxRequestTokens": 2048, "engine": {"maxNumSeqs": 64}},
         {"name": "medium", "maxRequestTokens": 4096},
         {"name": "long", "maxRequestTokens": 8192, "engine": {"maxNumSeqs": 8}}]
ROUTING = {"gateway": {"name": "inference-gateway"}, "priorityClasses": [{"name": "interactive", "priority": 10}]}


def _fleet(pools: list[dict[str, Any]] | None, name: str = "chat") -> dict[str, Any]:
    spec: dict[str, Any] = {"model": {"name": "Qwen/Qwen3-4B-Instruct-2507"}, "gpu": {"product": "NVIDIA-A10G"},
                            "routing": copy.deepcopy(ROUTING)}
    if pools is not None:
        spec["pools"] = copy.deepcopy(pools)
    return {"apiVersion": "qwenfleet.io/v1alpha1", "kind": "QwenInference", "metadata": {"name": name},
            "spec": spec}


def _install_crds(cluster: LocalCluster) -> None:
    for path in third_party_crds():  # cached by the script
        if crd_name(path) in CRDS and cluster.kubectl("get", "crd", crd_name(path), check=False).returncode:
            cluster.install_crd(path, name=crd_name(path))


def _pools_ready(cluster: LocalCluster, ns: str, names: list[str]) -> list[dict[str, Any]] | None:
    status = (get(cluster, "qwi", "chat", ns) or {}).get("status") or {}
    pools = status.get("pools") or []
    ready = [p["name"] for p in pools if p["readyReplicas"] == 1]
    return pools if ready == names else None


def _gone(cluster: LocalCluster, ns: str, kind: str, name: str) -> Callable[[], bool | None]:
    return lambda: get(cluster, kind, name, ns) is None or None


def test_the_operator_makes_each_pool_and_prunes_a_removed_one(cluster: LocalCluster, operator: OperatorProcess,
                                                                namespace: str) -> None:
    _install_crds(cluster)
    apply(cluster, namespace, _fleet(POOLS))
    pools = wait_fleet(cluster, namespace, "chat", operator.tail, "every pool Ready in status.pools",
                       lambda: _pools_ready(cluster, namespace, ["short", "medium", "long"]), timeout=120)
    assert [(p["maxRequestTokens"], p["maxModelLen"], p["header"], p["default"]) for p in pools] == [
        (2048, 2048, "x-qwen-pool: short", False), (4096, 4096, "x-qwen-pool: medium", False),
        (8192, 8192, "x-qwen-pool: long", True)]
    qwi = get(cluster, "qwi", "chat", namespace) or {}
    assert (qwi["status"]["replicas"], qwi["status"]["readyReplicas"]) == (3, 3)
    ready = next(c for c in qwi["status"]["conditions"] if c["type"] == "Ready")
    assert ready["status"] == "True", ready
    for pool in ("short", "medium", "long"):
        dep = get(cluster, "deployment", f"chat-{pool}", namespace) or {}
        args = dep["spec"]["template"]["spec"]["containers"][0]["args"]
        assert args[args.index("--max-model-len") + 1] == str(POOLS[["short", "medium", "long"].index(pool)][
            "maxRequestTokens"])
        inference_pool = get(cluster, "inferencepool", f"chat-{pool}", namespace) or {}
        assert inference_pool["spec"]["selector"]["matchLabels"]["qwenfleet.io/pool"] == pool
        assert get(cluster, "deployment", f"chat-{pool}-epp", namespace) is not None
        objective = get(cluster, "inferenceobjective", f"chat-{pool}-interactive", namespace) or {}
        assert objective["spec"]["poolRef"]["name"] == f"chat-{pool}"
    route = get(cluster, "httproute", "chat", namespace) or {}
    assert [r["backendRefs"][0]["name"] for r in route["spec"]["rules"]] == ["chat-short", "chat-medium", "chat-long"]
    # Each pool's serving pods are its own (the pool's picker pod carries the pool label, not the fleet's).
    pods = json.loads(cluster.kubectl("get", "pods", "-n", namespace, "-l",
                                      "qwenfleet.io/inference=chat,qwenfleet.io/pool=short", "-o", "json").stdout)
    assert [p["metadata"]["name"].rsplit("-", 2)[0] for p in pods["items"]] == ["chat-short"]

    # The medium pool removed: its Deployment, picker, InferencePool and objective go; the others stay.
    apply(cluster, namespace, _fleet([POOLS[0], POOLS[2]]))
    for kind, name in (("deployment", "chat-medium"), ("deployment", "chat-medium-epp"),
                       ("inferencepool", "chat-medium"), ("inferenceobjective", "chat-medium-interactive")):
        wait_fleet(cluster, namespace, "chat", operator.tail, f"{kind}/{name} pruned",
                   _gone(cluster, namespace, kind, name), timeout=30)
    wait_fleet(cluster, namespace, "chat", operator.tail, "two pools Ready",
               lambda: _pools_ready(cluster, namespace, ["short", "long"]), timeout=60)
    assert get(cluster, "deployment", "chat-short", namespace) is not None


@pytest.mark.parametrize(("before", "after"), [(None, POOLS), (POOLS, None)], ids=["add", "remove"])
def test_pools_cannot_be_switched_on_or_off(cluster: LocalCluster, crd: Any, namespace: str,
                                            before: list[dict[str, Any]] | None,
                                            after: list[dict[str, Any]] | None) -> None:
    created = cluster.kubectl("create", "-n", namespace, "-f", "-", input=json.dumps(_fleet(before, "switch")),
                              check=False)
    assert created.returncode == 0, created.stderr
    # replace, not apply: a field another manager set (pools, by create) would survive an apply without it.
    out = cluster.kubectl("replace", "-n", namespace, "-f", "-", input=json.dumps(_fleet(after, "switch")),
                          check=False)
    assert out.returncode != 0 and POOLS_SWITCH_MESSAGE in out.stderr, out.stderr


def test_the_length_pools_example_becomes_ready_pool_by_pool(cluster: LocalCluster, operator: OperatorProcess,
                                                             namespace: str) -> None:
    """examples/qwen3-8b-length-pools.yaml as a user applies it (test_operator's example test leaves routing
    examples to this module, which installs the Inference Extension's CRDs)."""
    _install_crds(cluster)
    path = ROOT / "examples" / "qwen3-8b-length-pools.yaml"
    doc = yaml.safe_load(path.read_text())
    name, names = doc["metadata"]["name"], [p["name"] for p in doc["spec"]["pools"]]
    cluster.kubectl("apply", "-n", namespace, "-f", str(path))
    want = {p["name"]: p.get("replicas", 1) for p in doc["spec"]["pools"]}

    def all_ready() -> list[dict[str, Any]] | None:
        pools = ((get(cluster, "qwi", name, namespace) or {}).get("status") or {}).get("pools") or []
        return pools if {p["name"]: p["readyReplicas"] for p in pools} == want else None

    pools = wait_fleet(cluster, namespace, name, operator.tail, "every pool of the example Ready", all_ready,
                       timeout=180)
    assert [p["name"] for p in pools] == names
    for pool in doc["spec"]["pools"]:
        dep = get(cluster, "deployment", f"{name}-{pool['name']}", namespace) or {}
        args = dep["spec"]["template"]["spec"]["containers"][0]["args"]
        assert args[args.index("--max-model-len") + 1] == str(pool["maxRequestTokens"])
    conditions = (get(cluster, "qwi", name, namespace) or {})["status"]["conditions"]
    ready = next(c for c in conditions if c["type"] == "Ready")
    assert ready["status"] == "True", ready
