"""NCCL preflight: prove a multi-GPU pod's interconnect with all-reduce before vLLM starts.

Runs as an init container of the serving pod, with the server's NCCL environment:

    python3 nccl_preflight.py --max-small-latency-us=50 --min-bus-bandwidth-gbps=100 \
        --output=/dev/termination-log

One process per visible GPU (``--nproc`` to choose), a local rendezvous (a TCP store the launcher holds on
127.0.0.1, port picked by the kernel, so no port can race), then ``torch.distributed.all_reduce`` (SUM,
float32): a correctness check per size, warm-up, then timed rounds. Small messages (8 B .. 64 KiB) give
the latency per call; with NCCL a round is one CUDA-graph replay of ``--iters`` calls, because vLLM
decodes under CUDA graphs and an eager call adds torch.distributed's host path (reported apart as
``eagerLatencyUs``). One large message (256 MiB) gives the bus bandwidth as nccl-tests defines it for
all-reduce: algbw = bytes / time, busbw = algbw * 2 * (n - 1) / n. Each rank times a round after a device
synchronisation; the median round counts, and the slowest rank's figure is reported.

A multi-node group (one pod per node, e.g. a LeaderWorkerSet group) runs this in every pod with
``--nnodes --node-rank --master-addr --master-port``: the leader (node rank 0) holds the TCP store on the fixed
port and waits, at most ``--rendezvous-timeout-s``, until every pod has checked in; the others dial it (retrying
while the leader's pod starts). Global rank = node_rank * local ranks + local rank, world = nnodes * local
ranks: one all-reduce across the nodes, and every pod writes the same figures into its own report.

The result is one short JSON object (well under the 4096 bytes of a Kubernetes termination message),
written to ``--output`` and printed as the last line of stdout. Exit status: 0 passed; 1 a threshold was
not met (0 with ``--warn-only``); 2 bad arguments; 3 the check could not run (no GPU, NCCL error, hang).

STANDALONE: this file is copied into a ConfigMap and run with the vLLM image's python3, so it imports the
standard library and torch only, never qwen_fleet. torch is imported lazily, so ``--help`` and the pure
functions below (which ``qwen_fleet.preflight.report`` reuses) work without it.
"""

from __future__ import annotations

import argparse
import contextlib
import importlib
import json
import os
import statistics
import sys
import time
from collections.abc import Callable, Mapping, Sequence
from datetime import UTC, datetime, timedelta
from typing import Any

SCHEMA = "qwen-fleet.nccl-preflight/v1"
MAX_REPORT_BYTES = 4096  # Kubernetes keeps at most this much of a container's termination message
REPORT_BUDGET_BYTES = 3072  # what we allow ourselves, leaving room below the kubelet's limit
DEFAULT_SMALL_SIZES = tuple(2**k for k in range(3, 17))  # 8 B .. 64 KiB
DEFAULT_LARGE_BYTES = 256 * 2**20
DEFAULT_MAX_SMALL_LATENCY_US = 50.0  # the seed documents' bar for small-message all-reduce
TOPOLOGY_HINT = "check NVLink/PCIe topology (nvidia-smi topo -m)"
# gloo between processes of one pod (device CPU): the data goes through loopback TCP, so a slow result is the
# CPU's, not a fabric's.
CPU_HINT = "gloo all-reduce over loopback in the pod: check the pod's CPU limit (throttling) and the node's load"
FABRIC_HINT = (  # a group spanning nodes: the slow link is most often the one between them
    "check the inter-node fabric (ibstat on each node, NCCL_IB_HCA, NCCL_SOCKET_IFNAME; NCCL_DEBUG=INFO names "
    "the transport NCCL chose) and NVLink/PCIe within each node (nvidia-smi topo -m)"
)
KEY_PREFIX = "qwen-fleet-preflight"  # keys this script sets in the group's TCP store
RECORDED_ENV_PREFIXES = ("NCCL_", "TORCH_NCCL_")
RECORDED_ENV_NAMES = ("CUDA_VISIBLE_DEVICES",)
IGNORED_ENV_NAMES = ("NCCL_VERSION",)  # CUDA images set it as a label; it configures nothing
EXIT_PASSED, EXIT_BELOW_THRESHOLD, EXIT_USAGE, EXIT_ERROR = 0, 1, 2, 3
_FLOAT32_BYTES = 4


