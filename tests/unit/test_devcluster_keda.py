"""The local KEDA's wiring (devtools/qwen_fleet_dev/keda.py, pki.py) and the side-by-side record's reading of an HPA."""

from __future__ import annotations

import subprocess
from pathlib import Path

import pytest
from bench.keda_vs_hpa import _hpa_view, markdown

from qwen_fleet import versions
from qwen_fleet_dev import keda
from qwen_fleet_dev.pki import make_loopback_serving_pki


def test_one_certificate_serves_and_authenticates_both_ends_and_names_the_apiservice_service(tmp_path: Path) -> None:
    pki = make_loopback_serving_pki(tmp_path, "keda", dns_names=("keda-metrics-apiserver.keda.svc",),
                                    client_auth=True)
    text = subprocess.run(["openssl", "x509", "-in", str(pki.cert), "-noout", "-text"], check=True,
                          capture_output=True, text=True).stdout
    assert "TLS Web Server Authentication, TLS Web Client Authentication" in text
    assert "DNS:keda-metrics-apiserver.keda.svc" in text and "IP Address:127.0.0.1" in text
    verify = subprocess.run(["openssl", "verify", "-CAfile", str(pki.ca), "-purpose", "sslclient", str(pki.cert)],
                            capture_output=True, text=True)
    assert verify.returncode == 0, verify.stdout + verify.stderr


def test_a_webhook_certificate_stays_server_only(tmp_path: Path) -> None:
    pki = make_loopback_serving_pki(tmp_path, "hook")
    verify = subprocess.run(["openssl", "verify", "-CAfile", str(pki.ca), "-purpose", "sslclient", str(pki.cert)],
                            capture_output=True, text=True)
    assert verify.returncode != 0


def test_an_empty_cache_lacks_both_binaries_and_the_crds(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("QF_CACHE", str(tmp_path))
    home = tmp_path / "keda" / versions.KEDA
    assert keda.missing() == [home / "bin" / "keda", home / "bin" / "keda-adapter", home / "crds"]


def test_the_record_reads_the_queue_metric_of_either_hpa() -> None:
    pods_hpa = {"status": {"desiredReplicas": 3, "conditions": [{"type": "ScalingActive", "status": "True"}],
                           "currentMetrics": [
                               {"type": "Pods", "pods": {"metric": {"name": "vllm_num_requests_waiting"},
                                                         "current": {"averageValue": "10"}}},
                               {"type": "Pods", "pods": {"metric": {"name": "vllm_kv_cache_usage_ratio"},
                                                         "current": {"averageValue": "100m"}}}]}}
    keda_hpa = {"status": {"desiredReplicas": 3, "conditions": [{"type": "ScalingActive", "status": "False"}],
                           "currentMetrics": [
                               {"type": "External", "external": {"metric": {"name": "s1-prometheus"},
                                                                 "current": {"averageValue": "100m"}}},
                               {"type": "External", "external": {"metric": {"name": "s0-prometheus"},
                                                                 "current": {"averageValue": "3334m"}}}]}}
    assert _hpa_view(pods_hpa) == (3, 10.0, True)
    assert _hpa_view(keda_hpa) == (3, 3.334, False)
    assert _hpa_view({}) == (None, None, False)


def test_the_markdown_keeps_only_rows_where_something_changed() -> None:
    row = {"waiting": 10.0, "hpa_replicas": 1, "hpa_desired": 1, "hpa_metric": 0.0, "keda_replicas": 1,
           "keda_desired": 1, "keda_metric": 0.0}
    results = {"steps": [{"waiting": 10, "expected_replicas": 3, "hpa_reached_s": 7.5, "keda_reached_s": 6.0}],
               "samples": [{"t": 0.0, **row}, {"t": 0.5, **row}, {"t": 1.0, **row, "keda_replicas": 3}]}
    text = markdown(results)
    assert "| 10 | 3 | 7.5 s | 6.0 s |" in text
    assert "| 0.0 |" in text and "| 0.5 |" not in text and "| 1.0 |" in text
