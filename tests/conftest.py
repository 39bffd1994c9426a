"""Shared fixtures: a real local control plane (started once per session), the CRD, the operator process.

Nothing here skips for lack of a cluster: the suite builds (hack/build-binaries.sh) and starts its own.
"""

from __future__ import annotations

import os
import shutil
import tempfile
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from qwen_fleet_dev import binaries
from qwen_fleet_dev.cluster import LocalCluster
from tests.support import lanes
from tests.support.keda_prebuild import KedaPrebuild
from tests.support.operator_process import OperatorProcess
from tests.support.serving import RenderedServer, rendered_server
from tests.support.tiny_qwen import TinyQwen, make_tiny_model
from tests.support.vllm_server import EAGER_ENV
from tests.support.wall_times import WallTimes, output_path

# Test engines skip vLLM's per-start torch.compile unless their argv chooses a mode (tests/support/vllm_server.py).
os.environ.setdefault(EAGER_ENV, "1")

ROOT = Path(__file__).resolve().parent.parent
CRD_FILE = ROOT / "crds" / "qwenfleet.io_qweninferences.yaml"
BATCH_CRD_FILE = ROOT / "crds" / "qwenfleet.io_qwenbatches.yaml"


def pytest_configure(config: pytest.Config) -> None:
    # After the run: wall time per area and the ten slowest modules, also as JSON (tests/support/wall_times.py).
    # Under xdist only the controller keeps it: every worker's reports reach it (pytest_runtest_logreport).
    if not hasattr(config, "workerinput"):
        config.pluginmanager.register(WallTimes(), "qwen-fleet-wall-times")
    # KEDA's cold build in the background while the other tests run, when the run has KEDA tests (issue 30); under
    # xdist in each worker that collected them (the cache lock makes one build and the others wait).
    config.pluginmanager.register(KedaPrebuild(), "qwen-fleet-keda-prebuild")


LANES_SECONDS = "qwen_fleet_module_seconds"
LANES_DIR = "qwen_fleet_lane_groups"


def _lanes_dir(config: pytest.Config) -> Path:
    """The controller's folder where the workers write their groups (tests/support/lanes.py); made once."""
    directory = getattr(config, "_qwen_fleet_lanes_dir", None)
    if directory is None:
        directory = Path(tempfile.mkdtemp(prefix="qf-lanes-"))
        config._qwen_fleet_lanes_dir = directory  # type: ignore[attr-defined]
        config.add_cleanup(lambda: shutil.rmtree(directory, ignore_errors=True))
    return directory


@pytest.hookimpl(optionalhook=True)
def pytest_configure_node(node: Any) -> None:
    """xdist's controller, per worker: where to write its groups, and the previous run's module times, read
    once here so that every worker orders its collection from the same figures (tests/support/lanes.py)."""
    path = output_path(os.environ)
    node.workerinput[LANES_SECONDS] = lanes.module_seconds(path) if path is not None else {}
    node.workerinput[LANES_DIR] = str(_lanes_dir(node.config))


@pytest.hookimpl(optionalhook=True, tryfirst=True)  # before xdist's own, which would make its LoadGroupScheduling
def pytest_xdist_make_scheduler(config: pytest.Config, log: Any) -> Any:
    if config.getvalue("dist") != "loadgroup":
        return None
    return lanes.LaneScheduling(config, log, _lanes_dir(config))


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    """An xdist worker under ``--dist loadgroup``: each test's lane group, longest group first."""
    workerinput = getattr(config, "workerinput", None)
    if workerinput is None or not getattr(config.option, "loadgroup", False):  # a worker's dist is "no"
        return
    groups = []
    for item in items:
        named = [str(m.args[0] if m.args else m.kwargs.get("name", "default"))
                 for m in item.iter_markers("xdist_group")]
        groups.append(named[0] if named else
                      lanes.group_of(lanes.module_of(item.nodeid), getattr(item, "fixturenames", ())))
    lanes.write_groups(Path(workerinput[LANES_DIR]), str(workerinput.get("workerid", "gw")),
                       {item.nodeid: group for item, group in zip(items, groups, strict=True)})
    items[:] = lanes.order(items, groups, workerinput.get(LANES_SECONDS, {}))


