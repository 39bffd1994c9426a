"""Fake nodes for kwok: GPU nodes carry the labels NVIDIA's GPU feature discovery puts on real ones."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

GPU_RESOURCE = "nvidia.com/gpu"
GPU_TAINT = {"key": GPU_RESOURCE, "value": "present", "effect": "NoSchedule"}


@dataclass(frozen=True)
class NodePool:
    """``count`` identical fake nodes; ``gpus`` = 0 makes plain CPU nodes (where the operator itself runs)."""

    prefix: str
    count: int
    gpus: int = 0
    product: str | None = None
    gpu_memory_mib: int | None = None
    cpu: str = "64"
    memory: str = "512Gi"
    pods: str = "110"


# Two big multi-GPU nodes and eight small single-GPU nodes (enough for the examples side by side and an
# autoscaled fleet), plus one CPU node for non-GPU pods such as the operator's own.
DEFAULT_POOLS: tuple[NodePool, ...] = (
    NodePool("gpu-h100", 2, gpus=8, product="NVIDIA-H100-80GB-HBM3", gpu_memory_mib=81559,
             cpu="192", memory="2000Gi"),
    NodePool("gpu-a10g", 8, gpus=1, product="NVIDIA-A10G", gpu_memory_mib=23028, cpu="16", memory="64Gi"),
    NodePool("cpu", 1, cpu="32", memory="128Gi"),
)


def node_manifest(pool: NodePool, index: int) -> dict[str, Any]:
    name = f"{pool.prefix}-{index}"
    labels = {
        "type": "kwok",
        "kubernetes.io/hostname": name,
        "kubernetes.io/os": "linux",
        "kubernetes.io/arch": "amd64",
        "node.kubernetes.io/instance-type": pool.prefix,
    }
    capacity: dict[str, str] = {"cpu": pool.cpu, "memory": pool.memory, "pods": pool.pods}
    taints: list[dict[str, str]] = []
    if pool.gpus:
        capacity[GPU_RESOURCE] = str(pool.gpus)
        labels["nvidia.com/gpu.present"] = "true"
        labels["nvidia.com/gpu.count"] = str(pool.gpus)
        if pool.product:
            labels["nvidia.com/gpu.product"] = pool.product
        if pool.gpu_memory_mib:
            labels["nvidia.com/gpu.memory"] = str(pool.gpu_memory_mib)
        taints.append(dict(GPU_TAINT))
    return {
        "apiVersion": "v1",
        "kind": "Node",
        "metadata": {
            "name": name,
            "labels": labels,
            "annotations": {"kwok.x-k8s.io/node": "fake", "node.alpha.kubernetes.io/ttl": "0"},
        },
        "spec": {"taints": taints} if taints else {},
        "status": {"capacity": capacity, "allocatable": dict(capacity)},
    }


def node_manifests(pools: tuple[NodePool, ...]) -> list[dict[str, Any]]:
    return [node_manifest(pool, i) for pool in pools for i in range(pool.count)]
