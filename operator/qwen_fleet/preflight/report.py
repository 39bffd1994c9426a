"""Operator side of the NCCL preflight: the command that runs it and the report it leaves behind.

The check itself is ``nccl_preflight.py`` beside this module, a standalone script (stdlib + torch) that the
operator ships in a ConfigMap and runs in an init container. Its report reaches the operator as the init
container's termination message; ``parse_report`` reads it back (returning None for anything that is not
a report: a truncated message, a log tail, garbage) and ``to_status`` shapes it for ``status.nccl``.
The threshold logic (``judge``) and the bus-bandwidth formula live in the script and are imported from it,
so the pod and the operator cannot disagree. Nothing here imports torch.
"""

from __future__ import annotations

import json
import math
from collections.abc import Mapping
from dataclasses import dataclass, field
from importlib import resources
from typing import Any

from qwen_fleet.preflight.nccl_preflight import (
    DEFAULT_MAX_SMALL_LATENCY_US,
    MAX_REPORT_BYTES,
    SCHEMA,
    bus_bandwidth_gbps,
    judge,
)

SCRIPT_NAME = "nccl_preflight.py"
SCRIPT_MOUNT_PATH = f"/opt/qwen-fleet/preflight/{SCRIPT_NAME}"
TERMINATION_LOG = "/dev/termination-log"
OUTCOMES = ("passed", "below-threshold", "error")

__all__ = [
    "DEFAULT_MAX_SMALL_LATENCY_US",
    "MAX_REPORT_BYTES",
    "SCHEMA",
    "GroupMember",
    "GroupRendezvous",
    "PreflightReport",
    "bus_bandwidth_gbps",
    "group_args",
    "group_status",
    "judge",
    "parse_report",
    "preflight_command",
    "script_source",
    "to_status",
]


@dataclass(frozen=True)
class PreflightReport:
    """One preflight result. Latencies in microseconds, bandwidths in GB/s (10^9 bytes per second)."""

    passed: bool
    outcome: str  # one of OUTCOMES: "error" means the check could not run (no GPU, NCCL error, hang)
    message: str  # one line, what an operator shows in a condition or Event
    backend: str  # "nccl" in pods; "gloo" in CPU tests
    ranks: int
    gpus: int
    checked_at: str  # ISO 8601, UTC
    small_latency_us: dict[int, float] = field(default_factory=dict)  # message bytes -> average latency
    max_small_latency_us: float | None = None
    max_small_latency_bytes: int | None = None
    large_bytes: int | None = None
    alg_bandwidth_gbps: float | None = None
    bus_bandwidth_gbps: float | None = None
    max_small_latency_limit_us: float | None = None
    min_bus_bandwidth_limit_gbps: float | None = None
    device: str | None = None
    torch_version: str | None = None
    nccl_version: str | None = None
    env: dict[str, str] = field(default_factory=dict)
    truncated: bool = False
    nodes: int = 1  # pods of a multi-node group that joined one all-reduce (ranks counts all of them)
    node_rank: int = 0  # this pod's index in the group (LWS_WORKER_INDEX); 0 is the leader


class _NotAReport(ValueError):
    pass


def _get(doc: Mapping[str, Any], key: str, kind: type | tuple[type, ...], *, required: bool = False) -> Any:
    value = doc.get(key)
    if value is None:
        if required:
            raise _NotAReport(f"missing {key}")
        return None
    if isinstance(value, bool) and kind is not bool:  # JSON true is not a number
        raise _NotAReport(f"{key} is a boolean")
    if not isinstance(value, kind):
        raise _NotAReport(f"{key} has type {type(value).__name__}")
    if isinstance(value, float) and not math.isfinite(value):
        raise _NotAReport(f"{key} is not finite")
    return value


def _number(doc: Mapping[str, Any], key: str) -> float | None:
    value = _get(doc, key, (int, float))
    return None if value is None else float(value)


def _latencies(doc: Mapping[str, Any]) -> dict[int, float]:
    raw = _get(doc, "smallLatencyUs", dict) or {}
    out: dict[int, float] = {}
    for size, value in raw.items():
        if not str(size).isdigit() or isinstance(value, bool) or not isinstance(value, int | float):
            raise _NotAReport(f"bad latency entry {size!r}")
        out[int(size)] = float(value)
    return dict(sorted(out.items()))


