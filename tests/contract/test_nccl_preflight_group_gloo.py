"""The multi-node NCCL preflight, run for real as a LeaderWorkerSet group would run it: two "pods" are two
processes of the very script the operator ships, started from the init containers of the LeaderWorkerSet the
operator renders, with the LWS env the pod webhook injects, rendezvousing over TCP on 127.0.0.1.

What changes on CPU, and only that: ``python3`` is the engine venv's python (it has torch), the script path is
the repository's file, the termination log is a file; ``--backend=gloo --nproc=1`` stands for one GPU per pod
(gloo on CPU tensors), and the quick sizes and lax thresholds below replace the pod's (gloo on a shared CPU is
far slower than NVLink or InfiniBand: the figures are real, the bar is not the point here). Both processes
share loopback, so the fixed store port becomes a free one, as tests/support/lws_group.py does for vLLM's.
"""

from __future__ import annotations

import os
import subprocess
from pathlib import Path
from typing import Any

import pytest

from qwen_fleet.api import QwenInference
from qwen_fleet.config import OperatorConfig
from qwen_fleet.plan import make_plan
from qwen_fleet.preflight.nccl_preflight import EXIT_ERROR, EXIT_PASSED, MAX_REPORT_BYTES
from qwen_fleet.preflight.report import SCRIPT_MOUNT_PATH, PreflightReport, parse_report
from qwen_fleet.reconcile.store import nccl_status, pod_summary
from qwen_fleet.render import ALL_CAPABILITIES, render_children
from qwen_fleet.render.leaderworkerset import PREFLIGHT_PORT
from tests.support.lws_group import expand
from tests.support.vllm_server import free_port

pytestmark = pytest.mark.vllm

REPO = Path(__file__).resolve().parents[2]
SCRIPT = REPO / "operator/qwen_fleet/preflight/nccl_preflight.py"
CPU = ["--backend=gloo", "--nproc=1", "--small-sizes=8,1024,65536", f"--large-bytes={2**20}", "--warmup=2",
       "--iters=5", "--rounds=3", "--large-warmup=1", "--large-iters=3", "--timeout-s=120",
       "--max-small-latency-us=1e9", "--min-bus-bandwidth-gbps=1e-9"]


def rendered_templates() -> dict[str, dict[str, Any]]:
    cr = QwenInference.model_validate({
        "metadata": {"name": "big", "namespace": "llm", "uid": "u"},
        "spec": {"model": {"name": "Qwen/Qwen3-4B-Instruct-2507"}, "gpu": {"product": "NVIDIA-H100-80GB-HBM3"},
                 "parallelism": {"pipeline": 2, "nodes": 2}, "nccl": {"preflight": {"enabled": True}}}})
    kids = {c["kind"]: c for c in render_children(cr, make_plan(cr, OperatorConfig()), ALL_CAPABILITIES)}
    template = kids["LeaderWorkerSet"]["spec"]["leaderWorkerTemplate"]
    return {"leader": template["leaderTemplate"], "worker": template["workerTemplate"]}


def pod_process(template: dict[str, Any], python: str, *, index: int, size: int, port: int, log: Path,
                extra: tuple[str, ...] = ()) -> subprocess.Popen[str]:
    """The init container of one pod of the group as a local process (the mapping in the module docstring)."""
    (init,) = template["spec"]["initContainers"]
    lws = {"LWS_LEADER_ADDRESS": "127.0.0.1", "LWS_GROUP_SIZE": str(size), "LWS_WORKER_INDEX": str(index)}
    env = {**os.environ, **{e["name"]: e["value"] for e in init["env"]}, **lws}
    assert init["command"] == ["python3", SCRIPT_MOUNT_PATH]
    args = [expand(a, env) for a in init["args"]]
    assert args.count(f"--master-port={PREFLIGHT_PORT}") == 1 and "--output=/dev/termination-log" in args
    args = [f"--master-port={port}" if a.startswith("--master-port=") else a for a in args]
    args = [f"--output={log}" if a.startswith("--output=") else a for a in args]
    return subprocess.Popen([python, str(SCRIPT), *args, *CPU, *extra], env=env, text=True,
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE)


