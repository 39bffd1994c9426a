"""What the chaos tests share: QwenInference documents, the operator's desired children (rendered in-process
by the same functions the operator runs), the children the cluster really holds, and readings of the
operator's log and metrics.
"""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
import time
import urllib.parse
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from qwen_fleet.api import QwenInference
from qwen_fleet.config import OperatorConfig
from qwen_fleet.plan import make_plan
from qwen_fleet.render import Capabilities, render_children
from qwen_fleet.render.common import INSTANCE_LABEL, MANAGED_BY_LABEL
from qwen_fleet_dev.cluster import LocalCluster
from qwen_fleet_dev.rest import Rest, RestError

H100 = "NVIDIA-H100-80GB-HBM3"
MODEL = "Qwen/Qwen3-4B-Instruct-2507"
QWI_PATH = "/apis/qwenfleet.io/v1alpha1/namespaces/{ns}/qweninferences"
# Every kind the operator may create in a cluster without the Prometheus Operator CRDs, and where to list it.
CHILD_PATHS = {
    "Deployment": "/apis/apps/v1/namespaces/{ns}/deployments",
    "Service": "/api/v1/namespaces/{ns}/services",
    "HorizontalPodAutoscaler": "/apis/autoscaling/v2/namespaces/{ns}/horizontalpodautoscalers",
    "PodDisruptionBudget": "/apis/policy/v1/namespaces/{ns}/poddisruptionbudgets",
    "ConfigMap": "/api/v1/namespaces/{ns}/configmaps",
    "PersistentVolumeClaim": "/api/v1/namespaces/{ns}/persistentvolumeclaims",
    "Job": "/apis/batch/v1/namespaces/{ns}/jobs",
}
MANAGED_SELECTOR = urllib.parse.quote(f"{MANAGED_BY_LABEL}=qwen-fleet")
TRACEBACK = "Traceback (most recent call last)"


def qwi(name: str, spec: dict[str, Any]) -> dict[str, Any]:
    return {"apiVersion": "qwenfleet.io/v1alpha1", "kind": "QwenInference", "metadata": {"name": name},
            "spec": spec}


def small_spec(max_num_seqs: int = 64) -> dict[str, Any]:
    """Qwen3-4B on one H100 of the chaos cluster's pool: fits, schedules, becomes Ready under kwok."""
    return {"model": {"name": MODEL},
            "engine": {"maxModelLen": 4096, "maxNumSeqs": max_num_seqs, "maxNumBatchedTokens": 8192},
            "gpu": {"product": H100}}


def admin(cluster: LocalCluster) -> Rest:
    return Rest(cluster.server, cluster.admin_token, timeout=30)


def list_items(rest: Rest, path: str, selector: str = MANAGED_SELECTOR) -> list[dict[str, Any]]:
    sep = "&" if "?" in path else "?"
    return list(rest.get(f"{path}{sep}labelSelector={selector}" if selector else path)["items"])


def get_or_none(rest: Rest, path: str) -> dict[str, Any] | None:
    try:
        return dict(rest.get(path))
    except RestError as err:
        if err.status == 404:
            return None
        raise


def resources(rest: Rest, ns: str) -> dict[str, dict[str, Any]]:
    return {o["metadata"]["name"]: o for o in rest.get(QWI_PATH.format(ns=ns))["items"]}


def actual_children(rest: Rest, ns: str) -> dict[tuple[str, str], dict[str, Any]]:
    """Every object in ``ns`` labelled as managed by the operator, by (kind, name)."""
    out: dict[tuple[str, str], dict[str, Any]] = {}
    for kind, path in CHILD_PATHS.items():
        listed = rest.get(f"{path.format(ns=ns)}?labelSelector={MANAGED_SELECTOR}")
        for item in listed["items"]:
            # Items of a list come without apiVersion and kind; the list names them once.
            out[(kind, item["metadata"]["name"])] = {"apiVersion": listed["apiVersion"], "kind": kind, **item}
    return out


def desired_children(obj: dict[str, Any]) -> dict[tuple[str, str], dict[str, Any]]:
    """What the operator must have applied for this QwenInference as the apiserver stores it (with its uid and
    defaults), rendered by the very functions the operator runs; {} when the spec is refused or infeasible."""
    cr = QwenInference.model_validate({"metadata": obj["metadata"], "spec": obj.get("spec") or {}})
    plan = make_plan(cr, OperatorConfig())
    if plan.problems:
        return {}
    children = {(c["kind"], c["metadata"]["name"]): c for c in render_children(cr, plan, Capabilities())}
    # A model prefetch that has not succeeded holds the fleet at its cache claim and Job
    # (reconcile/changes.py); these clusters bind no claim, so a fuzzed prefetch stays there.
    if any(kind == "Job" for kind, _ in children) and \
            ((obj.get("status") or {}).get("prefetch") or {}).get("state") != "Succeeded":
        return {k: c for k, c in children.items() if k[0] in ("Job", "PersistentVolumeClaim")}
    return children


def container_args(deployment: dict[str, Any]) -> list[str]:
    return list(deployment["spec"]["template"]["spec"]["containers"][0]["args"])


def flag(args: list[str], name: str) -> str | None:
    return args[args.index(name) + 1] if name in args else None


def condition(obj: dict[str, Any] | None, type_: str) -> dict[str, Any]:
    for cond in ((obj or {}).get("status") or {}).get("conditions") or []:
        if cond.get("type") == type_:
            return dict(cond)
    return {}