def _from_doc(doc: Mapping[str, Any]) -> PreflightReport:
    if doc.get("schema") != SCHEMA:
        raise _NotAReport("not a preflight report")
    outcome = _get(doc, "outcome", str, required=True)
    if outcome not in OUTCOMES:
        raise _NotAReport(f"unknown outcome {outcome!r}")
    small = _latencies(doc)
    worst = _number(doc, "maxSmallLatencyUs")
    worst_bytes = _get(doc, "maxSmallLatencyBytes", int)
    if worst is None and small:  # a truncated report may keep only the per-size table, or only the max
        worst_bytes = max(small, key=lambda s: small[s])
        worst = small[worst_bytes]
    thresholds = _get(doc, "thresholds", dict) or {}
    versions = _get(doc, "versions", dict) or {}
    env = _get(doc, "env", dict) or {}
    return PreflightReport(
        passed=_get(doc, "passed", bool, required=True),
        outcome=outcome,
        message=_get(doc, "message", str, required=True),
        backend=_get(doc, "backend", str, required=True),
        ranks=_get(doc, "ranks", int, required=True),
        gpus=_get(doc, "gpus", int, required=True),
        checked_at=_get(doc, "checkedAt", str, required=True),
        small_latency_us=small,
        max_small_latency_us=worst,
        max_small_latency_bytes=worst_bytes,
        large_bytes=_get(doc, "largeBytes", int),
        alg_bandwidth_gbps=_number(doc, "algBandwidthGBps"),
        bus_bandwidth_gbps=_number(doc, "busBandwidthGBps"),
        max_small_latency_limit_us=_number(thresholds, "maxSmallLatencyUs"),
        min_bus_bandwidth_limit_gbps=_number(thresholds, "minBusBandwidthGBps"),
        device=_get(doc, "device", str),
        torch_version=_get(versions, "torch", str),
        nccl_version=_get(versions, "nccl", str),
        env={str(k): str(v) for k, v in env.items()},
        truncated=bool(_get(doc, "truncated", bool)),
        nodes=_get(doc, "nodes", int) or 1,
        node_rank=_get(doc, "nodeRank", int) or 0,
    )


def _candidates(text: str) -> list[str]:
    """The whole text, then (newest first) each line that could hold the JSON: a log tail ends with it."""
    stripped = text.strip()
    lines = [line.strip() for line in reversed(stripped.splitlines()) if line.strip().startswith("{")]
    return [stripped, *lines]


def parse_report(text: str) -> PreflightReport | None:
    """Read a termination message or log tail; None when it holds no complete, well-formed report."""
    if not isinstance(text, str) or not text.strip():
        return None
    for candidate in _candidates(text):
        try:
            doc = json.loads(candidate)
        except ValueError:
            continue
        if not isinstance(doc, dict):
            continue
        try:
            return _from_doc(doc)
        except (_NotAReport, TypeError, ValueError):
            continue
    return None


def to_status(report: PreflightReport) -> dict[str, Any]:
    """The camelCase dict for ``status.nccl``; fields the report lacks are left out, not nulled."""
    status: dict[str, Any] = {
        "passed": report.passed,
        "outcome": report.outcome,
        "message": report.message,
        "gpus": report.gpus,
        "backend": report.backend,
        "smallMessageLatencyMicroseconds": report.max_small_latency_us,
        "smallMessageLatencyBytes": report.max_small_latency_bytes,
        "busBandwidthGBps": report.bus_bandwidth_gbps,
        "ncclVersion": report.nccl_version,
        "checkedAt": report.checked_at,
    }
    return {k: v for k, v in status.items() if v is not None}


@dataclass(frozen=True)
class GroupRendezvous:
    """Where the pods of a multi-node group meet for one all-reduce (values may be kubelet ``$(VAR)`` refs)."""

    nodes: str  # e.g. "$(LWS_GROUP_SIZE)"
    node_rank: str  # e.g. "$(LWS_WORKER_INDEX)"
    master_addr: str  # e.g. "$(LWS_LEADER_ADDRESS)"
    master_port: int
    timeout_s: float


