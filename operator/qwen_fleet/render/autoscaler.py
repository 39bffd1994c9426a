"""The HorizontalPodAutoscaler: queue depth first, KV-cache usage second, GPU utilisation opt-in.

All three are Pods metrics with AverageValue targets, so the HPA computes
``desired = ceil(sum over pods / target)``: total waiting requests divided by the per-replica target. The HPA
takes the largest recommendation, so a saturated but unqueued fleet still grows on KV-cache usage. Pods that
are still loading the model export no series; the HPA counts such missing pods as 0 when scaling up and as
at-target when scaling down, so they neither inflate a scale-up nor trigger a scale-down.
"""

from __future__ import annotations

from typing import Any

from qwen_fleet.api import QwenInference
from qwen_fleet.api.scaling import ScalingRules
from qwen_fleet.render.common import metadata, number
from qwen_fleet.render.metric_names import GPU_UTIL_METRIC, KV_CACHE_METRIC, QUEUE_METRIC


def _pods_metric(name: str, average: str) -> dict[str, Any]:
    return {"type": "Pods", "pods": {"metric": {"name": name},
                                     "target": {"type": "AverageValue", "averageValue": average}}}


def _milli(value: float) -> str:
    """A quantity for a fraction: 0.8 -> '800m' (the apiserver's canonical form, so no false drift)."""
    milli = round(value * 1000)
    return str(milli // 1000) if milli % 1000 == 0 else f"{milli}m"


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
