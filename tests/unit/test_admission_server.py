"""The webhook's HTTPS server on loopback: answers AdmissionReviews, and a rotated certificate (the mounted
Secret's files replaced in place) is served to new connections without a restart."""

from __future__ import annotations

import json
import shutil
import socket
import ssl
import urllib.request
from pathlib import Path

from qwen_fleet.admission.server import PATH, WebhookServer, WebhookSettings
from qwen_fleet.config import OperatorConfig
from qwen_fleet_dev.cluster import free_port
from tests.support.webhook_certs import make_serving_cert


def _served_certificate(port: int) -> bytes:
    context = ssl.create_default_context()
    context.check_hostname, context.verify_mode = False, ssl.CERT_NONE
    with socket.create_connection(("127.0.0.1", port), timeout=10) as raw, \
            context.wrap_socket(raw, server_hostname="127.0.0.1") as tls:
        der = tls.getpeercert(binary_form=True)
    assert der is not None
    return der


def test_answers_reviews_and_serves_a_rotated_certificate(tmp_path: Path) -> None:
    first, second = make_serving_cert(tmp_path / "a"), make_serving_cert(tmp_path / "b")
    mounted = tmp_path / "mounted"
    mounted.mkdir()
    for name in ("tls.crt", "tls.key"):
        shutil.copy(first.cert.with_name(name), mounted / name)
    port = free_port()
    server = WebhookServer(WebhookSettings(port, mounted / "tls.crt", mounted / "tls.key", host="127.0.0.1"),
                           OperatorConfig()).start()
    try:
        trusted = ssl.create_default_context(cafile=str(first.ca))
        body = {"request": {"uid": "u", "operation": "CREATE", "object": {
            "metadata": {"name": "q", "namespace": "ns"},
            "spec": {"model": {"name": "Qwen/Qwen3.6-27B"}, "gpu": {"product": "NVIDIA-A10G"}}}}}
        request = urllib.request.Request(f"https://127.0.0.1:{port}{PATH}", data=json.dumps(body).encode(),
                                         headers={"Content-Type": "application/json"})
        with urllib.request.urlopen(request, context=trusted, timeout=10) as answer:
            response = json.load(answer)["response"]
        assert response["allowed"] is False and response["status"]["message"].startswith("WeightsDoNotFit")
        before = _served_certificate(port)
        for name in ("tls.crt", "tls.key"):
            shutil.copy(second.cert.with_name(name), mounted / name)
        assert server.certificate.reload()  # what the server's watch loop does every RELOAD_SECONDS
        assert not server.certificate.reload()  # unchanged files: nothing to do
        after = _served_certificate(port)
        assert before != after
        assert after == ssl.PEM_cert_to_DER_cert(second.cert.read_text())
    finally:
        server.stop()
