"""The NCCL preflight of a multi-node group (LeaderWorkerSet): the script's group flags and messages, and how
the operator reads the reports of a group's pods into ``status.nccl.groups``. No torch: the measuring half runs
in tests/contract/test_nccl_preflight_group_gloo.py."""

from __future__ import annotations

from typing import Any

import pytest

from qwen_fleet.api.resource import NcclStatus
from qwen_fleet.preflight import nccl_preflight as script
from qwen_fleet.preflight.report import (
    GroupMember,
    GroupRendezvous,
    group_status,
    parse_report,
    preflight_command,
)
from qwen_fleet.reconcile.store import nccl_status, pod_summary


def a_group_report(node_rank: int, *, nodes: int = 2, outcome: str = "passed", message: str | None = None,
                   busbw: float = 45.2) -> str:
    """A report as the script writes it for one pod of a group."""
    passed = outcome == "passed"
    doc: dict[str, Any] = {
        "schema": script.SCHEMA, "passed": passed, "outcome": outcome,
        "message": message or f"all-reduce across {nodes * 8} ranks on {nodes} nodes passed",
        "backend": "nccl", "ranks": nodes * 8, "gpus": nodes * 8, "nodes": nodes, "nodeRank": node_rank,
        "thresholds": {"maxSmallLatencyUs": 50.0, "minBusBandwidthGBps": 40.0},
        "checkedAt": f"2026-12-01T06:00:0{node_rank}Z", "versions": {"torch": "2.13.0", "nccl": "2.29.7"},
    }
    if outcome != "error":
        doc.update(smallLatencyUs={"8": 21.5, "65536": 38.0}, maxSmallLatencyUs=38.0, maxSmallLatencyBytes=65536,
                   largeBytes=256 * 2**20, algBandwidthGBps=busbw * 16 / 30, busBandwidthGBps=busbw)
    return script.encode_report(doc)


def member(pod: str, index: int, text: str | None) -> GroupMember:
    return GroupMember(pod=pod, worker_index=index, report=parse_report(text) if text else None)


# ---- the script: group flags, messages ------------------------------------------------------------------


def test_judge_names_the_group_and_points_a_slow_group_at_the_inter_node_fabric() -> None:
    common: dict[str, Any] = {"ranks": 16, "small_latency_us": {8: 20.0}, "large_bytes": 256 * 2**20,
                              "max_small_latency_us": 50.0, "min_bus_bandwidth_gbps": 40.0}
    passed, message = script.judge(**common, bus_bandwidth=45.0, nodes=2)
    assert passed and message.startswith("all-reduce across 16 ranks on 2 nodes passed")
    passed, message = script.judge(**common, bus_bandwidth=12.0, nodes=2)
    assert not passed
    assert "12.0 GB/s at 256 MiB is below the 40 GB/s minimum" in message
    assert "ibstat" in message and "NCCL_SOCKET_IFNAME" in message
    _, single = script.judge(**common, bus_bandwidth=12.0)
    assert "ibstat" not in single and single.endswith("(nvidia-smi topo -m)")


@pytest.mark.parametrize("bad", [
    ["--nnodes=2"],  # no leader address or port
    ["--nnodes=2", "--master-addr=leader", "--master-port=0"],
    ["--nnodes=2", "--master-addr=leader", "--master-port=29400", "--node-rank=2"],
    ["--nnodes=2", "--master-addr=leader", "--master-port=29400", "--node-rank=-1"],
    ["--nnodes=0"],
    ["--nnodes=2", "--master-addr=leader", "--master-port=29400", "--rendezvous-timeout-s=0"],
    ["--node-rank=$(LWS_WORKER_INDEX)"],  # the kubelet left it unexpanded: the LWS env is missing
])
def test_the_script_refuses_an_incomplete_group_before_importing_torch(bad: list[str]) -> None:
    with pytest.raises(SystemExit) as exc:
        script.main(["--backend=gloo", *bad])
    assert exc.value.code == script.EXIT_USAGE


def test_the_missing_member_message_names_the_worker_index_and_the_port() -> None:
    message = script.missing_members_message([1, 3], 4, 29400, 900)
    assert message.startswith("rendezvous: 2 of 3 worker pod(s) (worker index 1, 3) did not join")
    assert "port 29400 within 900 s" in message and "image pulled" in message


def test_the_group_command_parses_with_the_script_parser() -> None:
    group = GroupRendezvous(nodes="4", node_rank="3", master_addr="big-0.big-0.ns", master_port=29400,
                            timeout_s=900)
    opts = script.build_parser().parse_args(preflight_command(group=group)[2:])
    assert (opts.nnodes, opts.node_rank, opts.master_addr, opts.master_port) == (4, 3, "big-0.big-0.ns", 29400)
    assert opts.rendezvous_timeout_s == 900.0


