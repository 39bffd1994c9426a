"""The NCCL preflight script, run for real with the gloo backend on CPU: 2 processes, torch.distributed.

The very file the operator ships in its ConfigMap runs as a subprocess under the cached vLLM venv's python
(which has torch; the project venv has none), and its report is read back with the operator's parser.
"""

from __future__ import annotations

import json
import os
import subprocess
from pathlib import Path

import pytest

from qwen_fleet.preflight.nccl_preflight import (
    EXIT_BELOW_THRESHOLD,
    EXIT_ERROR,
    EXIT_PASSED,
    MAX_REPORT_BYTES,
    bus_bandwidth_gbps,
)
from qwen_fleet.preflight.report import PreflightReport, parse_report

pytestmark = pytest.mark.vllm

REPO = Path(__file__).resolve().parents[2]
SCRIPT = REPO / "operator/qwen_fleet/preflight/nccl_preflight.py"
SMALL_SIZES = (8, 64, 1024, 65536)
LARGE_BYTES = 2**20
QUICK = [
    f"--small-sizes={','.join(map(str, SMALL_SIZES))}",
    f"--large-bytes={LARGE_BYTES}",
    "--warmup=3",
    "--iters=10",
    "--rounds=3",
    "--large-warmup=1",
    "--large-iters=3",
    "--timeout-s=120",
]


@pytest.fixture(scope="module")
def torch_python() -> str:
    """The vLLM CPU venv's python (hack/vllm-venv.sh builds the venv if it is missing)."""
    done = subprocess.run(
        [str(REPO / "hack/vllm-venv.sh")], capture_output=True, text=True, check=True, timeout=3600
    )
    return done.stdout.strip().splitlines()[-1]


def run_script(
    python: str, tmp_path: Path, *args: str, env: dict[str, str] | None = None
) -> tuple[subprocess.CompletedProcess[str], str]:
    out = tmp_path / "termination-log"
    full_env = {**os.environ, "NCCL_DEBUG": "WARN", "NCCL_P2P_DISABLE": "0", **(env or {})}
    done = subprocess.run(
        [python, str(SCRIPT), *args, f"--output={out}"],
        capture_output=True,
        text=True,
        env=full_env,
        timeout=300,
        check=False,
    )
    return done, out.read_text() if out.exists() else ""


def read(done: subprocess.CompletedProcess[str], written: str) -> PreflightReport:
    assert written, f"no report written; stderr:\n{done.stderr}"
    assert len(written.encode()) < MAX_REPORT_BYTES
    assert done.stdout.strip().splitlines()[-1] == written  # the same JSON, last line of stdout
    report = parse_report(written)
    assert report is not None, written
    return report


def test_two_gloo_ranks_pass_a_lax_threshold(torch_python: str, tmp_path: Path) -> None:
    done, written = run_script(
        torch_python,
        tmp_path,
        "--backend=gloo",
        "--nproc=2",
        "--max-small-latency-us=1e9",
        "--min-bus-bandwidth-gbps=1e-9",
        *QUICK,
    )
    assert done.returncode == EXIT_PASSED, done.stderr
    report = read(done, written)
    assert report.passed
    assert report.outcome == "passed"
    assert (report.backend, report.ranks, report.gpus, report.device) == ("gloo", 2, 0, "cpu")
    assert sorted(report.small_latency_us) == list(SMALL_SIZES)
    assert all(v > 0 for v in report.small_latency_us.values())
    assert report.max_small_latency_us == max(report.small_latency_us.values())
    assert report.large_bytes == LARGE_BYTES
    doc = json.loads(written)
    algbw, busbw = bus_bandwidth_gbps(LARGE_BYTES, doc["largeTimeUs"] / 1e6, 2)
    assert report.alg_bandwidth_gbps == pytest.approx(algbw, rel=0.01)
    assert report.bus_bandwidth_gbps == pytest.approx(busbw, rel=0.01)  # n = 2: busbw == algbw
    assert report.env["NCCL_DEBUG"] == "WARN"  # the environment the ranks ran with is on record
    assert report.env["NCCL_P2P_DISABLE"] == "0"
    assert "PATH" not in report.env
    assert report.torch_version
    assert doc["timing"] == "eager"
    assert report.checked_at.endswith("Z")
    assert "passed" in report.message


def test_an_impossible_threshold_fails_with_a_clear_one_line_message(
    torch_python: str, tmp_path: Path
) -> None:
    done, written = run_script(
        torch_python,
        tmp_path,
        "--backend=gloo",
        "--nproc=2",
        "--max-small-latency-us=0.001",
        "--min-bus-bandwidth-gbps=1e6",
        *QUICK,
        env={"NCCL_P2P_DISABLE": "1"},
    )
    assert done.returncode == EXIT_BELOW_THRESHOLD, done.stderr
    report = read(done, written)
    assert not report.passed
    assert report.outcome == "below-threshold"
    assert "exceeds the 0.001 us limit" in report.message
    assert "is below the 1e+06 GB/s minimum" in report.message
    # gloo on one node is a CPU fleet's check: the hint names the CPU, not the GPU topology or NCCL's P2P setting
    # (the GPU hints, NCCL_P2P_DISABLE=1 included, are the judge's unit tests: tests/unit/test_preflight_report.py).
    assert "check the pod's CPU limit" in report.message
    assert "nvidia-smi topo -m" not in report.message
    assert "NCCL_P2P_DISABLE" not in report.message
    assert "\n" not in report.message
    assert f"FAILED: {report.message}" in done.stderr


def test_warn_only_reports_the_failure_but_exits_zero(torch_python: str, tmp_path: Path) -> None:
    done, written = run_script(
        torch_python,
        tmp_path,
        "--backend=gloo",
        "--nproc=2",
        "--max-small-latency-us=0.001",
        "--warn-only",
        *QUICK,
    )
    assert done.returncode == EXIT_PASSED, done.stderr
    report = read(done, written)
    assert not report.passed
    assert report.outcome == "below-threshold"


def test_one_rank_reports_a_degenerate_bus_bandwidth_honestly(torch_python: str, tmp_path: Path) -> None:
    done, written = run_script(
        torch_python,
        tmp_path,
        "--backend=gloo",
        "--nproc=1",
        "--max-small-latency-us=1e9",
        "--min-bus-bandwidth-gbps=1e6",
        *QUICK,
    )
    assert done.returncode == EXIT_PASSED, done.stderr
    report = read(done, written)
    assert report.ranks == 1
    assert report.bus_bandwidth_gbps == 0.0
    assert "not judged" in report.message


def test_nccl_without_gpus_is_an_error_not_a_pass(torch_python: str, tmp_path: Path) -> None:
    done, written = run_script(
        torch_python, tmp_path, "--backend=nccl", *QUICK, env={"CUDA_VISIBLE_DEVICES": ""}
    )
    assert done.returncode == EXIT_ERROR, done.stderr
    report = read(done, written)
    assert report.outcome == "error"
    assert not report.passed
    assert "GPU" in report.message
    assert report.env.get("CUDA_VISIBLE_DEVICES") == ""


def test_a_check_that_overruns_its_deadline_is_killed_and_reported(torch_python: str, tmp_path: Path) -> None:
    # One second is less than two ranks need to import torch and meet, so the launcher's deadline fires.
    done, written = run_script(torch_python, tmp_path, "--backend=gloo", "--nproc=2", "--timeout-s=1")
    assert done.returncode == EXIT_ERROR, done.stderr
    report = read(done, written)
    assert report.outcome == "error"
    assert "preflight could not run" in report.message
