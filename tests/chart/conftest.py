"""Fixtures of the chart tests: one audited control plane for the whole package, the monitoring CRDs, kstatus.

The chart's end-to-end tests install the chart and run the operator under the chart's own ServiceAccount, so
they get their own control plane (started once for tests/chart, ~15 s) instead of the suite's shared one,
whose operator runs as a cluster admin: two operators must not reconcile the same resources, and the audit
log here must only hold the chart identity's requests.
"""

from __future__ import annotations

import subprocess
from collections.abc import Iterator
from pathlib import Path

import pytest

from qwen_fleet.devcluster import binaries
from qwen_fleet.devcluster.cluster import LocalCluster
from tests.chart.support import ROOT, AuditedCluster

MONITORING_CRDS = Path(__file__).with_name("monitoring-crds.yaml")


@pytest.fixture(scope="package")
def chart_cluster(tmp_path_factory: pytest.TempPathFactory) -> Iterator[LocalCluster]:
    binaries.ensure()
    cluster = AuditedCluster(workdir=tmp_path_factory.mktemp("chart-cluster"))
    cluster.start()
    try:
        # The Prometheus Operator's kinds exist from the start: dry-runs of ServiceMonitor/PrometheusRule need
        # them, and the operator then watches, applies and prunes both kinds (so the audit covers their rules).
        cluster.install_crd(MONITORING_CRDS, "servicemonitors.monitoring.coreos.com")
        cluster.install_crd(MONITORING_CRDS, "prometheusrules.monitoring.coreos.com")
        yield cluster
    finally:
        cluster.stop()


@pytest.fixture(scope="session")
def kstatus_bin() -> Path:
    """hack/kstatus: sigs.k8s.io/cli-utils' kstatus (what Flux waits with), built once and cached."""
    out = subprocess.run([str(ROOT / "hack" / "kstatus" / "build.sh")], check=True, capture_output=True,
                         text=True, timeout=600)
    return Path(out.stdout.strip().splitlines()[-1])
