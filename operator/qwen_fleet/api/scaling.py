"""``spec.autoscaling``, ``spec.monitoring``, ``spec.rollout``: how the fleet grows, is watched and changes."""

from __future__ import annotations

from typing import Literal

from pydantic import Field

from qwen_fleet.api.base import ApiModel, IntOrPercent, Rule, cel_and

# Which autoscaler the operator creates: a HorizontalPodAutoscaler on the custom metrics API (served by
# prometheus-adapter with the chart's rules), or a KEDA ScaledObject whose Prometheus triggers query the same
# series (KEDA then makes and drives its own HPA, keda-hpa-<name>). docs/autoscaling.md compares them.
AutoscalingEngine = Literal["hpa", "keda"]


class ScalingRules(ApiModel):
    """One direction of the HPA's behavior: a stabilization window and a rate limit."""

    stabilization_window_seconds: int = Field(ge=0, le=3600, description="The HPA acts on the most "
                                              "conservative recommendation over this window.")
    pods: int = Field(ge=1, le=1000, description="At most this many pods added or removed per period.")
    period_seconds: int = Field(ge=1, le=1800, description="Length of the rate-limit period.")


def _scale_up() -> ScalingRules:
    # GPU pods take minutes to load a model: add capacity at once, two pods a minute at most.
    return ScalingRules(stabilization_window_seconds=0, pods=2, period_seconds=60)


def _scale_down() -> ScalingRules:
    # The queue reads 0 whenever the fleet keeps up; a long window stops the scale-down/re-saturate flap.
    return ScalingRules(stabilization_window_seconds=600, pods=1, period_seconds=180)


class ScalingBehavior(ApiModel):
    """HPA behavior tuned for slow-starting GPU pods: scale up fast, scale down slowly."""

    scale_up: ScalingRules = Field(default_factory=_scale_up, description="Scale-up rules (default: no "
                                   "window, 2 pods per 60 s).")
    scale_down: ScalingRules = Field(default_factory=_scale_down, description="Scale-down rules (default: "
                                     "600 s window, 1 pod per 180 s).")


class QueueDepthMetric(ApiModel):
    """Primary signal: vLLM's waiting requests (vllm:num_requests_waiting), summed over the fleet."""

    target_per_replica: float = Field(default=5, gt=0, le=10000, description="Waiting requests per "
                                      "replica the HPA aims for: replicas = ceil(total waiting / target).")


class KvCacheUsageMetric(ApiModel):
    """Second signal: KV-cache occupancy (vllm:kv_cache_usage_perc), so a full but unqueued fleet grows."""

    enabled: bool = Field(default=True, description="Scale on KV-cache usage as well.")
    target_percent: float = Field(default=80, gt=0, le=100, description="Average KV-cache usage per "
                                  "replica, in percent.")


class GpuUtilizationMetric(ApiModel):
    """Opt-in signal: DCGM_FI_DEV_GPU_UTIL from dcgm-exporter, averaged over each pod's GPUs."""

    enabled: bool = Field(default=False, description="Also scale on GPU utilisation. Off by default: with "
                          "continuous batching the duty cycle is near 100% at any load.")
    target_percent: float = Field(default=90, gt=0, le=100, description="Average GPU utilisation per "
                                  "replica, in percent.")


class KedaOptions(ApiModel):
    """Settings only the KEDA engine reads."""

    prometheus_address: str = Field(pattern=r"^https?://[^\s]+$", max_length=512, description="URL of the "
                                    "Prometheus that scrapes the fleet (the operator's ServiceMonitor), e.g. "
                                    "http://prometheus-operated.monitoring.svc:9090; KEDA's Prometheus scaler "
                                    "queries it from the KEDA operator's pod.")


