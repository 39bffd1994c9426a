"""A real gateway in the data path: Envoy Gateway's controller and an Envoy proxy as pods on the real node.

Upstream's chart installs the controller from the locally built image; a Gateway of our class gets an Envoy
Deployment (the PyPI build of Envoy on Debian) and a ClusterIP Service; requests from the host go to that Service,
through Envoy, to busybox pods behind an HTTPRoute. Every assertion is on what the client received.

The route picks the backend by a header the client sets (``x-qwen-model``): Gateway API matches headers, never the
body, so an OpenAI client's ``model`` field needs a body-based router in front (GAIE's ``cmd/bbr``), not built here
yet (docs/gateway.md).
"""

from __future__ import annotations

import json
import time
import urllib.error
import urllib.request
import uuid
from collections.abc import Iterator
from typing import Any

import pytest

from qwen_fleet_dev.cluster import LocalCluster
from qwen_fleet_dev.gateway import EnvoyGateway, gateway
from tests.node.pods import apply, wait_ready, web_pod

pytestmark = [pytest.mark.cluster, pytest.mark.real_gateway]

MODEL_HEADER = "x-qwen-model"
_DIRECT = urllib.request.build_opener(urllib.request.ProxyHandler({}))


@pytest.fixture(scope="module")
def envoy_gateway(real_cluster: LocalCluster) -> Iterator[EnvoyGateway]:
    eg = EnvoyGateway(real_cluster).start()
    print(f"envoy gateway installed in {eg.start_seconds:.0f} s")
    try:
        yield eg
    finally:
        eg.stop()


@pytest.fixture(scope="module")
def ns(real_cluster: LocalCluster) -> Iterator[str]:
    name = f"gw-{uuid.uuid4().hex[:8]}"
    real_cluster.kubectl("create", "namespace", name)
    try:
        yield name
    finally:
        # The Gateway goes with the namespace, and Envoy Gateway removes its proxy Deployment and Service.
        real_cluster.kubectl("delete", "namespace", name, "--timeout=120s", check=False, timeout=150)


def _service(name: str) -> dict[str, Any]:
    return {"apiVersion": "v1", "kind": "Service", "metadata": {"name": name},
            "spec": {"selector": {"app": name}, "ports": [{"name": "http", "port": 8080, "targetPort": 8080}]}}


def _route(gateway_name: str, backends: list[str]) -> dict[str, Any]:
    rules = [{"matches": [{"headers": [{"name": MODEL_HEADER, "value": b}], "path": {"type": "PathPrefix",
                                                                                    "value": "/"}}],
              "backendRefs": [{"name": b, "port": 8080}]} for b in backends]
    return {"apiVersion": "gateway.networking.k8s.io/v1", "kind": "HTTPRoute", "metadata": {"name": "by-model"},
            "spec": {"parentRefs": [{"name": gateway_name, "sectionName": "http"}], "rules": rules}}


def _get(url: str, headers: dict[str, str]) -> tuple[int, str, dict[str, str]]:
    request = urllib.request.Request(url, headers=headers)
    try:
        with _DIRECT.open(request, timeout=10) as resp:
            return resp.status, resp.read().decode(), {k.lower(): v for k, v in resp.headers.items()}
    except urllib.error.HTTPError as err:
        return err.code, err.read().decode(), {k.lower(): v for k, v in err.headers.items()}


def _eventually(url: str, headers: dict[str, str], status: int, timeout: float = 90) -> tuple[int, str, dict[str, str]]:
    """The proxy gets the route a moment after the Gateway is Programmed (xDS push): ask until it answers with
    ``status`` or ``timeout`` passes; returns the last answer."""
    deadline = time.monotonic() + timeout
    last: tuple[int, str, dict[str, str]] = (0, "", {})
    while time.monotonic() < deadline:
        try:
            last = _get(url, headers)
        except OSError as exc:  # refused or reset while the listener comes up
            last = (0, str(exc), {})
        if last[0] == status:
            return last
        time.sleep(1)
    return last


@pytest.fixture(scope="module")
def routed(real_cluster: LocalCluster, envoy_gateway: EnvoyGateway, ns: str) -> str:
    """Two backends behind one Gateway listener, by header; returns the gateway's base URL."""
    for name in ("alpha", "beta"):
        apply(real_cluster, ns, web_pod(name))
        apply(real_cluster, ns, _service(name))
    apply(real_cluster, ns, gateway(ns, "front"))
    apply(real_cluster, ns, _route("front", ["alpha", "beta"]))
    for name in ("alpha", "beta"):
        wait_ready(real_cluster, ns, name)
    address = envoy_gateway.wait_programmed(ns, "front")
    return f"http://{address}"


def test_the_gateway_runs_envoy_from_our_image_on_the_real_node(envoy_gateway: EnvoyGateway, ns: str,
                                                                routed: str) -> None:
    pods = envoy_gateway.proxy_pods(ns, "front")
    assert len(pods) == 1, [p["metadata"]["name"] for p in pods]
    spec, status = pods[0]["spec"], pods[0]["status"]
    assert spec["nodeName"] == "real-node-0"
    images = {c["name"]: (c["image"], c["imagePullPolicy"]) for c in spec["containers"]}
    assert images["envoy"] == ("qwen-fleet.local/envoy:1.40.0", "Never")
    assert images["shutdown-manager"] == ("qwen-fleet.local/envoy-gateway:v1.7.0", "Never")
    assert all(c["ready"] for c in status["containerStatuses"]), status["containerStatuses"]
    # The URL the client uses is the proxy's own Service (it selects the Envoy pod only), not a backend's.
    services = envoy_gateway.proxy_services(ns, "front")
    assert [s["spec"]["clusterIP"] for s in services] == [routed.removeprefix("http://")]
    selector = services[0]["spec"]["selector"]
    assert selector.items() <= pods[0]["metadata"]["labels"].items(), (selector, pods[0]["metadata"]["labels"])


