"""routing.gateway.implementation EnvoyGateway through the operator against the real apiserver with Envoy Gateway
v1.7.0's own CRDs (EnvoyExtensionPolicy, BackendTrafficPolicy: upstream's chart, from the module cache) beside the
Inference Extension's and the Gateway API's (hack/third-party-crds.sh): Stalled naming Envoy Gateway while the
cluster does not serve its policies (nothing applied), both policies accepted by server-side apply against the real
schemas (their CEL rules included) once it does, and both pruned when the fleet moves to a conformant gateway.

No Envoy Gateway controller runs here: what Envoy makes of these policies is shown on the real node
(tests/node/test_real_gateway.py).
"""

from __future__ import annotations

import copy
import json
import time
from pathlib import Path
from typing import Any

import pytest

from qwen_fleet_dev import binaries
from qwen_fleet_dev.cluster import LocalCluster
from tests.support.kube import apply, condition, get, wait_fleet, wait_until
from tests.support.operator_process import OperatorProcess, audit_writes
from tests.support.third_party import crd_name, third_party_crds

pytestmark = pytest.mark.cluster
ROUTING_CRDS = {"inference.networking.k8s.io_inferencepools.yaml": "inferencepools.inference.networking.k8s.io",
                "gateway.networking.k8s.io_httproutes.yaml": "httproutes.gateway.networking.k8s.io"}
EG_CRDS = {"gateway.envoyproxy.io_envoyextensionpolicies.yaml": "envoyextensionpolicies.gateway.envoyproxy.io",
           "gateway.envoyproxy.io_backendtrafficpolicies.yaml": "backendtrafficpolicies.gateway.envoyproxy.io"}
EG_ROUTING = {"gateway": {"name": "front", "implementation": "EnvoyGateway"}}
RESYNC_S = 12  # one resync of the operator (10 s in these tests) refreshes its capabilities


def _eg_crd_dir() -> Path:
    chart = binaries.ensure_gateway().chart
    return chart / "crds" / "generated"


def _fleet(routing: dict[str, Any]) -> dict[str, Any]:
    return {"apiVersion": "qwenfleet.io/v1alpha1", "kind": "QwenInference", "metadata": {"name": "big"},
            "spec": {"model": {"name": "Qwen/Qwen3-4B-Instruct-2507"}, "engine": {"maxModelLen": 4096},
                     "gpu": {"product": "NVIDIA-A10G"}, "routing": copy.deepcopy(routing)}}


def _present(cluster: LocalCluster, names: list[str]) -> list[str]:
    return [n for n in names if cluster.kubectl("get", "crd", n, check=False).returncode == 0]


def _install_routing_crds(cluster: LocalCluster) -> None:
    missing = set(ROUTING_CRDS.values()) - set(_present(cluster, list(ROUTING_CRDS.values())))
    for path in third_party_crds():
        if path.name in ROUTING_CRDS and ROUTING_CRDS[path.name] in missing:
            assert crd_name(path) == ROUTING_CRDS[path.name]
            cluster.install_crd(path, name=ROUTING_CRDS[path.name])


def _install_eg_crds(cluster: LocalCluster) -> None:
    for file, name in EG_CRDS.items():
        path = _eg_crd_dir() / file
        assert crd_name(path) == name
        cluster.install_crd(path, name=name)


def _remove_eg_crds(cluster: LocalCluster) -> None:
    present = _present(cluster, list(EG_CRDS.values()))
    if present:
        cluster.kubectl("delete", "crd", *present, "--wait=true", timeout=120)


def _stalled(cluster: LocalCluster, ns: str) -> tuple[str, str, str]:
    cond = condition(get(cluster, "qwi", "big", ns), "Stalled") or {}
    return str(cond.get("status")), str(cond.get("reason")), str(cond.get("message"))