def test_a_group_report_carries_its_place_and_a_single_pod_report_defaults_to_one_node() -> None:
    report = parse_report(a_group_report(1))
    assert report is not None and (report.nodes, report.node_rank, report.ranks) == (2, 1, 16)
    single = parse_report(a_group_report(0).replace('"nodes":2,"nodeRank":0,', ""))
    assert single is not None and (single.nodes, single.node_rank) == (1, 0)


# ---- group_status: one verdict per group ----------------------------------------------------------------


def test_a_group_passes_when_every_pod_passed_and_shows_the_leaders_figures() -> None:
    entry = group_status(0, [member("big-0-1", 1, a_group_report(1, busbw=44.0)),
                             member("big-0", 0, a_group_report(0, busbw=45.2))])
    assert entry["pods"] == ["big-0", "big-0-1"]  # leader first
    assert (entry["passed"], entry["outcome"], entry["nodes"], entry["reported"]) == (True, "passed", 2, 2)
    assert entry["message"].startswith("pod big-0 (worker index 0): all-reduce across 16 ranks on 2 nodes")
    assert (entry["busBandwidthGBps"], entry["gpus"], entry["smallMessageLatencyMicroseconds"]) == (45.2, 16, 38.0)


def test_one_failing_pod_fails_the_group_and_an_error_outranks_a_slow_link() -> None:
    slow = a_group_report(1, outcome="below-threshold", message="all-reduce bus bandwidth 9.0 GB/s ... ibstat")
    entry = group_status(3, [member("big-3", 0, a_group_report(0)), member("big-3-1", 1, slow)])
    assert (entry["group"], entry["passed"], entry["outcome"]) == (3, False, "below-threshold")
    assert entry["message"] == "pod big-3-1 (worker index 1): all-reduce bus bandwidth 9.0 GB/s ... ibstat"
    error = a_group_report(0, outcome="error", message="preflight could not run: rendezvous: 1 of 1 worker pod(s)")
    entry = group_status(3, [member("big-3", 0, error), member("big-3-1", 1, slow)])
    assert (entry["passed"], entry["outcome"]) == (False, "error")
    assert entry["message"].startswith("pod big-3 (worker index 0): preflight could not run: rendezvous")


def test_a_group_is_pending_until_every_pod_has_reported() -> None:
    entry = group_status(0, [member("big-0", 0, a_group_report(0)), member("big-0-1", 1, None)])
    assert (entry["outcome"], entry["reported"], "passed" in entry) == ("pending", 1, False)
    assert entry["message"] == "1 of 2 pods reported; waiting for worker index 1"
    alone = group_status(0, [member("big-0", 0, a_group_report(0))])  # the worker pod does not exist yet
    assert alone["outcome"] == "pending" and alone["message"].endswith("waiting for the group's other pods")


# ---- from pods to status.nccl ---------------------------------------------------------------------------


def a_pod(name: str, report: str | None, *, group: int | None = None, worker: int = 0,
          exit_code: int = 0) -> dict[str, Any]:
    labels = {"qwenfleet.io/inference": "big"}
    if group is not None:
        labels |= {"leaderworkerset.sigs.k8s.io/group-index": str(group),
                   "leaderworkerset.sigs.k8s.io/worker-index": str(worker)}
    init: dict[str, Any] = {"name": "nccl-preflight", "state": {"running": {}}}
    if report is not None:
        init["state"] = {"terminated": {"exitCode": exit_code, "message": report}}
    return {"metadata": {"name": name, "labels": labels},
            "status": {"phase": "Pending", "initContainerStatuses": [init]}}


def test_status_shows_the_preflight_per_group_and_keeps_the_single_pod_shape() -> None:
    pods = [pod_summary(p) for p in (
        a_pod("big-0", a_group_report(0), group=0),
        a_pod("big-0-1", a_group_report(1), group=0, worker=1),
        a_pod("big-1", a_group_report(0, outcome="error", message="preflight could not run: rendezvous"),
              group=1, exit_code=3),
        a_pod("big-1-1", None, group=1, worker=1),
    )]
    status = nccl_status(pods)
    assert status is not None
    groups = status.pop("groups")
    assert [(g["group"], g["outcome"], g["pods"]) for g in groups] == [
        (0, "passed", ["big-0", "big-0-1"]), (1, "error", ["big-1", "big-1-1"])]
    assert status["pod"] in {"big-0", "big-0-1", "big-1"} and "outcome" in status  # the newest report, as before
    assert NcclStatus.model_validate({**status, "groups": groups}).groups is not None  # the CRD's shape


def test_a_single_node_fleet_has_no_groups() -> None:
    text = a_group_report(0).replace('"nodes":2,"nodeRank":0,', "")
    status = nccl_status([pod_summary(a_pod("small-abc", text))])
    assert status is not None and "groups" not in status
    assert status["pod"] == "small-abc" and status["passed"] is True
    NcclStatus.model_validate(status)
