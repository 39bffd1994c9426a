"""KubeClient's connections, against a real TLS server on 127.0.0.1 (Python's ssl and http.server, certificates
made by the `openssl` CLI): connections are reused up to the pool's size, TLS files are read once for all
connections (not once per connection), and verification, the client certificate, the token and the User-Agent
still reach the server. Counts come from the server's accepts and from the ssl module, not from the client."""

from __future__ import annotations

import asyncio
import ssl
import subprocess
import threading
from collections import Counter
from collections.abc import Callable, Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any

import pytest
import yaml

from qwen_fleet import __version__
from qwen_fleet.reconcile.kube import KubeClient, KubeError


def _self_signed(dir_: Path, name: str) -> tuple[Path, Path]:
    cert, key = dir_ / f"{name}.crt", dir_ / f"{name}.key"
    subprocess.run(["openssl", "req", "-x509", "-newkey", "ec", "-pkeyopt", "ec_paramgen_curve:P-256", "-nodes",
                    "-keyout", str(key), "-out", str(cert), "-days", "1", "-subj", f"/CN={name}",
                    "-addext", "subjectAltName=IP:127.0.0.1"], check=True, capture_output=True)
    return cert, key


@pytest.fixture(scope="module")
def pki(tmp_path_factory: pytest.TempPathFactory) -> dict[str, tuple[Path, Path]]:
    d = tmp_path_factory.mktemp("pki")
    return {name: _self_signed(d, name) for name in ("server", "client", "stranger")}


class ApiServer(ThreadingHTTPServer):
    """Answers every request with {} over keep-alive HTTP/1.1; closes the connection after every
    ``close_every``-th request (as an apiserver closing idle connections makes the client reconnect)."""

    daemon_threads = True

    def __init__(self, context: ssl.SSLContext, close_every: int = 0) -> None:
        self.context = context
        self.close_every = close_every
        self.accepted = 0
        self.requests: list[dict[str, str]] = []
        self.lock = threading.Lock()
        super().__init__(("127.0.0.1", 0), Handler)

    def get_request(self) -> tuple[Any, Any]:
        sock, addr = self.socket.accept()
        with self.lock:
            self.accepted += 1
        return self.context.wrap_socket(sock, server_side=True), addr


class Handler(BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"
    server: ApiServer

    def _answer(self) -> None:
        self.rfile.read(int(self.headers.get("Content-Length") or 0))
        with self.server.lock:
            self.server.requests.append({k.lower(): v for k, v in self.headers.items()})
            n = len(self.server.requests)
        body = b"{}"
        self.send_response(200)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(body)))
        if self.server.close_every and n % self.server.close_every == 0:
            self.send_header("Connection", "close")
            self.close_connection = True
        self.end_headers()
        self.wfile.write(body)

    do_GET = do_PATCH = do_POST = _answer

    def log_message(self, format: str, *args: Any) -> None:
        pass


@pytest.fixture
def serve(pki: dict[str, tuple[Path, Path]]) -> Iterator[Callable[..., ApiServer]]:
    servers: list[ApiServer] = []

    def start(close_every: int = 0, client_ca: Path | None = None) -> ApiServer:
        context = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
        context.load_cert_chain(*pki["server"])
        if client_ca:  # mutual TLS: a client without a certificate signed by client_ca is refused
            context.verify_mode = ssl.CERT_REQUIRED
            context.load_verify_locations(cafile=str(client_ca))
        server = ApiServer(context, close_every)
        threading.Thread(target=server.serve_forever, daemon=True).start()
        servers.append(server)
        return server

    yield start
    for server in servers:
        server.shutdown()
        server.server_close()


def _kubeconfig(path: Path, port: int, cluster: dict[str, Any], user: dict[str, Any]) -> str:
    path.write_text(yaml.safe_dump({
        "apiVersion": "v1", "kind": "Config", "current-context": "t",
        "clusters": [{"name": "t", "cluster": {"server": f"https://127.0.0.1:{port}", **cluster}}],
        "users": [{"name": "t", "user": user}],
        "contexts": [{"name": "t", "context": {"cluster": "t", "user": "t"}}],
    }))
    return str(path)


@pytest.fixture
def tls_loads(monkeypatch: pytest.MonkeyPatch) -> Counter[str]:
    """How often anything in the process reads CAs or a certificate into an SSL context."""
    counts: Counter[str] = Counter()
    for method in ("load_verify_locations", "load_default_certs", "load_cert_chain"):
        original = getattr(ssl.SSLContext, method)

        def counted(self: ssl.SSLContext, *args: Any, _original: Any = original, _name: str = method,
                    **kwargs: Any) -> Any:
            counts[_name] += 1
            return _original(self, *args, **kwargs)

        monkeypatch.setattr(ssl.SSLContext, method, counted)
    return counts


