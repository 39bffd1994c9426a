"""A real gateway in the data path: Envoy Gateway's controller and an Envoy proxy as pods on the real node.

Upstream's chart installs the controller from the locally built image; a Gateway of our class gets an Envoy
Deployment (the PyPI build of Envoy on Debian) and a ClusterIP Service; requests from the host go to that Service,
through Envoy, to busybox pods behind an HTTPRoute. Every assertion is on what the client received.

The last three tests put the operator's rendering for routing.auth.apiKeys and routing.canary on an HTTPS listener
of the same Gateway: TLS with our certificate, 401/200 by key, and a weight shift under a steady client.

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
from http.client import HTTPException
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


# --- keys, TLS and a canary through the real Envoy (routing.auth.apiKeys, routing.canary; docs/gateway.md) ---------

TLS_HOST = "qwen.test"  # the certificate's name; the client sends it as SNI and checks the certificate against it
SECURE_MODEL = "qwen-gw"  # the served model name of the two fleets below (the client sets the BBR's header)


def _fleet_children(ns: str, canary_weight: int) -> list[dict[str, Any]]:
    """What the operator renders for fleet "stable" (routing EnvoyGateway by model on the https listener, an API
    key from Secret gw-keys, routing.canary to fleet "next"): its HTTPRoute, BackendTrafficPolicy and
    SecurityPolicy, without the owner reference (no QwenInference here) and without the EnvoyExtensionPolicy (no
    picker runs here: Envoy falls back to least-request, as the endpoint override says when no header names an
    endpoint). The two fleets' Services are busybox pages on port 8080 that name their pod."""
    from qwen_fleet.api import QwenInference
    from qwen_fleet.config import OperatorConfig
    from qwen_fleet.plan import make_plan
    from qwen_fleet.render import ALL_CAPABILITIES, render_children

    routing: dict[str, Any] = {"gateway": {"name": "front", "sectionName": "https", "implementation": "EnvoyGateway",
                                           "routeByModel": True},
                               "canary": {"fleet": "next", "weight": canary_weight},
                               "auth": {"apiKeys": {"secretRefs": [{"name": "gw-keys"}]}}}
    cr = QwenInference.model_validate({"metadata": {"name": "stable", "namespace": ns, "uid": "none"}, "spec": {
        "model": {"name": "Qwen/Qwen3-4B-Instruct-2507", "servedModelName": SECURE_MODEL},
        "gpu": {"product": "NVIDIA-A10G"}, "service": {"port": 8080}, "routing": routing}})
    wanted = {"HTTPRoute", "BackendTrafficPolicy", "SecurityPolicy"}
    out = [c for c in render_children(cr, make_plan(cr, OperatorConfig()), ALL_CAPABILITIES) if c["kind"] in wanted]
    assert {c["kind"] for c in out} == wanted
    for child in out:
        child["metadata"].pop("ownerReferences")
    return out


def _tls_secret(real_cluster: LocalCluster, ns: str, workdir: Any) -> Any:
    """A self-signed certificate for TLS_HOST as the kubernetes.io/tls Secret front-tls; returns its PEM path."""
    import subprocess

    cert, key = workdir / "tls.crt", workdir / "tls.key"
    subprocess.run(["openssl", "req", "-x509", "-newkey", "rsa:2048", "-nodes", "-keyout", str(key), "-out",
                    str(cert), "-days", "1", "-subj", f"/CN={TLS_HOST}", "-addext",
                    f"subjectAltName=DNS:{TLS_HOST}"], check=True, capture_output=True, timeout=60)
    real_cluster.kubectl("create", "secret", "tls", "front-tls", f"--cert={cert}", f"--key={key}", "-n", ns)
    return cert


def _https(address: str, cafile: Any, headers: dict[str, str], timeout: float = 10) -> tuple[int, str, str]:
    """GET /index.html over TLS to the gateway's 443, SNI and certificate check for TLS_HOST (the address is the
    proxy Service's ClusterIP, which the certificate does not name); returns (status, body, peer CN)."""
    import http.client
    import socket
    import ssl

    context = ssl.create_default_context(cafile=str(cafile))
    raw = socket.create_connection((address, 443), timeout=timeout)
    tls = context.wrap_socket(raw, server_hostname=TLS_HOST)
    peer = tls.getpeercert() or {}
    names = [str(pair[1]) for rdn in peer.get("subject", ()) for pair in rdn if pair[0] == "commonName"]
    conn = http.client.HTTPConnection(address, 443, timeout=timeout)
    conn.sock = tls
    try:
        conn.request("GET", "/index.html", headers=headers)
        resp = conn.getresponse()
        return resp.status, resp.read().decode(errors="replace"), ",".join(names)
    finally:
        conn.close()


