"""The documented rule that runs a rendered QwenBatch Job's containers as local processes (as cpu_rule.py does for
a fleet's server). Only what has no local equivalent changes; commands, flags and environment are otherwise taken
verbatim from the Job the operator renders (operator/qwen_fleet/render/batch.py):

1. volumes: every mountPath, wherever it appears (an argument, an environment value, inside the engine's
   ``sh -c`` script), is rewritten to the local directory standing in for that volume (``claim-0`` -> a tmp
   dir, ``work`` -> a tmp dir: a new one per pod, as an emptyDir is; the engine's memory-backed ``dshm`` ->
   this machine's own /dev/shm, unless the caller names another);
2. interpreters: the runner's ``qwen-fleet`` entry point -> ``python -m qwen_fleet.cli`` of this venv; the
   engine's ``python3`` -> the CPU engine venv's interpreter (same vLLM version);
3. ``--batch NAMESPACE/NAME`` is dropped from the runner: it names the QwenBatch whose status the runner
   reports to, and there is no API server here (with it the runner exits 2, "no Kubernetes API to report to");
   status reporting is tested against a real apiserver elsewhere (tests/unit/test_batch_runner.py,
   tests/integration);
4. through a fleet, ``--endpoint`` (the fleet's Service) -> the local server's URL;
5. dedicated, ``--model <repo id>`` -> the local model directory (no download here), and the CPU engine's KV
   space is ``VLLM_CPU_KVCACHE_SPACE`` GiB (cpu_rule.py's rule 4); a GPU limit has no CPU equivalent, so the
   spec must ask for ``gpus: 0``.
"""

from __future__ import annotations

import contextlib
import os
import re
import shlex
import signal
import subprocess
import sys
import tempfile
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from qwen_fleet.api.batch import QwenBatch
from qwen_fleet.render.batch import render_job
from qwen_fleet_dev.processes import _die_with_parent

BATCH_NAME, NAMESPACE = "tiny-batch", "llm"
RUNNER_IMAGE, ENGINE_IMAGE = "qwen-fleet/operator:test", "vllm/vllm-openai:test"
# Variables of this venv that must not leak into the engine's interpreter (as tests/support/vllm_server.py).
_DROP_ENV = ("PYTHONPATH", "PYTHONHOME", "VIRTUAL_ENV", "PYTEST_CURRENT_TEST", "PYTEST_ADDOPTS")
ENGINE_ENV = {"HF_HUB_OFFLINE": "1", "TRANSFORMERS_OFFLINE": "1", "VLLM_NO_USAGE_STATS": "1", "DO_NOT_TRACK": "1",
              "VLLM_CPU_KVCACHE_SPACE": "1", "PYTHONUNBUFFERED": "1"}


@dataclass(frozen=True)
class Step:
    name: str  # the container's name
    argv: list[str]
    env: dict[str, str]  # the whole environment of the process
    cwd: Path  # the pod's emptyDir: never the checkout, whose directories (operator/, tests/) could shadow modules


def rendered_job(spec: dict[str, Any]) -> dict[str, Any]:
    """The Job the operator renders for a QwenBatch with ``spec`` (pydantic refuses a bad spec, as the CRD would)."""
    batch = QwenBatch.model_validate({"metadata": {"name": BATCH_NAME, "namespace": NAMESPACE, "uid": "u"},
                                      "spec": spec})
    return render_job(batch, RUNNER_IMAGE, ENGINE_IMAGE)


def pod_containers(job: dict[str, Any]) -> list[dict[str, Any]]:
    """Init containers then containers, in the order the kubelet starts them."""
    pod = job["spec"]["template"]["spec"]
    return [*pod.get("initContainers", []), *pod["containers"]]


def _mounts(container: dict[str, Any], volumes: dict[str, Path]) -> list[tuple[str, str]]:
    """(mountPath, local dir), longest mountPath first; every volume must have a local stand-in."""
    pairs = []
    volumes = {"dshm": Path("/dev/shm"), **volumes}
    for mount in container.get("volumeMounts", []):
        if mount["name"] not in volumes:
            raise KeyError(f"volume {mount['name']!r} of container {container['name']!r} has no local directory")
        pairs.append((mount["mountPath"], str(volumes[mount["name"]])))
    return sorted(pairs, key=lambda p: -len(p[0]))


def _rewrite(value: str, mounts: list[tuple[str, str]]) -> str:
    """One pass, longest mountPath first, each only as a whole path (followed by '/', a space, a quote or the end):
    a local stand-in under /tmp is never rewritten again by the engine's /tmp mount."""
    if not mounts:
        return value
    table = dict(mounts)
    pattern = "|".join(re.escape(path) for path, _ in mounts)
    return re.sub(f"({pattern})(?![^/\\s'\"])", lambda m: table[m.group(1)], value)


