"""routing.auth.apiKeys and routing.canary through the operator against the real apiserver, with Envoy Gateway
v1.7.0's own CRDs (SecurityPolicy, EnvoyExtensionPolicy, BackendTrafficPolicy: upstream's chart, from the module
cache) beside the Inference Extension's and the Gateway API's HTTPRoute (hack/third-party-crds.sh).

- A key Secret that does not exist: Stalled APIKeySecretNotFound naming it, nothing applied; the Secret made, the
  SecurityPolicy (accepted by upstream's schema) names it, and the key itself is nowhere the operator writes or
  logs: not in any object of the namespace but the Secret, not in the status, the Events or the operator's log.
- A canary that does not exist, then one serving another model: the stable fleet Stalled (CanaryNotFound,
  CanaryModelMismatch naming both), nothing of it applied; then the route weighted 80/20, status.traffic saying
  so, the canary routing by the same model name on the same Gateway without being Stalled ModelNameClaimed; a
  weight change moves the route's weights and the status.

No Gateway CRD is served here, so the GatewayNotFound check is left out (tests/integration/test_gateway_claims.py
has it); no Envoy Gateway controller runs: what Envoy does with these objects is tests/node/test_real_gateway.py's.
"""

from __future__ import annotations

import copy
import json
import time
import uuid
from collections.abc import Iterator
from datetime import datetime
from typing import Any

import pytest

from qwen_fleet.config import FIELD_MANAGER
from qwen_fleet_dev import binaries
from qwen_fleet_dev.cluster import LocalCluster
from tests.support.kube import apply, condition, events_for, get, wait_fleet, wait_until
from tests.support.operator_process import OperatorProcess
from tests.support.third_party import crd_name, third_party_crds

pytestmark = pytest.mark.cluster
ROUTING_CRDS = {"inference.networking.k8s.io_inferencepools.yaml": "inferencepools.inference.networking.k8s.io",
                "gateway.networking.k8s.io_httproutes.yaml": "httproutes.gateway.networking.k8s.io"}
EG_CRDS = {"gateway.envoyproxy.io_envoyextensionpolicies.yaml": "envoyextensionpolicies.gateway.envoyproxy.io",
           "gateway.envoyproxy.io_backendtrafficpolicies.yaml": "backendtrafficpolicies.gateway.envoyproxy.io",
           "gateway.envoyproxy.io_securitypolicies.yaml": "securitypolicies.gateway.envoyproxy.io"}
ENVOY = {"name": "front", "implementation": "EnvoyGateway", "routeByModel": True}
RESYNC_S = 12  # one resync of the operator (10 s in these tests) refreshes its capabilities


def _fleet(name: str, routing: dict[str, Any], served: str = "qwen") -> dict[str, Any]:
    return {"apiVersion": "qwenfleet.io/v1alpha1", "kind": "QwenInference", "metadata": {"name": name},
            "spec": {"model": {"name": "Qwen/Qwen3-4B-Instruct-2507", "servedModelName": served},
                     "engine": {"maxModelLen": 4096}, "gpu": {"product": "NVIDIA-A10G"},
                     "routing": copy.deepcopy(routing)}}


def _after_creation_second(cluster: LocalCluster, namespace: str, name: str) -> None:
    """Return once this machine's clock (the apiserver's: it runs here) is past the second QwenInference ``name``
    was created in."""
    stamp = get(cluster, "qwi", name, namespace)["metadata"]["creationTimestamp"]
    created = datetime.fromisoformat(stamp.replace("Z", "+00:00")).timestamp()
    time.sleep(max(0.0, created + 1.05 - time.time()))


def _present(cluster: LocalCluster, names: list[str]) -> list[str]:
    return [n for n in names if cluster.kubectl("get", "crd", n, check=False).returncode == 0]


def _install(cluster: LocalCluster) -> list[str]:
    """The routing CRDs this module needs; returns Envoy Gateway's that it installed (removed after it)."""
    missing = set(ROUTING_CRDS.values()) - set(_present(cluster, list(ROUTING_CRDS.values())))
    for path in third_party_crds():
        if path.name in ROUTING_CRDS and ROUTING_CRDS[path.name] in missing:
            assert crd_name(path) == ROUTING_CRDS[path.name]
            cluster.install_crd(path, name=ROUTING_CRDS[path.name])
    generated = binaries.ensure_gateway().chart / "crds" / "generated"
    installed = []
    for file, name in EG_CRDS.items():
        if not _present(cluster, [name]):
            assert crd_name(generated / file) == name
            cluster.install_crd(generated / file, name=name)
            installed.append(name)
    return installed