def test_a_request_through_envoy_reaches_the_backend_its_header_names(routed: str) -> None:
    for name in ("alpha", "beta"):
        status, body, headers = _eventually(f"{routed}/index.html", {MODEL_HEADER: name}, 200)
        assert (status, body) == (200, f"hello from {name}\n"), (status, body, headers)


def test_a_model_no_route_names_is_404_from_the_gateway(routed: str) -> None:
    _eventually(f"{routed}/index.html", {MODEL_HEADER: "alpha"}, 200)
    status, body, _ = _get(f"{routed}/index.html", {MODEL_HEADER: "gamma"})
    assert status == 404, (status, body)
    status, body, _ = _get(f"{routed}/index.html", {})
    assert status == 404, (status, body)


def _policy_accepted(envoy_gateway: EnvoyGateway, kind: str, name: str, ns: str) -> bool:
    status = envoy_gateway.get(kind, name, ns).get("status") or {}
    conditions = [c for a in status.get("ancestors") or [] for c in a.get("conditions") or []]
    return any(c.get("type") == "Accepted" and c.get("status") == "True" for c in conditions)


def test_the_operators_envoy_gateway_policies_are_accepted_and_fail_closed_while_the_picker_is_down(
        real_cluster: LocalCluster, envoy_gateway: EnvoyGateway, ns: str, routed: str) -> None:
    """What the operator renders for routing.gateway.implementation EnvoyGateway (the HTTPRoute to the fleet's
    Service, the EnvoyExtensionPolicy to the picker, the BackendTrafficPolicy), applied as rendered but without the
    owner reference (no QwenInference in this namespace) beside a busybox "gamma" on the fleet's Service name.
    Envoy Gateway's controller accepts the traffic policy; with the picker's Service selecting no pod it refuses the
    extension policy naming why and fails the route closed (a 500); the extension policy removed, the same request
    reaches the backend, so the failure was the picker's policy and not the route."""
    from qwen_fleet.api import QwenInference
    from qwen_fleet.config import OperatorConfig
    from qwen_fleet.plan import make_plan
    from qwen_fleet.render import ALL_CAPABILITIES, render_children

    cr = QwenInference.model_validate({"metadata": {"name": "gamma", "namespace": ns, "uid": "none"}, "spec": {
        "model": {"name": "Qwen/Qwen3-4B-Instruct-2507"}, "gpu": {"product": "NVIDIA-A10G"},
        "service": {"port": 8080},
        "routing": {"gateway": {"name": "front", "sectionName": "http", "implementation": "EnvoyGateway",
                                "routeByModel": True}}}})
    wanted = {("Service", "gamma-epp"), ("HTTPRoute", "gamma"), ("EnvoyExtensionPolicy", "gamma-epp"),
              ("BackendTrafficPolicy", "gamma")}
    rendered = [c for c in render_children(cr, make_plan(cr, OperatorConfig()), ALL_CAPABILITIES)
                if (c["kind"], c["metadata"]["name"]) in wanted]
    assert len(rendered) == len(wanted)
    apply(real_cluster, ns, web_pod("gamma"))
    apply(real_cluster, ns, _service("gamma"))
    for child in rendered:
        child["metadata"].pop("ownerReferences")
        apply(real_cluster, ns, child)
    wait_ready(real_cluster, ns, "gamma")
    envoy_gateway.wait_for("BackendTrafficPolicy/gamma Accepted", lambda: _policy_accepted(
        envoy_gateway, "BackendTrafficPolicy", "gamma", ns), timeout=90)
    # With no ready picker endpoint Envoy Gateway does not accept the extension policy: it names the cause and
    # answers the route with a 500 of its own (seen in the first run's controller log: "setting 500 direct response
    # in routes due to errors in EnvoyExtensionPolicy ... no ready endpoints for the related Service").
    envoy_gateway.wait_for("EnvoyExtensionPolicy/gamma-epp naming the missing picker", lambda: "no ready endpoints" in
                           json.dumps(envoy_gateway.get("EnvoyExtensionPolicy", "gamma-epp", ns).get("status")),
                           timeout=90)

    headers = {"X-Gateway-Model-Name": "gamma"}  # what the Body-Based Router writes from the body's model
    # Until the proxy has the route and the filter (xDS push) the answer may be 404 or the page; then 5xx.
    deadline = time.monotonic() + 90
    status, body = 0, ""
    while time.monotonic() < deadline and status < 500:
        status, body, _ = _get(f"{routed}/index.html", headers)
        time.sleep(1)
    assert status >= 500 and "hello from gamma" not in body, (status, body)
    print(f"picker down, FailClose: {status} {body[:80]!r}")
    # The other fleets' routes are untouched by gamma's policies.
    assert _get(f"{routed}/index.html", {MODEL_HEADER: "alpha"})[:2] == (200, "hello from alpha\n")

    real_cluster.kubectl("delete", "envoyextensionpolicy", "gamma-epp", "-n", ns)
    status, body, _ = _eventually(f"{routed}/index.html", headers, 200, timeout=90)
    assert (status, body) == (200, "hello from gamma\n"), (status, body)
