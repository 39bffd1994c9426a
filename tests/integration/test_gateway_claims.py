"""routing.gateway through the operator against the real apiserver: a route to a Gateway that does not exist is
Stalled GatewayNotFound with the fix (nothing applied) until the Gateway is made, and one to a listener it does not
have GatewayListenerNotFound; with routeByModel, a second fleet
claiming the first's model name on that Gateway is Stalled ModelNameClaimed naming the first, and nothing of the
first is written. The Gateway CRD is Envoy Gateway v1.7.0's bundled copy of Gateway API v1.4.1 (upstream's chart,
from the module cache); no gateway controller runs here (tests/node/test_real_gateway.py has one).
"""

from __future__ import annotations

import copy
import time
from pathlib import Path
from typing import Any

import pytest
import yaml

from qwen_fleet_dev import binaries
from qwen_fleet_dev.cluster import LocalCluster
from tests.support.kube import apply, condition, get, wait_fleet, wait_until
from tests.support.operator_process import OperatorProcess, audit_writes
from tests.support.third_party import crd_name, third_party_crds

pytestmark = pytest.mark.cluster
GATEWAYS = "gateways.gateway.networking.k8s.io"
ROUTING_CRDS = {"inference.networking.k8s.io_inferencepools.yaml": "inferencepools.inference.networking.k8s.io",
                "gateway.networking.k8s.io_httproutes.yaml": "httproutes.gateway.networking.k8s.io"}
RESYNC_S = 12  # one resync of the operator (10 s in these tests)


def _fleet(name: str, routing: dict[str, Any], served: str) -> dict[str, Any]:
    return {"apiVersion": "qwenfleet.io/v1alpha1", "kind": "QwenInference", "metadata": {"name": name},
            "spec": {"model": {"name": "Qwen/Qwen3-4B-Instruct-2507", "servedModelName": served},
                     "engine": {"maxModelLen": 4096}, "gpu": {"product": "NVIDIA-A10G"},
                     "routing": copy.deepcopy(routing)}}


def _gateway(name: str) -> dict[str, Any]:
    return {"apiVersion": "gateway.networking.k8s.io/v1", "kind": "Gateway", "metadata": {"name": name},
            "spec": {"gatewayClassName": "qwen-fleet-envoy",
                     "listeners": [{"name": "http", "protocol": "HTTP", "port": 80}]}}


def _install(cluster: LocalCluster, tmp: Path) -> None:
    present = {n for n in [*ROUTING_CRDS.values(), GATEWAYS]
               if cluster.kubectl("get", "crd", n, check=False).returncode == 0}
    for path in third_party_crds():
        if path.name in ROUTING_CRDS and ROUTING_CRDS[path.name] not in present:
            assert crd_name(path) == ROUTING_CRDS[path.name]
            cluster.install_crd(path, name=ROUTING_CRDS[path.name])
    if GATEWAYS not in present:
        bundle = binaries.ensure_gateway().chart / "crds" / "gatewayapi-crds.yaml"
        (doc,) = [d for d in yaml.safe_load_all(bundle.read_text()) if d and d["metadata"]["name"] == GATEWAYS]
        path = tmp / "gateways.yaml"
        path.write_text(yaml.safe_dump(doc))
        cluster.install_crd(path, name=GATEWAYS)


def _stalled(cluster: LocalCluster, ns: str, name: str) -> tuple[str, str, str]:
    cond = condition(get(cluster, "qwi", name, ns), "Stalled") or {}
    return str(cond.get("status")), str(cond.get("reason")), str(cond.get("message"))


