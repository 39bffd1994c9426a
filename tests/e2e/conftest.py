"""End-to-end fixtures: the autoscaler's metrics path (Prometheus, prometheus-adapter, a fake dcgm-exporter).
The engines are the modules' own (test_autoscaling.py: the llm-d inference simulator; test_dashboard_live.py: the
session's real vLLM server). Missing binaries are built, never skipped.
"""

from __future__ import annotations

import subprocess
from collections.abc import Iterator
from pathlib import Path

import pytest

from qwen_fleet_dev import metrics_stack as ms
from qwen_fleet_dev.binaries import repo_root
from qwen_fleet_dev.cluster import LocalCluster


def _ensure_metrics_binaries() -> None:
    if all(p.exists() for p in (ms.prometheus_binary(), ms.adapter_binary())):
        return
    root = repo_root()
    assert root is not None, "the metrics binaries are built from the source checkout's hack/build-binaries.sh"
    subprocess.run([str(root / "hack" / "build-binaries.sh"), "prometheus", "adapter"], check=True)


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
