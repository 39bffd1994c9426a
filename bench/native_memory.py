"""Where the operator's memory per fleet goes, native allocations included (issue 14's RSS target).

``bench.memory`` sees Python allocations (tracemalloc); they explain about a third of the RSS a fleet adds. This
bench asks memray, which hooks ``malloc``/``mmap`` themselves, with native stacks: the operator runs exactly as in
the fleet bench, a ``sitecustomize`` hook starts memray's tracker on the first SIGUSR2 (operator idle) and stops
it on the second (N fleets Ready), and the allocations made in between and still live at the end are the
fleets' share. They are grouped by allocator, by the innermost Python frame's package and function, and by the
innermost native frame that is not an allocator itself. Beside it, ``/proc/PID/smaps`` splits the RSS into the
brk heap, anonymous mappings (glibc's thread arenas, pymalloc's arenas) and files.

memray is not a dependency of the project: it is installed once, pinned, with ``pip --no-deps --target`` into
``$QF_CACHE/memray/<version>`` (default ``~/.cache/qwen-fleet``) and put on the operator's PYTHONPATH only here.

    python -m bench.native_memory --n 300 [--output bench/results/fleet-memory-native.json]
"""

from __future__ import annotations

import argparse
import json
import os
import signal
import subprocess
import sys
import tempfile
import time
from collections import defaultdict
from collections.abc import Iterable
from pathlib import Path
from typing import Any

from tests.support.operator_process import OperatorProcess

from bench.fleet import NAMESPACE, ROOT, _apply_all, _rss_cpu, cluster_for, resources
from bench.watch import Recorder, api_client, qwi_ready

RESULTS = Path(__file__).resolve().parent / "results"

# memray and what its module imports at load time (rich for its reporters); Pygments comes from the venv's lock.
MEMRAY_VERSION = "1.20.0"
PINS = (f"memray=={MEMRAY_VERSION}", "rich==15.0.0", "markdown-it-py==4.3.0", "mdurl==0.1.2")

HOOK = '''\
import os, signal
_state = {}
def _toggle(signum, frame):
    import memray
    path = os.environ["QF_MEMRAY_FILE"]
    if "tracker" not in _state:
        _state["tracker"] = memray.Tracker(path, native_traces=True, follow_fork=False)
        _state["tracker"].__enter__()
        open(path + ".started", "w").close()
    else:
        _state.pop("tracker").__exit__(None, None, None)
        open(path + ".done", "w").close()
signal.signal(signal.SIGUSR2, _toggle)
'''

# Native frames that only pass an allocation on: the first frame below them is the one that asked for memory.
ALLOCATOR_WORDS = ("alloc", "Alloc", "arena", "Arena", "Mmap", "_PyObject_New", "PyObject_GC_New", "_PyObject_GC_",
                   "Resize", "resize", "memray", "operator new", "_Py_NewReference", "PyMem_", "obmalloc")


def memray_dir() -> Path:
    base = Path(os.environ.get("QF_CACHE") or Path(os.environ.get("XDG_CACHE_HOME") or Path.home() / ".cache")
                / "qwen-fleet")
    target = base / "memray" / MEMRAY_VERSION
    if (target / ".installed").exists():
        return target
    scratch = Path(tempfile.mkdtemp(prefix="memray-", dir=target.parent if target.parent.exists() else None))
    subprocess.run([sys.executable, "-m", "pip", "install", "--quiet", "--no-deps", "--target", str(scratch),
                    *PINS], check=True)
    (scratch / ".installed").write_text(" ".join(PINS) + "\n")
    target.parent.mkdir(parents=True, exist_ok=True)
    if target.exists():
        subprocess.run(["rm", "-rf", str(target)], check=True)
    scratch.rename(target)
    return target


