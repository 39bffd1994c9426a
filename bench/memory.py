"""Where the operator's memory per fleet goes: tracemalloc snapshots of the real operator process, idle and
after N fleets are Ready, compared by file and by line (issue 14's RSS target).

The operator runs exactly as in the fleet bench (``python -m qwen_fleet.cli operator``); a ``sitecustomize``
module put on its PYTHONPATH by this bench starts tracemalloc and writes a snapshot on SIGUSR2, so nothing in
the product knows about it. tracemalloc sees Python allocations only (not the interpreter's own arenas' slack
nor C libraries' malloc), and it slows the operator: read the per-fleet bytes, not the timings.

    python -m bench.memory --n 300 [--frames 8] [--output bench/results/fleet-memory.json]
"""

from __future__ import annotations

import argparse
import json
import os
import signal
import sys
import tempfile
import time
import tracemalloc
from collections import defaultdict
from pathlib import Path
from typing import Any

from tests.support.operator_process import OperatorProcess

from bench.fleet import NAMESPACE, ROOT, _apply_all, _rss_cpu, cluster_for, resources
from bench.watch import Recorder, api_client, exists, qwi_ready

RESULTS = Path(__file__).resolve().parent / "results"

HOOK = '''\
import ctypes, gc, os, signal, tracemalloc
if int(os.environ.get("QF_TRACEMALLOC_FRAMES", "1")):
    tracemalloc.start(int(os.environ.get("QF_TRACEMALLOC_FRAMES", "1")))
def _trim(signum, frame):
    gc.collect()
    ctypes.CDLL("libc.so.6").malloc_trim(0)
signal.signal(signal.SIGUSR1, _trim)
_count = [0]
def _dump(signum, frame):
    gc.collect()
    _count[0] += 1
    tracemalloc.take_snapshot().dump(os.path.join(os.environ["QF_TRACEMALLOC_DIR"], f"snap-{_count[0]}.bin"))
signal.signal(signal.SIGUSR2, _dump)
'''


def _snapshot(operator: OperatorProcess, directory: Path, index: int, timeout: float = 300) -> tracemalloc.Snapshot:
    assert operator.proc is not None
    operator.proc.send_signal(signal.SIGUSR2)
    path = directory / f"snap-{index}.bin"
    deadline = time.monotonic() + timeout
    while True:  # the dump is written by the operator's main thread; wait until it is complete
        size = path.stat().st_size if path.exists() else -1
        time.sleep(1.0)
        if size > 0 and path.stat().st_size == size:
            try:
                return tracemalloc.Snapshot.load(str(path))
            except (EOFError, ValueError):
                pass
        if time.monotonic() > deadline:
            raise TimeoutError(f"no tracemalloc snapshot at {path} after {timeout}s")


def group(snapshot: tracemalloc.Snapshot, key: str) -> dict[str, int]:
    """Bytes by top frame's file ('filename') or file:line ('lineno'), with the site-packages prefix cut."""
    out: dict[str, int] = defaultdict(int)
    for stat in snapshot.statistics(key):
        frame = stat.traceback[0]
        name = frame.filename.split("site-packages/")[-1].split("/lib/python3.11/")[-1]
        out[name if key == "filename" else f"{name}:{frame.lineno}"] += stat.size
    return out


def package(filename: str) -> str:
    parts = filename.split("/")
    return parts[0] if len(parts) > 1 else "(stdlib) " + filename


def diff(before: dict[str, int], after: dict[str, int], n: int, top: int) -> list[dict[str, Any]]:
    rows = [(k, after.get(k, 0) - before.get(k, 0)) for k in set(before) | set(after)]
    rows.sort(key=lambda r: -r[1])
    return [{"where": k, "kib_per_fleet": round(d / 1024 / n, 2), "mib_total": round(d / 1024 / 1024, 2)}
            for k, d in rows[:top]]


