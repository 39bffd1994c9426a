"""Replicas for a daily volume (plan/daily.py, `qwen-fleet plan --requests-per-day`): figures worked by hand."""

from __future__ import annotations

import pytest

from qwen_fleet.cli import main
from qwen_fleet.plan.daily import (
    DailyPlanError,
    DailyWork,
    ReplicaThroughput,
    allowed_concurrency,
    format_daily_plan,
    plan_daily,
)

SEED_002 = DailyWork(requests_per_day=100_000, prompt_tokens=2_000, output_tokens=200)


def test_seed_002_with_prefill_and_decode_stated() -> None:
    # per request: 2,000 / 4,000 = 0.5 s of prefill + 200 / 400 = 0.5 s of decode = 1.0 s of one replica
    # a day: 100,000 x 1.0 s = 100,000 replica-seconds; window 24 h = 86,400 s
    # replicas = ceil(100,000 / 86,400) = ceil(1.157...) = 2; busy 100,000 / (2 x 86,400) = 0.5787...
    plan = plan_daily(SEED_002, ReplicaThroughput(output_tokens_per_second=400, prefill_tokens_per_second=4_000))
    assert plan.replica_seconds == pytest.approx(100_000.0)
    assert plan.replicas == 2
    assert plan.window_utilization == pytest.approx(0.5787, abs=1e-4)
    assert plan.notes == ()


def test_a_shorter_window_needs_more_replicas() -> None:
    # same 100,000 replica-seconds in 8 h = 28,800 s: ceil(100,000 / 28,800) = ceil(3.47...) = 4
    work = DailyWork(requests_per_day=100_000, prompt_tokens=2_000, output_tokens=200, window_hours=8)
    plan = plan_daily(work, ReplicaThroughput(output_tokens_per_second=400, prefill_tokens_per_second=4_000))
    assert plan.replicas == 4


def test_decode_only_is_a_lower_bound_and_says_so() -> None:
    # 100,000 x 200 / 400 = 50,000 s < 86,400 s: one replica; the prompt's time is left out, with a note
    plan = plan_daily(SEED_002, ReplicaThroughput(output_tokens_per_second=400))
    assert plan.replica_seconds == pytest.approx(50_000.0)
    assert plan.replicas == 1
    assert any("prefill time not counted" in n for n in plan.notes)


def test_exact_fit_does_not_round_up() -> None:
    # 86,400 requests x 100 output tokens / 100 tokens/s = 86,400 s = exactly one 24 h window: 1 replica, 100%
    work = DailyWork(requests_per_day=86_400, prompt_tokens=0, output_tokens=100)
    plan = plan_daily(work, ReplicaThroughput(output_tokens_per_second=100))
    assert (plan.replicas, plan.window_utilization) == (1, pytest.approx(1.0))


def test_prompt_only_work_needs_only_prefill() -> None:
    # embeddings-like: 1,000,000 x 500 prompt tokens / 10,000 tokens/s = 50,000 s: 1 replica
    work = DailyWork(requests_per_day=1_000_000, prompt_tokens=500, output_tokens=0)
    assert plan_daily(work, ReplicaThroughput(prefill_tokens_per_second=10_000)).replicas == 1


@pytest.mark.parametrize(("throughput", "flag"), [
    (ReplicaThroughput(), "--output-tokens-per-second-per-replica and/or --prefill-tokens-per-second-per-replica"),
    (ReplicaThroughput(prefill_tokens_per_second=4_000), "--output-tokens-per-second-per-replica"),
])
def test_refused_without_the_throughput_it_needs(throughput: ReplicaThroughput, flag: str) -> None:
    with pytest.raises(DailyPlanError, match=flag):
        plan_daily(SEED_002, throughput)


@pytest.mark.parametrize("work", [
    DailyWork(requests_per_day=0, prompt_tokens=1, output_tokens=1),
    DailyWork(requests_per_day=1, prompt_tokens=0, output_tokens=0),
    DailyWork(requests_per_day=1, prompt_tokens=1, output_tokens=1, window_hours=0),
])
def test_bad_work_refused(work: DailyWork) -> None:
    with pytest.raises(DailyPlanError):
        plan_daily(work, ReplicaThroughput(output_tokens_per_second=1, prefill_tokens_per_second=1))