def _stalled(cluster: LocalCluster, ns: str, name: str) -> tuple[str, str, str]:
    cond = condition(get(cluster, "qwi", name, ns), "Stalled") or {}
    return str(cond.get("status")), str(cond.get("reason")), str(cond.get("message"))


def _metadata_lookup(cluster: LocalCluster, ns: str, name: str) -> dict[str, Any]:
    """The request KubeClient.metadata_of makes, with the operator's own client and Accept header, answered whole."""
    import asyncio

    from qwen_fleet.reconcile.kube import METADATA_ONLY, KubeClient, object_path

    async def lookup() -> dict[str, Any]:
        kube = KubeClient.from_environment(kubeconfig=str(cluster.kubeconfig))
        try:
            found = await kube.request("GET", object_path("v1", "Secret", ns, name), accept=METADATA_ONLY)
            assert await kube.metadata_of("v1", "Secret", ns, name + "-absent") is None
            return dict(found)
        finally:
            kube.close()

    return asyncio.run(lookup())


@pytest.fixture(scope="module")
def eg_crds(cluster: LocalCluster) -> Iterator[None]:
    installed = _install(cluster)
    time.sleep(RESYNC_S)  # the operator's capabilities see the new kinds at its next resync
    yield
    # Other modules start from a cluster without Envoy Gateway's kinds (test_envoy_gateway_policies.py's Stalled).
    if installed:
        cluster.kubectl("delete", "crd", *installed, "--wait=true", check=False, timeout=120)


def test_a_missing_key_secret_is_stalled_then_the_policy_names_it_and_the_key_is_nowhere_else(
        cluster: LocalCluster, operator: OperatorProcess, namespace: str, eg_crds: None) -> None:
    routing = {"gateway": ENVOY, "auth": {"apiKeys": {"secretRefs": [{"name": "team-keys"}]}}}
    try:
        apply(cluster, namespace, _fleet("keyed", routing))
        wait_until("Stalled APIKeySecretNotFound",
                   lambda: _stalled(cluster, namespace, "keyed")[:2] == ("True", "APIKeySecretNotFound"), 30)
        message = _stalled(cluster, namespace, "keyed")[2]
        assert f"names Secret {namespace}/team-keys, which does not exist: create it" in message, message
        for kind in ("deployment", "httproute", "securitypolicy"):
            assert get(cluster, kind, "keyed", namespace) is None, kind

        key = f"sk-qf-{uuid.uuid4().hex}"
        cluster.kubectl("create", "secret", "generic", "team-keys", f"--from-literal=team-a={key}", "-n", namespace)
        policy = wait_fleet(cluster, namespace, "keyed", operator.tail, "the SecurityPolicy",
                            lambda: get(cluster, "securitypolicy", "keyed", namespace), timeout=60)
        assert policy["spec"]["targetRefs"] == [{"group": "gateway.networking.k8s.io", "kind": "HTTPRoute",
                                                 "name": "keyed"}]
        auth = policy["spec"]["apiKeyAuth"]
        assert auth["credentialRefs"] == [{"group": "", "kind": "Secret", "name": "team-keys"}]
        assert auth["extractFrom"] == [{"headers": ["Authorization"]}] and auth["sanitize"] is True
        wait_until("keyed Stalled False", lambda: _stalled(cluster, namespace, "keyed")[0] == "False", 30)
        time.sleep(RESYNC_S)  # a resync with the Secret in place (the operator looked it up again)

        # The key is in its Secret and nowhere else the operator writes: every other object of the namespace
        # (the fleet and its status, its children, ConfigMaps, Events) and the operator's log.
        kinds = "qweninferences,deployments,services,configmaps,events,httproutes,securitypolicies," \
                "envoyextensionpolicies,backendtrafficpolicies,inferencepools,serviceaccounts,roles,rolebindings"
        everything = cluster.kubectl("get", kinds, "-n", namespace, "-o", "json").stdout
        assert "team-keys" in everything  # the SecurityPolicy names the Secret...
        assert key not in everything  # ...and nothing holds the key
        assert key not in json.dumps(events_for(cluster, namespace, "keyed"))
        assert key not in operator.log.read_text(errors="replace")
        secret = json.loads(cluster.kubectl("get", "secret", "team-keys", "-n", namespace, "-o", "json",
                                            "--show-managed-fields").stdout)
        assert list(secret["data"]) == ["team-a"]  # the check did not touch it (no field manager of the operator's)
        managers = {m.get("manager") for m in secret["metadata"].get("managedFields") or []}
        assert managers and FIELD_MANAGER not in managers, managers

        # What the operator's lookup gets from the real apiserver: the Secret's metadata, without its data.
        seen = _metadata_lookup(cluster, namespace, "team-keys")
        assert seen["kind"] == "PartialObjectMetadata" and "data" not in seen and key not in json.dumps(seen), seen
        assert seen["metadata"]["name"] == "team-keys"

        # The keys removed from the spec: the SecurityPolicy is pruned.
        apply(cluster, namespace, _fleet("keyed", {"gateway": ENVOY}))
        wait_fleet(cluster, namespace, "keyed", operator.tail, "the SecurityPolicy pruned",
                   lambda: get(cluster, "securitypolicy", "keyed", namespace) is None or None, timeout=30)
    finally:
        cluster.kubectl("delete", "qwi", "keyed", "-n", namespace, "--wait=false", check=False)