def run(n: int, frames: int, timeout: float, env: dict[str, str] | None = None) -> dict[str, Any]:
    docs = resources(n)
    with tempfile.TemporaryDirectory() as tmp:
        work = Path(tmp)
        hook_dir, snaps = work / "hook", work / "snaps"
        hook_dir.mkdir()
        snaps.mkdir()
        (hook_dir / "sitecustomize.py").write_text(HOOK)
        cluster = cluster_for(docs, work / "cluster")
        cluster.install_crd(ROOT / "crds" / "qwenfleet.io_qweninferences.yaml")
        pythonpath = os.pathsep.join(filter(None, [str(hook_dir), os.environ.get("PYTHONPATH")]))
        traced = {"PYTHONPATH": pythonpath, "QF_TRACEMALLOC_DIR": str(snaps), "QF_TRACEMALLOC_FRAMES": str(frames)}
        traced["QF_TRACEMALLOC_FRAMES"] = str(frames)
        operator = OperatorProcess(cluster, work / "operator.log", env={**traced, **(env or {})})
        try:
            operator.start()
            assert operator.proc is not None
            time.sleep(2)
            idle = _snapshot(operator, snaps, 1) if frames else None
            rss_idle, _ = _rss_cpu(operator.proc.pid)
            api = api_client(str(cluster.kubeconfig))
            qwis = Recorder(api, f"/apis/qwenfleet.io/v1alpha1/namespaces/{NAMESPACE}/qweninferences",
                            {"seen": exists, "ready": qwi_ready}).start()
            start = time.monotonic()
            _apply_all(cluster, docs)
            ready = qwis.wait("ready", n, timeout)
            took = time.monotonic() - start
            qwis.stop()
            time.sleep(45)  # the HPAs' first conditions are mirrored once (as in the fleet bench's settle)
            loaded = _snapshot(operator, snaps, 2) if frames else None
            rss_loaded, _ = _rss_cpu(operator.proc.pid)
            operator.proc.send_signal(signal.SIGUSR1)  # gc + malloc_trim(0): free heap pages go back to the OS
            time.sleep(3)
            rss_trimmed, _ = _rss_cpu(operator.proc.pid)
        finally:
            operator.stop()
            cluster.cleanup()
    rss = {"idle": round(rss_idle, 1), "loaded": round(rss_loaded, 1),
           "kib_per_fleet": round((rss_loaded - rss_idle) * 1024 / n, 1),
           "after_malloc_trim": round(rss_trimmed, 1),
           "kib_per_fleet_after_malloc_trim": round((rss_trimmed - rss_idle) * 1024 / n, 1)}
    head = {"n": n, "all_ready": ready, "seconds_to_ready": round(took, 1), "operator_env": env or {},
            "tracemalloc_frames": frames, "rss_mib": rss}
    if idle is None or loaded is None:
        return head
    by_file_before, by_file_after = group(idle, "filename"), group(loaded, "filename")
    by_pkg_before: dict[str, int] = defaultdict(int)
    by_pkg_after: dict[str, int] = defaultdict(int)
    for k, v in by_file_before.items():
        by_pkg_before[package(k)] += v
    for k, v in by_file_after.items():
        by_pkg_after[package(k)] += v
    traced = sum(by_file_after.values()) - sum(by_file_before.values())
    return {
        **head,
        "traced_kib_per_fleet": round(traced / 1024 / n, 1),
        "traced_mib": {"idle": round(sum(by_file_before.values()) / 2**20, 1),
                       "loaded": round(sum(by_file_after.values()) / 2**20, 1)},
        "by_package": diff(by_pkg_before, by_pkg_after, n, 15),
        "by_file": diff(by_file_before, by_file_after, n, 25),
        "by_line": diff(group(idle, "lineno"), group(loaded, "lineno"), n, 40),
    }


def summary(result: dict[str, Any]) -> str:
    if "by_file" not in result:
        return (f"RSS (no tracemalloc, operator env {result['operator_env']}): idle {result['rss_mib']['idle']} MiB, "
                f"with {result['n']} Ready fleets {result['rss_mib']['loaded']} MiB: "
                f"{result['rss_mib']['kib_per_fleet']} KiB per fleet; after gc + malloc_trim(0) "
                f"{result['rss_mib']['after_malloc_trim']} MiB: {result['rss_mib']['kib_per_fleet_after_malloc_trim']} "
                "KiB per fleet\n")
    lines = [f"# Operator memory per fleet (tracemalloc, N={result['n']})", "",
             f"RSS idle {result['rss_mib']['idle']} MiB, with {result['n']} Ready fleets "
             f"{result['rss_mib']['loaded']} MiB: {result['rss_mib']['kib_per_fleet']} KiB per fleet "
             f"(tracemalloc itself adds to RSS). Python allocations traced: {result['traced_kib_per_fleet']} KiB "
             "per fleet.", "", "| package / file / line (top frame) | KiB per fleet | MiB total |", "|---|---|---|"]
    for section in ("by_package", "by_file", "by_line"):
        lines.append(f"| **{section.replace('_', ' ')}** | | |")
        lines += [f"| {r['where']} | {r['kib_per_fleet']} | {r['mib_total']} |" for r in result[section][:15]]
    return "\n".join(lines) + "\n"


def env_setting(text: str) -> tuple[str, str]:
    name, sep, value = text.partition("=")
    if not sep or not name:
        raise argparse.ArgumentTypeError(f"expected NAME=VALUE, got {text!r}")
    return name, value


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--n", type=int, default=300)
    parser.add_argument("--frames", type=int, default=1, help="traceback depth tracemalloc keeps (1 is cheapest; 0: "
                        "no tracemalloc, RSS only)")
    parser.add_argument("--env", action="append", default=[], metavar="NAME=VALUE", type=env_setting,
                        help="set in the operator's environment (e.g. MALLOC_ARENA_MAX=2)")
    parser.add_argument("--timeout", type=float, default=1800)
    parser.add_argument("--output", type=Path, default=RESULTS / "fleet-memory.json")
    args = parser.parse_args(argv)
    result = run(args.n, args.frames, args.timeout, dict(args.env))
    args.output.write_text(json.dumps(result, indent=1) + "\n")
    args.output.with_suffix(".md").write_text(summary(result))
    print(summary(result))
    return 0


if __name__ == "__main__":
    sys.exit(main())
