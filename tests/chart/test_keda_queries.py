"""The ScaledObject's Prometheus queries (autoscaling.engine keda) evaluated by the pinned Prometheus itself
(``promtool test rules``, promql_expr_test) on made-up series: each gives the fleet's total of the per-pod value
the chart's prometheus-adapter rules give the HPA. Expected values are worked out by hand below, per pod."""

from __future__ import annotations

import subprocess
from pathlib import Path

import yaml

from qwen_fleet.api import QwenInference
from qwen_fleet.render.keda import render_scaled_object
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