def _backends(cluster: LocalCluster, ns: str) -> list[tuple[str, int]]:
    route = get(cluster, "httproute", "stable", ns) or {}
    (rule,) = route["spec"]["rules"]
    return [(b["name"], b["weight"]) for b in rule["backendRefs"]]


def _traffic(cluster: LocalCluster, ns: str) -> list[tuple[str, int, str]]:
    status = (get(cluster, "qwi", "stable", ns) or {}).get("status") or {}
    return [(t["fleet"], t["percent"], t["role"]) for t in status.get("traffic") or []]


def test_a_canary_is_checked_then_weighted_and_not_a_claim_on_the_model_name(
        cluster: LocalCluster, operator: OperatorProcess, namespace: str, eg_crds: None) -> None:
    stable = {"gateway": ENVOY, "canary": {"fleet": "next", "weight": 20}}
    try:
        apply(cluster, namespace, _fleet("stable", stable))
        wait_until("Stalled CanaryNotFound",
                   lambda: _stalled(cluster, namespace, "stable")[:2] == ("True", "CanaryNotFound"), 30)
        assert f"names QwenInference {namespace}/next, which does not exist" in _stalled(cluster, namespace,
                                                                                         "stable")[2]
        assert get(cluster, "httproute", "stable", namespace) is None

        # A canary of another model: Stalled naming both, still nothing of the stable fleet. Made in a later second
        # than "stable": creationTimestamp has whole seconds, and a tie goes to the name ("next" < "stable"), as the
        # Gateway API's route precedence does, which would make "next" the older fleet (render/model_claims.py).
        _after_creation_second(cluster, namespace, "stable")
        apply(cluster, namespace, _fleet("next", {"gateway": ENVOY}, served="qwen-other"))
        wait_until("Stalled CanaryModelMismatch",
                   lambda: _stalled(cluster, namespace, "stable")[:2] == ("True", "CanaryModelMismatch"), 30)
        message = _stalled(cluster, namespace, "stable")[2]
        assert f"QwenInference {namespace}/stable serves qwen but its canary {namespace}/next serves qwen-other" \
            in message, message
        assert get(cluster, "httproute", "stable", namespace) is None
        assert get(cluster, "deployment", "stable", namespace) is None

        # The canary serving the same name: the stable fleet's route splits 80/20 at its next resync.
        apply(cluster, namespace, _fleet("next", {"gateway": ENVOY}, served="qwen"))
        wait_fleet(cluster, namespace, "stable", operator.tail, "the weighted route",
                   lambda: get(cluster, "httproute", "stable", namespace), timeout=60)
        assert _backends(cluster, namespace) == [("stable", 80), ("next", 20)]
        wait_until("status.traffic 80/20", lambda: _traffic(cluster, namespace) == [
            ("stable", 80, "stable"), ("next", 20, "canary")] or None, 30)
        # The canary routes by the same name on the same Gateway, declared by the older fleet: not a claim.
        wait_fleet(cluster, namespace, "next", operator.tail, "the canary's own route",
                   lambda: get(cluster, "httproute", "next", namespace), timeout=60)
        assert _stalled(cluster, namespace, "next")[0] == "False", _stalled(cluster, namespace, "next")
        assert _stalled(cluster, namespace, "stable")[0] == "False"

        # Promote in steps: the route's weights and the status follow the spec.
        for weight in (50, 100):
            apply(cluster, namespace, _fleet("stable", {**stable, "canary": {"fleet": "next", "weight": weight}}))
            route_weights = [("stable", 100 - weight), ("next", weight)]
            shares = [("stable", 100 - weight, "stable"), ("next", weight, "canary")]
            wait_until(f"route at {100 - weight}/{weight}",
                       lambda want=route_weights: _backends(cluster, namespace) == want or None, 30)  # type: ignore[misc]
            wait_until(f"status.traffic at {weight}",
                       lambda want=shares: _traffic(cluster, namespace) == want or None, 30)  # type: ignore[misc]
    finally:
        cluster.kubectl("delete", "qwi", "stable", "next", "-n", namespace, "--wait=false", check=False)