def smaps_split(pid: int) -> dict[str, float]:
    """RSS in MiB by kind of mapping: the brk heap, anonymous mappings, stacks, files."""
    out: dict[str, float] = defaultdict(float)
    kind = "file"
    for line in Path(f"/proc/{pid}/smaps").read_text().splitlines():
        head = line.split()
        if not head:
            continue
        if "-" in head[0] and len(head) >= 5 and not head[0].endswith(":"):  # a mapping's header line
            path = head[5] if len(head) > 5 else ""
            kind = ("heap" if path == "[heap]" else "stack" if path.startswith("[stack") else
                    "anonymous" if path == "" else "other" if path.startswith("[") else "file")
        elif head[0] == "Rss:":
            out[kind] += int(head[1]) / 1024
    return {k: round(v, 1) for k, v in sorted(out.items())}


def owner(path: str) -> str:
    """The package a Python file belongs to (site-packages/<pkg>, qwen_fleet, or a stdlib module)."""
    if "site-packages/" in path:
        return path.split("site-packages/", 1)[1].split("/", 1)[0].removesuffix(".py")
    for mine in ("qwen_fleet", "qwen_fleet_dev", "tests", "bench"):
        if f"/{mine}/" in path:
            return mine
    if "/python3." in path:
        return "(stdlib) " + path.split("/python3.", 1)[1].split("/", 1)[-1]
    return path


def classify(stack: Iterable[tuple[str, str, int]]) -> tuple[str, str, str]:
    """(Python package, Python package:function, native site) of one allocation's hybrid stack, innermost
    first. A stack without Python frames (a thread memray saw no Python for) says so."""
    native = python_pkg = python_fn = None
    for function, filename, _line in stack:
        is_python = filename.endswith(".py")
        if is_python and python_pkg is None:
            python_pkg = owner(filename)
            python_fn = f"{python_pkg}:{function}"
        if not is_python and native is None and python_pkg is None \
                and not any(word in function for word in ALLOCATOR_WORDS):
            native = function
        if python_pkg is not None and native is not None:
            break
    return python_pkg or "(no Python frame)", python_fn or "(no Python frame)", native or "(allocator only)"


def analyse(capture: Path, n: int, top: int = 25) -> dict[str, Any]:
    sys.path.insert(0, str(memray_dir()))
    import memray  # installed by memray_dir(), not a project dependency

    reader = memray.FileReader(str(capture))
    groups: dict[str, dict[str, int]] = {k: defaultdict(int) for k in
                                         ("by_allocator", "by_python_package", "by_python_function",
                                          "by_native_site")}
    total = count = 0
    for record in reader.get_leaked_allocation_records(merge_threads=True):
        try:
            stack = record.hybrid_stack_trace()
        except NotImplementedError:
            stack = record.native_stack_trace()
        pkg, fn, site = classify(stack)
        for key, value in (("by_allocator", memray.AllocatorType(record.allocator).name), ("by_python_package", pkg),
                           ("by_python_function", fn), ("by_native_site", site)):
            groups[key][value] += record.size
        total += record.size
        count += record.n_allocations
    return {"live_kib_per_fleet": round(total / 1024 / n, 1), "live_mib": round(total / 2**20, 1),
            "live_allocations": count,
            **{key: [{"where": k, "kib_per_fleet": round(v / 1024 / n, 2), "share": round(v / total, 3)}
                     for k, v in sorted(rows.items(), key=lambda kv: -kv[1])[:top]]
               for key, rows in groups.items()}}


def _wait_for(path: Path, timeout: float) -> None:
    deadline = time.monotonic() + timeout
    while not path.exists():
        if time.monotonic() > deadline:
            raise TimeoutError(f"the operator's memray hook did not write {path.name} in {timeout:.0f} s")
        time.sleep(0.5)