def test_envoy_gateway_policies_stall_without_the_crds_then_are_accepted_and_pruned(
        cluster: LocalCluster, operator: OperatorProcess, namespace: str) -> None:
    _install_routing_crds(cluster)
    if _present(cluster, list(EG_CRDS.values())):  # another run left them: start without the APIs
        _remove_eg_crds(cluster)
        time.sleep(RESYNC_S)
    try:
        # Without Envoy Gateway's policy kinds: Stalled with the fix, nothing of the fleet applied.
        apply(cluster, namespace, _fleet(EG_ROUTING))
        wait_until("Stalled EnvoyExtensionPolicyMissing",
                   lambda: _stalled(cluster, namespace)[:2] == ("True", "EnvoyExtensionPolicyMissing"), 30)
        message = _stalled(cluster, namespace)[2]
        assert "gateway.envoyproxy.io/v1alpha1 envoyextensionpolicies" in message, message
        assert "install Envoy Gateway (v1.7.0" in message and "implementation to InferencePool" in message, message
        assert get(cluster, "deployment", "big", namespace) is None

        # The CRDs installed: at the next resync every child is applied, the policies validated by upstream's
        # schemas and CEL rules.
        _install_eg_crds(cluster)
        btp = wait_fleet(cluster, namespace, "big", operator.tail, "the BackendTrafficPolicy",
                         lambda: get(cluster, "backendtrafficpolicy", "big", namespace), timeout=60)
        route_ref = {"group": "gateway.networking.k8s.io", "kind": "HTTPRoute", "name": "big"}
        assert btp["spec"]["targetRefs"] == [route_ref]
        assert btp["spec"]["loadBalancer"]["endpointOverride"] == {
            "extractFrom": [{"header": "x-gateway-destination-endpoint"}]}
        assert btp["spec"]["retry"]["retryOn"] == {"triggers": ["connect-failure", "reset"]}
        eep = get(cluster, "envoyextensionpolicy", "big-epp", namespace)
        assert eep is not None
        (ext_proc,) = eep["spec"]["extProc"]
        # weight 1: the schema's default (BackendRef.weight), filled in by the apiserver.
        assert ext_proc["backendRefs"] == [{"group": "", "kind": "Service", "name": "big-epp", "port": 9002,
                                            "weight": 1}]
        assert ext_proc["failOpen"] is False
        assert eep["metadata"]["ownerReferences"][0]["kind"] == "QwenInference"
        route = get(cluster, "httproute", "big", namespace)
        assert route is not None
        assert route["spec"]["rules"][0]["backendRefs"] == [
            {"group": "", "kind": "Service", "name": "big", "port": 8000, "weight": 1}]
        wait_until("Stalled False", lambda: _stalled(cluster, namespace)[0] == "False", 30)

        # Unchanged, through a resync and the real schemas' defaults: no writes to the policies.
        time.sleep(2)
        since = time.time()
        time.sleep(RESYNC_S + 2)
        writes = [w for w in audit_writes(cluster, since)
                  if (w.get("objectRef") or {}).get("resource") in ("envoyextensionpolicies", "backendtrafficpolicies")]
        assert writes == [], writes

        # Upstream's own rule, the reason the operator refuses FailOpen behind Envoy Gateway: the same policy
        # with failOpen true is refused by the real CRD.
        bad = {"apiVersion": eep["apiVersion"], "kind": "EnvoyExtensionPolicy",
               "metadata": {"name": "fail-open"}, "spec": copy.deepcopy(eep["spec"])}
        bad["spec"]["extProc"][0]["failOpen"] = True
        out = cluster.kubectl("create", "--dry-run=server", "-n", namespace, "-f", "-", input=json.dumps(bad),
                              check=False)
        assert out.returncode != 0, out.stdout
        assert "If FullDuplexStreamed body processing mode is used, FailOpen must be false" in out.stderr, out.stderr

        # A conformant gateway instead: the route's backend is the InferencePool again, both policies pruned.
        apply(cluster, namespace, _fleet({"gateway": {"name": "front"}}))
        for kind, name in [("envoyextensionpolicy", "big-epp"), ("backendtrafficpolicy", "big")]:
            def gone(k: str = kind, n: str = name) -> bool | None:
                return get(cluster, k, n, namespace) is None or None

            wait_fleet(cluster, namespace, "big", operator.tail, f"{kind}/{name} pruned", gone, timeout=30)
        route = get(cluster, "httproute", "big", namespace)
        assert route is not None
        assert route["spec"]["rules"][0]["backendRefs"][0]["kind"] == "InferencePool"
    finally:
        cluster.kubectl("delete", "qwi", "big", "-n", namespace, "--wait=false", check=False)
        _remove_eg_crds(cluster)
