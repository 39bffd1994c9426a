"""What the watches have seen: the resources, their children and their pods, kept compact in memory.

Children and pods come from kopf indexes, which kopf fills completely before any handler runs: after a
restart the first reconcile already sees every existing child, so an unchanged fleet causes no writes.
Children are stored as compact JSON (managedFields dropped) to keep the operator small at fleet scale.
Objects the operator itself just wrote are kept too, until the watch catches up, so a reconcile that runs
between a write and its watch event does not write again.
"""

from __future__ import annotations

import json
import re
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from typing import Any

from qwen_fleet.api import API_VERSION, KIND
from qwen_fleet.preflight.report import GroupMember, group_status, parse_report, to_status
from qwen_fleet.reconcile.queue import Key
from qwen_fleet.render.common import CONTAINER_NAME, INSTANCE_LABEL
from qwen_fleet.render.deployment import PREFLIGHT_CONTAINER
from qwen_fleet.render.leaderworkerset import GROUP_INDEX_LABEL, WORKER_INDEX_LABEL
from qwen_fleet.render.scale_to_zero import INTERCEPTOR_ROUTE_API

ChildKey = tuple[str, str]  # (kind, name)
# A line that reports an error: "ValueError: ...", "pydantic_core...ValidationError: ...", "api_server.py: error: ..."
_ERROR_LINE = re.compile(r"(Error|Exception)\b.*:|\berror: ")


# Children owned by another child rather than by the QwenInference itself: the scale-to-zero proxy Service, owned
# by the fleet's InterceptorRoute (render/scale_to_zero.py), which is named as the fleet. Only these: KEDA's own HPA
# is controlled by the fleet's ScaledObject and carries its labels, and must never count as a child (it would be
# pruned).
CHILD_OWNERS = {(INTERCEPTOR_ROUTE_API, "InterceptorRoute")}


def owner_key(body: Mapping[str, Any]) -> Key | None:
    """The QwenInference that controls this child, from its ownerReferences."""
    meta = body.get("metadata") or {}
    for ref in meta.get("ownerReferences") or []:
        owner = (ref.get("apiVersion"), ref.get("kind"))
        if ref.get("controller") and (owner == (API_VERSION, KIND) or owner in CHILD_OWNERS):
            return (str(meta.get("namespace") or ""), str(ref.get("name")))
    return None


def compact_child(body: Mapping[str, Any]) -> str:
    meta = {k: v for k, v in (body.get("metadata") or {}).items() if k != "managedFields"}
    return json.dumps({**{k: v for k, v in body.items() if k != "metadata"}, "metadata": meta},
                      separators=(",", ":"), default=dict)


def _rv(obj: Mapping[str, Any]) -> int:
    try:
        return int((obj.get("metadata") or {}).get("resourceVersion") or 0)
    except ValueError:
        return 0


def pod_summary(body: Mapping[str, Any]) -> dict[str, Any]:
    """What status needs to know about one pod: scheduling trouble, crash loops, the preflight report."""
    meta, st = body.get("metadata") or {}, body.get("status") or {}
    out: dict[str, Any] = {"name": meta.get("name"), "phase": st.get("phase")}
    # The timestamps of a start (reconcile/cold_start.py): creation, scheduled, vLLM running, Ready.
    if meta.get("creationTimestamp"):
        out["createdAt"] = meta["creationTimestamp"]
    labels = meta.get("labels") or {}
    if str(labels.get(GROUP_INDEX_LABEL, "")).isdigit():  # a pod of a LeaderWorkerSet group (set by LWS)
        out["group"] = int(labels[GROUP_INDEX_LABEL])
        worker = str(labels.get(WORKER_INDEX_LABEL, ""))
        out["workerIndex"] = int(worker) if worker.isdigit() else 0
    claims = [str(v["persistentVolumeClaim"].get("claimName")) for v in (body.get("spec") or {}).get("volumes") or []
              if isinstance(v, Mapping) and isinstance(v.get("persistentVolumeClaim"), Mapping)]
    if claims:  # a claim a pod mounts is never pruned (reconcile/changes.py)
        out["claims"] = claims
    for cond in st.get("conditions") or []:
        if cond.get("type") == "PodScheduled" and cond.get("status") == "False":
            out["unschedulable"] = cond.get("message") or cond.get("reason")
        if cond.get("type") in ("PodScheduled", "Ready") and cond.get("status") == "True" \
                and cond.get("lastTransitionTime"):
            out["scheduledAt" if cond["type"] == "PodScheduled" else "readyAt"] = cond["lastTransitionTime"]
    for cs in st.get("containerStatuses") or []:
        if cs.get("name") != CONTAINER_NAME:
            continue
        running = (cs.get("state") or {}).get("running") or {}
        if running.get("startedAt"):
            out["startedAt"] = running["startedAt"]
        waiting = (cs.get("state") or {}).get("waiting")
        if waiting:
            out["waitingReason"], out["waitingMessage"] = waiting.get("reason"), waiting.get("message", "")
        term = (cs.get("state") or {}).get("terminated") or (cs.get("lastState") or {}).get("terminated")
        if term and term.get("exitCode", 0) != 0 and not cs.get("ready"):
            out["engineExit"] = {"exitCode": term.get("exitCode"), "reason": term.get("reason") or "",
                                 "lines": error_lines(term.get("message") or "")}
    for cs in st.get("initContainerStatuses") or []:
        if cs.get("name") != PREFLIGHT_CONTAINER:
            continue
        term = (cs.get("state") or {}).get("terminated") or (cs.get("lastState") or {}).get("terminated")
        if term:
            out["preflightReport"] = term.get("message") or ""
            out["preflightFailed"] = term.get("exitCode", 0) != 0
            report = parse_report(out["preflightReport"])
            out["preflightMessage"] = report.message if report else f"exit code {term.get('exitCode')}"
    return out


