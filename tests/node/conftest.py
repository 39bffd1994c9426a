"""A local cluster with a real node (kubelet, containerd, runc, CNI bridge, kube-proxy), once per session.

Nothing here skips: a missing kubelet or kube-proxy is built (hack/build-binaries.sh node), and a missing
container runtime (hack/real-node-deps.sh) makes the fixture, and so every test here, fail.
"""

from __future__ import annotations

from collections.abc import Iterator

import pytest

from qwen_fleet_dev import binaries
from qwen_fleet_dev.cluster import LocalCluster
from qwen_fleet_dev.engine_image import EngineImage, ensure_engine_image
from qwen_fleet_dev.nodes import NodePool
from qwen_fleet_dev.operator_image import OperatorImage, ensure_operator_image
from tests.support.operator_chart import OperatorRelease, install_operator

# One fake GPU node beside the real one: kwok and the kubelet share the cluster.
KWOK_POOLS = (NodePool("gpu-a10g", 1, gpus=1, product="NVIDIA-A10G", gpu_memory_mib=23028, cpu="16",
                       memory="64Gi"),)


@pytest.fixture(scope="session")
def real_cluster(tmp_path_factory: pytest.TempPathFactory) -> Iterator[LocalCluster]:
    binaries.ensure(real_node=True)
    local = LocalCluster(workdir=tmp_path_factory.mktemp("real-node-cluster"), node_pools=KWOK_POOLS,
                         real_node=True)
    local.start()
    try:
        yield local
    finally:
        local.stop()


@pytest.fixture(scope="session")
def engine_image(real_cluster: LocalCluster) -> EngineImage:
    """The vLLM CPU engine image (built when the cache lacks it), in the real node's containerd."""
    image = ensure_engine_image()
    assert real_cluster.real_node is not None
    real_cluster.real_node.import_archive_dir(image.archive)
    return image


@pytest.fixture(scope="session")
def operator_image(real_cluster: LocalCluster) -> OperatorImage:
    """The operator's image (built when the cache lacks it), in the real node's containerd: the chart's pod and
    a QwenBatch's runner (the operator's own image) run it."""
    image = ensure_operator_image()
    assert real_cluster.real_node is not None
    real_cluster.real_node.import_archive_dir(image.archive)
    return image


@pytest.fixture(scope="module")
def fleet_operator(real_cluster: LocalCluster, operator_image: OperatorImage,
                   tmp_path_factory: pytest.TempPathFactory) -> Iterator[OperatorRelease]:
    """The chart's operator pod (helm install --wait: its Deployment available), with the CRDs it installs; one
    release per module, uninstalled after it."""
    release = install_operator(real_cluster, operator_image)
    try:
        yield release
    finally:
        log = tmp_path_factory.mktemp("fleet-operator") / "operator.log"
        log.write_text(release.logs(tail=-1))
        print(f"operator pod log: {log}")
        release.uninstall()