def preflight_command(
    *,
    max_small_latency_us: float = DEFAULT_MAX_SMALL_LATENCY_US,
    min_bus_bandwidth_gbps: float = 0.0,
    nproc: int | None = None,
    backend: str = "nccl",
    large_bytes: int | None = None,
    warn_only: bool = False,
    script_path: str = SCRIPT_MOUNT_PATH,
    output: str = TERMINATION_LOG,
    group: GroupRendezvous | None = None,
) -> list[str]:
    """The init container's command line; the script's defaults (nccl, one rank per GPU) fit a GPU pod.
    ``backend="gloo"`` runs it on CPU tensors (``nproc`` processes); ``large_bytes`` sets the bandwidth message.

    With ``group`` every pod of a multi-node group runs it, and their ranks form one all-reduce.
    """
    cmd = [
        "python3",
        script_path,
        f"--max-small-latency-us={max_small_latency_us:g}",
        f"--min-bus-bandwidth-gbps={min_bus_bandwidth_gbps:g}",
        f"--output={output}",
    ]
    if backend != "nccl":
        cmd.append(f"--backend={backend}")
    if nproc:
        cmd.append(f"--nproc={nproc}")
    if large_bytes is not None:
        cmd.append(f"--large-bytes={large_bytes}")
    if warn_only:
        cmd.append("--warn-only")
    if group is not None:
        cmd += group_args(group)
    return cmd


def group_args(group: GroupRendezvous) -> list[str]:
    """The flags that make one pod's preflight a member of its group's all-reduce."""
    return [f"--nnodes={group.nodes}", f"--node-rank={group.node_rank}", f"--master-addr={group.master_addr}",
            f"--master-port={group.master_port}", f"--rendezvous-timeout-s={group.timeout_s:g}"]


def script_source() -> str:
    """The standalone script's text, for the ConfigMap mounted at SCRIPT_MOUNT_PATH."""
    return resources.files("qwen_fleet.preflight").joinpath(SCRIPT_NAME).read_text(encoding="utf-8")


@dataclass(frozen=True)
class GroupMember:
    """One pod of a multi-node group as the operator sees it: its report, if its init container has ended."""

    pod: str
    worker_index: int
    report: PreflightReport | None


def _says(member: GroupMember, report: PreflightReport) -> str:
    return f"pod {member.pod} (worker index {member.worker_index}): {report.message}"


def group_status(group: int, members: list[GroupMember]) -> dict[str, Any]:
    """One entry of ``status.nccl.groups``: a group passes when every pod of it reported a pass.

    Every pod of a group ran the same all-reduce (its figures are MAX-reduced over the whole group), so the
    figures shown are the leader's, or the first reporter's until the leader has reported. The verdict is the
    worst of the members': an error (the check could not run, e.g. a pod never joined) before a failed
    threshold; ``pending`` until as many pods as the group's size have reported.
    """
    members = sorted(members, key=lambda m: (m.worker_index, m.pod))
    reported = [(m, m.report) for m in members if m.report is not None]
    nodes = max([r.nodes for _, r in reported] + [len(members)])
    entry: dict[str, Any] = {"group": group, "pods": [m.pod for m in members], "nodes": nodes,
                             "reported": len(reported)}
    for outcome in ("error", "below-threshold"):
        bad = [(m, r) for m, r in reported if r.outcome == outcome]
        if bad:
            entry.update(passed=False, outcome=outcome, message=_says(*bad[0]))
            break
    else:
        if len(reported) < nodes:
            waiting = sorted({m.worker_index for m in members} - {m.worker_index for m, _ in reported})
            which = f"worker index {', '.join(map(str, waiting))}" if waiting else "the group's other pods"
            entry.update(outcome="pending", message=f"{len(reported)} of {nodes} pods reported; waiting for {which}")
        else:
            entry.update(passed=True, outcome="passed", message=_says(*reported[0]))
    if reported:
        figures = to_status(reported[0][1])
        for key in ("gpus", "backend", "smallMessageLatencyMicroseconds", "smallMessageLatencyBytes",
                    "busBandwidthGBps", "ncclVersion", "checkedAt"):
            if key in figures:
                entry[key] = figures[key]
    return entry
