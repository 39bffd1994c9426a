"""``spec.autoscaling``, ``spec.monitoring``, ``spec.rollout``: how the fleet grows, is watched and changes."""

from __future__ import annotations

from typing import Annotated, Literal

from pydantic import Field

from qwen_fleet.api.base import DNS_LABEL, DNS_SUBDOMAIN, ApiModel, IntOrPercent, Rule, cel_and

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


# The percentiles the chart's prometheus-adapter rules serve as custom metrics (engine hpa: the HPA can only read a
# metric the adapter names, one per percentile); KEDA's triggers carry their own query, so engine keda takes any.
HPA_LATENCY_PERCENTILES = (50, 90, 95, 99)


# prometheus-adapter serves custom metrics in thousandths (pkg/custom-provider/provider.go, NewMilliQuantity), so a
# finer target could never be told from 0.
MIN_TARGET_SECONDS = 0.001


class LatencyTarget(ApiModel, rules=[
    # Not the schema's `minimum: 0.001`: the apiserver compares a JSON integer with int64(minimum), which admits 0.
    Rule(cel=f"self.targetSeconds >= {MIN_TARGET_SECONDS}",
         check=lambda t: t.target_seconds >= MIN_TARGET_SECONDS,
         message="targetSeconds must be at least 0.001 (1 ms): prometheus-adapter serves latencies to the "
                 "millisecond, so a finer target could never be told from 0"),
]):
    """A percentile of one of vLLM's latency histograms and the value it should stay under."""

    percentile: float = Field(default=90, gt=0, lt=100, description="Which percentile of the histogram, over the "
                              "last 2 minutes of each replica's requests. Engine hpa: 50, 90, 95 or 99 (the "
                              "chart's adapter rules serve those); engine keda: any in (0, 100).")
    target_seconds: float = Field(gt=0, le=3600, description="The percentile each replica should stay "
                                  "under, in seconds (at least 1 ms). Above it the fleet grows in proportion: "
                                  "replicas = ceil(sum over replicas of their percentile / target).")


def _any_target(t: LatencyTargets) -> bool:
    return t.time_to_first_token is not None or t.inter_token_latency is not None


class LatencyTargets(ApiModel, rules=[
    Rule(cel="has(self.timeToFirstToken) || has(self.interTokenLatency)", check=_any_target,
         message="autoscaling.latency needs timeToFirstToken or interTokenLatency (or both)"),
]):
    """Latency targets from vLLM's own histograms: scale up while a replica's percentile is above its target, and
    let a scale-down through only when it is far enough below (docs/autoscaling.md, "Latency targets")."""

    time_to_first_token: LatencyTarget | None = Field(default=None, description="Time to the first token "
                                                      "(vllm:time_to_first_token_seconds): queueing plus prefill, "
                                                      "what an interactive user waits before text appears.")
    inter_token_latency: LatencyTarget | None = Field(default=None, description="Time between two output tokens "
                                                      "of a request (vllm:inter_token_latency_seconds): how fast "
                                                      "text streams; it grows with the decode batch.")


def _hpa_percentiles(a: Autoscaling) -> bool:
    if a.engine != "hpa" or a.latency is None:
        return True
    targets = (a.latency.time_to_first_token, a.latency.inter_token_latency)
    return all(t is None or t.percentile in HPA_LATENCY_PERCENTILES for t in targets)


_HPA_PERCENTILE_LIST = ", ".join(f"{p}.0" for p in HPA_LATENCY_PERCENTILES)  # a number field is a double in CEL
_HPA_PERCENTILE_CEL = " && ".join(f"(!has(self.latency.{f}) || self.latency.{f}.percentile in [{_HPA_PERCENTILE_LIST}])"
                                  for f in ("timeToFirstToken", "interTokenLatency"))


class KedaOptions(ApiModel):
    """Settings only the KEDA engine reads."""

    prometheus_address: str = Field(pattern=r"^https?://[^\s]+$", max_length=512, description="URL of the "
                                    "Prometheus that scrapes the fleet (the operator's ServiceMonitor), e.g. "
                                    "http://prometheus-operated.monitoring.svc:9090; KEDA's Prometheus scaler "
                                    "queries it from the KEDA operator's pod.")