def _env(container: dict[str, Any], mounts: list[tuple[str, str]], base: dict[str, str]) -> dict[str, str]:
    env = dict(base)
    for var in container.get("env", []):
        if "valueFrom" in var:
            raise ValueError(f"{var['name']} comes from elsewhere; the local rule takes literal values only")
        env[var["name"]] = _rewrite(var["value"], mounts)
    return env


def runner_step(container: dict[str, Any], volumes: dict[str, Path], endpoint: str | None = None) -> Step:
    """A ``qwen-fleet batch-run`` container (fleet runner, dedicated stage or progress) as a local process."""
    command = list(container["command"])
    if command[:2] != ["qwen-fleet", "batch-run"]:
        raise ValueError(f"not the runner: {command[:2]}")
    mounts = _mounts(container, volumes)
    args = [_rewrite(a, mounts) for a in command[2:]]
    if "--batch" in args:  # rule 3
        i = args.index("--batch")
        del args[i:i + 2]
    if endpoint is not None:  # rule 4
        args[args.index("--endpoint") + 1] = endpoint
    env = _env(container, mounts, dict(os.environ))
    return Step(container["name"], [sys.executable, "-m", "qwen_fleet.cli", "batch-run", *args], env,
                volumes["work"])


def engine_step(container: dict[str, Any], volumes: dict[str, Path], python: str, model_dir: Path) -> Step:
    """The dedicated Job's engine container (``sh -c <script> run-batch <flags>``) as a local process."""
    command = list(container["command"])
    if command[:2] != ["sh", "-c"]:
        raise ValueError(f"not the engine's script: {command[:2]}")
    mounts = _mounts(container, volumes)
    script = _rewrite(command[2], mounts)
    if script.count("python3 -m ") != 1:
        raise ValueError(f"expected one `python3 -m` in the engine's script:\n{script}")
    script = script.replace("python3 -m ", f"{shlex.quote(python)} -m ")  # rule 2
    args = [_rewrite(a, mounts) for a in command[3:]]
    args[args.index("--model", 1) + 1] = str(model_dir)  # rule 5; args[0] is $0 of the script
    base = {k: v for k, v in os.environ.items() if k not in _DROP_ENV} | ENGINE_ENV
    return Step(container["name"], ["sh", "-c", script, *args], _env(container, mounts, base), volumes["work"])


def start(step: Step, log: Path) -> subprocess.Popen[bytes]:
    """A step as its own process group (the engine's script forks python, which forks the engine core), dying
    with the test process; stop() ends what is left of the group."""
    with log.open("ab") as out:
        out.write(f"# {step.name}: {step.argv}\n".encode())
        out.flush()
        return subprocess.Popen(step.argv, env=step.env, cwd=step.cwd, stdout=out, stderr=subprocess.STDOUT,
                                stdin=subprocess.DEVNULL, start_new_session=True, preexec_fn=_die_with_parent)


def stop(proc: subprocess.Popen[bytes]) -> None:
    with contextlib.suppress(ProcessLookupError):
        os.killpg(proc.pid, signal.SIGKILL)
    proc.wait(30)


@dataclass(frozen=True)
class PodRun:
    stage: int  # exit status of the init container
    engine: int | None  # of the engine container; None when the init container failed (it never starts)
    sidecar_outlived_engine: bool
    sidecar: int | None  # after SIGTERM


def run_dedicated_pod(job: dict[str, Any], volumes: dict[str, Path], python: str, model_dir: Path, log: Path,
                      engine_timeout: float = 1800) -> PodRun:
    """One pod of a rendered dedicated Job, in the kubelet's order: the init container to its end; then the native
    sidecar, and the engine beside it; the sidecar gets SIGTERM once the engine has ended."""
    stage, progress, engine = pod_containers(job)
    if [stage["name"], progress["name"], engine["name"]] != ["stage", "progress", "vllm"] \
            or progress.get("restartPolicy") != "Always":
        raise ValueError("not the dedicated Job's layout (stage, progress sidecar, vllm)")
    volumes["work"].mkdir(parents=True, exist_ok=True)
    for scratch in ("home", "tmp"):  # the engine's emptyDirs (a non-root user's HOME and /tmp): new per pod
        volumes.setdefault(scratch, Path(tempfile.mkdtemp(prefix=f"{scratch}-", dir=volumes["work"])))
    proc = start(runner_step(stage, volumes), log)
    try:
        stage_code = proc.wait(300)
    finally:
        stop(proc)
    if stage_code != 0:
        return PodRun(stage_code, None, False, None)
    sidecar = start(runner_step(progress, volumes), log)
    try:
        proc = start(engine_step(engine, volumes, python, model_dir), log)
        try:
            engine_code = proc.wait(engine_timeout)
        finally:
            stop(proc)  # a timeout, or a child the script left behind
        outlived = sidecar.poll() is None
        sidecar.send_signal(signal.SIGTERM)
        sidecar_code = sidecar.wait(60)
    finally:
        stop(sidecar)
    return PodRun(stage_code, engine_code, outlived, sidecar_code)