def test_concurrency_is_the_smaller_of_max_num_seqs_and_the_kv_cache() -> None:
    # 103,088 KV tokens // (2,000 + 200) = 46 (46 x 2,200 = 101,200; 47 x 2,200 = 103,400 > 103,088)
    assert allowed_concurrency(max_num_seqs=256, kv_cache_tokens=103_088, prompt_tokens=2_000, output_tokens=200) == 46
    assert allowed_concurrency(max_num_seqs=32, kv_cache_tokens=103_088, prompt_tokens=2_000, output_tokens=200) == 32
    # 2,200 tokens > max_model_len 2,048: not one sequence runs
    assert allowed_concurrency(max_num_seqs=256, kv_cache_tokens=103_088, prompt_tokens=2_000, output_tokens=200,
                               max_model_len=2_048) == 0


def test_per_sequence_rate_and_plausibility() -> None:
    # 400 tokens/s over 46 sequences = 8.695... tokens/s each: plausible
    ok = plan_daily(SEED_002, ReplicaThroughput(output_tokens_per_second=400), concurrency=46)
    assert ok.tokens_per_second_per_sequence == pytest.approx(8.6957, abs=1e-4)
    assert ok.warnings == ()
    # 50,000 tokens/s over 46 sequences = 1,087 tokens/s each, above 1,000 (1 ms a step): flagged
    fast = plan_daily(SEED_002, ReplicaThroughput(output_tokens_per_second=50_000), concurrency=46)
    assert fast.warnings and "1,087 tokens/s per sequence" in fast.warnings[0]
    # a KV cache that cannot hold one 2,200-token sequence: flagged
    none = plan_daily(SEED_002, ReplicaThroughput(output_tokens_per_second=400), concurrency=0)
    assert none.warnings and "cannot hold one sequence" in none.warnings[0]


def test_format_names_replicas_and_gpus() -> None:
    plan = plan_daily(SEED_002, ReplicaThroughput(output_tokens_per_second=400, prefill_tokens_per_second=4_000),
                      concurrency=46)
    text = "\n".join(format_daily_plan(plan, gpus_per_replica=2))
    # 2 replicas x 2 GPUs = 4 GPUs; 100,000 s = 27.8 replica-hours
    assert "replicas needed: 2 (4 GPU(s))" in text
    assert "replica-hours of work: 27.8" in text


PLAN = ["plan", "--model", "Qwen/Qwen2.5-7B-Instruct", "--gpu", "a10g", "--max-model-len", "8192",
        "--requests-per-day", "100000", "--prompt-tokens", "2000", "--output-tokens", "200"]


def test_cli_refuses_without_throughput(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(PLAN) == 2
    err = capsys.readouterr().err
    assert "--output-tokens-per-second-per-replica" in err and "--prefill-tokens-per-second-per-replica" in err


def test_cli_answers_with_stated_throughput(capsys: pytest.CaptureFixture[str]) -> None:
    rc = main([*PLAN, "--output-tokens-per-second-per-replica", "400", "--prefill-tokens-per-second-per-replica",
               "4000"])
    out = capsys.readouterr().out
    assert rc == 0
    assert "replicas needed: 2 (2 GPU(s))" in out  # 100,000 s / 86,400 s -> 2 replicas of 1 GPU
    assert "concurrency a replica allows:" in out


def test_cli_warns_when_a_request_is_longer_than_the_context(capsys: pytest.CaptureFixture[str]) -> None:
    args = [a if a != "8192" else "2048" for a in PLAN]  # 2,000 + 200 tokens > max_model_len 2,048
    assert main([*args, "--output-tokens-per-second-per-replica", "400"]) == 1
    assert "cannot hold one sequence of 2200 tokens" in capsys.readouterr().out


def test_cli_needs_token_counts(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["plan", "--model", "Qwen/Qwen2.5-7B-Instruct", "--gpu", "a10g", "--requests-per-day", "10"]) == 2
    assert "--prompt-tokens and --output-tokens" in capsys.readouterr().err
