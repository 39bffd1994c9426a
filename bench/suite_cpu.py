"""How much CPU a test run uses against its wall time, per module: which parts of the suite wait (on an apiserver,
a kubelet, a resync) and which compute (vLLM engines). Figures: bench/results/suite-cpu.md.

    python -m bench.suite_cpu --out run.json -- .venv/bin/pytest -p bench.suite_cpu tests/integration/test_x.py

The wrapper makes itself a child subreaper (prctl PR_SET_CHILD_SUBREAPER) and runs the command as its child.
Everything the command starts stays below it, even what daemonizes (containerd's shims, their containers) or
outlives its parent, and it reaps those orphans itself, so their CPU is counted too. Twice a second it samples
the tree's cumulative CPU: what its reaped descendants used (getrusage RUSAGE_CHILDREN) plus, for each live
descendant, its own utime+stime and what the children it reaped used (cutime+cstime, /proc/PID/stat). Each
process's time is in exactly one of those places at any instant. It also samples the whole machine's busy share
(/proc/stat), since other work on the machine stretches the wall time.

With ``-p bench.suite_cpu`` pytest (and each xdist worker) appends every test's start and end, on the machine's
monotonic clock, to ``$QF_CPU_MARKS``; the wrapper sets that and turns the samples into per-module CPU seconds
(by interpolation). Under xdist modules overlap, so only the run's totals mean anything there.
"""

from __future__ import annotations

import argparse
import contextlib
import ctypes
import json
import os
import signal
import subprocess
import sys
import tempfile
import threading
import time
from bisect import bisect_left
from collections import defaultdict
from pathlib import Path
from typing import Any

PR_SET_CHILD_SUBREAPER = 36
TICKS = os.sysconf("SC_CLK_TCK")
SAMPLE_S = 0.5


def _stat_fields(pid: int) -> list[str] | None:
    try:
        return Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    except (OSError, IndexError):
        return None


def _descendants_cpu(root: int) -> float:
    """CPU seconds of the live processes under ``root`` (not root itself): own time plus reaped children's."""
    parent_of: dict[int, int] = {}
    cpu: dict[int, float] = {}
    for entry in os.scandir("/proc"):
        if not entry.name.isdigit():
            continue
        fields = _stat_fields(int(entry.name))
        if fields is None:
            continue
        pid = int(entry.name)
        parent_of[pid] = int(fields[1])
        # fields after the ")": state ppid ... utime(11) stime(12) cutime(13) cstime(14)
        cpu[pid] = sum(int(f) for f in fields[11:15]) / TICKS
    total = 0.0
    for pid, seconds in cpu.items():
        p, hops = parent_of.get(pid), 0
        while p is not None and p != root and p > 1 and hops < 64:
            p, hops = parent_of.get(p), hops + 1
        if p == root:
            total += seconds
    return total


def _children(parent: int) -> list[int]:
    out = []
    for entry in os.scandir("/proc"):
        if entry.name.isdigit():
            fields = _stat_fields(int(entry.name))
            if fields is not None and int(fields[1]) == parent:
                out.append(int(entry.name))
    return out


def _machine_busy() -> tuple[float, float]:
    """(busy, total) jiffies of the whole machine."""
    values = [int(v) for v in Path("/proc/stat").read_text().split("\n", 1)[0].split()[1:]]
    idle = values[3] + values[4]
    total = sum(values[:8])
    return total - idle, total


def _reaped_cpu() -> float:
    import resource

    ru = resource.getrusage(resource.RUSAGE_CHILDREN)
    return ru.ru_utime + ru.ru_stime


class Sampler:
    def __init__(self) -> None:
        self.samples: list[tuple[float, float]] = []  # (monotonic time, cumulative CPU seconds of the tree)
        self.stop = threading.Event()
        self.lock = threading.Lock()

    def cumulative(self) -> float:
        with self.lock:  # reaping and reading RUSAGE_CHILDREN must not interleave with a scan
            return _reaped_cpu() + _descendants_cpu(os.getpid())

    def reap(self, keep: int) -> None:
        """Reap the orphans that ended (not ``keep``, the command itself: Popen waits for that one)."""
        with self.lock:
            for pid in _children(os.getpid()):
                if pid != keep:
                    with contextlib.suppress(ChildProcessError):
                        os.waitpid(pid, os.WNOHANG)

    def run(self, child: subprocess.Popen[bytes]) -> None:
        while not self.stop.is_set():
            self.reap(child.pid)
            self.samples.append((time.monotonic(), self.cumulative()))
            self.stop.wait(SAMPLE_S)


