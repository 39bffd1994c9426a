"""The webhook's HTTPS server on loopback: answers AdmissionReviews, and a rotated certificate (the mounted
Secret's files replaced in place) is served to new connections without a restart."""

from __future__ import annotations

import json
import os
import shutil
import socket
import ssl
import subprocess
import urllib.request
from datetime import UTC, datetime
from pathlib import Path

from prometheus_client import REGISTRY

from qwen_fleet.admission.server import PATH, CertificateFiles, WebhookServer, WebhookSettings
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


def _openssl_end_date(cert: Path) -> float:
    """The oracle: openssl's reading of notAfter, not the stdlib decoder the server uses."""
    out = subprocess.run(["openssl", "x509", "-enddate", "-noout", "-in", str(cert)], check=True,
                         capture_output=True, text=True).stdout.strip()
    when = datetime.strptime(out.removeprefix("notAfter="), "%b %d %H:%M:%S %Y %Z")
    return when.replace(tzinfo=UTC).timestamp()


def test_the_certificates_expiry_is_a_metric_that_follows_rotation(tmp_path: Path) -> None:
    short, long = make_serving_cert(tmp_path / "a", days=2), make_serving_cert(tmp_path / "b", days=40)
    mounted = tmp_path / "mounted"
    mounted.mkdir()
    for name in ("tls.crt", "tls.key"):
        shutil.copy(short.cert.with_name(name), mounted / name)
    files = CertificateFiles(mounted / "tls.crt", mounted / "tls.key")
    metric = "qwen_fleet_webhook_cert_expiry_timestamp_seconds"
    assert REGISTRY.get_sample_value(metric) == _openssl_end_date(short.cert)
    for name in ("tls.crt", "tls.key"):
        shutil.copy(long.cert.with_name(name), mounted / name)
    os.utime(mounted / "tls.crt", (1, 1))  # a new mtime even within the filesystem's timestamp granularity
    assert files.reload()
    assert REGISTRY.get_sample_value(metric) == _openssl_end_date(long.cert)
    assert _openssl_end_date(long.cert) - _openssl_end_date(short.cert) > 37 * 86400
