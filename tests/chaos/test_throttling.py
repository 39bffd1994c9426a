"""429 Too Many Requests (issue 38 item 4): an apiserver of its own that serves one request at a time, and one
mutating one (`--max-requests-inflight=1 --max-mutating-requests-inflight=1`, with API Priority and Fairness off so
the limit answers 429 at once instead of queueing). system:masters is never throttled, so the operator runs under
the Helm chart's own identity, as in a cluster; the control plane's own components (masters here) are not slowed.

A burst of new fleets and a spec change to each: every fleet ends with exactly its desired children, Ready for its
generation, no Stalled condition (429 is transient: the queue backs off and tries again), the same process (no
crash, no restart), and the log shows that the apiserver did throttle it (a test that saw no 429 proves nothing).
"""

from __future__ import annotations

import time
import uuid
from collections.abc import Iterator
from pathlib import Path

import pytest

from qwen_fleet_dev import binaries
from qwen_fleet_dev.cluster import LocalCluster
from qwen_fleet_dev.nodes import NodePool
from tests.chaos.conftest import CRD_FILE
from tests.chaos.helpers import (
    H100,
    QWI_PATH,
    TRACEBACK,
    LogWindow,
    actual_children,
    admin,
    condition,
    container_args,
    desired_children,
    flag,
    qwi,
    record,
    resources,
    small_spec,
)
from tests.chaos.test_least_privilege import _kubeconfig, chart_identity  # noqa: F401 (a fixture)
from tests.support.kube import wait_until
from tests.support.operator_process import OperatorProcess

pytestmark = [pytest.mark.cluster, pytest.mark.slow]

FLEETS = 6
THROTTLED = ["--enable-priority-and-fairness=false", "--max-requests-inflight=1", "--max-mutating-requests-inflight=1"]
POOLS = (NodePool("gpu-h100", 2, gpus=8, product=H100, gpu_memory_mib=81559, cpu="192", memory="2000Gi"),
         NodePool("cpu", 1, cpu="32", memory="128Gi"))


@pytest.fixture(scope="module")
def chaos_cluster(tmp_path_factory: pytest.TempPathFactory) -> Iterator[LocalCluster]:
    """This module's own cluster (the name overrides the package's, so the chart identity is installed here)."""
    binaries.ensure()
    local = LocalCluster(workdir=tmp_path_factory.mktemp("throttled-cluster"), node_pools=POOLS,
                         apiserver_flags=THROTTLED)
    local.start()
    try:
        local.install_crd(CRD_FILE)
        yield local
    finally:
        local.stop()


@pytest.fixture
def namespace(chaos_cluster: LocalCluster) -> Iterator[str]:
    name = f"throttled-{uuid.uuid4().hex[:6]}"
    chaos_cluster.kubectl("create", "namespace", name)
    try:
        yield name
    finally:
        chaos_cluster.kubectl("delete", "namespace", name, "--wait=false", check=False)


def _converged(cluster: LocalCluster, ns: str, seqs: int) -> bool:
    rest = admin(cluster)
    crs = resources(rest, ns)
    if len(crs) != FLEETS:
        return False
    actual = actual_children(rest, ns)
    wanted = {k: v for cr in crs.values() for k, v in desired_children(cr).items()}
    if set(actual) != set(wanted):
        return False
    for name, cr in crs.items():
        gen, ready = cr["metadata"]["generation"], condition(cr, "Ready")
        if ready.get("status") != "True" or ready.get("observedGeneration") != gen:
            return False
        if flag(container_args(actual[("Deployment", name)]), "--max-num-seqs") != str(seqs):
            return False
    return True


def test_a_throttling_apiserver_slows_the_operator_down_and_nothing_else(
        chaos_cluster: LocalCluster, chart_identity: tuple[str, str], namespace: str,  # noqa: F811
        tmp_path: Path) -> None:
    cluster, rest, ns = chaos_cluster, admin(chaos_cluster), namespace
    operator = OperatorProcess(cluster, tmp_path / "operator.log", env={"QWEN_FLEET_RESYNC_SECONDS": "10"},
                               kubeconfig=_kubeconfig(cluster, *chart_identity, tmp_path / "kubeconfig"))
    operator.start()
    try:
        assert operator.proc is not None
        pid, window, began = operator.proc.pid, LogWindow(operator.log), time.monotonic()
        for i in range(FLEETS):
            rest.request("POST", QWI_PATH.format(ns=ns), qwi(f"f{i}", small_spec(64)))
        wait_until("every new fleet converged", lambda: _converged(cluster, ns, 64), 300, interval=2)
        created = time.monotonic() - began
        for i in range(FLEETS):
            rest.request("PATCH", f"{QWI_PATH.format(ns=ns)}/f{i}", {"spec": {"engine": {"maxNumSeqs": 96}}},
                         content_type="application/merge-patch+json")
        wait_until("every change converged", lambda: _converged(cluster, ns, 96), 300, interval=2)
        changed = time.monotonic() - began - created
        log = window.text()
        crs = resources(rest, ns)
        assert operator.proc.poll() is None and operator.proc.pid == pid, operator.tail()
    finally:
        operator.stop()
    throttled = log.count("429")
    stalled = {name: condition(cr, "Stalled") for name, cr in crs.items()}
    record("throttling", {"fleets": FLEETS, "create_seconds": round(created, 1), "change_seconds": round(changed, 1),
                          "log_lines_with_429": throttled, "log_lines": len(log.splitlines()),
                          "tracebacks": log.count(TRACEBACK)})
    assert throttled > 0, "the apiserver never throttled the operator: this run proves nothing\n" + log[-3000:]
    assert all(s.get("status") == "False" for s in stalled.values()), stalled
    assert TRACEBACK not in log, log[-4000:]