# The shared cluster's nodes are kwok's: their heartbeat says how much CPU kwok got, not whether a node is healthy.
# With the default 50 s grace, a loaded machine (the HPA e2e's burst: 10 s TLS handshakes to the apiserver) let the
# node lifecycle controller mark every pod of a node NotReady, and kwok's pod-ready stage only handles Pending pods,
# so they stayed NotReady: a Deployment with 0 ready, a fleet RollingOut for good (issue 30; tests/chaos/conftest.py
# met the same after an etcd outage). No test of this cluster is about node failure.
FAKE_NODE_GRACE_S = 600


@pytest.fixture(scope="session")
def cluster(tmp_path_factory: pytest.TempPathFactory) -> Iterator[LocalCluster]:
    binaries.ensure()
    local = LocalCluster(workdir=tmp_path_factory.mktemp("cluster"), hpa_sync_period="5s",
                         controller_flags=[f"--node-monitor-grace-period={FAKE_NODE_GRACE_S}s"])
    local.start()
    try:
        yield local
    finally:
        local.stop()


@pytest.fixture(scope="session")
def crd(cluster: LocalCluster) -> Path:
    cluster.install_crd(CRD_FILE)
    # QwenBatch too: the operator watches both kinds from its start.
    cluster.install_crd(BATCH_CRD_FILE, name="qwenbatches.qwenfleet.io")
    return CRD_FILE


@pytest.fixture(scope="session")
def operator(cluster: LocalCluster, crd: Path, tmp_path_factory: pytest.TempPathFactory) -> Iterator[OperatorProcess]:
    """The operator as its own process (as in production), with its own identity for counting writes."""
    proc = OperatorProcess(cluster, tmp_path_factory.mktemp("operator") / "operator.log",
                           env={"QWEN_FLEET_RESYNC_SECONDS": "10"})
    proc.start()
    try:
        yield proc
    finally:
        proc.stop()


@pytest.fixture
def namespace(cluster: LocalCluster) -> Iterator[str]:
    name = f"t-{uuid.uuid4().hex[:8]}"
    cluster.kubectl("create", "namespace", name)
    try:
        yield name
    finally:
        cluster.kubectl("delete", "namespace", name, "--wait=false", check=False)


@pytest.fixture(scope="session")
def vllm_python() -> str:
    """The cached venv with the real vLLM CPU engine (built by hack/vllm-venv.sh when missing)."""
    import subprocess

    out = subprocess.run([str(ROOT / "hack" / "vllm-venv.sh")], check=True, capture_output=True, text=True)
    path = out.stdout.strip().splitlines()[-1]
    assert os.access(path, os.X_OK), path
    return path


@pytest.fixture(scope="session")
def tiny_qwen() -> TinyQwen:
    """FACTS.md's tiny random-weight Qwen2 (2 layers, 1 KV head of 64: 512 bytes of KV per token)."""
    return TinyQwen()


@pytest.fixture(scope="session")
def tiny_qwen_dir(tmp_path_factory: pytest.TempPathFactory, vllm_python: str, tiny_qwen: TinyQwen) -> Path:
    return make_tiny_model(tmp_path_factory.mktemp("tiny-qwen2"), tiny_qwen, python=vllm_python)


@pytest.fixture(scope="session")
def serving_vllm(vllm_python: str, tiny_qwen_dir: Path, tmp_path_factory: pytest.TempPathFactory
                 ) -> Iterator[RenderedServer]:
    """The shared real vLLM server, started from the operator's rendered Deployment (tests/support/serving.py)."""
    server = rendered_server(vllm_python, tiny_qwen_dir, tmp_path_factory.mktemp("serving-vllm") / "vllm.log")
    with server:
        yield server
