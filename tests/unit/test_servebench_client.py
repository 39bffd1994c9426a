"""The client's command line, the parsing of the JSON it saves, and the report built from it.

``fixtures/vllm-bench-serve-0.32.json`` was saved by a real ``vllm bench serve`` of vLLM 0.32 (the CPU engine
venv), started with ``client_args`` through ``LAUNCHER`` against a stand-in server that failed two requests
(hack/bench-serve-fixture.py); its figures are the stand-in's.
"""

from __future__ import annotations

import json
import math
import subprocess
import sys
from pathlib import Path

import pytest

from qwen_fleet.servebench.client import Figures, Workload, client_args, parse_result
from qwen_fleet.servebench.report import Report
from qwen_fleet.servebench.sweep import Row, Rule, Setting

FIXTURE = Path(__file__).parent / "fixtures" / "vllm-bench-serve-0.32.json"


def saved() -> dict[str, object]:
    return dict(json.loads(FIXTURE.read_text()))


def test_a_real_saved_result_parses() -> None:
    raw = saved()
    figures = parse_result(raw)
    assert figures.failed == 2  # the stand-in's two HTTP 500s
    assert figures.completed == raw["num_prompts"] - 2
    assert figures.output_throughput == raw["output_throughput"]
    assert figures.p99_ttft_ms == raw["p99_ttft_ms"]
    assert figures.p99_e2el_ms == raw["p99_e2el_ms"]
    assert figures.duration_s == raw["duration"]
    # the client's own totals agree with its throughput figures
    assert figures.output_throughput == pytest.approx(raw["total_output_tokens"] / raw["duration"])


def test_a_result_without_e2e_percentiles_names_the_flag() -> None:
    raw = saved()
    del raw["p99_e2el_ms"]
    with pytest.raises(ValueError, match=r"p99_e2el_ms.*--percentile-metrics including e2el"):
        parse_result(raw)


def test_a_non_number_is_refused() -> None:
    raw = saved()
    raw["failed"] = None
    with pytest.raises(ValueError, match="failed is None"):
        parse_result(raw)


def test_client_args_parse_with_vllms_names() -> None:
    args = client_args(Workload(input_len=64, output_len=16, num_prompts=8, max_concurrency=4, seed=3),
                       "http://svc:8000", "qwen-tiny", "/models", "/tmp/r", "x.json")
    pairs = dict(zip(args, [*args[1:], None], strict=True))  # each argument -> the one after it
    assert pairs["--random-input-len"] == "64"
    assert pairs["--random-output-len"] == "16"
    assert pairs["--num-prompts"] == "8"
    assert pairs["--max-concurrency"] == "4"
    assert pairs["--seed"] == "3"
    assert pairs["--request-rate"] == "inf"
    assert pairs["--percentile-metrics"] == "ttft,tpot,itl,e2el"
    assert "--ignore-eos" in args
    assert "--save-result" in args


@pytest.mark.parametrize(("kwargs", "message"), [
    ({"input_len": 0}, "input_len"), ({"num_prompts": -1}, "num_prompts"), ({"request_rate": 0}, "request_rate"),
    ({"max_concurrency": 0}, "max_concurrency"),
])
def test_bad_workloads_are_refused(kwargs: dict[str, float], message: str) -> None:
    with pytest.raises(ValueError, match=message):
        Workload(**kwargs)  # type: ignore[arg-type]


def test_report_marks_the_recommended_row_and_writes_json(tmp_path: Path) -> None:
    good = parse_result(saved())
    clean = Figures(**{**good.__dict__, "failed": 0})
    rows = [Row(Setting(2, 1024), good), Row(Setting(8, 1024), clean), Row(Setting(16, 8), error="refused: x")]
    report = Report("test", "grid", Workload(), Rule(), rows)
    md, js = report.write(tmp_path, "t")
    table = [line for line in md.read_text().splitlines() if line.startswith("| ")]
    assert len(table) == 4  # header + 3 rows
    assert "**←**" in table[2] and "**←**" not in table[1]  # (2, 1024) failed 2 requests: not recommended
    assert "— (refused: x)" in table[3]
    doc = json.loads(js.read_text())
    assert doc["recommended"] == {"maxNumSeqs": 8, "maxNumBatchedTokens": 1024}
    assert doc["workload"]["request_rate"] == "inf"
    assert doc["rows"][0]["figures"]["failed"] == 2
    assert doc["rows"][2]["error"] == "refused: x"
    assert math.isclose(doc["rows"][1]["figures"]["output_throughput"], good.output_throughput)


def test_bench_serving_cli_imports_no_controller() -> None:
    code = ("import sys\nfrom qwen_fleet.cli import build_parser\nbuild_parser()\n"
            "import qwen_fleet.servebench.cluster\n"
            "print(sorted(m for m in sys.modules if m == 'kopf' or m.startswith('qwen_fleet.reconcile')))")
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=False, timeout=120)
    assert done.returncode == 0, done.stderr
    assert done.stdout.strip() == "[]"


def test_bench_serving_cli_refuses_a_bad_ladder() -> None:
    from qwen_fleet.cli import main

    assert main(["bench-serving", "fleet", "--max-num-seqs", "32,16"]) == 2