# The KEDA HTTP add-on (github.com/kedacore/http-add-on v0.15.0) as its Helm chart installs it: the interceptor's proxy
# Service and the external scaler's gRPC Service, both in the add-on's namespace (config/interceptor/proxy-service.yaml,
# config/scaler/service.yaml, with the chart's keda-add-ons-http- prefix).
HTTP_ADD_ON_NAMESPACE = "keda"
INTERCEPTOR_SERVICE = "keda-add-ons-http-interceptor-proxy"
INTERCEPTOR_PORT = 8080
SCALER_SERVICE = "keda-add-ons-http-external-scaler"
SCALER_PORT = 9090
# A vLLM replica never serves sooner than this after it is asked for: scheduling, the image, the weights, the
# engine's warm-up (CUDA graphs). A hold shorter than that answers 504 to the first request of every cold start.
MIN_HOLD_SECONDS = 60
# An idle period shorter than this gives away a GPU whose replica takes minutes to get back.
MIN_IDLE_SECONDS = 60
HOSTNAME = r"^(\*\.)?[a-z0-9]([-a-z0-9]*[a-z0-9])?(\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*$"


class HttpAddOn(ApiModel):
    """Where the KEDA HTTP add-on runs; the defaults are its Helm chart's (namespace keda)."""

    namespace: str = Field(default=HTTP_ADD_ON_NAMESPACE, max_length=63, pattern=DNS_LABEL,
                           description="Namespace of the add-on's interceptor and external scaler.")
    interceptor_service: str = Field(default=INTERCEPTOR_SERVICE, max_length=63, pattern=DNS_LABEL,
                                     description="The interceptor's proxy Service, which clients reach the fleet "
                                     "through.")
    interceptor_port: int = Field(default=INTERCEPTOR_PORT, ge=1, le=65535, description="Port of the interceptor's "
                                  "proxy Service (plain HTTP).")
    scaler_service: str = Field(default=SCALER_SERVICE, max_length=63, pattern=DNS_LABEL,
                                description="The add-on's external scaler Service (gRPC), which KEDA asks whether "
                                "requests are waiting.")
    scaler_port: int = Field(default=SCALER_PORT, ge=1, le=65535, description="Port of the external scaler "
                             "Service.")
    cluster_domain: str = Field(default="cluster.local", max_length=253, pattern=DNS_SUBDOMAIN,
                                description="The cluster's DNS domain: the fleet's <name>-proxy Service is an "
                                "ExternalName for <interceptorService>.<namespace>.svc.<clusterDomain>.")


class ScaleToZero(ApiModel):
    """Scale an idle fleet to zero replicas; the KEDA HTTP add-on's interceptor holds the requests that arrive
    meanwhile and KEDA starts a replica for them (docs/autoscaling.md, "Scale to zero")."""

    idle_seconds: int = Field(default=600, ge=MIN_IDLE_SECONDS, le=86400, description="How long the fleet has "
                              "no request in the interceptor, no queue and an empty KV cache before it goes to "
                              "zero (KEDA's cooldownPeriod; also initialCooldownPeriod, so a new fleet serves this "
                              "long before its first scale to zero).")
    hold_timeout_seconds: int = Field(default=600, ge=MIN_HOLD_SECONDS, le=3600, description="How long the "
                                      "interceptor holds a request while the fleet has no ready replica (its "
                                      "readiness timeout); then it answers 504. At least 60 s: no vLLM replica "
                                      "serves sooner. At most an hour: clients and load balancers in front give "
                                      "up long before.")
    hosts: list[Annotated[str, Field(max_length=253, pattern=HOSTNAME)]] = Field(
        default_factory=list, max_length=16, description="More Host names the interceptor routes to this fleet "
        "(e.g. the host of an Ingress in front of the interceptor; *.example.com wildcards allowed), besides "
        "the in-cluster names of the fleet's <name>-proxy Service.")
    http_add_on: HttpAddOn = Field(default_factory=HttpAddOn, description="Where the KEDA HTTP add-on runs.")