def run(n: int, timeout: float) -> dict[str, Any]:
    docs = resources(n)
    deps = memray_dir()
    with tempfile.TemporaryDirectory() as tmp:
        work = Path(tmp)
        hook_dir = work / "hook"
        hook_dir.mkdir()
        (hook_dir / "sitecustomize.py").write_text(HOOK)
        capture = work / "operator.memray"
        cluster = cluster_for(docs, work / "cluster")
        cluster.install_crd(ROOT / "crds" / "qwenfleet.io_qweninferences.yaml")
        pythonpath = os.pathsep.join(filter(None, [str(hook_dir), str(deps), os.environ.get("PYTHONPATH")]))
        operator = OperatorProcess(cluster, work / "operator.log",
                                   env={"PYTHONPATH": pythonpath, "QF_MEMRAY_FILE": str(capture)})
        try:
            operator.start()
            assert operator.proc is not None
            pid = operator.proc.pid
            time.sleep(2)
            rss_idle, _ = _rss_cpu(pid)
            smaps_idle = smaps_split(pid)
            operator.proc.send_signal(signal.SIGUSR2)
            _wait_for(Path(f"{capture}.started"), 60)
            api = api_client(str(cluster.kubeconfig))
            qwis = Recorder(api, f"/apis/qwenfleet.io/v1alpha1/namespaces/{NAMESPACE}/qweninferences",
                            {"ready": qwi_ready}).start()
            start = time.monotonic()
            _apply_all(cluster, docs)
            ready = qwis.wait("ready", n, timeout)
            took = time.monotonic() - start
            qwis.stop()
            time.sleep(45)  # as bench.memory: the HPAs' first conditions are mirrored once
            rss_loaded, _ = _rss_cpu(pid)
            smaps_loaded = smaps_split(pid)
            operator.proc.send_signal(signal.SIGUSR2)
            _wait_for(Path(f"{capture}.done"), 600)
        finally:
            operator.stop()
            cluster.cleanup()
        native = analyse(capture, n)
    return {"n": n, "all_ready": ready, "seconds_to_ready_with_memray": round(took, 1), "memray": MEMRAY_VERSION,
            "rss_mib": {"idle": round(rss_idle, 1), "loaded": round(rss_loaded, 1),
                        "kib_per_fleet": round((rss_loaded - rss_idle) * 1024 / n, 1)},
            "smaps_rss_mib": {"idle": smaps_idle, "loaded": smaps_loaded,
                              "kib_per_fleet": {k: round((smaps_loaded.get(k, 0) - smaps_idle.get(k, 0)) * 1024 / n, 1)
                                                for k in sorted(set(smaps_idle) | set(smaps_loaded))}},
            **native}


def summary(result: dict[str, Any]) -> str:
    rss = result["rss_mib"]
    lines = [f"# Operator memory per fleet, native allocations included (memray {result['memray']}, "
             f"N={result['n']})", "",
             f"RSS idle {rss['idle']} MiB, with {result['n']} Ready fleets {rss['loaded']} MiB: "
             f"{rss['kib_per_fleet']} KiB per fleet (memray's own bookkeeping is in it). By mapping, KiB per fleet: "
             + ", ".join(f"{k} {v}" for k, v in result["smaps_rss_mib"]["kib_per_fleet"].items()) + ".", "",
             f"Allocated between the two readings and still live at the second: {result['live_kib_per_fleet']} KiB "
             f"per fleet ({result['live_allocations']} allocations).", ""]
    for section in ("by_allocator", "by_python_package", "by_python_function", "by_native_site"):
        lines += [f"| {section.replace('_', ' ')} | KiB per fleet | share |", "|---|---|---|"]
        lines += [f"| {r['where']} | {r['kib_per_fleet']} | {r['share']:.1%} |" for r in result[section][:15]]
        lines.append("")
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--n", type=int, default=300)
    parser.add_argument("--timeout", type=float, default=1800)
    parser.add_argument("--output", type=Path, default=RESULTS / "fleet-memory-native.json")
    args = parser.parse_args(argv)
    result = run(args.n, args.timeout)
    args.output.write_text(json.dumps(result, indent=1) + "\n")
    args.output.with_suffix(".md").write_text(summary(result))
    print(summary(result))
    return 0


if __name__ == "__main__":
    sys.exit(main())