# ---- pure logic (stdlib only; shared with qwen_fleet.preflight.report) ---------------------------------


def format_bytes(n: int) -> str:
    """8 -> '8 B', 65536 -> '64 KiB', 268435456 -> '256 MiB'."""
    for unit, scale in (("GiB", 2**30), ("MiB", 2**20), ("KiB", 2**10)):
        if n >= scale and n % scale == 0:
            return f"{n // scale} {unit}"
    return f"{n} B"


def bus_bandwidth_gbps(nbytes: int, seconds: float, ranks: int) -> tuple[float, float]:
    """(algbw, busbw) in GB/s (10^9 bytes) for one all-reduce of ``nbytes`` taking ``seconds``.

    nccl-tests (doc/PERFORMANCE.md): algbw = S / t; an all-reduce moves 2 * (n - 1) / n * S through each
    rank's link, so busbw = algbw * 2 * (n - 1) / n, comparable with the link's unidirectional peak. With
    one rank nothing crosses a link and busbw is 0.
    """
    if seconds <= 0 or ranks < 1:
        raise ValueError(f"need seconds > 0 and ranks >= 1, got {seconds=} {ranks=}")
    algbw = nbytes / seconds / 1e9
    return algbw, algbw * 2 * (ranks - 1) / ranks


def _p2p_hint(env: Mapping[str, str]) -> str:
    if env.get("NCCL_P2P_DISABLE", "").strip().lower() in ("1", "true", "yes"):
        return " (NCCL_P2P_DISABLE=1 is set: GPU-to-GPU traffic goes through host memory)"
    return ""


def judge(
    *,
    ranks: int,
    small_latency_us: Mapping[int, float],
    bus_bandwidth: float | None,
    large_bytes: int | None,
    max_small_latency_us: float | None,
    min_bus_bandwidth_gbps: float | None,
    env: Mapping[str, str] | None = None,
    nodes: int = 1,
    backend: str = "nccl",
) -> tuple[bool, str]:
    """Compare measurements with thresholds; return (passed, one-line message).

    ``nodes`` > 1 (a group of pods on several nodes) names the group in the message and points a failure at
    the inter-node fabric first.

    A threshold that is None or <= 0 is off. Bus bandwidth is not judged with one rank: a 1-rank
    all-reduce moves nothing between GPUs, so its busbw (0 by definition) says nothing about the fabric.
    """
    env = env or {}
    latency_limit = max_small_latency_us if max_small_latency_us and max_small_latency_us > 0 else None
    bandwidth_min = min_bus_bandwidth_gbps if min_bus_bandwidth_gbps and min_bus_bandwidth_gbps > 0 else None
    failures: list[str] = []
    notes: list[str] = []
    worst_size = max(small_latency_us, key=lambda s: small_latency_us[s]) if small_latency_us else None
    if worst_size is not None:
        worst = small_latency_us[worst_size]
        if latency_limit is not None and worst > latency_limit:
            failures.append(
                f"all-reduce latency {worst:.1f} us at {format_bytes(worst_size)} exceeds the "
                f"{latency_limit:g} us limit"
            )
        else:
            limit = f" (limit {latency_limit:g} us)" if latency_limit else ""
            notes.append(f"max small-message latency {worst:.1f} us at {format_bytes(worst_size)}{limit}")
    if bus_bandwidth is not None and large_bytes:
        size = format_bytes(large_bytes)
        if ranks < 2:
            notes.append("bus bandwidth not judged: a 1-rank all-reduce moves no data between GPUs")
        elif bandwidth_min is not None and bus_bandwidth < bandwidth_min:
            failures.append(
                f"all-reduce bus bandwidth {bus_bandwidth:.1f} GB/s at {size} is below the "
                f"{bandwidth_min:g} GB/s minimum"
            )
        else:
            limit = f" (minimum {bandwidth_min:g} GB/s)" if bandwidth_min else ""
            notes.append(f"bus bandwidth {bus_bandwidth:.1f} GB/s at {size}{limit}")
    if failures:
        if backend == "gloo" and nodes == 1:
            return False, "; ".join(failures) + f": {CPU_HINT}"
        hint = FABRIC_HINT if nodes > 1 else TOPOLOGY_HINT
        return False, "; ".join(failures) + f": {hint}{_p2p_hint(env)}"
    where = f"{ranks} ranks on {nodes} nodes" if nodes > 1 else f"{ranks} ranks"
    return True, f"all-reduce across {where} passed: " + ", ".join(notes or ["nothing measured"])


