"""Names of the metrics the autoscaler uses: the vLLM/DCGM series, and what the metrics adapter calls them.

The chart's prometheus-adapter rules expose exactly these custom-metric names; a test checks both agree and
that the source series exist on a real vLLM server.
"""

QUEUE_SERIES = "vllm:num_requests_waiting"
KV_CACHE_SERIES = "vllm:kv_cache_usage_perc"  # a 0-1 fraction despite the name
RUNNING_SERIES = "vllm:num_requests_running"
GPU_UTIL_SERIES = "DCGM_FI_DEV_GPU_UTIL"  # percent, one series per GPU

QUEUE_METRIC = "vllm_num_requests_waiting"
KV_CACHE_METRIC = "vllm_kv_cache_usage_ratio"
GPU_UTIL_METRIC = "dcgm_gpu_utilization_percent"

# Prometheus label that carries the fleet name: the ServiceMonitor's podTargetLabels copies the pod label
# qwenfleet.io/inference, sanitised.
FLEET_LABEL = "qwenfleet_io_inference"

# Latency histograms (vLLM 0.32, vllm/v1/metrics/loggers.py), read through their _bucket series.
TTFT_SERIES = "vllm:time_to_first_token_seconds"
ITL_SERIES = "vllm:inter_token_latency_seconds"
# The window each replica's percentile is computed over (rate of the _bucket series): 8 scrapes at the
# ServiceMonitor's default 15 s interval, so a percentile rests on enough finished requests to be steady, and a
# latency rise shows within a minute or two (the queue is the fast signal). The chart's adapter rules use the same.
LATENCY_WINDOW = "2m"


def latency_metric(series: str, percentile: float) -> str:
    """The custom metric the chart's adapter rules serve for a percentile of a histogram:
    (vllm:time_to_first_token_seconds, 90) -> vllm_time_to_first_token_seconds_p90."""
    return f"{series.replace(':', '_')}_p{percentile:g}"


def quantile(percentile: float) -> str:
    """histogram_quantile's first argument for a percentile: 90 -> '0.9', 99.9 -> '0.999'."""
    return f"{round(percentile / 100, 12):.12g}"


def latency_per_pod(series: str, percentile: float, matchers: str, group_by: str) -> str:
    """Each pod's percentile of a latency histogram over LATENCY_WINDOW; 0 for a serving pod that finished no
    request in the window (histogram_quantile of no observations is NaN: ``>= 0`` drops it, and the ``or`` puts a
    0 for every pod that exports vllm:num_requests_running). A pod still loading its model exports neither and has
    no value. ``matchers`` and ``group_by``: the adapter's <<.LabelMatchers>> and <<.GroupBy>>, or a fleet's."""
    return (f"histogram_quantile({quantile(percentile)}, sum by (le, {group_by}) "
            f"(rate({series}_bucket{{{matchers}}}[{LATENCY_WINDOW}]))) >= 0 "
            f"or 0 * sum by ({group_by}) ({RUNNING_SERIES}{{{matchers}}})")


def signal_of(metric: str) -> str | None:
    """The signal (the ScaledObject's trigger name) an HPA metric carries: vllm_num_requests_waiting ->
    queue-depth, vllm_time_to_first_token_seconds_p90 -> time-to-first-token; None for a metric not ours."""
    fixed = {QUEUE_METRIC: "queue-depth", KV_CACHE_METRIC: "kv-cache-usage", GPU_UTIL_METRIC: "gpu-utilization"}
    if metric in fixed:
        return fixed[metric]
    for series, signal in ((TTFT_SERIES, "time-to-first-token"), (ITL_SERIES, "inter-token-latency")):
        if metric.startswith(series.replace(":", "_") + "_p"):
            return signal
    return None
