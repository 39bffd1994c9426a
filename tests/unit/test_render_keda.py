"""autoscaling.engine keda: the ScaledObject, against values written from the spec and from the chart's
prometheus-adapter rules (the per-pod values the HPA reads), not from the code under test."""

from __future__ import annotations

import copy
import re
from pathlib import Path
from typing import Any

from qwen_fleet.api import QwenInference
from qwen_fleet.config import OperatorConfig
from qwen_fleet.plan import make_plan
from qwen_fleet.render import ALL_CAPABILITIES, render_children
from qwen_fleet.render.stamp import RENDERED_HASH_ANNOTATION

ROOT = Path(__file__).resolve().parents[2]
ADAPTER_RULES = ROOT / "charts" / "qwen-fleet" / "templates" / "prometheus-adapter-rules.yaml"
PROM = "http://prometheus-operated.monitoring.svc:9090"
SPEC: dict[str, Any] = {
    "model": {"name": "Qwen/Qwen3-4B-Instruct-2507"}, "gpu": {"product": "NVIDIA-A10G"},
    "autoscaling": {"enabled": True, "engine": "keda", "minReplicas": 2, "maxReplicas": 6,
                    "queueDepth": {"targetPerReplica": 4}, "kvCacheUsage": {"targetPercent": 85},
                    "gpuUtilization": {"enabled": True, "targetPercent": 95},
                    "behavior": {"scaleUp": {"stabilizationWindowSeconds": 30, "pods": 3, "periodSeconds": 90},
                                 "scaleDown": {"stabilizationWindowSeconds": 900, "pods": 1, "periodSeconds": 300}},
                    "keda": {"prometheusAddress": PROM}}}
FLEET = 'namespace="llm",qwenfleet_io_inference="big"'


def children(spec: dict[str, Any], name: str = "big") -> dict[str, dict[str, Any]]:
    cr = QwenInference.model_validate({"metadata": {"name": name, "namespace": "llm", "uid": "u-1"},
                                       "spec": copy.deepcopy(spec)})
    return {c["kind"]: c for c in render_children(cr, make_plan(cr, OperatorConfig()), ALL_CAPABILITIES)}


def test_engine_keda_renders_a_scaled_object_and_no_hpa() -> None:
    out = children(SPEC)
    assert "HorizontalPodAutoscaler" not in out
    scaled = out["ScaledObject"]
    assert scaled["apiVersion"] == "keda.sh/v1alpha1"
    assert scaled["metadata"]["name"] == "big" and scaled["metadata"]["namespace"] == "llm"
    assert scaled["metadata"]["ownerReferences"][0]["kind"] == "QwenInference"
    assert RENDERED_HASH_ANNOTATION in scaled["metadata"]["annotations"]
    assert scaled["spec"] == {
        "scaleTargetRef": {"apiVersion": "apps/v1", "kind": "Deployment", "name": "big"},
        "minReplicaCount": 2,
        "maxReplicaCount": 6,
        "advanced": {
            "horizontalPodAutoscalerConfig": {"behavior": {
                "scaleUp": {"stabilizationWindowSeconds": 30, "selectPolicy": "Max",
                            "policies": [{"type": "Pods", "value": 3, "periodSeconds": 90}]},
                "scaleDown": {"stabilizationWindowSeconds": 900, "selectPolicy": "Max",
                              "policies": [{"type": "Pods", "value": 1, "periodSeconds": 300}]}}},
        },
        "triggers": [
            {"type": "prometheus", "name": "queue-depth", "metricType": "AverageValue",
             "metadata": {"serverAddress": PROM, "threshold": "4", "ignoreNullValues": "true",
                          "query": f"sum(sum by (pod) (vllm:num_requests_waiting{{{FLEET}}}))"}},
            {"type": "prometheus", "name": "kv-cache-usage", "metricType": "AverageValue",
             "metadata": {"serverAddress": PROM, "threshold": "0.85", "ignoreNullValues": "true",
                          "query": f"sum(max by (pod) (vllm:kv_cache_usage_perc{{{FLEET}}}))"}},
            {"type": "prometheus", "name": "gpu-utilization", "metricType": "AverageValue",
             "metadata": {"serverAddress": PROM, "threshold": "95", "ignoreNullValues": "true",
                          "query": 'sum(avg by (pod) (DCGM_FI_DEV_GPU_UTIL{namespace="llm"}) and on (pod) '
                                   f"vllm:num_requests_waiting{{{FLEET}}})"}},
        ],
    }


