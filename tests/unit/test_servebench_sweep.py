"""The serving benchmark's sweep and recommendation rule, with hand-worked answers (docs/bench-serving.md)."""

from __future__ import annotations

import pytest

from qwen_fleet.servebench.client import Figures
from qwen_fleet.servebench.report import run_sweep
from qwen_fleet.servebench.sweep import Row, Rule, Setting, check_ladder, grid, next_setting, recommend


def figures(out: float, ttft_p99: float = 100.0, failed: int = 0) -> Figures:
    return Figures(completed=10, failed=failed, duration_s=1.0, request_throughput=out / 100,
                   output_throughput=out, total_token_throughput=out * 2, mean_ttft_ms=ttft_p99 / 2,
                   median_ttft_ms=ttft_p99 / 2, p99_ttft_ms=ttft_p99, mean_itl_ms=5.0, p99_itl_ms=9.0,
                   p99_e2el_ms=900.0)


def row(seqs: int, tokens: int, out: float, ttft_p99: float = 100.0, failed: int = 0) -> Row:
    return Row(Setting(seqs, tokens), figures(out, ttft_p99, failed))


def test_grid_is_seqs_major_and_measures_every_pair_once() -> None:
    rule = Rule()
    rows: list[Row] = []
    order = []
    while (s := next_setting("grid", [8, 16], [512, 1024], rows, rule)) is not None:
        order.append((s.max_num_seqs, s.max_num_batched_tokens))
        rows.append(Row(s, figures(1.0)))
    assert order == [(8, 512), (8, 1024), (16, 512), (16, 1024)]


# Output tok/s of a made-up engine that saturates: rises with seqs up to 32, then flat; tokens help at 32 only.
ENGINE = {
    (8, 2048): 100.0, (16, 2048): 180.0, (32, 2048): 250.0, (64, 2048): 255.0, (128, 2048): 256.0,
    (32, 4096): 300.0, (32, 8192): 303.0, (64, 4096): 999.0,
}


def measure_engine(setting: Setting) -> Row:
    return Row(setting, figures(ENGINE[(setting.max_num_seqs, setting.max_num_batched_tokens)]))


def test_climb_raises_seqs_until_flat_then_tokens_at_that_seqs() -> None:
    rows = run_sweep(measure_engine, "climb", [8, 16, 32, 64, 128], [2048, 4096, 8192], Rule(flat_percent=5))
    # 16: +80%, 32: +39%, 64: +2% (flat: stop at 32); tokens at 32: 4096 +20%, 8192 +1% (flat: stop).
    # (128, 2048) is never measured, nor (64, 4096), although the latter would have been the best.
    assert [(r.setting.max_num_seqs, r.setting.max_num_batched_tokens) for r in rows] == [
        (8, 2048), (16, 2048), (32, 2048), (64, 2048), (32, 4096), (32, 8192)]
    rec = recommend(rows, Rule(flat_percent=5))
    # best 303 at (32, 8192); 300 at (32, 4096) is within 5% and smaller.
    assert rec.setting == Setting(32, 4096)


def test_climb_stops_a_walk_at_failed_requests_and_at_the_slo() -> None:
    rule = Rule(flat_percent=5, ttft_p99_slo_ms=500)
    rows = [row(8, 2048, 100), row(16, 2048, 200, failed=1)]
    # seqs walk stopped at 8 (16 failed): the tokens walk starts at 8.
    assert next_setting("climb", [8, 16, 32], [2048, 4096], rows, rule) == Setting(8, 4096)
    rows = [row(8, 2048, 100), row(16, 2048, 200, ttft_p99=600)]
    assert next_setting("climb", [8, 16, 32], [2048, 4096], rows, rule) == Setting(8, 4096)
    rows += [row(8, 4096, 104)]  # +4%: flat
    assert next_setting("climb", [8, 16, 32], [2048, 4096], rows, rule) is None


def test_climb_stops_when_the_first_setting_is_unusable() -> None:
    rows = [Row(Setting(8, 2048), error="refused: engine.maxNumBatchedTokens must be at least ...")]
    assert next_setting("climb", [8, 16], [2048, 4096], rows, Rule()) is None


def test_climb_with_a_zero_throughput_base_counts_any_rise_as_a_gain() -> None:
    rows = [row(1, 64, 0.0), row(2, 64, 1.0)]
    assert next_setting("climb", [1, 2, 4], [64], rows, Rule()) == Setting(4, 64)


def test_recommendation_takes_the_best_within_the_slo_and_no_failures() -> None:
    rows = [row(8, 1024, 100), row(16, 1024, 200), row(32, 1024, 400, ttft_p99=900), row(64, 1024, 500, failed=2)]
    assert recommend(rows, Rule(flat_percent=5, ttft_p99_slo_ms=800)).setting == Setting(16, 1024)
    assert recommend(rows, Rule(flat_percent=5)).setting == Setting(32, 1024)  # no SLO: 900 ms is fine


def test_recommendation_ties_within_flat_percent_go_to_the_smaller_setting() -> None:
    rows = [row(64, 4096, 1000), row(32, 8192, 960), row(32, 4096, 940)]
    # floor at 10%: 900 -> all three tie; smallest is (32, 4096).
    assert recommend(rows, Rule(flat_percent=10)).setting == Setting(32, 4096)
    # floor at 5%: 950 -> (32, 8192) and (64, 4096) tie; (32, 8192) is smaller (fewer sequences first).
    assert recommend(rows, Rule(flat_percent=5)).setting == Setting(32, 8192)
    # no tolerance: the strict best.
    assert recommend(rows, Rule(flat_percent=0)).setting == Setting(64, 4096)


def test_no_recommendation_says_why_for_every_row() -> None:
    rows = [row(8, 1024, 100, failed=1), Row(Setting(16, 1024), error="engine did not start: OOM")]
    rec = recommend(rows, Rule())
    assert rec.setting is None
    assert "maxNumSeqs=8 maxNumBatchedTokens=1024: 1 failed requests" in rec.reason
    assert "engine did not start: OOM" in rec.reason


@pytest.mark.parametrize(("values", "message"), [
    ([], "at least one value"), ([8, 0], "positive"), ([16, 8], "strictly ascending"), ([8, 8], "strictly"),
])
def test_bad_ladders_are_refused_with_a_message(values: list[int], message: str) -> None:
    with pytest.raises(ValueError, match=message):
        check_ladder("--max-num-seqs", values)


def test_bad_rules_are_refused() -> None:
    with pytest.raises(ValueError, match="flat_percent"):
        Rule(flat_percent=-1)
    with pytest.raises(ValueError, match="SLO"):
        Rule(ttft_p99_slo_ms=0)


def test_run_sweep_refuses_a_target_that_measures_something_else() -> None:
    with pytest.raises(RuntimeError, match="when"):
        run_sweep(lambda s: Row(Setting(s.max_num_seqs + 1, s.max_num_batched_tokens)), "grid", [8], [64], Rule())


def test_grid_helper() -> None:
    assert grid([1, 2], [3]) == [Setting(1, 3), Setting(2, 3)]
