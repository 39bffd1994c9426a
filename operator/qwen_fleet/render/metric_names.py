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