def finish(proc: subprocess.Popen[str], log: Path) -> tuple[int, PreflightReport, str, str]:
    out, err = proc.communicate(timeout=300)
    written = log.read_text() if log.exists() else ""
    assert written, f"no report written; stderr:\n{err[-3000:]}"
    assert len(written.encode()) < MAX_REPORT_BYTES
    assert out.strip().splitlines()[-1] == written
    report = parse_report(written)
    assert report is not None, written
    return proc.returncode, report, written, err


def test_two_pods_of_a_group_run_one_all_reduce_and_both_report(vllm_python: str, tmp_path: Path) -> None:
    templates, port = rendered_templates(), free_port()
    logs = {role: tmp_path / f"{role}-termination-log" for role in templates}
    # The worker starts first: it must wait for the leader's store, as a worker pod scheduled earlier would.
    worker = pod_process(templates["worker"], vllm_python, index=1, size=2, port=port, log=logs["worker"])
    leader = pod_process(templates["leader"], vllm_python, index=0, size=2, port=port, log=logs["leader"])
    results = {"leader": finish(leader, logs["leader"]), "worker": finish(worker, logs["worker"])}
    for role, (code, report, _, err) in results.items():
        assert code == EXIT_PASSED, f"{role}: {err[-3000:]}"
        assert (report.outcome, report.backend, report.nodes, report.ranks) == ("passed", "gloo", 2, 2)
        assert report.message.startswith("all-reduce across 2 ranks on 2 nodes passed")
        assert report.bus_bandwidth_gbps is not None and report.bus_bandwidth_gbps > 0
    leader_report, worker_report = results["leader"][1], results["worker"][1]
    assert (leader_report.node_rank, worker_report.node_rank) == (0, 1)
    # One all-reduce, MAX-reduced over the world: both pods report the same figures.
    assert leader_report.small_latency_us == worker_report.small_latency_us
    assert leader_report.bus_bandwidth_gbps == worker_report.bus_bandwidth_gbps
    # ... and the operator reads the two pods' termination messages into one passing group.
    pods = [pod_summary({"metadata": {"name": name, "labels": {
                "leaderworkerset.sigs.k8s.io/group-index": "0", "leaderworkerset.sigs.k8s.io/worker-index": index}},
             "status": {"initContainerStatuses": [{"name": "nccl-preflight", "state": {
                 "terminated": {"exitCode": 0, "message": results[role][2]}}}]}})
            for name, index, role in (("big-0", "0", "leader"), ("big-0-1", "1", "worker"))]
    status = nccl_status(pods)
    assert status is not None
    (group,) = status["groups"]
    assert (group["outcome"], group["passed"], group["pods"], group["reported"]) == (
        "passed", True, ["big-0", "big-0-1"], 2)


def test_a_worker_that_never_comes_fails_the_leader_with_exit_3_and_says_which(
        vllm_python: str, tmp_path: Path) -> None:
    log = tmp_path / "leader-termination-log"
    port = free_port()
    leader = pod_process(rendered_templates()["leader"], vllm_python, index=0, size=2, port=port, log=log,
                         extra=("--rendezvous-timeout-s=3",))
    code, report, _, err = finish(leader, log)
    assert code == EXIT_ERROR
    assert (report.outcome, report.passed, report.nodes, report.node_rank) == ("error", False, 2, 0)
    assert report.message == ("preflight could not run: rendezvous: 1 of 1 worker pod(s) (worker index 1) did not "
                              f"join the leader's store on port {port} within 3 s: check that every pod of the "
                              "group is scheduled and started (image pulled) and can reach the leader on TCP port "
                              f"{port}")
    assert f"ERROR: {report.message}" in err


def test_a_worker_without_its_leader_gives_up_with_exit_3(vllm_python: str, tmp_path: Path) -> None:
    log = tmp_path / "worker-termination-log"
    port = free_port()  # nothing listens there
    worker = pod_process(rendered_templates()["worker"], vllm_python, index=1, size=2, port=port, log=log,
                         extra=("--rendezvous-timeout-s=3",))
    code, report, _, _ = finish(worker, log)
    assert code == EXIT_ERROR
    assert (report.outcome, report.node_rank) == ("error", 1)
    assert f"could not reach the group leader's store at 127.0.0.1:{port} within 3 s" in report.message