def recorded_env(environ: Mapping[str, str]) -> dict[str, str]:
    """The NCCL/torch-distributed settings the check ran with (what a slow result should be read with)."""
    return {
        k: v
        for k, v in sorted(environ.items())
        if (k.startswith(RECORDED_ENV_PREFIXES) or k in RECORDED_ENV_NAMES) and k not in IGNORED_ENV_NAMES
    }


def encode_report(report: Mapping[str, Any]) -> str:
    """Compact JSON under REPORT_BUDGET_BYTES: shorten, then drop the least useful parts if needed."""
    doc = dict(report)
    text = json.dumps(doc, separators=(",", ":"))
    if len(text.encode()) <= REPORT_BUDGET_BYTES:
        return text
    doc["truncated"] = True
    doc["message"] = str(doc.get("message", ""))[:400]
    doc["env"] = {k[:48]: str(v)[:48] for k, v in dict(doc.get("env") or {}).items()}
    for drop in ("", "env", "smallLatencyUs", "versions"):
        if drop:
            doc.pop(drop, None)
        text = json.dumps(doc, separators=(",", ":"))
        if len(text.encode()) <= REPORT_BUDGET_BYTES:
            return text
    return text[:REPORT_BUDGET_BYTES]  # unreachable with the fields above; never exceed the budget


# ---- measurement (torch, in one spawned process per rank) -------------------------------------------


def _torch() -> Any:
    return importlib.import_module("torch")


def _check_sum(torch: Any, tensor: Any) -> None:
    """One all-reduce of rank-dependent integers must give their exact sum on every element."""
    dist = torch.distributed
    ranks = dist.get_world_size()
    tensor.fill_(float(dist.get_rank() + 1))
    dist.all_reduce(tensor)
    expected = ranks * (ranks + 1) / 2
    if not bool((tensor == expected).all()):
        got = float(tensor.flatten()[0])
        size = format_bytes(tensor.numel() * _FLOAT32_BYTES)
        raise RuntimeError(f"all-reduce of {size} summed to {got}, not {expected}")


def _round(torch: Any, tensor: Any, iters: int, graph: bool) -> Callable[[], None]:
    """One timed round: ``iters`` all-reduces back to back, eagerly or as one CUDA-graph replay.

    Eager calls pay torch.distributed's host path each time (tens of microseconds on a slow host), which
    hides the interconnect; vLLM runs its decode steps as CUDA graphs, so the graph replay is what serving
    sees and what the latency bar is about.
    """
    dist = torch.distributed
    if not graph:

        def eager() -> None:
            for _ in range(iters):
                dist.all_reduce(tensor)

        return eager
    side = torch.cuda.Stream()
    side.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(side):  # warm up on a side stream, as torch's CUDA-graph notes ask
        for _ in range(3):
            dist.all_reduce(tensor)
    torch.cuda.current_stream().wait_stream(side)
    torch.cuda.synchronize()
    g = torch.cuda.CUDAGraph()
    # thread_local: the NCCL watchdog thread may query events while this thread captures.
    with torch.cuda.graph(g, capture_error_mode="thread_local"):
        for _ in range(iters):
            dist.all_reduce(tensor)
    return g.replay  # type: ignore[no-any-return]


