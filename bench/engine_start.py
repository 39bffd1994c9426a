"""Where a vLLM CPU engine's start-up goes on this machine: ``python -m bench.engine_start host`` (or ``pod``).

The phases come from the engine's own log: each line is stamped as it arrives (``host``: read from the server's
pipe against the moment of ``exec``; ``pod``: ``kubectl logs --timestamps``, the container runtime's stamp), and
the milestones below are lines vLLM 0.32 itself prints, one per process it starts:

* ``api import``: the API server's interpreter up to its first config line (python, torch and vllm imported);
* ``engine-core spawn+import``: vLLM's CPU platform forces the ``spawn`` start method, so the engine core is a
  fresh interpreter that imports torch and vllm again before it logs "Initializing a V1 LLM engine";
* ``worker spawn+import``: the multiprocessing executor spawns the worker, a third interpreter, up to
  "Starting to load model";
* ``weights``: to "Loading weights took";
* ``kv profile+warm-up``: to "init engine (profile, create kv cache, warmup model) took";
* ``api server up``: to uvicorn's "Application startup complete";
* ``/health``: to the first ``/health`` 200 (``host``), or, for a pod, ``ready``: to the pod's Ready condition
  (its readiness probe, after the startup probe), read from the pod's status.

A pod adds, before its first log line, ``scheduled`` (creation to PodScheduled) and ``container start`` (to the
container's startedAt: sandbox, mounts; the image is already in containerd) and ``python start`` (to the first
line). Importing the engine image into the node's containerd is timed by the ``engine_image`` fixture of
tests/node/conftest.py (printed with ``-s``).

``host`` runs each ``--variant`` ``--rounds`` times, interleaved (variant A, B, A, B ...), so the figures of one
run compare under the same load; the machine is shared, so compare ratios, not seconds across runs. Variants:

* ``baseline``: what the suite runs (tests/support/vllm_server.py: offline env, ``--enforce-eager``, nice 19);
* ``uniproc``: ``VLLM_ENABLE_V1_MULTIPROCESSING=0``: vLLM's CPU platform then keeps the ``uni`` executor, so the
  worker runs inside the engine-core process (one interpreter fewer);
* ``compiled``: no ``--enforce-eager`` (what the rendered Deployment runs when the spec does not ask for eager).

Nothing here asserts a time. Figures to ``--out`` (JSON) and stdout (a markdown table).
"""

from __future__ import annotations

import argparse
import json
import os
import re
import subprocess
import sys
import tempfile
import threading
import time
import urllib.request
from datetime import datetime
from pathlib import Path
from typing import Any

# (event, the log line that marks it), in the order vLLM reaches them.
MILESTONES: tuple[tuple[str, re.Pattern[str]], ...] = (
    ("api import", re.compile(r"\(APIServer pid=\d+\).*non-default args")),
    ("engine-core spawn+import", re.compile(r"\(EngineCore.*Initializing a V1 LLM engine")),
    ("worker spawn+import", re.compile(r"Starting to load model")),
    ("weights", re.compile(r"Loading weights took")),
    ("kv profile+warm-up", re.compile(r"init engine \(profile, create kv cache, warmup model\) took")),
    ("api server up", re.compile(r"Application startup complete")),
)
VARIANTS: dict[str, tuple[dict[str, str], list[str]]] = {
    "baseline": ({}, ["--enforce-eager"]),
    "uniproc": ({"VLLM_ENABLE_V1_MULTIPROCESSING": "0"}, ["--enforce-eager"]),
    "compiled": ({}, []),
}
_DIRECT = urllib.request.build_opener(urllib.request.ProxyHandler({}))


def phases(stamped: list[tuple[float, str]], end: float | None, end_name: str) -> dict[str, float]:
    """Seconds per phase from (seconds since start, line) pairs: each milestone's first line minus the previous
    milestone's (the first one from 0); ``end`` (health or Ready) closes the last phase. A milestone the log
    lacks (a variant without that process) takes no time of its own."""
    out: dict[str, float] = {}
    last = 0.0
    for name, pattern in MILESTONES:
        at = next((t for t, line in stamped if pattern.search(line)), None)
        if at is None:
            continue
        out[name] = round(at - last, 2)
        last = at
    if end is not None:
        out[end_name] = round(end - last, 2)
        out["total"] = round(end, 2)
    return out


