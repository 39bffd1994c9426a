"""NCCL preflight: report parsing, thresholds, the busbw formula, report size, the standalone-script rule.

Runs without torch (the project venv has none); the script's measuring half is covered by
tests/contract/test_nccl_preflight_gloo.py.
"""

from __future__ import annotations

import ast
import json
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

from qwen_fleet.preflight import nccl_preflight as script
from qwen_fleet.preflight.report import (
    MAX_REPORT_BYTES,
    SCRIPT_MOUNT_PATH,
    PreflightReport,
    parse_report,
    preflight_command,
    script_source,
    to_status,
)

REPO = Path(__file__).resolve().parents[2]
SCRIPT = REPO / "operator/qwen_fleet/preflight/nccl_preflight.py"
H200_REPORT = REPO / "bench/results/nccl-preflight-h200x2.json"


def a_report(**overrides: Any) -> dict[str, Any]:
    """A report as the script builds it, from its own pure functions (no torch needed)."""
    small = {8: 14.4, 64: 14.3, 65536: 16.6}
    algbw, busbw = script.bus_bandwidth_gbps(256 * 2**20, 903.6e-6, 2)
    passed, message = script.judge(
        ranks=2,
        small_latency_us=small,
        bus_bandwidth=busbw,
        large_bytes=256 * 2**20,
        max_small_latency_us=50,
        min_bus_bandwidth_gbps=100,
    )
    doc: dict[str, Any] = {
        "schema": script.SCHEMA,
        "passed": passed,
        "outcome": "passed" if passed else "below-threshold",
        "message": message,
        "backend": "nccl",
        "ranks": 2,
        "gpus": 2,
        "thresholds": {"maxSmallLatencyUs": 50.0, "minBusBandwidthGBps": 100.0},
        "env": script.recorded_env({"NCCL_DEBUG": "WARN", "PATH": "/usr/bin", "NCCL_VERSION": "2.28.3-1"}),
        "checkedAt": "2026-11-30T02:47:56Z",
        "versions": {"torch": "2.11.0", "cuda": "13.0", "nccl": "2.28.9"},
        "device": "NVIDIA H200",
        "timing": "cuda-graph",
        "smallLatencyUs": {str(k): v for k, v in small.items()},
        "maxSmallLatencyUs": 16.6,
        "maxSmallLatencyBytes": 65536,
        "largeBytes": 256 * 2**20,
        "algBandwidthGBps": round(algbw, 2),
        "busBandwidthGBps": round(busbw, 2),
    }
    doc.update(overrides)
    return doc


# ---- bus bandwidth (nccl-tests, doc/PERFORMANCE.md: busbw = algbw * 2(n-1)/n for all-reduce) ----------


@pytest.mark.parametrize(("ranks", "factor"), [(1, 0.0), (2, 1.0), (4, 1.5), (8, 1.75)])
def test_bus_bandwidth_follows_nccl_tests_all_reduce_factor(ranks: int, factor: float) -> None:
    algbw, busbw = script.bus_bandwidth_gbps(10**9, 0.004, ranks)
    assert algbw == pytest.approx(250.0)
    assert busbw == pytest.approx(250.0 * factor)


def test_bus_bandwidth_rejects_impossible_inputs() -> None:
    with pytest.raises(ValueError, match="seconds"):
        script.bus_bandwidth_gbps(1, 0.0, 2)
    with pytest.raises(ValueError, match="ranks"):
        script.bus_bandwidth_gbps(1, 1.0, 0)


def test_the_h200_report_is_consistent_with_the_formula() -> None:
    doc = json.loads(H200_REPORT.read_text())
    algbw, busbw = script.bus_bandwidth_gbps(doc["largeBytes"], doc["largeTimeUs"] / 1e6, doc["ranks"])
    assert doc["algBandwidthGBps"] == pytest.approx(algbw, rel=1e-3)
    assert doc["busBandwidthGBps"] == pytest.approx(busbw, rel=1e-3)


# ---- judge --------------------------------------------------------------------------------------------


def judge(**kw: Any) -> tuple[bool, str]:
    args: dict[str, Any] = {
        "ranks": 2,
        "small_latency_us": {8: 12.0, 64: 20.0},
        "bus_bandwidth": 300.0,
        "large_bytes": 256 * 2**20,
        "max_small_latency_us": 50.0,
        "min_bus_bandwidth_gbps": 100.0,
    }
    args.update(kw)
    return script.judge(**args)


