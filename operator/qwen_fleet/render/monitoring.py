"""Prometheus Operator objects: a ServiceMonitor for /metrics and, on request, this fleet's alerts."""

from __future__ import annotations

from typing import Any

from qwen_fleet.api import QwenInference
from qwen_fleet.render.common import HTTP_PORT_NAME, INSTANCE_LABEL, metadata, selector_labels
from qwen_fleet.render.keda import keda_hpa_name
from qwen_fleet.render.metric_names import FLEET_LABEL, KV_CACHE_SERIES, QUEUE_SERIES


def render_service_monitor(cr: QwenInference) -> dict[str, Any]:
    return {
        "apiVersion": "monitoring.coreos.com/v1",
        "kind": "ServiceMonitor",
        "metadata": metadata(cr),
        "spec": {
            "selector": {"matchLabels": selector_labels(cr)},
            "endpoints": [{"port": HTTP_PORT_NAME, "path": "/metrics",
                           "interval": cr.spec.monitoring.scrape_interval}],
            "podTargetLabels": [INSTANCE_LABEL],
        },
    }


def _selector(cr: QwenInference) -> str:
    return f'namespace="{cr.namespace}",{FLEET_LABEL}="{cr.name}"'


def render_prometheus_rule(cr: QwenInference) -> dict[str, Any]:
    sel = _selector(cr)
    target = cr.spec.autoscaling.queue_depth.target_per_replica
    labels = {"severity": "warning", "qwenfleet_io_inference": cr.name}
    rules: list[dict[str, Any]] = [
        {"alert": "QwenInferenceQueueBackingUp",
         "expr": f"sum({QUEUE_SERIES}{{{sel}}}) / clamp_min(count({QUEUE_SERIES}{{{sel}}}), 1) > {2 * target:g}",
         "for": "10m", "labels": labels,
         "annotations": {"summary": f"{cr.namespace}/{cr.name}: requests are queueing",
                         "description": "Waiting requests per replica stayed above twice the autoscaling "
                                        "target for 10 minutes."}},
        {"alert": "QwenInferenceKVCacheSaturated",
         "expr": f"max({KV_CACHE_SERIES}{{{sel}}}) > 0.95", "for": "10m", "labels": labels,
         "annotations": {"summary": f"{cr.namespace}/{cr.name}: KV cache above 95%",
                         "description": "A replica's KV cache has been nearly full for 10 minutes; expect "
                                        "preemptions. Add replicas, lower maxNumSeqs or use an fp8 KV cache."}},
    ]
    if cr.spec.autoscaling.enabled:
        # The HPA that sets the replica count: ours, or the one KEDA makes for the ScaledObject.
        hpa = keda_hpa_name(cr.name) if cr.spec.autoscaling.engine == "keda" else cr.name
        rules.append({
            "alert": "QwenInferenceAtMaxReplicas",
            "expr": (f'kube_horizontalpodautoscaler_status_current_replicas{{namespace="{cr.namespace}",'
                     f'horizontalpodautoscaler="{hpa}"}} >= kube_horizontalpodautoscaler_spec_max_replicas'
                     f'{{namespace="{cr.namespace}",horizontalpodautoscaler="{hpa}"}}'),
            "for": "15m", "labels": labels,
            "annotations": {"summary": f"{cr.namespace}/{cr.name}: at maxReplicas",
                            "description": "The autoscaler has wanted more replicas than maxReplicas for 15 "
                                           "minutes."}})
    return {
        "apiVersion": "monitoring.coreos.com/v1",
        "kind": "PrometheusRule",
        "metadata": metadata(cr),
        "spec": {"groups": [{"name": f"qwen-fleet.{cr.namespace}.{cr.name}", "rules": rules}]},
    }