class Autoscaling(ApiModel, rules=[
    Rule(cel="!self.enabled || has(self.maxReplicas)",
         check=lambda a: not a.enabled or a.max_replicas is not None,
         message="autoscaling.maxReplicas is required when autoscaling is enabled"),
    Rule(cel="!has(self.maxReplicas) || self.minReplicas <= self.maxReplicas",
         check=lambda a: a.max_replicas is None or a.min_replicas <= a.max_replicas,
         message="autoscaling.minReplicas must not exceed autoscaling.maxReplicas"),
    Rule(cel="self.engine != 'hpa' || self.minReplicas >= 1",
         check=lambda a: a.engine != "hpa" or a.min_replicas >= 1,
         message="autoscaling.minReplicas 0 needs engine keda (and scaleToZero): the HorizontalPodAutoscaler "
                 "cannot scale up from zero pods on Pods metrics (vLLM exports none from zero pods), and nothing "
                 "would hold the first request while a replica starts"),
    Rule(cel="self.minReplicas >= 1 || has(self.scaleToZero)",
         check=lambda a: a.min_replicas >= 1 or a.scale_to_zero is not None,
         message="autoscaling.minReplicas 0 needs autoscaling.scaleToZero: scale to zero is only safe with a "
                 "component that holds the first request while a replica starts (the KEDA HTTP add-on's "
                 "interceptor); `scaleToZero: {}` takes the defaults (idle 600 s, hold 600 s)"),
    Rule(cel="!has(self.scaleToZero) || self.minReplicas == 0",
         check=lambda a: a.scale_to_zero is None or a.min_replicas == 0,
         message="autoscaling.scaleToZero is set but autoscaling.minReplicas is not 0: set minReplicas to 0 to "
                 "scale an idle fleet to zero, or remove scaleToZero"),
    Rule(cel="!has(self.scaleToZero) || self.engine == 'keda'",
         check=lambda a: a.scale_to_zero is None or a.engine == "keda",
         message="autoscaling.scaleToZero needs engine keda: the HorizontalPodAutoscaler cannot scale from zero "
                 "pods (vLLM exports no metric from zero pods) and nothing would hold the first request; KEDA "
                 "wakes the fleet when the KEDA HTTP add-on's interceptor holds a request for it"),
    Rule(cel="!has(self.scaleToZero) || self.enabled",
         check=lambda a: a.scale_to_zero is None or a.enabled,
         message="autoscaling.scaleToZero needs autoscaling.enabled: true (without an autoscaler the fleet runs "
                 "spec.replicas and never scales to zero)"),
    Rule(cel="!has(self.latency) || self.enabled",
         check=lambda a: a.latency is None or a.enabled,
         message="autoscaling.latency needs autoscaling.enabled: true (latency targets are signals of the "
                 "autoscaler; without one the fleet runs spec.replicas)"),
    Rule(cel="self.engine != 'hpa' || !has(self.latency) || (" + _HPA_PERCENTILE_CEL + ")",
         check=_hpa_percentiles,
         message="autoscaling.latency: with engine hpa a percentile must be 50, 90, 95 or 99, the ones the chart's "
                 "prometheus-adapter rules serve as custom metrics; engine keda takes any percentile"),
    Rule(cel="!self.enabled || self.engine != 'keda' || has(self.keda)",
         check=lambda a: not a.enabled or a.engine != "keda" or a.keda is not None,
         message="autoscaling.keda.prometheusAddress is required with engine keda: the URL of the Prometheus "
                 "that scrapes the fleet, which KEDA's Prometheus scaler queries"),
]):
    """An autoscaler on vLLM's queue depth and KV-cache usage (and, opt-in, GPU utilisation and latency targets).

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
    min_replicas: int = Field(default=1, ge=0, le=1000, description="Fewest replicas. 0 scales an idle fleet to "
                              "zero: needs engine keda and scaleToZero (the KEDA HTTP add-on holds the first "
                              "request while a replica starts).")
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
    latency: LatencyTargets | None = Field(default=None, description="Latency targets (time to first token, "
                                           "inter-token latency) as more signals, from vLLM's histograms; the "
                                           "queue stays the fast signal.")
    behavior: ScalingBehavior = Field(default_factory=ScalingBehavior, description="Scale-up and "
                                      "scale-down pacing.")
    keda: KedaOptions | None = Field(default=None, description="Engine keda: where KEDA reads the metrics "
                                     "(required with engine keda).")
    scale_to_zero: ScaleToZero | None = Field(default=None, description="With minReplicas 0: when an idle fleet "
                                              "goes to zero and how long a request is held while it comes back "
                                              "(engine keda and the KEDA HTTP add-on v0.15+).")


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
