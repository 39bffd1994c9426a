"""The operator as a separate OS process against the local cluster, as it runs in production."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
import urllib.request
from pathlib import Path
from typing import Any

from qwen_fleet_dev.cluster import OPERATOR_USER, LocalCluster, free_port
from qwen_fleet_dev.processes import _die_with_parent, wait_for

LIVENESS_WAIT_S = 300


class OperatorProcess:
    def __init__(self, cluster: LocalCluster, log: Path, env: dict[str, str] | None = None,
                 kubeconfig: Path | None = None) -> None:
        self.cluster = cluster
        self.log = log
        self.kubeconfig = kubeconfig or cluster.operator_kubeconfig
        self.extra_env = env or {}
        self.proc: subprocess.Popen[bytes] | None = None
        self.metrics_port = free_port()
        self.liveness_port = free_port()

    def start(self, wait: bool = True) -> None:
        env = {**os.environ, "KUBECONFIG": str(self.kubeconfig), "PYTHONUNBUFFERED": "1",
               "QWEN_FLEET_METRICS_PORT": str(self.metrics_port),
               "QWEN_FLEET_LIVENESS_PORT": str(self.liveness_port),
               "QWEN_FLEET_RESYNC_SECONDS": "60", **self.extra_env}
        self.log.parent.mkdir(parents=True, exist_ok=True)
        with self.log.open("ab") as out:
            self.proc = subprocess.Popen([sys.executable, "-m", "qwen_fleet.cli", "operator"], env=env,
                                         stdout=out, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL,
                                         preexec_fn=_die_with_parent)
        if wait:
            # healthy() fails at once when the process exits, so the bound is only for one that hangs alive. It
            # was 60 s: on a machine at load 30 (2 cores, other suites beside this one) a healthy operator still
            # importing kopf missed it, three setups of one run (issue 30). 300 s is far past any start seen.
            wait_for("operator liveness", self.healthy, LIVENESS_WAIT_S, interval=0.3)

    def healthy(self) -> bool:
        if self.proc is None or self.proc.poll() is not None:
            raise RuntimeError(f"operator exited ({self.proc.returncode if self.proc else None}):\n{self.tail()}")
        with urllib.request.urlopen(f"http://127.0.0.1:{self.liveness_port}/healthz", timeout=2) as resp:
            return bool(resp.status == 200)

    def stop(self, sig: int = signal.SIGTERM, timeout: float = 20) -> int | None:
        if self.proc is None:
            return None
        if self.proc.poll() is None:
            self.proc.send_signal(sig)
            try:
                self.proc.wait(timeout=timeout)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait()
        code = self.proc.returncode
        self.proc = None
        return code

    def kill(self) -> None:
        self.stop(signal.SIGKILL)

    def restart(self) -> None:
        self.stop()
        self.start()

    def tail(self, lines: int = 40) -> str:
        try:
            return "\n".join(self.log.read_text(errors="replace").splitlines()[-lines:])
        except FileNotFoundError:
            return ""

    def metrics(self) -> str:
        # A ceiling, not a speed bar: a loaded 2-core machine can keep a Python process waiting for seconds.
        with urllib.request.urlopen(f"http://127.0.0.1:{self.metrics_port}/metrics", timeout=30) as resp:
            return str(resp.read().decode())


_QUERIES = {"selfsubjectaccessreviews", "selfsubjectrulesreviews", "subjectaccessreviews", "tokenreviews"}


def audit_writes(cluster: LocalCluster, since: float, user: str = OPERATOR_USER) -> list[dict[str, Any]]:
    """Write requests (create/update/patch/delete) the apiserver logged for ``user`` after ``since``."""
    out = []
    try:
        lines = cluster.audit_log.read_text().splitlines()
    except FileNotFoundError:
        return out
    for line in lines:
        try:
            entry = json.loads(line)
        except ValueError:
            continue
        if entry.get("user", {}).get("username") != user:
            continue
        # Access reviews are questions (POST, but nothing is stored): the startup permission check asks them.
        if (entry.get("objectRef") or {}).get("resource") in _QUERIES:
            continue
        ts = entry.get("requestReceivedTimestamp", "")
        if _epoch(ts) >= since:
            out.append(entry)
    return out


def _epoch(ts: str) -> float:
    from datetime import datetime

    try:
        return datetime.fromisoformat(ts.replace("Z", "+00:00")).timestamp()
    except ValueError:
        return 0.0


def now() -> float:
    return time.time()
