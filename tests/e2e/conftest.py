"""End-to-end fixtures: the autoscaler's metrics path (Prometheus, prometheus-adapter, a fake dcgm-exporter)
and a real vLLM CPU server on a tiny Qwen2 model. Missing binaries are built, never skipped.
"""

from __future__ import annotations

import subprocess
from collections.abc import Iterator
from pathlib import Path

import pytest
from bench.autoscaling import ENGINE_ENV, SERVER_ARGS, EarlyVllmServer

from qwen_fleet_dev import metrics_stack as ms
from qwen_fleet_dev.binaries import repo_root
from qwen_fleet_dev.cluster import LocalCluster
from tests.support.tiny_qwen import TinyQwen, make_tiny_model


def _ensure_metrics_binaries() -> None:
    if all(p.exists() for p in (ms.prometheus_binary(), ms.adapter_binary())):
        return
    root = repo_root()
    assert root is not None, "the metrics binaries are built from the source checkout's hack/build-binaries.sh"
    subprocess.run([str(root / "hack" / "build-binaries.sh"), "prometheus", "adapter"], check=True)


@pytest.fixture(scope="session")
def autoscaling_vllm(tmp_path_factory: pytest.TempPathFactory, vllm_python: str) -> Iterator[EarlyVllmServer]:
    """A real vLLM server (``--max-num-seqs 4``), spawned but not yet waited for.

    Session scope only so that pytest creates it before the session-scoped control plane: the engine's
    minute-long start-up then overlaps the cluster's. The test calls ``wait_ready()`` and stops it when done.
    """
    model = make_tiny_model(tmp_path_factory.mktemp("tiny-qwen2-autoscaling"), TinyQwen(), python=vllm_python)
    server = EarlyVllmServer(SERVER_ARGS, ENGINE_ENV, model, python=vllm_python,
                             log_path=tmp_path_factory.mktemp("vllm-autoscaling") / "vllm.log").begin()
    try:
        yield server
    finally:
        server.stop()


@pytest.fixture(scope="module")
def metrics_stack(cluster: LocalCluster, tmp_path_factory: pytest.TempPathFactory) -> Iterator[ms.MetricsStack]:
    """Prometheus + prometheus-adapter fed exactly the adapter rules the chart renders."""
    _ensure_metrics_binaries()
    workdir: Path = tmp_path_factory.mktemp("metrics")
    stack = ms.MetricsStack(cluster, ms.chart_adapter_rules(cluster.bins.helm), workdir).start()
    try:
        yield stack
    finally:
        stack.stop()


@pytest.fixture(scope="module")
def dcgm_exporter(metrics_stack: ms.MetricsStack) -> Iterator[ms.FakeDcgmExporter]:
    exporter = ms.FakeDcgmExporter().start()
    metrics_stack.set_dcgm_targets([exporter.address])
    try:
        yield exporter
    finally:
        exporter.stop()