def test_keda_and_hpa_share_targets_bounds_and_behavior() -> None:
    """The same spec with engine hpa: the HPA's min/max and behavior are the ScaledObject's, and each trigger's
    threshold is the HPA metric's averageValue (0.85 is the HPA's 850m)."""
    hpa_spec = copy.deepcopy(SPEC)
    hpa_spec["autoscaling"]["engine"] = "hpa"
    hpa = children(hpa_spec)["HorizontalPodAutoscaler"]["spec"]
    scaled = children(SPEC)["ScaledObject"]["spec"]
    assert (hpa["minReplicas"], hpa["maxReplicas"]) == (scaled["minReplicaCount"], scaled["maxReplicaCount"])
    assert hpa["behavior"] == scaled["advanced"]["horizontalPodAutoscalerConfig"]["behavior"]
    assert [m["pods"]["target"]["averageValue"] for m in hpa["metrics"]] == ["4", "850m", "95"]
    assert [t["metadata"]["threshold"] for t in scaled["triggers"]] == ["4", "0.85", "95"]


def _adapter_per_pod_queries() -> dict[str, str]:
    """series -> the per-pod PromQL the chart's prometheus-adapter rules give the HPA, for this fleet's pods."""
    text = ADAPTER_RULES.read_text()
    out = {}
    for series, query in re.findall(r"seriesQuery: '\{__name__=\"([^\"]+)\".*?metricsQuery: ([^\n]+)", text, re.S):
        if series.startswith("{{"):
            continue  # the latency rules' loop: tests/unit/test_autoscaling_latency.py
        out[series] = query.strip().replace("<<.GroupBy>>", "pod")
    assert set(out) == {"vllm:num_requests_waiting", "vllm:kv_cache_usage_perc", "DCGM_FI_DEV_GPU_UTIL"}, out
    return out


def test_each_query_sums_the_adapter_rule_s_per_pod_value_over_the_fleet() -> None:
    """KEDA's External metric with an AverageValue target gives ceil(value / target); the HPA's Pods metric gives
    ceil(sum of the per-pod values / target). So each query must be sum(<the adapter's per-pod query>)."""
    rules = _adapter_per_pod_queries()
    queries = {t["name"]: t["metadata"]["query"] for t in children(SPEC)["ScaledObject"]["spec"]["triggers"]}
    assert queries["queue-depth"] == "sum(" + rules["vllm:num_requests_waiting"].replace(
        "<<.LabelMatchers>>", FLEET) + ")"
    assert queries["kv-cache-usage"] == "sum(" + rules["vllm:kv_cache_usage_perc"].replace(
        "<<.LabelMatchers>>", FLEET) + ")"
    # dcgm-exporter's series have no fleet label: the fleet's pods are those exporting its vLLM series.
    gpu = rules["DCGM_FI_DEV_GPU_UTIL"].replace("<<.LabelMatchers>>", 'namespace="llm"')
    assert queries["gpu-utilization"] == f"sum({gpu} and on (pod) vllm:num_requests_waiting{{{FLEET}}})"


def test_kv_cache_and_gpu_triggers_follow_their_switches() -> None:
    spec = copy.deepcopy(SPEC)
    spec["autoscaling"]["kvCacheUsage"] = {"enabled": False}
    spec["autoscaling"]["gpuUtilization"] = {"enabled": False}
    (trigger,) = children(spec)["ScaledObject"]["spec"]["triggers"]
    assert trigger["name"] == "queue-depth"


def test_a_multi_node_fleet_scales_its_leaderworkerset() -> None:
    spec = {**copy.deepcopy(SPEC), "gpu": {"product": "NVIDIA-H100-80GB-HBM3"},
            "parallelism": {"pipeline": 2, "nodes": 2}}
    assert children(spec)["ScaledObject"]["spec"]["scaleTargetRef"] == {
        "apiVersion": "leaderworkerset.x-k8s.io/v1", "kind": "LeaderWorkerSet", "name": "big"}


def test_at_max_replicas_alert_watches_keda_s_hpa() -> None:
    spec = {**copy.deepcopy(SPEC), "monitoring": {"prometheusRule": True}}
    rules = children(spec)["PrometheusRule"]["spec"]["groups"][0]["rules"]
    (at_max,) = [r for r in rules if r["alert"] == "QwenInferenceAtMaxReplicas"]
    assert 'horizontalpodautoscaler="keda-hpa-big"' in at_max["expr"]
    assert 'horizontalpodautoscaler="big"' not in at_max["expr"]


def test_engine_defaults_to_hpa_and_keda_options_are_ignored_while_autoscaling_is_off() -> None:
    cr = QwenInference.model_validate({"metadata": {"name": "a", "namespace": "n"},
                                       "spec": {"model": {"name": "Qwen/Qwen3-4B-Instruct-2507"}}})
    assert cr.spec.autoscaling.engine == "hpa" and cr.spec.autoscaling.keda is None
    spec = copy.deepcopy(SPEC)
    spec["autoscaling"]["enabled"] = False
    out = children(spec)
    assert "ScaledObject" not in out and "HorizontalPodAutoscaler" not in out