@pytest.fixture(scope="module")
def secure(real_cluster: LocalCluster, envoy_gateway: EnvoyGateway, ns: str, routed: str,
           tmp_path_factory: pytest.TempPathFactory) -> tuple[str, Any, str]:
    """Gateway "front" with an https listener beside its http one (TLS terminated with front-tls), fleets "stable"
    and "next" as busybox pages behind the operator's rendered route at 100/0, key Secret gw-keys; returns
    (address, CA file, the key)."""
    cafile = _tls_secret(real_cluster, ns, tmp_path_factory.mktemp("tls"))
    key = f"sk-qf-{uuid.uuid4().hex}"
    real_cluster.kubectl("create", "secret", "generic", "gw-keys", f"--from-literal=team-a={key}", "-n", ns)
    for name in ("stable", "next"):
        apply(real_cluster, ns, web_pod(name))
        apply(real_cluster, ns, _service(name))
    front = gateway(ns, "front")
    front["spec"]["listeners"].append({
        "name": "https", "protocol": "HTTPS", "port": 443, "allowedRoutes": {"namespaces": {"from": "Same"}},
        "tls": {"mode": "Terminate", "certificateRefs": [{"group": "", "kind": "Secret", "name": "front-tls"}]}})
    apply(real_cluster, ns, front)
    for child in _fleet_children(ns, canary_weight=0):
        apply(real_cluster, ns, child)
    for name in ("stable", "next"):
        wait_ready(real_cluster, ns, name)
    address = envoy_gateway.wait_programmed(ns, "front")
    envoy_gateway.wait_for("SecurityPolicy/stable Accepted",
                           lambda: _policy_accepted(envoy_gateway, "SecurityPolicy", "stable", ns), timeout=90)
    headers = {"X-Gateway-Model-Name": SECURE_MODEL, "Authorization": f"Bearer {key}"}

    def answers() -> bool:
        try:
            return _https(address, cafile, headers)[0] == 200
        except OSError:  # the 443 listener or its route not pushed yet
            return False

    envoy_gateway.wait_for("the https listener answering", answers, timeout=120)
    return address, cafile, key


def test_tls_on_the_listener_serves_our_certificate_and_plain_http_gets_no_answer_there(secure: tuple[str, Any, str],
                                                                                         routed: str) -> None:
    address, cafile, key = secure
    status, body, common_name = _https(address, cafile, {"X-Gateway-Model-Name": SECURE_MODEL,
                                                         "Authorization": f"Bearer {key}"})
    assert (status, body, common_name) == (200, "hello from stable\n", TLS_HOST)
    # Plain HTTP to the TLS port: no HTTP answer (Envoy expects a TLS ClientHello there).
    try:
        plain = _get(f"http://{address}:443/index.html", {"X-Gateway-Model-Name": SECURE_MODEL,
                                                           "Authorization": f"Bearer {key}"})[0]
    except (OSError, HTTPException):  # reset, or bytes that are not an HTTP response
        plain = 0
    assert plain != 200, plain
    # The route is attached to the https listener only: the same request on the http listener matches nothing.
    assert _get(f"{routed}/index.html", {"X-Gateway-Model-Name": SECURE_MODEL,
                                         "Authorization": f"Bearer {key}"})[0] == 404


def test_no_key_or_a_wrong_key_is_401_from_the_gateway_and_the_right_key_200(secure: tuple[str, Any, str]) -> None:
    address, cafile, key = secure
    model = {"X-Gateway-Model-Name": SECURE_MODEL}
    assert _https(address, cafile, model)[0] == 401
    assert _https(address, cafile, {**model, "Authorization": "Bearer sk-wrong"})[0] == 401
    assert _https(address, cafile, {**model, "Authorization": f"Bearer {key[:-1]}"})[0] == 401
    status, body, _ = _https(address, cafile, {**model, "Authorization": f"Bearer {key}"})
    assert (status, body) == (200, "hello from stable\n")


def test_a_weight_shift_100_0_to_50_50_to_0_100_under_a_steady_client_fails_no_request(
        real_cluster: LocalCluster, ns: str, secure: tuple[str, Any, str]) -> None:
    """One client sends requests back to back over TLS with the key while the route's weights move; every answer
    is counted by the page that answered it (or as a failure: any status but 200, or no answer)."""
    import threading

    address, cafile, key = secure
    headers = {"X-Gateway-Model-Name": SECURE_MODEL, "Authorization": f"Bearer {key}"}
    answers: list[str] = []
    failures: list[str] = []
    stop = threading.Event()

    def client() -> None:
        while not stop.is_set():
            try:
                status, body, _ = _https(address, cafile, headers)
            except OSError as exc:
                failures.append(f"no answer: {exc}")
                continue
            if status != 200:
                failures.append(f"{status} {body[:80]}")
            else:
                answers.append(body.strip().removeprefix("hello from "))

    def window(after: int, size: int, timeout: float = 120) -> list[str]:
        deadline = time.monotonic() + timeout
        while len(answers) < after + size and time.monotonic() < deadline:
            time.sleep(0.2)
        assert len(answers) >= after + size, (len(answers), after, size, failures)
        return answers[after:after + size]

    def settled(expected: set[str], run: int = 20, timeout: float = 120) -> int:
        """Once the newest ``run`` answers all come from ``expected`` (xDS has pushed the weights): the index."""
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            if len(answers) >= run and set(answers[-run:]) <= expected:
                return len(answers)
            time.sleep(0.2)
        raise AssertionError(f"never settled on {expected}: {answers[-run:]}, failures {failures[:5]}")

    thread = threading.Thread(target=client, daemon=True)
    thread.start()
    try:
        assert set(window(settled({"stable"}), 40)) == {"stable"}  # 100/0
        for child in _fleet_children(ns, canary_weight=50):
            apply(real_cluster, ns, child)
        # 50/50: both answer; over 100 requests each well above a fifth (a binomial 100 x 0.5 is below 20 with
        # probability ~1e-9).
        deadline = time.monotonic() + 120
        while time.monotonic() < deadline and not {"stable", "next"} <= set(answers[-20:]):
            time.sleep(0.2)
        half = window(len(answers), 100)
        print(f"50/50 window: stable {half.count('stable')}, next {half.count('next')}")
        assert half.count("stable") >= 20 and half.count("next") >= 20, half
        for child in _fleet_children(ns, canary_weight=100):
            apply(real_cluster, ns, child)
        assert set(window(settled({"next"}), 40)) == {"next"}  # 0/100
    finally:
        stop.set()
        thread.join(timeout=30)
    print(f"{len(answers)} answers through the shift, {len(failures)} failed")
    assert failures == [], failures[:10]
