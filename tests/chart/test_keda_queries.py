"""The ScaledObject's Prometheus queries (autoscaling.engine keda) evaluated by the pinned Prometheus itself
(``promtool test rules``, promql_expr_test) on made-up series: each gives the fleet's total of the per-pod value
the chart's prometheus-adapter rules give the HPA. Expected values are worked out by hand below, per pod."""

from __future__ import annotations

import subprocess
from pathlib import Path
from typing import Any

import yaml

from qwen_fleet.api import QwenInference
from qwen_fleet.render.keda import render_scaled_object
from tests.chart.support import one, template
from tests.chart.test_alert_rules import promtool  # noqa: F401 (the fixture: the pinned promtool, built if missing)

FLEET = 'namespace="llm",qwenfleet_io_inference="big"'
# Pod big-a is data-parallel (two engines, two GPUs); big-b has one engine and one GPU; big-c is still loading its
# model (GPU busy, no vLLM series yet). Another fleet's pod and the same fleet name in another namespace must not
# count.
SERIES = [
    ('vllm:num_requests_waiting{namespace="llm",qwenfleet_io_inference="big",pod="big-a",engine="0"}', "3"),
    ('vllm:num_requests_waiting{namespace="llm",qwenfleet_io_inference="big",pod="big-a",engine="1"}', "2"),
    ('vllm:num_requests_waiting{namespace="llm",qwenfleet_io_inference="big",pod="big-b",engine="0"}', "4"),
    ('vllm:num_requests_waiting{namespace="llm",qwenfleet_io_inference="other",pod="other-a",engine="0"}', "100"),
    ('vllm:num_requests_waiting{namespace="team-b",qwenfleet_io_inference="big",pod="big-a",engine="0"}', "100"),
    ('vllm:kv_cache_usage_perc{namespace="llm",qwenfleet_io_inference="big",pod="big-a",engine="0"}', "0.5"),
    ('vllm:kv_cache_usage_perc{namespace="llm",qwenfleet_io_inference="big",pod="big-a",engine="1"}', "0.9"),
    ('vllm:kv_cache_usage_perc{namespace="llm",qwenfleet_io_inference="big",pod="big-b",engine="0"}', "0.3"),
    ('vllm:kv_cache_usage_perc{namespace="llm",qwenfleet_io_inference="other",pod="other-a",engine="0"}', "1"),
    ('DCGM_FI_DEV_GPU_UTIL{namespace="llm",pod="big-a",gpu="0"}', "80"),
    ('DCGM_FI_DEV_GPU_UTIL{namespace="llm",pod="big-a",gpu="1"}', "100"),
    ('DCGM_FI_DEV_GPU_UTIL{namespace="llm",pod="big-b",gpu="0"}', "50"),
    ('DCGM_FI_DEV_GPU_UTIL{namespace="llm",pod="big-c",gpu="0"}', "10"),
    ('DCGM_FI_DEV_GPU_UTIL{namespace="llm",pod="other-a",gpu="0"}', "100"),
    ('DCGM_FI_DEV_GPU_UTIL{namespace="team-b",pod="big-a",gpu="0"}', "100"),
]
# queue: big-a 3+2 (summed per pod), big-b 4 -> 9. KV cache: big-a max(0.5, 0.9), big-b 0.3 -> 1.2.
# GPU: big-a avg(80, 100) = 90, big-b 50 -> 140 (big-c exports no vLLM series yet, so it is not counted).
EXPECTED = {"queue-depth": 9, "kv-cache-usage": 1.2, "gpu-utilization": 140}


def _queries() -> dict[str, str]:
    cr = QwenInference.model_validate({"metadata": {"name": "big", "namespace": "llm"}, "spec": {
        "model": {"name": "Qwen/Qwen3-4B-Instruct-2507"},
        "autoscaling": {"enabled": True, "engine": "keda", "maxReplicas": 8, "gpuUtilization": {"enabled": True},
                        "keda": {"prometheusAddress": "http://prometheus:9090"}}}})
    return {t["name"]: t["metadata"]["query"] for t in render_scaled_object(cr)["spec"]["triggers"]}


def test_promtool_evaluates_each_query_to_the_fleet_total(promtool: Path, tmp_path: Path) -> None:  # noqa: F811
    queries = _queries()
    assert set(queries) == set(EXPECTED)
    tests = {"rule_files": [], "evaluation_interval": "1m", "tests": [{
        "interval": "1m",
        "input_series": [{"series": series, "values": f"{value}x5"} for series, value in SERIES],
        "promql_expr_test": [{"expr": queries[name], "eval_time": "2m", "exp_samples": [{"labels": "{}",
                                                                                           "value": value}]}
                             for name, value in EXPECTED.items()],
    }]}
    (tmp_path / "keda.test.yaml").write_text(yaml.safe_dump(tests, sort_keys=False))
    result = subprocess.run([str(promtool), "test", "rules", "keda.test.yaml"], cwd=tmp_path, capture_output=True,
                            text=True, timeout=120, check=False)
    assert result.returncode == 0, result.stdout + result.stderr
    assert "SUCCESS" in result.stdout + result.stderr


# Latency targets: made-up histograms, worked out by hand. Counters grow by these amounts per minute (cumulative
# buckets). big-a is data-parallel: its two engines together have TTFT 0 <= 0.1 s, 50 <= 0.5 s, 100 <= 1 s (of 100),
# so its p90 is in (0.5, 1]: 0.5 + (90 - 50) / (100 - 50) * 0.5 = 0.9; its ITL 40 <= 0.05 s, 80 <= 0.1 s of 100, so
# its p50 is 0.05 + (50 - 40) / (80 - 40) * 0.05 = 0.0625. big-b: every first token within 0.1 s, p90 = 0.09; no ITL
# series (reads 0: it serves). big-c serves but finished nothing in the window (its counters stand still): 0. big-d
# is still loading (no series at all). Another fleet's pod must not count.
def _buckets(metric: str, labels: str, per_minute: dict[str, int]) -> list[tuple[str, str]]:
    return [(f'{metric}_bucket{{{labels},le="{le}"}}', f"0+{step}x10") for le, step in per_minute.items()]