def pods_of(rest: Rest, ns: str, name: str | None = None) -> list[dict[str, Any]]:
    selector = urllib.parse.quote(f"{INSTANCE_LABEL}={name}" if name else INSTANCE_LABEL)
    return list_items(rest, f"/api/v1/namespaces/{ns}/pods", selector)


def fleet_snapshot(cluster: LocalCluster, rest: Rest, ns: str, name: str, log_lines: int = 25) -> str:
    """What a failed wait needs to say where a fleet's rollout stopped: its status, Deployment, ReplicaSets, pods,
    the nodes they are on, and the last lines of the control-plane components that move a rollout along."""
    def brief(path: str, pick: Any) -> str:
        try:
            return json.dumps(pick(rest.get(path)), default=str)
        except Exception as err:  # the snapshot is best effort: say what could not be read
            return f"<{path}: {err}>"

    deps = f"/apis/apps/v1/namespaces/{ns}/deployments/{name}"
    selector = urllib.parse.quote(f"{INSTANCE_LABEL}={name}")
    parts = [
        "status: " + brief(f"{QWI_PATH.format(ns=ns)}/{name}", lambda o: {
            "generation": o["metadata"].get("generation"), "status": o.get("status")}),
        "deployment: " + brief(deps, lambda o: {"generation": o["metadata"].get("generation"),
                                                "status": o.get("status")}),
        "replicasets: " + brief(f"/apis/apps/v1/namespaces/{ns}/replicasets?labelSelector={selector}", lambda o: [
            {"name": rs["metadata"]["name"], "status": rs.get("status")} for rs in o["items"]]),
        "pods: " + brief(f"/api/v1/namespaces/{ns}/pods?labelSelector={selector}", lambda o: [
            {"name": p["metadata"]["name"], "node": p["spec"].get("nodeName"), "phase": p["status"].get("phase"),
             "deleting": p["metadata"].get("deletionTimestamp"),
             "conditions": {c["type"]: c["status"] for c in p["status"].get("conditions") or []}}
            for p in o["items"]]),
        "nodes: " + brief("/api/v1/nodes", lambda o: [
            {"name": n["metadata"]["name"], "taints": n["spec"].get("taints"),
             "ready": [c["status"] for c in n["status"].get("conditions") or [] if c["type"] == "Ready"]}
            for n in o["items"] if n["spec"].get("taints") or not any(
                c["type"] == "Ready" and c["status"] == "True" for c in n["status"].get("conditions") or [])]),
    ]
    for part in ("kube-controller-manager", "kube-scheduler", "kwok"):
        component = cluster.components.get(part)
        parts.append(f"--- {part} (last {log_lines} lines)\n" + (component.tail(log_lines) if component else "<none>"))
    return "\n".join(parts)


def reconcile_totals(metrics_text: str) -> dict[str, float]:
    """qwen_fleet_reconcile_total by result label, from the operator's /metrics text."""
    totals: dict[str, float] = {}
    for line in metrics_text.splitlines():
        match = re.match(r'^qwen_fleet_reconcile_total\{result="([^"]+)"\} (\S+)$', line)
        if match:
            totals[match[1]] = float(match[2])
    return totals


class LogWindow:
    """The part of a log file written after the window opened (the operator appends to it across restarts)."""

    def __init__(self, path: Path) -> None:
        self.path = path
        self.offset = path.stat().st_size if path.exists() else 0

    def text(self) -> str:
        with self.path.open("rb") as f:
            f.seek(self.offset)
            return f.read().decode(errors="replace")


def traceback_count(text: str) -> int:
    return text.count(TRACEBACK)


def cli() -> list[str]:
    """The installed console script, as a user runs it (falls back to the module next to this interpreter)."""
    script = Path(sys.executable).with_name("qwen-fleet")
    return [str(script)] if script.exists() else [sys.executable, "-m", "qwen_fleet.cli"]


@dataclass(frozen=True)
class CliRun:
    returncode: int | None  # None: still running at the timeout (the check let it through)
    stdout: str
    stderr: str
    seconds: float

    @property
    def lines(self) -> list[str]:
        return [line for line in self.stderr.splitlines() if line.strip()]


def run_operator_cli(kubeconfig: Path | str, timeout: float = 60,
                     env: dict[str, str] | None = None) -> CliRun:
    """``qwen-fleet operator`` with this kubeconfig, for start-up checks that must end it with one line."""
    full_env = {**os.environ, "KUBECONFIG": str(kubeconfig), "QWEN_FLEET_METRICS_PORT": "0",
                "QWEN_FLEET_LIVENESS_PORT": "0", "PYTHONUNBUFFERED": "1", **(env or {})}
    started = time.monotonic()
    try:
        done = subprocess.run([*cli(), "operator"], check=False, env=full_env, capture_output=True, text=True,
                              timeout=timeout, stdin=subprocess.DEVNULL)
    except subprocess.TimeoutExpired as err:
        def text(raw: bytes | str | None) -> str:
            return raw.decode(errors="replace") if isinstance(raw, bytes) else (raw or "")

        return CliRun(None, text(err.stdout), text(err.stderr), time.monotonic() - started)
    return CliRun(done.returncode, done.stdout, done.stderr, time.monotonic() - started)


def record(name: str, figures: dict[str, Any]) -> None:
    """Print the figures a test measured (``pytest -s`` shows them) and append them to $QF_CHAOS_FIGURES when
    set, one JSON line per test: docs/reliability.md quotes them."""
    line = json.dumps({"test": name, **figures}, sort_keys=True, default=str)
    print(f"\nFIGURES {line}")
    target = os.environ.get("QF_CHAOS_FIGURES")
    if target:
        with open(target, "a") as f:
            f.write(line + "\n")