def test_a_missing_gateway_and_a_claimed_model_name_are_stalled_and_the_first_fleet_untouched(
        cluster: LocalCluster, operator: OperatorProcess, namespace: str, tmp_path: Path) -> None:
    _install(cluster, tmp_path)
    time.sleep(RESYNC_S)
    routing = {"gateway": {"name": "front", "routeByModel": True}}
    try:
        # No Gateway "front" yet: Stalled with the fix, nothing of the fleet applied.
        apply(cluster, namespace, _fleet("first", routing, "qwen"))
        wait_until("Stalled GatewayNotFound",
                   lambda: _stalled(cluster, namespace, "first")[:2] == ("True", "GatewayNotFound"), 30)
        message = _stalled(cluster, namespace, "first")[2]
        assert f"Gateway {namespace}/front, which does not exist: create it" in message, message
        assert get(cluster, "deployment", "first", namespace) is None
        assert get(cluster, "httproute", "first", namespace) is None

        # The Gateway made: at the next resync the fleet and its route are applied.
        apply(cluster, namespace, _gateway("front"))
        route = wait_fleet(cluster, namespace, "first", operator.tail, "the first fleet's HTTPRoute",
                           lambda: get(cluster, "httproute", "first", namespace), timeout=60)
        assert route["spec"]["rules"][0]["matches"][0]["headers"] == [
            {"type": "Exact", "name": "X-Gateway-Model-Name", "value": "qwen"}]
        wait_until("first Stalled False", lambda: _stalled(cluster, namespace, "first")[0] == "False", 30)
        before = {kind: (get(cluster, kind, "first", namespace) or {})["metadata"]["resourceVersion"]
                  for kind in ("httproute", "deployment", "inferencepool", "service")}

        # A second fleet claiming "qwen" on the same Gateway: Stalled naming the first, nothing of it applied.
        since = time.time()
        apply(cluster, namespace, _fleet("second", routing, "qwen"))
        wait_until("second Stalled ModelNameClaimed",
                   lambda: _stalled(cluster, namespace, "second")[:2] == ("True", "ModelNameClaimed"), 30)
        message = _stalled(cluster, namespace, "second")[2]
        assert f"the model name qwen on Gateway {namespace}/front is already served there by QwenInference " \
               f"{namespace}/first" in message, message
        assert get(cluster, "httproute", "second", namespace) is None
        assert get(cluster, "deployment", "second", namespace) is None
        time.sleep(RESYNC_S + 2)  # through a resync of both
        after = {kind: (get(cluster, kind, "first", namespace) or {})["metadata"]["resourceVersion"]
                 for kind in before}
        assert after == before
        first_writes = [w for w in audit_writes(cluster, since)
                        if (w.get("objectRef") or {}).get("namespace") == namespace
                        and w["objectRef"].get("name", "").startswith("first")
                        and w["objectRef"]["resource"] not in ("qweninferences", "events")]
        assert first_writes == [], first_writes
        assert _stalled(cluster, namespace, "first")[0] == "False"

        # The second renamed: its own name, so it is applied beside the first.
        apply(cluster, namespace, _fleet("second", routing, "qwen-next"))
        wait_fleet(cluster, namespace, "second", operator.tail, "the second fleet's HTTPRoute",
                   lambda: get(cluster, "httproute", "second", namespace), timeout=60)

        # A listener the Gateway does not have (e.g. an https one that was never added): Stalled naming its
        # listeners, nothing applied.
        apply(cluster, namespace, _fleet("third", {"gateway": {"name": "front", "sectionName": "https"}}, "qwen-3"))
        wait_until("third Stalled GatewayListenerNotFound",
                   lambda: _stalled(cluster, namespace, "third")[:2] == ("True", "GatewayListenerNotFound"), 30)
        message = _stalled(cluster, namespace, "third")[2]
        assert f"sectionName https names no listener of Gateway {namespace}/front, whose listeners are http" \
            in message, message
        assert get(cluster, "httproute", "third", namespace) is None
    finally:
        cluster.kubectl("delete", "qwi", "first", "second", "third", "-n", namespace, "--wait=false", check=False)
        # Other modules route to Gateways that do not exist with no Gateway kind served: leave none served.
        cluster.kubectl("delete", "crd", GATEWAYS, "--wait=true", check=False, timeout=120)
