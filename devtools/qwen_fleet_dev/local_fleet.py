"""A CPU fleet of a local model on the real node: the pieces ``qwen-fleet run``, the node tests and
bench/real_fleet.py share.

The engine image is built locally (``engine_image``) and imported into the node's containerd; the model
directory reaches the pod through a hostPath PersistentVolume bound to the claim that the spec's
``model.source.pvc`` names, the path users take for a model on a volume.
"""

from __future__ import annotations

import json
import time
import urllib.request
from pathlib import Path
from typing import Any

from qwen_fleet_dev.cluster import KubectlError, LocalCluster
from qwen_fleet_dev.realnode import NODE_LABEL

MODEL_CLAIM = "tiny-model"
KV_SPACE_GIB = 1
# No proxy from the environment: ClusterIPs are routed into the node's network namespace.
_DIRECT = urllib.request.build_opener(urllib.request.ProxyHandler({}))


def host_path_claim(namespace: str, claim: str, host_dir: Path, access_mode: str = "ReadOnlyMany"
                    ) -> list[dict[str, Any]]:
    """A hostPath PersistentVolume over ``host_dir`` and the claim ``claim`` bound to it by name."""
    pv_name = f"{namespace}-{claim}"
    pv = {"apiVersion": "v1", "kind": "PersistentVolume", "metadata": {"name": pv_name},
          "spec": {"capacity": {"storage": "1Gi"}, "accessModes": [access_mode], "storageClassName": "",
                   "persistentVolumeReclaimPolicy": "Retain",
                   "hostPath": {"path": str(host_dir), "type": "Directory"},
                   "claimRef": {"namespace": namespace, "name": claim}}}
    pvc = {"apiVersion": "v1", "kind": "PersistentVolumeClaim",
           "metadata": {"name": claim, "namespace": namespace},
           "spec": {"accessModes": [access_mode], "storageClassName": "", "volumeName": pv_name,
                    "resources": {"requests": {"storage": "1Gi"}}}}
    return [pv, pvc]


def readable_by_any_user(directory: Path) -> Path:
    """Let every user read ``directory``'s tree: the engine runs as a non-root uid (spec.security, 1000), and a
    hostPath volume gets no fsGroup; pytest makes its temporary directories 0700."""
    for path in (directory, *directory.rglob("*")):
        mode = path.stat().st_mode
        path.chmod(mode | 0o444 | (0o111 if path.is_dir() else 0))
    return directory


def model_volume(namespace: str, model_dir: Path) -> list[dict[str, Any]]:
    """A hostPath PersistentVolume with the model directory (readable to the engine's user) and the claim bound to
    it by name."""
    return host_path_claim(namespace, MODEL_CLAIM, readable_by_any_user(model_dir))


def cpu_fleet(name: str, image: str, replicas: int = 1, extra_args: tuple[str, ...] = (),
              max_model_len: int = 1024, cpu: str = "1",
              model_name: str = "qwen-fleet/tiny-qwen2", nccl: dict[str, Any] | None = None) -> dict[str, Any]:
    """A CPU fleet of the model on the claim, on the real node (eager mode: the image carries no C compiler).
    ``nccl`` is the spec's ``nccl`` (e.g. the preflight: gloo between 2 processes on device CPU)."""
    fleet: dict[str, Any] = {
        "apiVersion": "qwenfleet.io/v1alpha1", "kind": "QwenInference", "metadata": {"name": name},
        "spec": {
            "model": {"name": model_name,
                      "source": {"pvc": {"claimName": MODEL_CLAIM, "readOnly": True}}},
            "device": "CPU",
            "engine": {"image": image, "maxModelLen": max_model_len, "maxNumSeqs": 8, "enforceEager": True,
                       "shutdownTimeoutSeconds": 5, "extraArgs": list(extra_args),
                       "env": [{"name": "VLLM_CPU_KVCACHE_SPACE", "value": str(KV_SPACE_GIB)},
                               # One rank: the worker in the engine-core process, as vLLM lays out one GPU rank
                               # (its uni executor); the CPU platform otherwise spawns it as a third interpreter
                               # importing torch and vllm, ~25 % of a pod's start (bench/results/engine-start.md).
                               {"name": "VLLM_ENABLE_V1_MULTIPROCESSING", "value": "0"}]},
            "replicas": replicas,
            # One pod more during a rollout, none fewer: a one-replica fleet keeps serving while it rolls.
            "rollout": {"maxSurge": 1, "maxUnavailable": 0},
            # The engine itself takes about 3 GiB (torch and its libraries); the KV cache must fit in the rest.
            "resources": {"cpu": cpu, "memory": "5Gi"},
            "scheduling": {"nodeSelector": {NODE_LABEL[0]: NODE_LABEL[1]}},
        },
    }
    if nccl is not None:
        fleet["spec"]["nccl"] = nccl
    return fleet


def apply(cluster: LocalCluster, namespace: str, obj: dict[str, Any] | list[dict[str, Any]]) -> None:
    items = obj if isinstance(obj, list) else [obj]
    cluster.kubectl("apply", "-n", namespace, "-f", "-", input=json.dumps({"apiVersion": "v1", "kind": "List",
                                                                            "items": items}))


def chat(url: str, model: str, content: str = "Hello", max_tokens: int = 4, timeout: float = 60) -> dict[str, Any]:
    body = json.dumps({"model": model, "messages": [{"role": "user", "content": content}],
                       "max_tokens": max_tokens, "temperature": 0}).encode()
    request = urllib.request.Request(f"{url}/v1/chat/completions", data=body,
                                     headers={"Content-Type": "application/json"})
    with _DIRECT.open(request, timeout=timeout) as resp:
        return dict(json.loads(resp.read()))


def service_url(cluster: LocalCluster, namespace: str, name: str) -> str:
    svc = json.loads(cluster.kubectl("get", "-n", namespace, "service", name, "-o", "json").stdout)
    port = next(p["port"] for p in svc["spec"]["ports"] if p.get("name") == "http")
    return f"http://{svc['spec']['clusterIP']}:{port}"


def wait_for_answer(cluster: LocalCluster, namespace: str, name: str, timeout: float = 900) -> dict[str, Any]:
    """The first chat completion answered through the fleet's Service (retrying until ``timeout``)."""
    deadline = time.monotonic() + timeout
    while True:
        try:
            return chat(service_url(cluster, namespace, name), name)
        except (KubectlError, OSError, StopIteration, KeyError, ValueError) as exc:  # no Service yet, 503 ...
            if time.monotonic() > deadline:
                raise TimeoutError(f"no answer from {namespace}/{name} in {timeout:.0f} s: {exc}") from exc
            time.sleep(1)
