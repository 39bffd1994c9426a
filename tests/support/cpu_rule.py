"""The documented rule that runs a rendered vLLM container as a local process on CPU (see docs/vllm-contract.md).

Only what has no CPU equivalent changes; the command, the engine arguments and the environment are otherwise
taken verbatim from the Deployment the operator renders:
1. interpreter: ``python3`` (the image's) -> the CPU engine venv's interpreter, same vLLM version;
2. volumes: every argument or environment value under a container mountPath is rewritten to the local
   directory standing in for that volume (``/models`` -> the tiny model made at test time); an emptyDir the
   caller names no directory for (the engine's HOME, /tmp) is a fresh temporary directory, as in a new pod;
3. network: ``--port N`` -> a free loopback port, plus ``--host 127.0.0.1`` (a pod listens on its own IP; a test
   that gives its fake pods loopback addresses of their own passes that address as ``host``);
4. GPUs: the ``nvidia.com/gpu`` request has no CPU equivalent and is dropped; the KV-cache memory that
   ``--gpu-memory-utilization`` carves out of a GPU is ``VLLM_CPU_KVCACHE_SPACE`` GiB on the CPU engine;
   flags the CPU engine cannot honour (an fp8 KV cache) are refused by this rule, so the test's spec must
   not use them;
5. one GPU per rank -> one CPU core per rank: a pod that asks for N > 1 GPUs runs N engine ranks (tensor x
   pipeline x local data-parallel ranks); vLLM's CPU build binds each rank's OpenMP threads to a NUMA node of
   its own and refuses more local ranks than NUMA nodes (``utils/ompmultiprocessing.py``: "Not enough allowed
   NUMA nodes to bind threads of 2 local CPUWorkers"). The rule binds rank k to core k of the cores this
   process may use instead (``VLLM_CPU_OMP_THREADS_BIND="0|1"``, vLLM's own manual binding), round-robin
   when there are more ranks than cores. docs/multi-node.md has what runs that way.
"""

from __future__ import annotations

import os
import tempfile
from dataclasses import dataclass
from pathlib import Path
from typing import Any

GPU = "nvidia.com/gpu"
CPU_UNSUPPORTED = {"--kv-cache-dtype": {"fp8", "fp8_e4m3", "fp8_e5m2"}}


@dataclass(frozen=True)
class LocalProcess:
    argv: list[str]
    env: dict[str, str]


def _server(deployment: dict[str, Any]) -> dict[str, Any]:
    containers = deployment["spec"]["template"]["spec"]["containers"]
    return dict(next(c for c in containers if c["name"] == "vllm"))


def rewrite_mounts(value: str, mounts: dict[str, Path]) -> str:
    """``value`` with a container mountPath prefix replaced by the local directory standing in for it."""
    for mount_path, local in sorted(mounts.items(), key=lambda kv: -len(kv[0])):
        if value == mount_path or value.startswith(mount_path.rstrip("/") + "/"):
            return str(local) + value[len(mount_path.rstrip("/")):]
    return value


def _disk_empty_dir(volume: dict[str, Any]) -> bool:
    return "emptyDir" in volume and volume["emptyDir"].get("medium") != "Memory"  # /dev/shm stays the host's


def local_process(deployment: dict[str, Any], python: str, volumes: dict[str, Path], port: int,
                  host: str = "127.0.0.1") -> LocalProcess:
    container = _server(deployment)
    pod_volumes = {v["name"]: v for v in deployment["spec"]["template"]["spec"].get("volumes", [])}
    fresh = {m["name"]: Path(tempfile.mkdtemp(prefix=f"qf-{m['name']}-")) for m in container.get("volumeMounts", [])
             if m["name"] not in volumes and _disk_empty_dir(pod_volumes.get(m["name"], {}))}
    volumes = {**fresh, **volumes}
    mounts = {m["mountPath"]: volumes[m["name"]] for m in container.get("volumeMounts", []) if m["name"] in volumes}
    argv = [*container["command"], *container["args"]]
    assert argv[0] == "python3", argv[0]
    argv[0] = python
    argv = [rewrite_mounts(a, mounts) for a in argv]
    for flag, bad in CPU_UNSUPPORTED.items():
        if flag in argv and argv[argv.index(flag) + 1] in bad:
            raise ValueError(f"{flag} {argv[argv.index(flag) + 1]} has no CPU equivalent")
    argv[argv.index("--port") + 1] = str(port)
    argv += ["--host", host]
    env: dict[str, str] = {}
    for var in container.get("env", []):
        if "valueFrom" in var:
            raise ValueError(f"{var['name']} comes from a Secret/ConfigMap; the contract test uses literal values")
        env[var["name"]] = rewrite_mounts(var["value"], mounts)
    ranks = gpus(container)
    if ranks > 1:
        env["VLLM_CPU_OMP_THREADS_BIND"] = threads_bind(ranks)
    return LocalProcess(argv, env)


def gpus(container: dict[str, Any]) -> int:
    """The GPUs a container asks for (its ``nvidia.com/gpu`` limit, else its request; 0 when none)."""
    resources = container.get("resources", {})
    for part in ("limits", "requests"):
        if GPU in resources.get(part, {}):
            return int(resources[part][GPU])
    return 0


def threads_bind(ranks: int, cores: list[int] | None = None) -> str:
    """vLLM's ``VLLM_CPU_OMP_THREADS_BIND`` value giving each of ``ranks`` local ranks one core of ``cores``
    (default: the cores this process may run on), ranks in vLLM's order; cores are reused round-robin when
    there are fewer than ranks."""
    available = sorted(os.sched_getaffinity(0)) if cores is None else cores
    if not available:
        raise ValueError("no CPU core to bind an engine rank to")
    return "|".join(str(available[k % len(available)]) for k in range(ranks))