def _seconds_per_call(torch: Any, tensor: Any, *, warmup: int, iters: int, rounds: int, graph: bool) -> float:
    """Median over ``rounds`` of the average seconds per all-reduce in a round (robust to one hiccup)."""
    dist = torch.distributed
    cuda = tensor.is_cuda
    _check_sum(torch, tensor)
    # Values grow with each in-place SUM (to inf eventually); all-reduce speed does not depend on them.
    tensor.fill_(1.0)
    for _ in range(warmup):
        dist.all_reduce(tensor)
    step = _round(torch, tensor, iters, graph)
    step()
    flag = torch.zeros(1, device=tensor.device)
    per_call: list[float] = []
    for _ in range(rounds):
        dist.all_reduce(flag)  # line the ranks up so no rank times its wait for the other
        if cuda:
            torch.cuda.synchronize()
        start = time.perf_counter()
        step()
        if cuda:
            torch.cuda.synchronize()
        per_call.append((time.perf_counter() - start) / iters)
    return statistics.median(per_call)


def _measure(torch: Any, opts: argparse.Namespace, local_rank: int) -> dict[str, Any]:
    """Slowest rank's seconds per call: one per small size, then large (if any), then eager (if graph)."""
    dist = torch.distributed
    cuda = opts.backend == "nccl"
    device = torch.device("cuda", local_rank) if cuda else torch.device("cpu")
    graph = opts.timing == "graph"

    def time_size(nbytes: int, warmup: int, iters: int, graph: bool) -> float:
        buf = torch.empty(nbytes // _FLOAT32_BYTES, dtype=torch.float32, device=device)
        return _seconds_per_call(torch, buf, warmup=warmup, iters=iters, rounds=opts.rounds, graph=graph)

    seconds = [time_size(size, opts.warmup, opts.iters, graph) for size in opts.small_sizes]
    if opts.large_bytes:
        seconds.append(time_size(opts.large_bytes, opts.large_warmup, opts.large_iters, False))
    if graph:  # the same smallest message through the eager host path, to show what the graph saves
        seconds.append(time_size(opts.small_sizes[0], opts.warmup, opts.iters, False))
    worst = torch.tensor(seconds, dtype=torch.float64, device=device)
    dist.all_reduce(worst, op=dist.ReduceOp.MAX)  # the collective is as slow as its slowest rank
    return {
        "seconds": worst.cpu().tolist(),
        "deviceName": torch.cuda.get_device_name(local_rank) if cuda else "cpu",
    }


# Where this pod's ranks sit in the all-reduce: (nodes, node_rank, local_ranks, store_host, store_port).
# Global rank = node_rank * local_ranks + local rank; world = nodes * local_ranks. A plain tuple, so the
# spawned ranks can unpickle it however this file was started.
Layout = tuple[int, int, int, str, int]


def _worker(local_rank: int, layout: Layout, opts: argparse.Namespace, results: Any) -> None:
    torch = _torch()
    dist = torch.distributed
    nodes, node_rank, local_ranks, host, port = layout
    rank = node_rank * local_ranks + local_rank
    try:
        timeout = timedelta(seconds=opts.timeout_s)
        if opts.backend == "nccl":
            torch.cuda.set_device(local_rank)
        store = dist.TCPStore(host, port, is_master=False, timeout=timeout)
        dist.init_process_group(
            opts.backend, store=store, rank=rank, world_size=nodes * local_ranks, timeout=timeout
        )
        measured = _measure(torch, opts, local_rank)
        if local_rank == 0:  # the figures are MAX-reduced over the whole world: every pod has the same
            results.put(("ok", measured))
        dist.destroy_process_group()
    except Exception as exc:
        results.put(("error", f"rank {rank}: {type(exc).__name__}: {' '.join(str(exc).split())[:300]}"))
        raise


def _spawn_and_wait(torch: Any, opts: argparse.Namespace, layout: Layout) -> dict[str, Any]:
    """Start this pod's ranks against the store at ``layout``; return local rank 0's measurements or raise."""
    mp = torch.multiprocessing
    results = mp.get_context("spawn").SimpleQueue()
    ctx = mp.start_processes(
        _worker, args=(layout, opts, results), nprocs=layout[2], join=False, start_method="spawn"
    )
    deadline = time.monotonic() + opts.timeout_s
    try:
        while not ctx.join(timeout=0.5):
            if time.monotonic() > deadline:
                for proc in ctx.processes:
                    proc.kill()
                raise TimeoutError(
                    f"all-reduce did not finish within {opts.timeout_s:g} s: a rank hung "
                    "(check NCCL_SOCKET_IFNAME, NCCL_P2P_DISABLE and nvidia-smi topo -m)"
                )
    except mp.ProcessRaisedException as exc:
        raise RuntimeError(_first_error(results) or str(exc).strip().splitlines()[-1]) from exc
    except mp.ProcessExitedException as exc:
        raise RuntimeError(_first_error(results) or str(exc)) from exc
    while not results.empty():
        status, payload = results.get()
        if status == "ok":
            return dict(payload)
    raise RuntimeError("rank 0 finished without reporting a result")


# ---- the group rendezvous (a pod of a multi-node group; --nnodes > 1) -------------------------------


def _key(what: str, node_rank: int | None = None) -> str:
    return f"{KEY_PREFIX}/{what}" if node_rank is None else f"{KEY_PREFIX}/{what}/{node_rank}"


def missing_members_message(missing: Sequence[int], nodes: int, port: int, waited_s: float) -> str:
    """What the leader says when part of its group never joined (pure: the operator's tests read it)."""
    which = ", ".join(str(r) for r in missing)
    return (
        f"rendezvous: {len(missing)} of {nodes - 1} worker pod(s) (worker index {which}) did not join the "
        f"leader's store on port {port} within {waited_s:g} s: check that every pod of the group is scheduled "
        f"and started (image pulled) and can reach the leader on TCP port {port}"
    )


def _lead_group(torch: Any, opts: argparse.Namespace) -> Any:
    """Node rank 0: hold the group's store on the fixed port, wait (bounded) until every pod has joined."""
    dist = torch.distributed
    timeout = timedelta(seconds=opts.timeout_s)
    try:  # the server listens on every interface; the leader's own ranks reach it on loopback
        store = dist.TCPStore("127.0.0.1", opts.master_port, None, True, timeout, wait_for_workers=False)
    except Exception as exc:
        raise RuntimeError(f"could not hold the group's store on port {opts.master_port}: {_one_line(exc)}") from exc
    store.set(_key("joined", 0), "1")
    deadline = time.monotonic() + opts.rendezvous_timeout_s
    while True:
        missing = [r for r in range(1, opts.nnodes) if not store.check([_key("joined", r)])]
        if not missing:
            break
        if time.monotonic() > deadline:
            raise TimeoutError(
                missing_members_message(missing, opts.nnodes, opts.master_port, opts.rendezvous_timeout_s)
            )
        time.sleep(0.2)
    store.set(_key("go"), "1")
    return store


def _join_group(torch: Any, opts: argparse.Namespace) -> Any:
    """Node rank > 0: reach the leader's store (retrying: its pod may start later), check in, wait for go."""
    dist = torch.distributed
    where = f"{opts.master_addr}:{opts.master_port}"
    deadline = time.monotonic() + opts.rendezvous_timeout_s
    last = "no attempt"
    store = None
    while store is None:
        left = deadline - time.monotonic()
        if left <= 0:
            raise TimeoutError(
                f"rendezvous: could not reach the group leader's store at {where} within "
                f"{opts.rendezvous_timeout_s:g} s (last error: {last[:200]}): is the leader pod running "
                "its preflight?"
            )
        try:
            store = dist.TCPStore(opts.master_addr, opts.master_port, None, False, timedelta(seconds=min(left, 10)))
        except Exception as exc:  # refused or not resolvable yet: the leader's pod is not up
            last = _one_line(exc)
            time.sleep(min(1.0, max(0.0, deadline - time.monotonic())))
    store.set(_key("joined", opts.node_rank), "1")
    try:
        store.wait([_key("go")], timedelta(seconds=max(1.0, deadline - time.monotonic())))
    except Exception as exc:
        raise TimeoutError(
            f"rendezvous: joined the leader at {where}, but the rest of the group did not come within "
            f"{opts.rendezvous_timeout_s:g} s ({_one_line(exc)[:200]})"
        ) from exc
    store.set_timeout(timedelta(seconds=opts.timeout_s))
    return store


def _group_layout(torch: Any, opts: argparse.Namespace, local_ranks: int) -> tuple[Any, Layout]:
    """The store this pod's ranks meet at, and their layout; a single pod holds a private one."""
    if opts.nnodes == 1:  # a port picked by the kernel, on loopback: nothing can race for it
        timeout = timedelta(seconds=opts.timeout_s)
        store = torch.distributed.TCPStore("127.0.0.1", 0, None, True, timeout, wait_for_workers=False)
        return store, (1, 0, local_ranks, "127.0.0.1", store.port)
    if opts.node_rank == 0:
        store = _lead_group(torch, opts)
        return store, (opts.nnodes, 0, local_ranks, "127.0.0.1", opts.master_port)
    store = _join_group(torch, opts)
    return store, (opts.nnodes, opts.node_rank, local_ranks, opts.master_addr, opts.master_port)


def _leave_group(store: Any, opts: argparse.Namespace) -> None:
    """Check out; the leader keeps its store up until every pod has (bounded), so none loses it mid-teardown."""
    if opts.nnodes == 1:
        return
    store.set(_key("done", opts.node_rank), "1")
    if opts.node_rank == 0:
        done = [_key("done", r) for r in range(1, opts.nnodes)]
        with contextlib.suppress(Exception):  # a member that did not finish reports its own error; ours stands
            store.wait(done, timedelta(seconds=min(60.0, opts.timeout_s)))


def _first_error(results: Any) -> str | None:
    while not results.empty():
        status, payload = results.get()
        if status == "error":
            return str(payload)
    return None


def _sig(x: float) -> float:
    """Four significant figures: 297.1 GB/s on NVLink, 0.2231 GB/s through gloo on a laptop."""
    return float(f"{x:.4g}")


def _one_line(exc: BaseException) -> str:
    return (" ".join(str(exc).split()) or type(exc).__name__)[:600]


# ---- command line -----------------------------------------------------------------------------------


def _sizes(text: str) -> tuple[int, ...]:
    sizes = tuple(int(s) for s in text.split(",") if s.strip())
    if not sizes or any(s < _FLOAT32_BYTES or s % _FLOAT32_BYTES for s in sizes):
        raise argparse.ArgumentTypeError(f"sizes must be positive multiples of 4 bytes, got {text!r}")
    return sizes


def _large_bytes(text: str) -> int:
    n = int(text)
    if n < 0 or n % _FLOAT32_BYTES:
        raise argparse.ArgumentTypeError(f"must be 0 or a positive multiple of 4 bytes, got {text!r}")
    return n


def build_parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(
        prog="nccl_preflight.py",
        description="All-reduce latency and bus bandwidth check for a multi-GPU pod (see module docstring).",
    )
    p.add_argument("--backend", choices=("nccl", "gloo"), default="nccl", help="gloo runs on CPU tensors")
    p.add_argument("--nproc", type=int, default=0, help="ranks in this pod; 0 = one per visible GPU (gloo: 2)")
    group = p.add_argument_group("multi-node group (one pod per node; every pod of the group runs this)")
    group.add_argument("--nnodes", type=int, default=1, help="pods in the group (LWS_GROUP_SIZE)")
    group.add_argument("--node-rank", type=int, default=0, help="this pod's index, 0 = leader (LWS_WORKER_INDEX)")
    group.add_argument("--master-addr", default="", help="the leader's address (LWS_LEADER_ADDRESS)")
    group.add_argument("--master-port", type=int, default=0, help="TCP port of the store the leader holds")
    group.add_argument(
        "--rendezvous-timeout-s",
        type=float,
        default=600.0,
        help="give up (exit 3) when the group is not whole after this long (default %(default)s)",
    )
    p.add_argument(
        "--max-small-latency-us",
        type=float,
        default=DEFAULT_MAX_SMALL_LATENCY_US,
        help="fail when any small size takes longer per call, us (<= 0: off; default %(default)s)",
    )
    p.add_argument(
        "--min-bus-bandwidth-gbps",
        type=float,
        default=0.0,
        help="fail when large-message busbw is lower, GB/s (<= 0: off; default %(default)s)",
    )
    p.add_argument(
        "--small-sizes",
        type=_sizes,
        default=DEFAULT_SMALL_SIZES,
        help="comma-separated bytes (default 8..65536, powers of 2)",
    )
    p.add_argument("--large-bytes", type=_large_bytes, default=DEFAULT_LARGE_BYTES, help="0 = skip bandwidth")
    p.add_argument(
        "--timing",
        choices=("auto", "graph", "eager"),
        default="auto",
        help="small messages as CUDA-graph replays (auto: nccl with >= 2 ranks) or eager calls",
    )
    p.add_argument("--warmup", type=int, default=20, help="untimed calls per small size")
    p.add_argument("--iters", type=int, default=100, help="timed calls per round, small sizes")
    p.add_argument("--rounds", type=int, default=5, help="timed rounds per size; the median is reported")
    p.add_argument("--large-warmup", type=int, default=5)
    p.add_argument("--large-iters", type=int, default=20, help="timed calls per round, large size")
    p.add_argument("--timeout-s", type=float, default=300.0, help="give up (exit 3) after this long")
    p.add_argument("--output", default="", help="also write the JSON report here (e.g. /dev/termination-log)")
    p.add_argument("--warn-only", action="store_true", help="exit 0 even when a threshold is not met")
    return p


def _base_report(opts: argparse.Namespace, ranks: int) -> dict[str, Any]:
    group = {"nodes": opts.nnodes, "nodeRank": opts.node_rank} if opts.nnodes > 1 else {}
    return {
        "schema": SCHEMA,
        "passed": False,
        "outcome": "error",
        "message": "",
        "backend": opts.backend,
        "ranks": ranks,
        "gpus": ranks if opts.backend == "nccl" else 0,
        **group,
        "thresholds": {
            "maxSmallLatencyUs": opts.max_small_latency_us,
            "minBusBandwidthGBps": opts.min_bus_bandwidth_gbps,
        },
        "env": recorded_env(os.environ),
        "checkedAt": datetime.now(UTC).strftime("%Y-%m-%dT%H:%M:%SZ"),
    }


def _versions(torch: Any) -> dict[str, str | None]:
    try:
        nccl: str | None = ".".join(str(x) for x in torch.cuda.nccl.version())
    except Exception:  # a CPU-only torch has no NCCL; gloo reports need none
        nccl = None
    return {"torch": str(torch.__version__), "cuda": torch.version.cuda, "nccl": nccl}


def run(opts: argparse.Namespace) -> dict[str, Any]:
    """Measure and judge; always returns a report (outcome 'error' when the check could not run)."""
    torch = _torch()
    gpus = torch.cuda.device_count() if opts.backend == "nccl" else 0
    local_ranks = opts.nproc or (gpus if opts.backend == "nccl" else 2)
    ranks = local_ranks * opts.nnodes
    if opts.timing == "auto":  # a 1-rank in-place all-reduce launches nothing: its graph would be empty
        opts.timing = "graph" if opts.backend == "nccl" and ranks >= 2 else "eager"
    report = _base_report(opts, ranks)
    report["versions"] = _versions(torch)
    if opts.backend == "nccl" and not 0 < local_ranks <= gpus:
        report["gpus"] = gpus
        report["message"] = f"nccl preflight needs {local_ranks or 'at least 1'} GPU(s), {gpus} visible to the pod"
        return report
    try:
        store, layout = _group_layout(torch, opts, local_ranks)
        measured = _spawn_and_wait(torch, opts, layout)
        _leave_group(store, opts)
    except Exception as exc:
        report["message"] = f"preflight could not run: {_one_line(exc)}"
        return report
    seconds = measured["seconds"]
    small = {size: round(s * 1e6, 2) for size, s in zip(opts.small_sizes, seconds, strict=False)}
    report["device"] = measured["deviceName"]
    report["timing"] = "cuda-graph" if opts.timing == "graph" else "eager"
    if opts.timing == "graph":
        report["eagerLatencyUs"] = round(seconds[-1] * 1e6, 2)
    report["smallLatencyUs"] = {str(k): v for k, v in small.items()}
    worst = max(small, key=lambda s: small[s])
    report["maxSmallLatencyUs"], report["maxSmallLatencyBytes"] = small[worst], worst
    busbw: float | None = None
    if opts.large_bytes:
        large_s = seconds[len(small)]
        algbw, busbw = bus_bandwidth_gbps(opts.large_bytes, large_s, ranks)
        report["largeBytes"] = opts.large_bytes
        report["largeTimeUs"] = round(large_s * 1e6, 1)
        report["algBandwidthGBps"], report["busBandwidthGBps"] = _sig(algbw), _sig(busbw)
    passed, message = judge(
        ranks=ranks,
        small_latency_us=small,
        bus_bandwidth=busbw,
        large_bytes=opts.large_bytes,
        max_small_latency_us=opts.max_small_latency_us,
        min_bus_bandwidth_gbps=opts.min_bus_bandwidth_gbps,
        env=report["env"],
        nodes=opts.nnodes,
        backend=opts.backend,
    )
    report.update(passed=passed, outcome="passed" if passed else "below-threshold", message=message)
    return report


def main(argv: Sequence[str] | None = None) -> int:
    parser = build_parser()
    opts = parser.parse_args(argv)
    if opts.timing == "graph" and opts.backend != "nccl":
        parser.error("--timing=graph needs --backend=nccl (CUDA graphs)")
    if min(opts.iters, opts.rounds, opts.large_iters) < 1 or min(opts.warmup, opts.large_warmup) < 0:
        parser.error("--iters, --rounds and --large-iters must be >= 1; warm-ups >= 0")
    if opts.nnodes < 1 or not 0 <= opts.node_rank < opts.nnodes:
        parser.error(f"--node-rank must be in 0..{opts.nnodes - 1} and --nnodes >= 1")
    if opts.nnodes > 1 and not (opts.master_addr and 0 < opts.master_port < 65536):
        parser.error("--nnodes > 1 needs --master-addr and --master-port (1..65535)")
    if opts.rendezvous_timeout_s <= 0 or opts.timeout_s <= 0:
        parser.error("--timeout-s and --rendezvous-timeout-s must be > 0")
    try:
        report = run(opts)
    except Exception as exc:  # never leave the termination message empty
        report = _base_report(opts, opts.nproc * opts.nnodes)
        report["message"] = f"preflight could not run: {_one_line(exc)}"
    text = encode_report(report)
    if opts.output:
        with open(opts.output, "w", encoding="utf-8") as out:
            out.write(text)
    print(text, flush=True)
    if report["outcome"] == "error":
        print(f"nccl-preflight: ERROR: {report['message']}", file=sys.stderr)
        return EXIT_ERROR
    if not report["passed"]:
        print(f"nccl-preflight: FAILED: {report['message']}", file=sys.stderr)
        return EXIT_PASSED if opts.warn_only else EXIT_BELOW_THRESHOLD
    return EXIT_PASSED


if __name__ == "__main__":
    sys.exit(main())