A0 = 'namespace="llm",qwenfleet_io_inference="big",pod="big-a",engine="0"'
A1 = 'namespace="llm",qwenfleet_io_inference="big",pod="big-a",engine="1"'
B0 = 'namespace="llm",qwenfleet_io_inference="big",pod="big-b",engine="0"'
C0 = 'namespace="llm",qwenfleet_io_inference="big",pod="big-c",engine="0"'
OTHER = 'namespace="llm",qwenfleet_io_inference="other",pod="other-a",engine="0"'
TTFT, ITL = "vllm:time_to_first_token_seconds", "vllm:inter_token_latency_seconds"
LATENCY_SERIES = [
    *_buckets(TTFT, A0, {"0.1": 0, "0.5": 25, "1": 50, "+Inf": 50}),
    *_buckets(TTFT, A1, {"0.1": 0, "0.5": 25, "1": 50, "+Inf": 50}),
    *_buckets(ITL, A0, {"0.01": 0, "0.05": 40, "0.1": 80, "+Inf": 100}),
    *_buckets(TTFT, B0, {"0.1": 100, "0.5": 100, "1": 100, "+Inf": 100}),
    *_buckets(TTFT, C0, {"0.1": 0, "0.5": 0, "1": 0, "+Inf": 0}),
    *_buckets(TTFT, OTHER, {"0.1": 0, "0.5": 0, "1": 0, "+Inf": 100}),
    *[(f"vllm:num_requests_running{{{labels}}}", "1x10") for labels in (A0, A1, B0, C0, OTHER)],
]
ADAPTER_RULES_ON = {"metrics": {"adapterRules": {"enabled": True}}}
PER_POD = {"vllm_time_to_first_token_seconds_p90": {"big-a": 0.9, "big-b": 0.09, "big-c": 0},
           "vllm_inter_token_latency_seconds_p50": {"big-a": 0.0625, "big-b": 0, "big-c": 0}}


def _promtool_test(binary: Path, tmp_path: Path, exprs: list[tuple[str, list[dict[str, Any]]]]) -> None:
    tests = {"rule_files": [], "evaluation_interval": "1m", "tests": [{
        "interval": "1m",
        "input_series": [{"series": series, "values": values} for series, values in LATENCY_SERIES],
        # In microseconds, rounded: promtool compares floats exactly, and 0.0625 comes out 0.06250000000000001.
        "promql_expr_test": [{"expr": f"round(1e6 * ({expr}))", "eval_time": "5m", "exp_samples": [
            {**sample, "value": round(sample["value"] * 1e6)} for sample in samples]} for expr, samples in exprs],
    }]}
    (tmp_path / "latency.test.yaml").write_text(yaml.safe_dump(tests, sort_keys=False))
    result = subprocess.run([str(binary), "test", "rules", "latency.test.yaml"], cwd=tmp_path, capture_output=True,
                            text=True, timeout=120, check=False)
    assert result.returncode == 0, result.stdout + result.stderr


def test_promtool_evaluates_the_adapter_s_latency_rules_per_pod(promtool: Path, tmp_path: Path) -> None:  # noqa: F811
    """The chart's rendered rules, with the adapter's placeholders filled as it fills them for the HPA's request
    (the pods of the fleet's selector, grouped by pod): each pod's percentile, 0 for one that finished nothing."""
    config = one(template(ADAPTER_RULES_ON), "ConfigMap", "-prometheus-adapter-rules")["data"]["config.yaml"]
    rules = {r["name"]["as"]: r["metricsQuery"] for r in yaml.safe_load(config)["rules"]}
    matchers = 'namespace="llm",pod=~"big-a|big-b|big-c|big-d"'
    _promtool_test(promtool, tmp_path, [
        (rules[metric].replace("<<.GroupBy>>", "pod").replace("<<.LabelMatchers>>", matchers),
         [{"labels": f'{{pod="{pod}"}}', "value": value} for pod, value in sorted(values.items())])
        for metric, values in PER_POD.items()])


def test_promtool_evaluates_each_latency_trigger_to_the_sum_of_the_pods_percentiles(promtool: Path,  # noqa: F811
                                                                                    tmp_path: Path) -> None:
    cr = QwenInference.model_validate({"metadata": {"name": "big", "namespace": "llm"}, "spec": {
        "model": {"name": "Qwen/Qwen3-4B-Instruct-2507"},
        "autoscaling": {"enabled": True, "engine": "keda", "maxReplicas": 8,
                        "keda": {"prometheusAddress": "http://prometheus:9090"},
                        "latency": {"timeToFirstToken": {"percentile": 90, "targetSeconds": 0.5},
                                    "interTokenLatency": {"percentile": 50, "targetSeconds": 0.05}}}}})
    queries = {t["name"]: t["metadata"]["query"] for t in render_scaled_object(cr)["spec"]["triggers"]}
    # 0.9 + 0.09 + 0 and 0.0625 + 0 + 0: with targets 0.5 and 0.05, KEDA's HPA asks ceil(0.99 / 0.5) = 2 and
    # ceil(0.0625 / 0.05) = 2 replicas.
    _promtool_test(promtool, tmp_path, [(queries["time-to-first-token"], [{"labels": "{}", "value": 0.99}]),
                                        (queries["inter-token-latency"], [{"labels": "{}", "value": 0.0625}])])