def _burst(kube: KubeClient, n: int) -> list[Any]:
    async def run() -> list[Any]:
        return await asyncio.gather(*(kube.request("PATCH", f"/api/v1/namespaces/x/things/t{i}", body={"i": i},
                                                   content_type="application/merge-patch+json")
                                      for i in range(n)))
    return asyncio.run(run())


def test_a_burst_reuses_at_most_pool_size_connections(serve: Callable[..., ApiServer], pki: Any,
                                                      tmp_path: Path) -> None:
    server = serve()
    config = _kubeconfig(tmp_path / "kc", server.server_port,
                         {"certificate-authority": str(pki["server"][0])}, {"token": "t0k3n"})
    kube = KubeClient.from_environment(workers=4, kubeconfig=config, identity="pod-a_1")
    try:
        assert _burst(kube, 200) == [{}] * 200
    finally:
        kube.close()
    assert len(server.requests) == 200
    assert 1 <= server.accepted <= 4  # the pool's size (max(workers, 4)): no connection opened and thrown away
    assert {r["authorization"] for r in server.requests} == {"Bearer t0k3n"}
    assert {r["user-agent"] for r in server.requests} == {f"qwen-fleet/{__version__} (pod-a_1)"}


def test_new_connections_reuse_one_context_with_ca_and_client_certificate(
        serve: Callable[..., ApiServer], pki: Any, tmp_path: Path, tls_loads: Counter[str]) -> None:
    server = serve(close_every=5, client_ca=pki["client"][0])
    tls_loads.clear()  # the server's own
    config = _kubeconfig(tmp_path / "kc", server.server_port, {"certificate-authority": str(pki["server"][0])},
                         {"client-certificate": str(pki["client"][0]), "client-key": str(pki["client"][1])})
    kube = KubeClient.from_environment(workers=4, kubeconfig=config)
    try:
        assert _burst(kube, 100) == [{}] * 100
    finally:
        kube.close()
    assert server.accepted >= 100 // 5  # the server closed a connection after every 5th request
    # The CA and the client certificate were read once, for all those connections; no system bundle.
    assert dict(tls_loads) == {"load_verify_locations": 1, "load_cert_chain": 1}


def test_without_verification_no_ca_bundle_is_loaded(serve: Callable[..., ApiServer], tmp_path: Path,
                                                     tls_loads: Counter[str]) -> None:
    server = serve(close_every=3)
    tls_loads.clear()  # the server's own
    config = _kubeconfig(tmp_path / "kc", server.server_port, {"insecure-skip-tls-verify": True}, {"token": "t"})
    kube = KubeClient.from_environment(workers=2, kubeconfig=config)
    try:
        assert _burst(kube, 30) == [{}] * 30
    finally:
        kube.close()
    assert server.accepted >= 10
    assert dict(tls_loads) == {}  # urllib3 loaded the system bundle for each of those connections before


def test_verification_still_refuses_a_server_the_ca_did_not_sign(serve: Callable[..., ApiServer], pki: Any,
                                                                 tmp_path: Path) -> None:
    server = serve()
    config = _kubeconfig(tmp_path / "kc", server.server_port,
                         {"certificate-authority": str(pki["stranger"][0])}, {"token": "t"})
    kube = KubeClient.from_environment(workers=1, kubeconfig=config)
    try:
        with pytest.raises(KubeError) as refused:
            kube._request_sync("GET", "/version")
    finally:
        kube.close()
    assert refused.value.status == 0 and "CERTIFICATE_VERIFY_FAILED" in str(refused.value)
    assert server.requests == []


def test_mutual_tls_without_the_client_certificate_is_refused(serve: Callable[..., ApiServer], pki: Any,
                                                              tmp_path: Path) -> None:
    """The converse of the client-certificate test above: the server really checks for one."""
    server = serve(client_ca=pki["client"][0])
    config = _kubeconfig(tmp_path / "kc", server.server_port,
                         {"certificate-authority": str(pki["server"][0])}, {"token": "t"})
    kube = KubeClient.from_environment(workers=1, kubeconfig=config)
    try:
        with pytest.raises(KubeError):
            kube._request_sync("GET", "/version")
    finally:
        kube.close()
    assert server.requests == []