def error_lines(log_tail: str, keep: int = 4, limit: int = 1000) -> str:
    """The engine's own error from the tail of its log (the termination message): from the last line that
    names an error (a Python exception, argparse's ``error:``), a few lines on, joined with `` | ``."""
    lines = [line.strip() for line in log_tail.splitlines() if line.strip()]
    start = max(0, len(lines) - keep)
    for index in range(len(lines) - 1, max(-1, len(lines) - 16), -1):
        if _ERROR_LINE.search(lines[index]):
            start = index
            break
    return " | ".join(lines[start:start + keep])[:limit]


def nccl_status(pods: Iterable[Mapping[str, Any]]) -> dict[str, Any] | None:
    """status.nccl from the newest preflight report among the fleet's pods; for a multi-node fleet also
    ``groups``, one verdict per LeaderWorkerSet group (every pod of a group runs the check together)."""
    best: dict[str, Any] | None = None
    groups: dict[int, list[GroupMember]] = {}
    for pod in pods:
        report = parse_report(pod.get("preflightReport") or "")
        if "group" in pod:
            member = GroupMember(pod=str(pod.get("name")), worker_index=int(pod.get("workerIndex", 0)), report=report)
            groups.setdefault(int(pod["group"]), []).append(member)
        if report is None:
            continue
        status = {**to_status(report), "pod": pod.get("name")}
        if best is None or str(status.get("checkedAt", "")) > str(best.get("checkedAt", "")):
            best = status
    if best is None or not groups:
        return best
    return {**best, "groups": [group_status(g, groups[g]) for g in sorted(groups)]}


@dataclass
class Store:
    resources: dict[Key, dict[str, Any]] = field(default_factory=dict)
    children_indexes: list[Mapping[Key, Iterable[str]]] = field(default_factory=list)  # owner -> children
    pods_index: Mapping[Key, Iterable[dict[str, Any]]] | None = None  # kopf index: owner -> pod summaries
    written: dict[Key, dict[ChildKey, dict[str, Any]]] = field(default_factory=dict)

    def put_resource(self, key: Key, body: dict[str, Any]) -> None:
        current = self.resources.get(key)
        if current is None or _rv(body) >= _rv(current):
            self.resources[key] = body

    def children(self, key: Key) -> dict[ChildKey, dict[str, Any]]:
        out: dict[ChildKey, dict[str, Any]] = {}
        for index in self.children_indexes:
            for raw in index.get(key, ()):
                obj = json.loads(raw)
                out[(obj["kind"], obj["metadata"]["name"])] = obj
        recent = self.written.get(key, {})
        for ckey, obj in list(recent.items()):
            seen = out.get(ckey)
            if seen is not None and _rv(seen) >= _rv(obj):
                del recent[ckey]  # the watch has caught up
            else:
                out[ckey] = obj
        if not recent:
            self.written.pop(key, None)
        return out

    def remember_write(self, key: Key, obj: dict[str, Any]) -> None:
        self.written.setdefault(key, {})[(obj["kind"], obj["metadata"]["name"])] = json.loads(compact_child(obj))

    def child_event(self, key: Key, body: Mapping[str, Any], deleted: bool) -> None:
        """A watch event for a child: drop our own copy once the watch has caught up with it (or it is gone)."""
        recent = self.written.get(key)
        if not recent:
            return
        ckey = (str(body.get("kind")), str((body.get("metadata") or {}).get("name")))
        mine = recent.get(ckey)
        if mine is not None and (deleted or _rv(body) >= _rv(mine)):
            del recent[ckey]

    def pods(self, key: Key) -> tuple[dict[str, Any], ...]:
        return tuple((self.pods_index or {}).get(key, ()))


def instance_key(body: Mapping[str, Any]) -> Key | None:
    meta = body.get("metadata") or {}
    name = (meta.get("labels") or {}).get(INSTANCE_LABEL)
    return (str(meta.get("namespace") or ""), str(name)) if name else None