# --- host -------------------------------------------------------------------------------------------------------

def start_on_host(variant: str, model_dir: Path, python: str, log: Path, timeout: float = 900) -> dict[str, Any]:
    """One engine start-up as the suite's VllmServer makes it, with the variant's env and argv; stopped after its
    first /health 200. Returns the phases and the stamped log's path."""
    from tests.support.vllm_server import VllmServer, _engine_child

    from qwen_fleet_dev.cluster import free_port

    env, argv = VARIANTS[variant]
    server = VllmServer(["--max-model-len", "1024", "--max-num-seqs", "8", *argv], env, model_dir,
                        port=free_port(), python=python, log_path=log)
    stamped: list[tuple[float, str]] = []
    t0 = time.monotonic()
    proc = subprocess.Popen(server.argv(), stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                            stdin=subprocess.DEVNULL, env=server.environment(), start_new_session=True,
                            preexec_fn=_engine_child)
    server.proc = proc  # so server.stop() ends the whole group

    def read() -> None:
        assert proc.stdout is not None
        with log.open("w") as out:
            for raw in proc.stdout:
                line = raw.decode(errors="replace").rstrip("\n")
                t = time.monotonic() - t0
                stamped.append((t, line))
                out.write(f"{t:9.3f} {line}\n")
                out.flush()

    reader = threading.Thread(target=read, daemon=True)
    reader.start()
    health, cpu = None, None
    try:
        while time.monotonic() - t0 < timeout and proc.poll() is None:
            try:
                with _DIRECT.open(f"{server.base_url}/health", timeout=2) as resp:
                    if resp.status == 200:
                        health = time.monotonic() - t0
                        cpu = group_cpu_seconds(server.group_pids())
                        break
            except OSError:
                pass
            time.sleep(0.2)
    finally:
        server.stop()
        reader.join(timeout=30)
    if health is None:
        raise RuntimeError(f"{variant}: no /health 200 (exit {proc.returncode}); log {log}")
    return {"variant": variant, "phases": phases(stamped, health, "/health") | {"cpu s": cpu}, "log": str(log)}


def group_cpu_seconds(pids: list[int]) -> float:
    """User + system CPU seconds the engine's live processes have used (less sensitive than wall time to what
    else runs on a shared machine: the figure to compare variants by)."""
    ticks = os.sysconf("SC_CLK_TCK")
    total = 0
    for pid in pids:
        try:
            fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
        except OSError:
            continue
        total += int(fields[11]) + int(fields[12])  # utime, stime (fields 14 and 15 of stat)
    return round(total / ticks, 1)


def run_host(args: argparse.Namespace) -> dict[str, Any]:
    from tests.support.tiny_qwen import make_tiny_qwen2, vllm_python

    python = vllm_python()
    work = Path(tempfile.mkdtemp(prefix="engine-start-"))
    model = make_tiny_qwen2(work / "tiny", python=python)
    runs = []
    for r in range(args.rounds):
        for variant in args.variant:
            run = start_on_host(variant, model, python, work / f"{variant}-{r}.log")
            print(f"round {r} {variant}: {run['phases']}", flush=True)
            runs.append(run)
    return {"mode": "host", "machine": machine(), "runs": runs}


# --- pod --------------------------------------------------------------------------------------------------------

def _ts(text: str) -> float:
    """An RFC 3339 time (nanoseconds allowed, 'Z') as epoch seconds."""
    text = text.replace("Z", "+00:00")
    main, _, rest = text.partition(".")
    if rest:  # fractional seconds: keep microseconds, then the offset
        digits = re.match(r"\d+", rest)
        assert digits
        frac, offset = digits.group(0)[:6], rest[digits.end():]
        text = f"{main}.{frac.ljust(6, '0')}{offset}"
    return datetime.fromisoformat(text).timestamp()


