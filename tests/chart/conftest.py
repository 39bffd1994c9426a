"""Fixtures of the chart tests: one audited control plane for the whole package, third-party CRDs, kstatus.

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

from qwen_fleet_dev import binaries
from qwen_fleet_dev.cluster import LocalCluster
from tests.chart.support import ROOT, AuditedCluster
from tests.support.third_party import crd_name, third_party_crds


@pytest.fixture(scope="package")
def chart_cluster(tmp_path_factory: pytest.TempPathFactory) -> Iterator[LocalCluster]:
    binaries.ensure()
    cluster = AuditedCluster(workdir=tmp_path_factory.mktemp("chart-cluster"))
    cluster.start()
    try:
        # The real CRDs of the third-party kinds exist from the start: dry-runs of ServiceMonitor, PrometheusRule,
        # Certificate, Issuer, LeaderWorkerSet and ScaledObject need them, and the operator then watches, applies
        # and prunes the monitoring kinds (so the audit covers their rules).
        for path in third_party_crds():
            cluster.install_crd(path, crd_name(path))
        yield cluster
    finally:
        cluster.stop()


@pytest.fixture(scope="session")
def kstatus_bin() -> Path:
    """hack/kstatus: sigs.k8s.io/cli-utils' kstatus (what Flux waits with), built once and cached."""
    out = subprocess.run([str(ROOT / "hack" / "kstatus" / "build.sh")], check=True, capture_output=True,
                         text=True, timeout=600)
    return Path(out.stdout.strip().splitlines()[-1])
