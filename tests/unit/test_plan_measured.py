"""`plan --requests-per-day --throughput-from FILE`: a measured throughput closes measure -> plan -> apply.

Figures are worked by hand in the comments; the file in the last tests is the repository's own bench-serving run
on the CPU engine (bench/results/serving-cpu-tiny.json).
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from qwen_fleet.cli import main
from qwen_fleet.plan.daily import DailyWork, ReplicaThroughput, plan_daily
from qwen_fleet.plan.measured import MeasurementError, measured_throughput

ROOT = Path(__file__).resolve().parents[2]
TINY_RUN = ROOT / "bench" / "results" / "serving-cpu-tiny.json"


def report(**over: Any) -> dict[str, Any]:
    doc: dict[str, Any] = {
        "target": "QwenInference team/chat",
        "workload": {"input_len": 2000, "output_len": 200},
        "context": {"replicas": 2},
        "rows": [
            {"maxNumSeqs": 32, "maxNumBatchedTokens": 4096,
             "figures": {"request_throughput": 3.0, "output_throughput": 600.0, "failed": 0}},
            {"maxNumSeqs": 64, "maxNumBatchedTokens": 4096,
             "figures": {"request_throughput": 4.0, "output_throughput": 800.0, "failed": 0}},
        ],
        "recommended": {"maxNumSeqs": 64, "maxNumBatchedTokens": 4096},
        "reason": "highest output tokens/s",
    }
    doc.update(over)
    return doc


def test_a_report_gives_the_recommended_rows_figures_per_replica() -> None:
    found = measured_throughput(report(), "r.json")
    # the recommended row: 4 requests/s over 2 replicas -> one replica spends 2 / 4 = 0.5 s per request
    assert found.seconds_per_request == pytest.approx(0.5)
    assert found.output_tokens_per_second_per_replica == pytest.approx(400.0)
    assert found.setting == "maxNumSeqs=64, maxNumBatchedTokens=4096"
    assert found.shape_mismatch(2000, 200) is None
    assert found.shape_mismatch(2150, 190) is None  # within 10%


def test_the_daily_plan_uses_the_measured_time_per_request() -> None:
    found = measured_throughput(report(), "r.json")
    throughput = ReplicaThroughput(output_tokens_per_second=found.output_tokens_per_second_per_replica,
                                   seconds_per_request=found.seconds_per_request, measured="r.json")
    plan = plan_daily(DailyWork(requests_per_day=400_000, prompt_tokens=2000, output_tokens=200), throughput)
    # 400,000 x 0.5 s = 200,000 replica-seconds; a day is 86,400 s -> ceil(2.31) = 3 replicas, 77% busy
    assert plan.replica_seconds == pytest.approx(200_000)
    assert plan.replicas == 3
    assert plan.window_utilization == pytest.approx(200_000 / (3 * 86_400))
    assert any("measured: r.json" in note for note in plan.notes)
    # stated figures would have added prefill and decode: not done for a measurement (it holds both)
    assert not any("prefill time not counted" in note for note in plan.notes)


def test_the_replicas_flag_overrides_the_reports_context() -> None:
    assert measured_throughput(report(), "r.json", replicas=1).seconds_per_request == pytest.approx(0.25)
    no_context = report(context={})
    assert measured_throughput(no_context, "r.json").replicas == 1


def test_another_shape_is_refused_with_the_command_that_measures_it() -> None:
    found = measured_throughput(report(), "r.json")
    why = found.shape_mismatch(8000, 200)
    assert why is not None
    assert "prompt tokens 8,000 vs 2,000 measured" in why
    assert "output tokens" not in why  # only the length that differs is named
    assert "bench-serving FLEET --input-len 8000 --output-len 200" in why


@pytest.mark.parametrize(("doc", "words"), [
    (report(recommended=None, reason="every setting failed"), "recommended no setting (every setting failed)"),
    (report(rows=[{"maxNumSeqs": 64, "maxNumBatchedTokens": 4096,
                   "figures": {"request_throughput": 4.0, "output_throughput": 800.0, "failed": 3}}]),
     "failed 3 request(s)"),
    (report(rows=[]), "no figures for the recommended setting"),
    (report(context={"replicas": 0}), "context.replicas is 0"),
    ({"hello": 1}, "neither a qwen-fleet bench-serving report"),
    ([1, 2], "not a JSON object"),
])
def test_files_that_cannot_plan_say_why(doc: Any, words: str) -> None:
    with pytest.raises(MeasurementError) as err:
        measured_throughput(doc, "r.json")
    assert words in str(err.value)


def test_a_vllm_bench_serve_result_is_one_replica() -> None:
    raw = {"model_id": "Qwen/Qwen3-4B", "completed": 64, "failed": 0, "total_input_tokens": 8192,
           "total_output_tokens": 4096, "request_throughput": 3.2, "output_throughput": 204.8}
    found = measured_throughput(raw, "vllm.json")
    # 8192 / 64 = 128 prompt tokens, 4096 / 64 = 64 output tokens a request; 1 / 3.2 = 0.3125 s per request
    assert (found.prompt_tokens, found.output_tokens) == (128, 64)
    assert found.seconds_per_request == pytest.approx(0.3125)
    assert found.setting is None


PLAN = ["plan", "--model", "Qwen/Qwen2.5-7B-Instruct", "--gpu", "a10g", "--max-model-len", "8192",
        "--requests-per-day", "10000000", "--prompt-tokens", "128", "--output-tokens", "64"]


def test_cli_plans_from_the_repositorys_own_bench_serving_run(capsys: pytest.CaptureFixture[str]) -> None:
    rc = main([*PLAN, "--throughput-from", str(TINY_RUN)])
    out = capsys.readouterr().out
    assert rc == 0, out
    # that run recommends maxNumSeqs 16 / maxNumBatchedTokens 128: 40.938 requests/s on one engine, so
    # 10,000,000 requests take 10,000,000 / 40.938 = 244,272 s = 67.9 replica-hours -> ceil(2.83) = 3 replicas
    assert "per replica (measured): 40.94 requests/s, output 2,620 tokens/s" in out
    assert "replica-hours of work: 67.9; replicas needed: 3" in out
    assert "at maxNumSeqs=16, maxNumBatchedTokens=128 (give the fleet that engine setting)" in out


def test_cli_refuses_a_measurement_of_another_shape(capsys: pytest.CaptureFixture[str]) -> None:
    args = [a if a != "128" else "2000" for a in PLAN]
    assert main([*args, "--throughput-from", str(TINY_RUN)]) == 2
    err = capsys.readouterr().err
    assert "prompt tokens 2,000 vs 128 measured" in err
    assert "--input-len 2000 --output-len 64" in err


def test_cli_refuses_both_a_measurement_and_stated_figures(capsys: pytest.CaptureFixture[str],
                                                           tmp_path: Path) -> None:
    assert main([*PLAN, "--throughput-from", str(TINY_RUN), "--output-tokens-per-second-per-replica", "9"]) == 2
    assert "give one or the other" in capsys.readouterr().err
    assert main([*PLAN, "--output-tokens-per-second-per-replica", "9", "--measured-replicas", "2"]) == 2
    assert "--measured-replicas goes with --throughput-from" in capsys.readouterr().err
    broken = tmp_path / "broken.json"
    broken.write_text("{not json")
    assert main([*PLAN, "--throughput-from", str(broken)]) == 2
    assert f"cannot read {broken}" in capsys.readouterr().err
    assert main([*PLAN, "--throughput-from", str(tmp_path / "absent.json")]) == 2
    assert "No such file" in capsys.readouterr().err


def test_the_bench_file_is_what_the_test_above_reads() -> None:
    # the figures quoted above are the file's own (a guard against the file being re-run without this test)
    doc = json.loads(TINY_RUN.read_text())
    row = next(r for r in doc["rows"] if (r["maxNumSeqs"], r["maxNumBatchedTokens"]) == (16, 128))
    assert round(row["figures"]["request_throughput"], 3) == 40.938


def test_bench_serving_records_the_ready_replicas_it_measured() -> None:
    from qwen_fleet.servebench.cli import _replicas

    assert _replicas({"status": {"readyReplicas": 3}}) == {"replicas": 3}
    assert _replicas({"status": {}}) == {}  # not known: the plan then assumes 1 and says so in its note
    assert _replicas({"status": {"readyReplicas": True}}) == {}
