"""`make run`'s driver end to end: cluster, CRD, chart RBAC, operator as its ServiceAccount, an example Ready,
status shown; Ctrl-C (SIGINT) stops everything it started."""

from __future__ import annotations

import contextlib
import os
import re
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from qwen_fleet_dev.processes import alive

pytestmark = pytest.mark.cluster
ROOT = Path(__file__).resolve().parents[2]


def _descendants(pid: int) -> set[int]:
    children: dict[int, list[int]] = {}
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        try:
            ppid = int((entry / "stat").read_text().rsplit(")", 1)[1].split()[1])
        except (OSError, IndexError, ValueError):
            continue
        children.setdefault(ppid, []).append(int(entry.name))
    out: set[int] = set()
    todo = [pid]
    while todo:
        for child in children.get(todo.pop(), []):
            if child not in out:
                out.add(child)
                todo.append(child)
    return out


def _stuck(proc: subprocess.Popen[str], started: set[int]) -> str:
    """Where a run that does not stop is: its Python stack (py-spy), what it printed, which of its processes
    live; then it and they are killed."""
    dump = subprocess.run([str(Path(sys.executable).parent / "py-spy"), "dump", "--pid", str(proc.pid)],
                          capture_output=True, text=True, timeout=60)
    live = [p for p in started if alive(p)]
    names = {p: _name(p) for p in live}
    for pid in [proc.pid, *live]:
        with contextlib.suppress(ProcessLookupError):
            os.kill(pid, signal.SIGKILL)
    out = proc.stdout.read() if proc.stdout else ""
    return f"py-spy dump:\n{dump.stdout}{dump.stderr}\nprinted after SIGINT:\n{out}\nstill alive: {names}"


def _name(pid: int) -> str:
    try:
        return (Path("/proc") / str(pid) / "comm").read_text().strip()
    except OSError:
        return "?"


def test_run_brings_an_example_to_ready_and_ctrl_c_stops_everything() -> None:
    env = {k: v for k, v in os.environ.items() if k != "KUBECONFIG"}
    proc = subprocess.Popen([sys.executable, "-m", "qwen_fleet.cli", "run"], cwd=ROOT, env=env, text=True,
                            stdout=subprocess.PIPE, stderr=subprocess.STDOUT)
    assert proc.stdout is not None
    lines: list[str] = []
    deadline = time.monotonic() + 300
    while time.monotonic() < deadline:
        line = proc.stdout.readline()
        if not line:
            break
        lines.append(line)
        if "Ctrl-C stops everything" in line:
            break
    text = "".join(lines)
    assert "qwen3-4b is Ready" in text, text
    assert "Ready          True" in text
    assert "capacity per replica" in text
    started = _descendants(proc.pid)
    assert len(started) >= 6  # etcd, apiserver, controller-manager, scheduler, kwok, operator
    proc.send_signal(signal.SIGINT)
    try:
        code = proc.wait(timeout=60)
    except subprocess.TimeoutExpired:
        raise AssertionError("`qwen-fleet run` did not stop within 60 s of SIGINT:\n" + _stuck(proc, started)) from None
    assert code == 0
    rest = proc.stdout.read()
    assert "stopped everything this run started" in rest
    # The cluster's directory (printed as `export KUBECONFIG=<workdir>/cluster/kubeconfig`) is gone with it.
    (kubeconfig,) = re.findall(r"export KUBECONFIG=(\S+)", text)
    workdir = Path(kubeconfig).parent.parent
    assert workdir.name.startswith("qwen-fleet-run-"), kubeconfig
    assert not workdir.exists(), sorted(str(p) for p in workdir.rglob("*"))[:20]
    deadline = time.monotonic() + 30
    while time.monotonic() < deadline and any(alive(p) for p in started):
        time.sleep(0.2)
    assert [p for p in started if alive(p)] == []