def test_judge_passes_within_both_limits_and_says_what_it_saw() -> None:
    passed, message = judge()
    assert passed
    assert "20.0 us at 64 B (limit 50 us)" in message
    assert "300.0 GB/s at 256 MiB (minimum 100 GB/s)" in message


def test_judge_fails_on_the_worst_small_size_with_the_topology_hint() -> None:
    passed, message = judge(small_latency_us={8: 71.3, 1024: 40.0})
    assert not passed
    assert message == (
        "all-reduce latency 71.3 us at 8 B exceeds the 50 us limit: "
        "check NVLink/PCIe topology (nvidia-smi topo -m)"
    )


def test_judge_points_a_slow_gloo_run_at_the_cpu_not_at_a_fabric() -> None:
    passed, message = judge(small_latency_us={8: 1557.1}, backend="gloo", env={"NCCL_P2P_DISABLE": "1"})
    assert not passed
    assert message == (
        "all-reduce latency 1557.1 us at 8 B exceeds the 50 us limit: "
        "gloo all-reduce over loopback in the pod: check the pod's CPU limit (throttling) and the node's load"
    )


def test_judge_fails_on_low_bus_bandwidth_and_reports_both_failures() -> None:
    passed, message = judge(small_latency_us={4096: 80.0}, bus_bandwidth=26.8)
    assert not passed
    assert "latency 80.0 us at 4 KiB exceeds the 50 us limit" in message
    assert "bus bandwidth 26.8 GB/s at 256 MiB is below the 100 GB/s minimum" in message
    assert "\n" not in message


def test_judge_names_p2p_disable_when_it_is_set() -> None:
    _, message = judge(bus_bandwidth=26.8, env={"NCCL_P2P_DISABLE": "1"})
    assert "NCCL_P2P_DISABLE=1" in message
    _, message = judge(bus_bandwidth=26.8, env={"NCCL_P2P_DISABLE": "0"})
    assert "NCCL_P2P_DISABLE" not in message


@pytest.mark.parametrize("off", [None, 0, -1])
def test_a_threshold_of_none_or_zero_is_off(off: float | None) -> None:
    assert judge(small_latency_us={8: 1e6}, max_small_latency_us=off)[0]
    assert judge(bus_bandwidth=0.001, min_bus_bandwidth_gbps=off)[0]


def test_one_rank_bandwidth_is_not_judged_but_latency_is() -> None:
    passed, message = judge(ranks=1, bus_bandwidth=0.0)
    assert passed
    assert "not judged" in message
    assert not judge(ranks=1, bus_bandwidth=0.0, small_latency_us={8: 99.0})[0]


def test_judge_edge_at_exactly_the_limit_passes() -> None:
    assert judge(small_latency_us={8: 50.0}, bus_bandwidth=100.0)[0]


# ---- report size and encoding -------------------------------------------------------------------------


def test_a_full_report_fits_a_termination_message() -> None:
    text = script.encode_report(a_report())
    assert len(text.encode()) < script.REPORT_BUDGET_BYTES < MAX_REPORT_BYTES
    assert "\n" not in text
    assert json.loads(text) == a_report()


def test_the_committed_h200_report_fits_a_termination_message() -> None:
    assert len(H200_REPORT.read_bytes()) < MAX_REPORT_BYTES


def test_an_oversized_report_is_cut_to_the_budget_and_still_parses() -> None:
    env = {f"NCCL_KNOB_{i}": "x" * 200 for i in range(40)}
    big = a_report(env=env, message="m" * 5000)
    text = script.encode_report(big)
    assert len(text.encode()) <= script.REPORT_BUDGET_BYTES
    report = parse_report(text)
    assert report is not None
    assert report.truncated
    assert report.bus_bandwidth_gbps == big["busBandwidthGBps"]
    assert len(report.message) == 400


def test_recorded_env_keeps_nccl_settings_only() -> None:
    env = script.recorded_env(
        {
            "NCCL_DEBUG": "INFO",
            "TORCH_NCCL_ASYNC_ERROR_HANDLING": "1",
            "HOME": "/root",
            "NCCL_VERSION": "2.28",
        }
    )
    assert env == {"NCCL_DEBUG": "INFO", "TORCH_NCCL_ASYNC_ERROR_HANDLING": "1"}


