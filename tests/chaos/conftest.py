"""Fixtures of the chaos suite: its own control plane (big GPU pools, so capacity never limits a fleet),
the CRD, and one operator process that tests kill, restart, stop and cut off from the apiserver.

The cluster is package-scoped: it is torn down when tests/chaos ends, so it never runs beside the session
cluster of the integration tests, and nothing the chaos does (an outage, 20 kills) reaches their operator.
"""

from __future__ import annotations

import os
import uuid
from collections.abc import Iterator
from pathlib import Path

import pytest

from qwen_fleet_dev import binaries
from qwen_fleet_dev.cluster import LocalCluster
from qwen_fleet_dev.nodes import NodePool
from tests.chaos.helpers import H100, CliRun, admin, run_operator_cli
from tests.support.kube import wait_until
from tests.support.operator_process import OperatorProcess

ROOT = Path(__file__).resolve().parents[2]
CRD_FILE = ROOT / "crds" / "qwenfleet.io_qweninferences.yaml"
RESYNC_SECONDS = 10
# test_outage.py stops etcd and the apiserver this long (plus ~14 s of restarts).
OUTAGE_S = int(os.environ.get("QF_CHAOS_OUTAGE_S", "30"))
# The node lifecycle controller marks a node Unknown when it has seen no lease renewal for this long, measured on
# its own clock, so an outage counts: with the default 50 s, a 30 s outage plus the restarts plus kwok's 10 s
# renewal interval crosses it in some runs (kubernetes/kubernetes#127352 reports the same for a 40 s etcd outage).
# It then sets Ready=False on every pod of the node. A real kubelet writes its pods' readiness back on its next
# status sync; kwok's pod-ready stage only handles Pending pods, so a Running pod marked NotReady stays so and a
# rollout started right after the outage never completes (CI saw that once, 6824ccb). The chaos cluster gives
# its fake nodes a grace period the outage cannot cross; what the test proves is the operator's recovery.
NODE_GRACE_S = OUTAGE_S + 90

# 24 x 8 H100s: the churn keeps up to ~90 fleets of 1-4 GPUs alive; a pending pod would hide what we test.
CHAOS_POOLS = (
    NodePool("gpu-h100", 24, gpus=8, product=H100, gpu_memory_mib=81559, cpu="192", memory="2000Gi"),
    NodePool("cpu", 1, cpu="32", memory="128Gi"),
)


@pytest.fixture(scope="package")
def bare_cluster(tmp_path_factory: pytest.TempPathFactory) -> Iterator[LocalCluster]:
    binaries.ensure()
    local = LocalCluster(workdir=tmp_path_factory.mktemp("chaos-cluster"), node_pools=CHAOS_POOLS,
                         hpa_sync_period="5s", controller_flags=[f"--node-monitor-grace-period={NODE_GRACE_S}s"])
    local.start()
    try:
        yield local
    finally:
        local.stop()


@pytest.fixture(scope="package")
def missing_crd_run(bare_cluster: LocalCluster) -> CliRun:
    """``qwen-fleet operator`` against the cluster before the CRD is installed. Taken here, once, because
    removing the CRD later would delete every QwenInference the other chaos tests hold."""
    return run_operator_cli(bare_cluster.kubeconfig, timeout=90)


@pytest.fixture(scope="package")
def chaos_cluster(bare_cluster: LocalCluster, missing_crd_run: CliRun) -> LocalCluster:
    bare_cluster.kubectl("apply", "--server-side", "-f", str(CRD_FILE))
    # Not `kubectl wait`: right after the create the CRD has no status yet, and kubectl errors on that.
    wait_until("the CRD Established", lambda: any(
        c["type"] == "Established" and c["status"] == "True" for c in (admin(bare_cluster).get(
            "/apis/apiextensions.k8s.io/v1/customresourcedefinitions/qweninferences.qwenfleet.io").get(
            "status") or {}).get("conditions") or []), 60)
    return bare_cluster


@pytest.fixture(scope="package")
def operator_process(chaos_cluster: LocalCluster,
                     tmp_path_factory: pytest.TempPathFactory) -> Iterator[OperatorProcess]:
    proc = OperatorProcess(chaos_cluster, tmp_path_factory.mktemp("chaos-operator") / "operator.log",
                           env={"QWEN_FLEET_RESYNC_SECONDS": str(RESYNC_SECONDS)})
    proc.start()
    try:
        yield proc
    finally:
        proc.stop()


@pytest.fixture
def chaos_operator(operator_process: OperatorProcess) -> OperatorProcess:
    """The chaos operator, running. A test before may have killed or stopped it on purpose: start it again."""
    if operator_process.proc is None or operator_process.proc.poll() is not None:
        operator_process.stop()
        operator_process.start()
    return operator_process


@pytest.fixture
def chaos_namespace(chaos_cluster: LocalCluster) -> Iterator[str]:
    name = f"chaos-{uuid.uuid4().hex[:8]}"
    chaos_cluster.kubectl("create", "namespace", name)
    try:
        yield name
    finally:
        chaos_cluster.kubectl("delete", "namespace", name, "--wait=false", check=False)