class Autoscaling(ApiModel, rules=[
    Rule(cel="!self.enabled || has(self.maxReplicas)",
         check=lambda a: not a.enabled or a.max_replicas is not None,
         message="autoscaling.maxReplicas is required when autoscaling is enabled"),
    Rule(cel="!has(self.maxReplicas) || self.minReplicas <= self.maxReplicas",
         check=lambda a: a.max_replicas is None or a.min_replicas <= a.max_replicas,
         message="autoscaling.minReplicas must not exceed autoscaling.maxReplicas"),
    Rule(cel="self.engine != 'hpa' || self.minReplicas >= 1",
         check=lambda a: a.engine != "hpa" or a.min_replicas >= 1,
         message="autoscaling.minReplicas must be at least 1 with engine hpa: the HorizontalPodAutoscaler "
                 "cannot scale up from zero pods on Pods metrics (vLLM exports none from zero pods)"),
    Rule(cel="self.engine != 'keda' || self.minReplicas >= 1",
         check=lambda a: a.engine != "keda" or a.min_replicas >= 1,
         message="autoscaling.minReplicas 0 (scale to zero) is not supported yet with engine keda: nothing "
                 "would hold the first request while a replica starts; set minReplicas to 1 or more"),
    Rule(cel="!self.enabled || self.engine != 'keda' || has(self.keda)",
         check=lambda a: not a.enabled or a.engine != "keda" or a.keda is not None,
         message="autoscaling.keda.prometheusAddress is required with engine keda: the URL of the Prometheus "
                 "that scrapes the fleet, which KEDA's Prometheus scaler queries"),
]):
    """An autoscaler on vLLM's queue depth and KV-cache usage (and, opt-in, GPU utilisation).

    Engine hpa: a HorizontalPodAutoscaler; needs the metrics adapter rules the chart ships, which expose the
    vLLM series to the custom metrics API. Engine keda: a KEDA ScaledObject with Prometheus triggers on the
    same series, targets and behavior; needs KEDA installed. While enabled, the autoscaler owns the replica
    count and the operator never resets it.
    """

    enabled: bool = Field(default=False, description="Create an autoscaler (engine: which one).")
    engine: AutoscalingEngine = Field(default="hpa", description="hpa: a HorizontalPodAutoscaler reading the "
                                      "custom metrics API (prometheus-adapter with the chart's rules). keda: "
                                      "a KEDA ScaledObject (keda.sh/v1alpha1) with Prometheus triggers on the "
                                      "same signals, targets and behavior; the cluster must serve KEDA's CRD. "
                                      "Never both: switching deletes the old autoscaler before making the new.")
    min_replicas: int = Field(default=1, ge=0, le=1000, description="Fewest replicas (at least 1 for now: "
                              "vLLM exports no queue metric from zero pods, and scale to zero needs a "
                              "component that holds the first request).")
    max_replicas: int | None = Field(default=None, ge=1, le=1000, description="Most replicas.")
    queue_depth: QueueDepthMetric = Field(default_factory=QueueDepthMetric, description="Primary signal: "
                                          "vLLM's waiting requests (vllm:num_requests_waiting), summed over "
                                          "the fleet's pods and averaged per replica.")
    kv_cache_usage: KvCacheUsageMetric = Field(default_factory=KvCacheUsageMetric, description="Second "
                                               "signal: KV-cache occupancy (vllm:kv_cache_usage_perc), so a "
                                               "saturated fleet grows before requests queue.")
    gpu_utilization: GpuUtilizationMetric = Field(default_factory=GpuUtilizationMetric, description="Opt-in "
                                                  "signal: DCGM_FI_DEV_GPU_UTIL from dcgm-exporter, averaged "
                                                  "over each pod's GPUs.")
    behavior: ScalingBehavior = Field(default_factory=ScalingBehavior, description="Scale-up and "
                                      "scale-down pacing.")
    keda: KedaOptions | None = Field(default=None, description="Engine keda: where KEDA reads the metrics "
                                     "(required with engine keda).")


class Monitoring(ApiModel):
    """Prometheus Operator objects for the fleet, made only when their CRDs exist in the cluster."""

    service_monitor: bool = Field(default=True, description="Create a ServiceMonitor for the vLLM "
                                  "/metrics endpoint (skipped when the CRD is absent).")
    prometheus_rule: bool = Field(default=False, description="Create a PrometheusRule with this fleet's "
                                  "alerts (queue backing up, KV cache saturated, at max replicas).")
    scrape_interval: str = Field(default="15s", pattern=r"^[0-9]+(ms|s|m)$", description="Scrape "
                                 "interval of the ServiceMonitor.")


class Rollout(ApiModel, rules=[Rule(
    cel="!(string(self.maxSurge) in ['0', '0%'] && string(self.maxUnavailable) in ['0', '0%'])",
    # cel_and, not `and`: CEL's `&&` is false when either side is, even if the other cannot be read (a
    # maxSurge written 1.0 beside maxUnavailable 1 is admitted).
    check=lambda r: not cel_and(lambda: str(r.max_surge) in ("0", "0%"), lambda: str(r.max_unavailable) in ("0", "0%")),
    message="rollout.maxSurge and rollout.maxUnavailable cannot both be 0 (the rollout could never start)",
)]):
    """How a spec change replaces pods, and how a pod drains."""

    max_surge: IntOrPercent = Field(default=0, description="Extra pods during a rollout. Default 0: GPUs "
                                    "are scarce, so no spare GPU is needed; set 1 (and maxUnavailable 0) "
                                    "for zero-downtime rollouts when a spare GPU exists.")
    max_unavailable: IntOrPercent = Field(default=1, description="Pods that may be down during a rollout.")
    pre_stop_seconds: int = Field(default=10, ge=0, le=600, description="Sleep before SIGTERM so "
                                  "endpoints and load balancers stop sending new requests first.")