def pod_phases(pod: dict[str, Any], timestamped_log: str, container: str = "vllm") -> dict[str, float]:
    """The phases of one engine pod, from its object and ``kubectl logs --timestamps`` of its engine container."""
    status = pod["status"]
    created = _ts(pod["metadata"]["creationTimestamp"])
    conditions = {c["type"]: c for c in status.get("conditions") or []}
    (state,) = [c for c in status.get("containerStatuses") or [] if c["name"] == container] or [{}]
    now = state.get("state") or {}
    running = now.get("running") or now.get("terminated") or {}
    out: dict[str, float] = {}
    scheduled = _ts(conditions["PodScheduled"]["lastTransitionTime"])
    out["scheduled"] = round(scheduled - created, 2)
    started = _ts(running["startedAt"]) if running.get("startedAt") else None
    stamped = []
    for line in timestamped_log.splitlines():
        stamp, _, text = line.partition(" ")
        try:
            stamped.append((_ts(stamp), text))
        except ValueError:
            continue
    if started is not None:
        out["container start"] = round(started - scheduled, 2)
    if not stamped:
        return out
    first = stamped[0][0]
    base = started if started is not None else first
    out["python start"] = round(first - base, 2)
    ready = conditions.get("Ready", {})
    ready_at = _ts(ready["lastTransitionTime"]) - base if ready.get("status") == "True" else None
    rel = [(t - base, text) for t, text in stamped]
    engine = phases(rel, ready_at, "ready (probes)")
    if "api import" in engine:  # run-batch (a dedicated batch) has no API server: its first milestone is the core's
        engine["api import"] = round(engine["api import"] - out["python start"], 2)
    else:
        first_name = next(iter(engine), None)
        if first_name is not None:
            engine[first_name] = round(engine[first_name] - out["python start"], 2)
    out |= engine
    if "total" in out:
        out["total"] = round(out["total"] + out["scheduled"] + out.get("container start", 0.0), 2)
    return out


def run_pod(args: argparse.Namespace) -> dict[str, Any]:
    kubectl = [args.kubectl, *(["--kubeconfig", args.kubeconfig] if args.kubeconfig else []), "-n", args.namespace]
    pod = json.loads(subprocess.run([*kubectl, "get", "pod", args.pod, "-o", "json"], check=True,
                                    capture_output=True, text=True).stdout)
    log = subprocess.run([*kubectl, "logs", "--timestamps", "-c", args.container, args.pod], check=True,
                         capture_output=True, text=True).stdout
    return {"mode": "pod", "machine": machine(), "runs": [
        {"variant": args.pod, "phases": pod_phases(pod, log, args.container)}]}


# --- output -----------------------------------------------------------------------------------------------------

def machine() -> dict[str, Any]:
    flags = Path("/proc/cpuinfo").read_text().split("flags\t\t: ", 1)[-1].split("\n", 1)[0].split()
    load = Path("/proc/loadavg").read_text().split()[:3]
    return {"cpus": len([ln for ln in Path("/proc/cpuinfo").read_text().splitlines() if ln.startswith("processor")]),
            "avx512": any(f.startswith("avx512") for f in flags), "loadavg_at_end": load}


def table(result: dict[str, Any]) -> str:
    names: list[str] = []
    for run in result["runs"]:
        names += [n for n in run["phases"] if n not in names]
    head = "| run | " + " | ".join(names) + " |"
    rows = [head, "|" + "---|" * (len(names) + 1)]
    for i, run in enumerate(result["runs"]):
        rows.append(f"| {i} {run['variant']} | " + " | ".join(
            f"{run['phases'][n]:.1f}" if n in run["phases"] else "-" for n in names) + " |")
    return "\n".join(rows)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n", 1)[0])
    sub = parser.add_subparsers(dest="mode", required=True)
    host = sub.add_parser("host", help="start the engine on this machine, as the suite does")
    host.add_argument("--variant", action="append", choices=sorted(VARIANTS))
    host.add_argument("--rounds", type=int, default=1)
    pod = sub.add_parser("pod", help="read an engine pod's phases from its status and timestamped log")
    pod.add_argument("namespace")
    pod.add_argument("pod")
    pod.add_argument("--container", default="vllm")
    pod.add_argument("--kubectl", default="kubectl")
    pod.add_argument("--kubeconfig")
    for p in (host, pod):
        p.add_argument("--out", type=Path, help="write the figures here as JSON")
    args = parser.parse_args(argv)
    if args.mode == "host":
        args.variant = args.variant or ["baseline"]
        result = run_host(args)
    else:
        result = run_pod(args)
    if args.out:
        args.out.write_text(json.dumps(result, indent=1) + "\n")
    print(table(result))
    return 0


if __name__ == "__main__":
    sys.exit(main())
