"""spec.autoscaling.latency: latency targets as HPA Pods metrics and as KEDA Prometheus triggers, with the
status's leading signal. Expected objects and queries are written out here from the spec and from the metric
names vLLM 0.32 exports (FACTS.md), not from the renderer."""

from __future__ import annotations

import copy
import re
from pathlib import Path
from typing import Any

import pytest
from pydantic import ValidationError

from qwen_fleet.api import QwenInference
from qwen_fleet.config import OperatorConfig
from qwen_fleet.plan import make_plan
from qwen_fleet.reconcile.status import Observed, Outcome, compute_status, leading_signal
from qwen_fleet.render import ALL_CAPABILITIES, render_children

ROOT = Path(__file__).resolve().parents[2]
ADAPTER_RULES = ROOT / "charts" / "qwen-fleet" / "templates" / "prometheus-adapter-rules.yaml"
PROM = "http://prometheus-operated.monitoring.svc:9090"
LATENCY = {"timeToFirstToken": {"percentile": 90, "targetSeconds": 1.5},
           "interTokenLatency": {"percentile": 99, "targetSeconds": 0.05}}
SPEC: dict[str, Any] = {
    "model": {"name": "Qwen/Qwen3-4B-Instruct-2507"}, "gpu": {"product": "NVIDIA-A10G"},
    "autoscaling": {"enabled": True, "minReplicas": 1, "maxReplicas": 4, "latency": LATENCY}}
FLEET = 'namespace="llm",qwenfleet_io_inference="chat"'


def _cr(spec: dict[str, Any]) -> QwenInference:
    return QwenInference.model_validate({"metadata": {"name": "chat", "namespace": "llm", "uid": "u-1"},
                                         "spec": copy.deepcopy(spec)})


def children(spec: dict[str, Any]) -> dict[str, dict[str, Any]]:
    cr = _cr(spec)
    return {c["kind"]: c for c in render_children(cr, make_plan(cr, OperatorConfig()), ALL_CAPABILITIES)}


def _keda(spec: dict[str, Any]) -> dict[str, Any]:
    out = copy.deepcopy(spec)
    out["autoscaling"].update(engine="keda", keda={"prometheusAddress": PROM})
    return out


def _pods(name: str, average: str) -> dict[str, Any]:
    return {"type": "Pods", "pods": {"metric": {"name": name},
                                     "target": {"type": "AverageValue", "averageValue": average}}}


def test_the_hpa_reads_one_pods_metric_per_latency_target_after_queue_and_kv_cache() -> None:
    metrics = children(SPEC)["HorizontalPodAutoscaler"]["spec"]["metrics"]
    assert metrics == [_pods("vllm_num_requests_waiting", "5"), _pods("vllm_kv_cache_usage_ratio", "800m"),
                       _pods("vllm_time_to_first_token_seconds_p90", "1500m"),
                       _pods("vllm_inter_token_latency_seconds_p99", "50m")]


@pytest.mark.parametrize(("seconds", "quantity"), [(2, "2"), (0.25, "250m"), (0.0015, "1500u"), (0.001, "1m")])
def test_a_target_in_seconds_is_the_apiservers_canonical_quantity(seconds: float, quantity: str) -> None:
    spec = copy.deepcopy(SPEC)
    spec["autoscaling"]["latency"] = {"timeToFirstToken": {"targetSeconds": seconds}}
    metrics = children(spec)["HorizontalPodAutoscaler"]["spec"]["metrics"]
    assert metrics[-1] == _pods("vllm_time_to_first_token_seconds_p90", quantity)  # percentile 90 by default


def _per_pod(series: str, quantile: str, matchers: str, group: str) -> str:
    return (f"histogram_quantile({quantile}, sum by (le, {group}) (rate({series}_bucket{{{matchers}}}[2m]))) >= 0 "
            f"or 0 * sum by ({group}) (vllm:num_requests_running{{{matchers}}})")


def test_keda_has_one_trigger_per_latency_target_summing_each_pods_percentile() -> None:
    triggers = children(_keda(SPEC))["ScaledObject"]["spec"]["triggers"]
    assert [t["name"] for t in triggers] == ["queue-depth", "kv-cache-usage", "time-to-first-token",
                                             "inter-token-latency"]
    assert triggers[2] == {"type": "prometheus", "name": "time-to-first-token", "metricType": "AverageValue",
                           "metadata": {"serverAddress": PROM, "threshold": "1.5", "ignoreNullValues": "true",
                                        "query": "sum(" + _per_pod("vllm:time_to_first_token_seconds", "0.9", FLEET,
                                                                   "pod") + ")"}}
    assert triggers[3]["metadata"]["threshold"] == "0.05"
    assert triggers[3]["metadata"]["query"] == "sum(" + _per_pod("vllm:inter_token_latency_seconds", "0.99", FLEET,
                                                                 "pod") + ")"


def test_keda_takes_any_percentile() -> None:
    spec = _keda(SPEC)
    spec["autoscaling"]["latency"] = {"interTokenLatency": {"percentile": 99.9, "targetSeconds": 0.1}}
    (trigger,) = [t for t in children(spec)["ScaledObject"]["spec"]["triggers"] if t["name"] == "inter-token-latency"]
    assert trigger["metadata"]["query"].startswith("sum(histogram_quantile(0.999, ")