def _at(samples: list[tuple[float, float]], t: float) -> float:
    times = [s[0] for s in samples]
    i = bisect_left(times, t)
    if i <= 0:
        return samples[0][1]
    if i >= len(samples):
        return samples[-1][1]
    (t0, c0), (t1, c1) = samples[i - 1], samples[i]
    return c0 + (c1 - c0) * (t - t0) / (t1 - t0) if t1 > t0 else c1


def per_module(samples: list[tuple[float, float]], marks: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """Each module's wall (its tests' spans, summed) and CPU (the tree's CPU over those spans)."""
    starts: dict[tuple[str, str], float] = {}
    wall: dict[str, float] = defaultdict(float)
    cpu: dict[str, float] = defaultdict(float)
    tests: dict[str, int] = defaultdict(int)
    for mark in marks:
        key = (mark["worker"], mark["nodeid"])
        module = mark["nodeid"].split("::", 1)[0]
        if mark["event"] == "start":
            starts[key] = mark["t"]
        elif key in starts:
            t0 = starts.pop(key)
            wall[module] += mark["t"] - t0
            cpu[module] += _at(samples, mark["t"]) - _at(samples, t0)
            tests[module] += 1
    return [{"module": m, "tests": tests[m], "wall_s": round(wall[m], 1), "cpu_s": round(cpu[m], 1),
             "cores": round(cpu[m] / wall[m], 2) if wall[m] else 0.0} for m in sorted(wall)]


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--out", type=Path, required=True, help="JSON with totals and per-module figures")
    parser.add_argument("--label", default="")
    parser.add_argument("command", nargs=argparse.REMAINDER)
    args = parser.parse_args(argv)
    command = args.command[1:] if args.command[:1] == ["--"] else args.command
    if not command:
        parser.error("no command")
    libc = ctypes.CDLL(None, use_errno=True)
    if libc.prctl(PR_SET_CHILD_SUBREAPER, 1, 0, 0, 0) != 0:
        raise OSError(ctypes.get_errno(), "prctl(PR_SET_CHILD_SUBREAPER)")
    marks_file = Path(tempfile.mkstemp(prefix="qf-cpu-marks-")[1])
    busy0, total0 = _machine_busy()
    started = time.monotonic()
    child = subprocess.Popen(command, env={**os.environ, "QF_CPU_MARKS": str(marks_file)})
    sampler = Sampler()
    thread = threading.Thread(target=sampler.run, args=(child,), daemon=True)
    thread.start()
    signal.signal(signal.SIGINT, lambda *_: child.send_signal(signal.SIGINT))
    rc = child.wait()
    ended = time.monotonic()
    # Orphans the command left (a shim, a daemon) count until they go: wait for them a while.
    deadline = time.monotonic() + 30
    while time.monotonic() < deadline and _children(os.getpid()):
        sampler.reap(keep=-1)
        time.sleep(0.5)
    sampler.stop.set()
    thread.join()
    sampler.reap(keep=-1)
    sampler.samples.append((time.monotonic(), sampler.cumulative()))
    busy1, total1 = _machine_busy()
    marks = [json.loads(line) for line in marks_file.read_text().splitlines() if line.strip()]
    marks_file.unlink(missing_ok=True)
    wall = ended - started
    cpu = sampler.samples[-1][1]
    result = {
        "label": args.label, "command": command, "exit": rc, "wall_s": round(wall, 1), "cpu_s": round(cpu, 1),
        "cores": round(cpu / wall, 2) if wall else 0.0, "machine_cpus": os.cpu_count(),
        "machine_busy_share": round((busy1 - busy0) / (total1 - total0), 2) if total1 > total0 else None,
        "load_avg_end": os.getloadavg(), "modules": per_module(sampler.samples, marks),
    }
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(json.dumps(result, indent=1) + "\n")
    print(f"[suite_cpu] {args.label or ' '.join(command)}: wall {wall:.0f} s, CPU {cpu:.0f} s "
          f"({result['cores']} cores), machine busy {result['machine_busy_share']}", file=sys.stderr)
    return rc


# --- the pytest side (-p bench.suite_cpu) ---------------------------------------------------------------------

def _mark(event: str, nodeid: str) -> None:
    path = os.environ.get("QF_CPU_MARKS")
    if not path:
        return
    line = json.dumps({"event": event, "nodeid": nodeid, "t": time.monotonic(),
                       "worker": os.environ.get("PYTEST_XDIST_WORKER", "main")})
    with open(path, "a") as f:
        f.write(line + "\n")


def pytest_runtest_logstart(nodeid: str, location: object) -> None:
    _mark("start", nodeid)


def pytest_runtest_logfinish(nodeid: str, location: object) -> None:
    _mark("end", nodeid)


if __name__ == "__main__":
    sys.exit(main())
