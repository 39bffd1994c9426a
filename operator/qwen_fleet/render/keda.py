"""The KEDA ScaledObject (autoscaling.engine keda): the HPA's signals, targets and behavior, through KEDA.

KEDA turns a ScaledObject into an HPA of its own (``keda-hpa-<name>``) whose metrics are External metrics
served by KEDA's metrics apiserver; each Prometheus trigger is one of them. An External metric with an
AverageValue target gives ``desired = ceil(value / target)``, so each query returns the fleet's total: the
sum over its pods of the very per-pod value the chart's prometheus-adapter rules give the HPA
(charts/qwen-fleet/templates/prometheus-adapter-rules.yaml), and the HPA's ``ceil(sum over pods / target)``
is what KEDA's HPA computes too.

- Queue depth: waiting requests summed per pod (all engines of a data-parallel pod), then over the pods.
- KV-cache usage: the fullest engine of each pod, then summed over the pods; target 0-1 like the HPA's.
- Latency targets: each pod's percentile of a vLLM histogram over the last 2 minutes (0 for a serving pod that
  finished no request), summed over the pods; the threshold is the target in seconds.
- GPU utilisation: each pod's GPUs averaged, then summed over the pods. dcgm-exporter's series carry no fleet
  label, so a pod counts when it also exports this fleet's vLLM series (``and on (pod)``): the pods the HPA's
  selector would pick, less any that has not started its API server yet.

What differs, by design of the two paths (docs/autoscaling.md): the HPA's Pods metrics treat a pod without a
sample as 0 when scaling up and as at-target when scaling down; an External metric is one number, so a pod
without a sample simply adds nothing. The KEDA operator queries Prometheus itself (triggers.metadata
serverAddress), so no prometheus-adapter is involved.
"""

from __future__ import annotations

from typing import Any

from qwen_fleet.api import QwenInference
from qwen_fleet.render.autoscaler import behavior_rules, latency_targets, scale_target
from qwen_fleet.render.common import metadata, number
from qwen_fleet.render.metric_names import FLEET_LABEL, GPU_UTIL_SERIES, KV_CACHE_SERIES, QUEUE_SERIES, latency_per_pod
from qwen_fleet.render.scale_to_zero import external_push_trigger, scale_to_zero

# KEDA names the HPA it makes for a ScaledObject so (controllers/keda/hpa.go getHPAName, KEDA v2.21.0), unless
# advanced.horizontalPodAutoscalerConfig.name says otherwise (we never set it).
KEDA_HPA_PREFIX = "keda-hpa-"


def keda_hpa_name(name: str) -> str:
    return KEDA_HPA_PREFIX + name


def fleet_queries(cr: QwenInference) -> dict[str, str]:
    """PromQL per signal, each one number: the sum over the fleet's pods of the adapter rule's per-pod value."""
    fleet = f'namespace="{cr.namespace}",{FLEET_LABEL}="{cr.name}"'
    return {
        "queue-depth": f"sum(sum by (pod) ({QUEUE_SERIES}{{{fleet}}}))",
        "kv-cache-usage": f"sum(max by (pod) ({KV_CACHE_SERIES}{{{fleet}}}))",
        "gpu-utilization": (f'sum(avg by (pod) ({GPU_UTIL_SERIES}{{namespace="{cr.namespace}"}}) '
                            f"and on (pod) {QUEUE_SERIES}{{{fleet}}})"),
    }


def latency_queries(cr: QwenInference) -> dict[str, str]:
    """PromQL per latency target: the sum over the fleet's pods of each pod's percentile (an idle pod's 0), the
    adapter rule's per-pod value, so ceil(value / target) is the HPA's ceil(sum over pods / target)."""
    fleet = f'namespace="{cr.namespace}",{FLEET_LABEL}="{cr.name}"'
    return {name: f"sum({latency_per_pod(series, percentile, fleet, 'pod')})"
            for name, series, percentile, _ in latency_targets(cr)}


def _trigger(name: str, address: str, query: str, threshold: float) -> dict[str, Any]:
    # metricType AverageValue: desired = ceil(value / threshold), as the HPA's AverageValue Pods metrics.
    # ignoreNullValues (KEDA's default, written out): no series yet (no pod serving) reads as 0, not an error.
    return {"type": "prometheus", "name": name, "metricType": "AverageValue",
            "metadata": {"serverAddress": address, "query": query, "threshold": number(threshold),
                         "ignoreNullValues": "true"}}


def render_scaled_object(cr: QwenInference) -> dict[str, Any]:
    auto = cr.spec.autoscaling
    assert auto.keda is not None, "the API requires autoscaling.keda with engine keda"
    address, queries = auto.keda.prometheus_address, fleet_queries(cr)
    triggers = [_trigger("queue-depth", address, queries["queue-depth"], auto.queue_depth.target_per_replica)]
    if auto.kv_cache_usage.enabled:
        triggers.append(_trigger("kv-cache-usage", address, queries["kv-cache-usage"],
                                 auto.kv_cache_usage.target_percent / 100))
    if auto.gpu_utilization.enabled:
        triggers.append(_trigger("gpu-utilization", address, queries["gpu-utilization"],
                                 auto.gpu_utilization.target_percent))
    latency = latency_queries(cr)
    for name, _, _, target in latency_targets(cr):
        triggers.append(_trigger(name, address, latency[name], target))
    spec: dict[str, Any] = {
        "scaleTargetRef": scale_target(cr),
        "minReplicaCount": auto.min_replicas,
        "maxReplicaCount": auto.max_replicas or auto.min_replicas,
    }
    stz = scale_to_zero(cr)
    if stz is not None:
        # KEDA scales to zero when no trigger has been active for cooldownPeriod (each Prometheus trigger is active
        # above 0: a queue or a non-empty KV cache), and a new ScaledObject not before initialCooldownPeriod
        # (pkg/scaling/executor/scale_scaledobjects.go scaleToZeroOrIdle; its default, 0, would take a new fleet
        # to zero at KEDA's first look). The add-on's trigger wakes it (render/scale_to_zero.py).
        spec["cooldownPeriod"] = stz.idle_seconds
        spec["initialCooldownPeriod"] = stz.idle_seconds
        triggers.append(external_push_trigger(cr, stz))
    return {
        "apiVersion": "keda.sh/v1alpha1",
        "kind": "ScaledObject",
        "metadata": metadata(cr),
        "spec": {
            **spec,
            "advanced": {
                # restoreToOriginalReplicaCount is left at KEDA's default, false: deleting the ScaledObject (a switch
                # to engine hpa, autoscaling turned off) leaves the replica count where KEDA's HPA put it, as
                # deleting an HPA does. Not written out: the field is a Go bool with omitempty
                # (apis/keda/v1alpha1/scaledobject_types.go), so KEDA's own full-object Update, when it adds its
                # finalizer and label, drops a false, and the operator would see drift and apply it again.
                "horizontalPodAutoscalerConfig": {"behavior": {
                    "scaleUp": behavior_rules(auto.behavior.scale_up),
                    "scaleDown": behavior_rules(auto.behavior.scale_down)}},
            },
            "triggers": triggers,
        },
    }