@pytest.mark.parametrize(
    ("n", "text"),
    [(8, "8 B"), (1000, "1000 B"), (65536, "64 KiB"), (256 * 2**20, "256 MiB"), (2**30, "1 GiB")],
)
def test_format_bytes(n: int, text: str) -> None:
    assert script.format_bytes(n) == text


# ---- parse_report --------------------------------------------------------------------------------------


def test_parse_reads_back_every_field() -> None:
    report = parse_report(script.encode_report(a_report()))
    assert isinstance(report, PreflightReport)
    assert report.passed
    assert report.outcome == "passed"
    assert (report.gpus, report.ranks, report.backend) == (2, 2, "nccl")
    assert report.small_latency_us == {8: 14.4, 64: 14.3, 65536: 16.6}
    assert (report.max_small_latency_us, report.max_small_latency_bytes) == (16.6, 65536)
    assert report.large_bytes == 256 * 2**20
    assert report.max_small_latency_limit_us == 50.0
    assert report.min_bus_bandwidth_limit_gbps == 100.0
    assert (report.torch_version, report.nccl_version, report.device) == ("2.11.0", "2.28.9", "NVIDIA H200")
    assert report.env == {"NCCL_DEBUG": "WARN"}
    assert report.checked_at == "2026-11-30T02:47:56Z"
    assert not report.truncated


def test_parse_the_real_h200_report() -> None:
    report = parse_report(H200_REPORT.read_text())
    assert report is not None
    assert report.gpus == 2
    assert report.backend == "nccl"
    assert report.max_small_latency_us == max(report.small_latency_us.values())
    assert report.bus_bandwidth_gbps is not None
    assert report.bus_bandwidth_gbps > 0


def test_parse_finds_the_report_at_the_end_of_a_log_tail() -> None:
    text = "NCCL INFO comm 0x1 rank 0\n{not json\n" + script.encode_report(a_report()) + "\n"
    report = parse_report(text)
    assert report is not None
    assert report.passed


def test_parse_computes_the_max_when_only_the_table_survived() -> None:
    doc = a_report()
    del doc["maxSmallLatencyUs"], doc["maxSmallLatencyBytes"]
    report = parse_report(json.dumps(doc))
    assert report is not None
    assert (report.max_small_latency_us, report.max_small_latency_bytes) == (16.6, 65536)


def test_parse_an_error_report_without_measurements() -> None:
    doc = {
        k: v
        for k, v in a_report(
            passed=False, outcome="error", message="preflight could not run: NCCL error", gpus=0
        ).items()
        if k not in {"smallLatencyUs", "maxSmallLatencyUs", "maxSmallLatencyBytes", "busBandwidthGBps"}
    }
    report = parse_report(json.dumps(doc))
    assert report is not None
    assert report.outcome == "error"
    assert report.bus_bandwidth_gbps is None
    assert report.max_small_latency_us is None


GARBAGE = [
    "",
    "   \n",
    "not json at all",
    "[1, 2, 3]",
    "null",
    '"a string"',
    '{"schema": "something-else/v1", "passed": true}',
    script.encode_report(a_report())[:200],  # cut off by the kubelet's limit
    json.dumps(a_report(passed="yes")),
    json.dumps(a_report(outcome="maybe")),
    json.dumps(a_report(gpus=True)),
    json.dumps(a_report(gpus="2")),
    json.dumps(a_report(busBandwidthGBps="fast")),
    json.dumps(a_report(smallLatencyUs={"eight": 1.0})),
    json.dumps(a_report(smallLatencyUs={"8": None})),
    json.dumps(a_report(smallLatencyUs=[1, 2])),
    json.dumps(a_report(env=["NCCL_DEBUG"])),
    json.dumps({k: v for k, v in a_report().items() if k != "message"}),
    '{"schema": "qwen-fleet.nccl-preflight/v1", "maxSmallLatencyUs": NaN}',
]


@pytest.mark.parametrize("text", GARBAGE)
def test_parse_returns_none_for_anything_that_is_not_a_report(text: str) -> None:
    assert parse_report(text) is None