def test_the_chart_serves_each_percentile_the_hpa_may_ask_for_with_the_keda_per_pod_query() -> None:
    """The template's loop, read as text: the four percentiles, both histograms, and the per-pod query of the KEDA
    trigger with the adapter's placeholders (tests/chart/test_chart_render.py checks the rendered rules)."""
    text = ADAPTER_RULES.read_text()
    assert 'list "vllm:time_to_first_token_seconds" "vllm:inter_token_latency_seconds"' in text
    assert '(list "50" "0.5") (list "90" "0.9") (list "95" "0.95") (list "99" "0.99")' in text
    (query,) = re.findall(r"metricsQuery: (histogram_quantile[^\n]+)", text)
    assert query == _per_pod("{{ $series }}", "{{ index $p 1 }}", "<<.LabelMatchers>>", "<<.GroupBy>>")


def _refusal(spec: dict[str, Any]) -> str:
    with pytest.raises(ValidationError) as err:
        _cr(spec)
    return str(err.value)


@pytest.mark.parametrize(("latency", "engine", "words"), [
    ({"timeToFirstToken": {"percentile": 0, "targetSeconds": 1}}, "hpa", "greater than 0"),
    ({"timeToFirstToken": {"percentile": 100, "targetSeconds": 1}}, "keda", "less than 100"),
    ({"interTokenLatency": {"targetSeconds": 0}}, "hpa", "greater than 0"),
    ({"interTokenLatency": {"targetSeconds": -1}}, "keda", "greater than 0"),
    ({"interTokenLatency": {"targetSeconds": 0.0009}}, "keda", "targetSeconds must be at least 0.001 (1 ms)"),
    ({}, "hpa", "autoscaling.latency needs timeToFirstToken or interTokenLatency"),
    ({"timeToFirstToken": {"percentile": 99.9, "targetSeconds": 1}}, "hpa", "with engine hpa a percentile must be"),
    ({"interTokenLatency": {"percentile": 75, "targetSeconds": 1}}, "hpa", "with engine hpa a percentile must be"),
])
def test_bad_latency_targets_are_refused(latency: dict[str, Any], engine: str, words: str) -> None:
    spec = _keda(SPEC) if engine == "keda" else copy.deepcopy(SPEC)
    spec["autoscaling"]["latency"] = latency
    assert words in _refusal(spec)


def test_latency_targets_need_autoscaling_enabled() -> None:
    spec = {"model": SPEC["model"], "autoscaling": {"latency": LATENCY}}
    assert "autoscaling.latency needs autoscaling.enabled: true" in _refusal(spec)


def _hpa(currents: dict[str, str], targets: dict[str, str] | None = None) -> dict[str, Any]:
    targets = targets or {"vllm_num_requests_waiting": "5", "vllm_kv_cache_usage_ratio": "800m",
                          "vllm_time_to_first_token_seconds_p90": "1"}
    return {"kind": "HorizontalPodAutoscaler", "metadata": {"name": "chat"},
            "spec": {"metrics": [_pods(m, t) for m, t in targets.items()]},
            "status": {"currentReplicas": 2, "desiredReplicas": 3, "conditions": [], "currentMetrics": [
                {"type": "Pods", "pods": {"metric": {"name": m}, "current": {"averageValue": v}}}
                for m, v in currents.items()]}}


@pytest.mark.parametrize(("currents", "leader"), [
    # ratios 4/5, 0.6/0.8, 1.4/1: latency leads
    ({"vllm_num_requests_waiting": "4", "vllm_kv_cache_usage_ratio": "600m",
      "vllm_time_to_first_token_seconds_p90": "1400m"}, "time-to-first-token"),
    # 12/5 beats 1.4/1: the queue leads
    ({"vllm_num_requests_waiting": "12", "vllm_kv_cache_usage_ratio": "600m",
      "vllm_time_to_first_token_seconds_p90": "1400m"}, "queue-depth"),
    # everything below target: the one least below still leads (it is what holds the replicas)
    ({"vllm_num_requests_waiting": "0", "vllm_kv_cache_usage_ratio": "700m",
      "vllm_time_to_first_token_seconds_p90": "300m"}, "kv-cache-usage"),
    # an idle fleet: all zero, no leader
    ({"vllm_num_requests_waiting": "0", "vllm_kv_cache_usage_ratio": "0",
      "vllm_time_to_first_token_seconds_p90": "0"}, None),
    # the HPA has read nothing yet
    ({}, None),
])
def test_the_leading_signal_is_the_metric_with_the_highest_current_to_target_ratio(currents: dict[str, str],
                                                                                   leader: str | None) -> None:
    assert leading_signal(_hpa(currents)) == leader


def test_the_status_names_the_leading_signal() -> None:
    cr = _cr(SPEC)
    hpa = _hpa({"vllm_num_requests_waiting": "1", "vllm_kv_cache_usage_ratio": "500m",
                "vllm_time_to_first_token_seconds_p90": "2"})
    st = compute_status(None, 1, Outcome.applied(), make_plan(cr, OperatorConfig()), Observed(autoscaler=hpa),
                        "2026-12-03T00:00:00Z")
    assert st["autoscaling"] == {"engine": "hpa", "hpaName": "chat", "currentReplicas": 2, "desiredReplicas": 3,
                                 "leadingSignal": "time-to-first-token", "message": ""}
