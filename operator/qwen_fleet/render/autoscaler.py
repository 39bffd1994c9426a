"""The HorizontalPodAutoscaler: queue depth first, KV-cache usage second, GPU utilisation and latency targets opt-in.

All three are Pods metrics with AverageValue targets, so the HPA computes
``desired = ceil(sum over pods / target)``: total waiting requests divided by the per-replica target. The HPA
takes the largest recommendation, so a saturated but unqueued fleet still grows on KV-cache usage. Pods that
are still loading the model export no series; the HPA counts such missing pods as 0 when scaling up and as
at-target when scaling down, so they neither inflate a scale-up nor trigger a scale-down.

A latency target is one more Pods metric: each pod's percentile over the last ``LATENCY_WINDOW`` (the chart's
adapter rules, one custom metric per percentile), with the target in seconds as the AverageValue. So
``desired = ceil(sum of the pods' percentiles / target)`` = the replicas times how far the mean pod is above (or
below) its target: proportional control, as for CPU utilisation.
"""

from __future__ import annotations

from typing import Any

from qwen_fleet.api import QwenInference
from qwen_fleet.api.scaling import ScalingRules
from qwen_fleet.render.common import metadata, number
from qwen_fleet.render.metric_names import (
    GPU_UTIL_METRIC,
    ITL_SERIES,
    KV_CACHE_METRIC,
    QUEUE_METRIC,
    TTFT_SERIES,
    latency_metric,
)


def _pods_metric(name: str, average: str) -> dict[str, Any]:
    return {"type": "Pods", "pods": {"metric": {"name": name},
                                     "target": {"type": "AverageValue", "averageValue": average}}}


def _milli(value: float) -> str:
    """A quantity for a fraction: 0.8 -> '800m' (the apiserver's canonical form, so no false drift)."""
    milli = round(value * 1000)
    return str(milli // 1000) if milli % 1000 == 0 else f"{milli}m"


def seconds(value: float) -> str:
    """A quantity for a time in seconds, to the microsecond: 1 -> '1', 0.05 -> '50m', 0.0015 -> '1500u' (the
    apiserver's canonical forms, so no false drift)."""
    micro = round(value * 1_000_000)
    if micro % 1_000_000 == 0:
        return str(micro // 1_000_000)
    return f"{micro // 1000}m" if micro % 1000 == 0 else f"{micro}u"


def latency_targets(cr: QwenInference) -> list[tuple[str, str, float, float]]:
    """(name, histogram, percentile, target seconds) of each latency target the spec sets, TTFT first."""
    latency = cr.spec.autoscaling.latency
    if latency is None:
        return []
    out = []
    for name, series, target in (("time-to-first-token", TTFT_SERIES, latency.time_to_first_token),
                                 ("inter-token-latency", ITL_SERIES, latency.inter_token_latency)):
        if target is not None:
            out.append((name, series, target.percentile, target.target_seconds))
    return out


def behavior_rules(rules: ScalingRules) -> dict[str, Any]:
    return {"stabilizationWindowSeconds": rules.stabilization_window_seconds, "selectPolicy": "Max",
            "policies": [{"type": "Pods", "value": rules.pods, "periodSeconds": rules.period_seconds}]}


def scale_target(cr: QwenInference) -> dict[str, str]:
    # A multi-node replica is an LWS group: its scale subresource counts groups, and its selector
    # (status.hpaPodSelector) picks the leaders, the pods whose API server exports the queue metrics.
    if cr.spec.parallelism.nodes > 1:
        return {"apiVersion": "leaderworkerset.x-k8s.io/v1", "kind": "LeaderWorkerSet", "name": cr.name}
    return {"apiVersion": "apps/v1", "kind": "Deployment", "name": cr.name}


def render_hpa(cr: QwenInference) -> dict[str, Any]:
    auto = cr.spec.autoscaling
    metrics = [_pods_metric(QUEUE_METRIC, _milli(auto.queue_depth.target_per_replica))]
    if auto.kv_cache_usage.enabled:
        metrics.append(_pods_metric(KV_CACHE_METRIC, _milli(auto.kv_cache_usage.target_percent / 100)))
    if auto.gpu_utilization.enabled:
        metrics.append(_pods_metric(GPU_UTIL_METRIC, number(auto.gpu_utilization.target_percent)))
    for _, series, percentile, target in latency_targets(cr):
        metrics.append(_pods_metric(latency_metric(series, percentile), seconds(target)))
    return {
        "apiVersion": "autoscaling/v2",
        "kind": "HorizontalPodAutoscaler",
        "metadata": metadata(cr),
        "spec": {
            "scaleTargetRef": scale_target(cr),
            "minReplicas": auto.min_replicas,
            "maxReplicas": auto.max_replicas or auto.min_replicas,
            "metrics": metrics,
            "behavior": {"scaleUp": behavior_rules(auto.behavior.scale_up),
                         "scaleDown": behavior_rules(auto.behavior.scale_down)},
        },
    }