def test_parse_rejects_non_finite_numbers() -> None:
    assert parse_report(json.dumps(a_report(busBandwidthGBps=float("inf")))) is None


def test_parse_tolerates_a_non_string() -> None:
    assert parse_report(None) is None  # type: ignore[arg-type]
    assert parse_report(b"{}") is None  # type: ignore[arg-type]


# ---- to_status -----------------------------------------------------------------------------------------


def test_to_status_is_camel_case_and_omits_what_is_missing() -> None:
    report = parse_report(script.encode_report(a_report()))
    assert report is not None
    status = to_status(report)
    assert status == {
        "passed": True,
        "outcome": "passed",
        "message": report.message,
        "gpus": 2,
        "backend": "nccl",
        "smallMessageLatencyMicroseconds": 16.6,
        "smallMessageLatencyBytes": 65536,
        "busBandwidthGBps": report.bus_bandwidth_gbps,
        "ncclVersion": "2.28.9",
        "checkedAt": "2026-11-30T02:47:56Z",
    }
    error = PreflightReport(
        passed=False, outcome="error", message="x", backend="nccl", ranks=2, gpus=0, checked_at="t"
    )
    assert "busBandwidthGBps" not in to_status(error)
    assert "smallMessageLatencyMicroseconds" not in to_status(error)
    assert json.dumps(to_status(error))


# ---- the command line the operator renders, and the standalone rule -------------------------------------


def test_preflight_command_is_accepted_by_the_script_parser() -> None:
    cmd = preflight_command(max_small_latency_us=50, min_bus_bandwidth_gbps=120.5, nproc=4, warn_only=True)
    assert cmd[:2] == ["python3", SCRIPT_MOUNT_PATH]
    opts = script.build_parser().parse_args(cmd[2:])
    assert (opts.max_small_latency_us, opts.min_bus_bandwidth_gbps) == (50.0, 120.5)
    assert (opts.nproc, opts.warn_only, opts.output) == (4, True, "/dev/termination-log")
    assert opts.backend == "nccl"


def test_a_gloo_command_names_its_backend_ranks_and_message_size() -> None:
    cmd = preflight_command(max_small_latency_us=0, backend="gloo", nproc=2, large_bytes=16 * 2**20)
    opts = script.build_parser().parse_args(cmd[2:])
    assert (opts.backend, opts.nproc, opts.large_bytes, opts.max_small_latency_us) == ("gloo", 2, 16 * 2**20, 0.0)


def test_script_defaults_fit_a_pod() -> None:
    opts = script.build_parser().parse_args([])
    assert opts.backend == "nccl"
    assert opts.nproc == 0  # one rank per visible GPU
    assert opts.max_small_latency_us == 50.0
    assert opts.small_sizes[0] == 8
    assert opts.small_sizes[-1] == 64 * 1024
    assert opts.large_bytes == 256 * 2**20


@pytest.mark.parametrize(
    "bad", [["--small-sizes=3"], ["--small-sizes="], ["--large-bytes=-4"], ["--large-bytes=6"]]
)
def test_script_rejects_bad_sizes(bad: list[str]) -> None:
    with pytest.raises(SystemExit):
        script.build_parser().parse_args(bad)


def test_script_source_is_the_file_the_operator_ships() -> None:
    assert script_source() == SCRIPT.read_text()


def test_script_imports_only_the_standard_library_and_torch_lazily() -> None:
    tree = ast.parse(SCRIPT.read_text())
    imported: set[str] = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            imported |= {alias.name.split(".")[0] for alias in node.names}
        elif isinstance(node, ast.ImportFrom):
            assert node.level == 0, "relative import in the standalone script"
            imported.add((node.module or "").split(".")[0])
    assert imported <= set(sys.stdlib_module_names)
    top_level = {n.names[0].name for n in tree.body if isinstance(n, ast.Import)}
    assert "torch" not in top_level


def test_script_help_runs_without_torch() -> None:
    done = subprocess.run(
        [sys.executable, str(SCRIPT), "--help"], capture_output=True, text=True, check=False
    )
    assert done.returncode == 0, done.stderr
    assert "--max-small-latency-us" in done.stdout


def test_importing_the_report_module_does_not_import_torch() -> None:
    code = "import sys, qwen_fleet.preflight; print('torch' in sys.modules)"
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert done.stdout.strip() == "False"
