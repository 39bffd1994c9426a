"""Properties of the rendered fleet that matter on a GPU node at 3 a.m."""

from __future__ import annotations

from typing import Any

import pytest

from qwen_fleet.api import QwenInference
from qwen_fleet.config import OperatorConfig
from qwen_fleet.plan import make_plan
from qwen_fleet.render import ALL_CAPABILITIES, Capabilities, render_children


def _render(spec: dict[str, Any], caps: Capabilities = ALL_CAPABILITIES) -> dict[str, dict[str, Any]]:
    cr = QwenInference.model_validate({"metadata": {"name": "q", "namespace": "ns", "uid": "u"}, "spec": spec})
    return {c["kind"]: c for c in render_children(cr, make_plan(cr, OperatorConfig()), caps)}


BASE = {"model": {"name": "Qwen/Qwen2.5-7B-Instruct"}, "gpu": {"product": "NVIDIA-H100-80GB-HBM3"}}


def _pod(children: dict[str, dict[str, Any]]) -> dict[str, Any]:
    return dict(children["Deployment"]["spec"]["template"]["spec"])


def test_tensor_parallel_pod_gets_gpus_shm_nccl_env_and_placement() -> None:
    children = _render({**BASE, "parallelism": {"tensor": 4, "pipeline": 2},
                        "nccl": {"ibDisable": True, "p2pDisable": False, "socketIfname": "eth0", "debug": "INFO"}})
    pod = _pod(children)
    (server,) = pod["containers"]
    assert server["resources"]["requests"]["nvidia.com/gpu"] == "8"
    assert server["resources"]["limits"] == server["resources"]["requests"]
    env = {e["name"]: e.get("value") for e in server["env"]}
    assert env["TORCH_NCCL_ASYNC_ERROR_HANDLING"] == "1"
    assert (env["NCCL_IB_DISABLE"], env["NCCL_P2P_DISABLE"], env["NCCL_SOCKET_IFNAME"], env["NCCL_DEBUG"]) == (
        "1", "0", "eth0", "INFO")
    shm = next(v for v in pod["volumes"] if v["name"] == "dshm")
    assert shm["emptyDir"] == {"medium": "Memory", "sizeLimit": "32Gi"}
    assert {"name": "dshm", "mountPath": "/dev/shm"} in server["volumeMounts"]
    assert pod["nodeSelector"] == {"nvidia.com/gpu.product": "NVIDIA-H100-80GB-HBM3"}
    assert {"key": "nvidia.com/gpu", "operator": "Exists", "effect": "NoSchedule"} in pod["tolerations"]
    args = server["args"]
    assert args[args.index("--tensor-parallel-size") + 1] == "4"
    assert args[args.index("--pipeline-parallel-size") + 1] == "2"


def test_preflight_init_container_has_the_servers_nccl_environment_and_gpus() -> None:
    children = _render({**BASE, "parallelism": {"tensor": 2},
                        "nccl": {"ibDisable": True, "env": [{"name": "NCCL_ALGO", "value": "Ring"}],
                                 "preflight": {"enabled": True, "maxSmallMessageLatencyMicroseconds": 40,
                                               "minBusBandwidthGBps": 150}}})
    pod = _pod(children)
    (init,) = pod["initContainers"]
    (server,) = pod["containers"]
    nccl = [e for e in server["env"] if e["name"].startswith(("NCCL_", "TORCH_NCCL_"))]
    assert [e for e in init["env"] if e["name"].startswith(("NCCL_", "TORCH_NCCL_"))] == nccl
    # the rest is where a non-root process writes: the server's own HOME and USER
    assert [e for e in init["env"] if e not in nccl] == [e for e in server["env"] if e["name"] in ("HOME", "USER")]
    assert {e["name"] for e in nccl} >= {"NCCL_IB_DISABLE", "NCCL_ALGO", "TORCH_NCCL_ASYNC_ERROR_HANDLING"}
    assert init["resources"] == server["resources"]
    assert init["image"] == server["image"]
    assert "--max-small-latency-us=40" in init["args"] and "--min-bus-bandwidth-gbps=150" in init["args"]
    assert "--output=/dev/termination-log" in init["args"]
    mounted = {m["mountPath"] for m in init["volumeMounts"]}
    assert init["command"][1].rsplit("/", 1)[0] in mounted
    script = children["ConfigMap"]["data"]["nccl_preflight.py"]
    assert "def main" in script and "torch" in script


def _preflight_opts(init: dict[str, Any]) -> Any:
    """The init container's arguments as the script itself reads them."""
    from qwen_fleet.preflight import nccl_preflight

    return nccl_preflight.build_parser().parse_args(init["args"])


def test_a_gpu_preflight_without_a_latency_bar_gets_the_50_us_one() -> None:
    (init,) = _pod(_render({**BASE, "parallelism": {"tensor": 2}, "nccl": {"preflight": {"enabled": True}}}))[
        "initContainers"]
    opts = _preflight_opts(init)
    assert (opts.backend, opts.nproc, opts.max_small_latency_us) == ("nccl", 0, 50.0)  # nproc 0: one per GPU
    assert opts.large_bytes == 256 * 2**20


CPU_FLEET = {"model": {"name": "Qwen/Qwen2.5-0.5B-Instruct"}, "device": "CPU",
             "engine": {"image": "example.org/vllm-cpu:0.32.0"}, "resources": {"cpu": "2", "memory": "4Gi"}}


def test_a_cpu_preflight_runs_two_gloo_processes_with_the_servers_resources_and_no_latency_bar() -> None:
    children = _render({**CPU_FLEET, "nccl": {"preflight": {"enabled": True}}})
    pod = _pod(children)
    (init,) = pod["initContainers"]
    (server,) = pod["containers"]
    opts = _preflight_opts(init)
    assert (opts.backend, opts.nproc) == ("gloo", 2)
    assert opts.max_small_latency_us == 0 and opts.min_bus_bandwidth_gbps == 0  # reported, not judged
    assert opts.large_bytes == 16 * 2**20
    assert opts.output == "/dev/termination-log"
    assert (init["image"], init["resources"]) == (server["image"], server["resources"])
    assert "nvidia.com/gpu" not in init["resources"]["requests"]
    assert init["terminationMessagePolicy"] == "FallbackToLogsOnError"
    assert "nccl_preflight.py" in children["ConfigMap"]["data"]


def test_a_cpu_preflight_judges_the_bars_the_spec_sets() -> None:
    (init,) = _pod(_render({**CPU_FLEET, "nccl": {"preflight": {
        "enabled": True, "maxSmallMessageLatencyMicroseconds": 2000, "minBusBandwidthGBps": 0.1}}}))[
        "initContainers"]
    opts = _preflight_opts(init)
    assert (opts.backend, opts.max_small_latency_us, opts.min_bus_bandwidth_gbps) == ("gloo", 2000.0, 0.1)


def test_single_gpu_default_shm_and_drain_timing() -> None:
    children = _render({**BASE, "engine": {"shutdownTimeoutSeconds": 45}, "rollout": {"preStopSeconds": 12}})
    pod = _pod(children)
    (server,) = pod["containers"]
    assert next(v for v in pod["volumes"] if v["name"] == "dshm")["emptyDir"]["sizeLimit"] == "1Gi"
    assert server["lifecycle"]["preStop"]["sleep"]["seconds"] == 12
    assert server["args"][server["args"].index("--shutdown-timeout") + 1] == "45"
    assert pod["terminationGracePeriodSeconds"] > 12 + 45
    assert server["startupProbe"]["httpGet"]["path"] == "/health"
    assert server["startupProbe"]["periodSeconds"] * server["startupProbe"]["failureThreshold"] >= 1800
    assert pod["enableServiceLinks"] is False  # a Service named "vllm" would inject VLLM_PORT


@pytest.mark.parametrize("timeout", [60, 1800, 7201, 86400])
def test_probes_wait_patiently_but_see_readiness_within_seconds(timeout: int) -> None:
    """A cold start waits for the probes on top of the engine: the startup probe's period (when it notices the
    engine is up), then the readiness probe's (the kubelet starts it only after startup succeeded). Both short;
    the patience for a download and load stays the spec's startupTimeoutSeconds, and liveness only follows."""
    (server,) = _pod(_render({**BASE, "engine": {"startupTimeoutSeconds": timeout}}))["containers"]
    startup, readiness, liveness = server["startupProbe"], server["readinessProbe"], server["livenessProbe"]
    assert startup["periodSeconds"] + readiness["periodSeconds"] <= 4
    patience = startup["periodSeconds"] * startup["failureThreshold"]
    assert timeout <= patience < timeout + startup["periodSeconds"]
    for probe in (startup, readiness, liveness):
        assert probe["httpGet"] == {"path": "/health", "port": "http"}
        assert "initialDelaySeconds" not in probe  # the startup probe gates the others, not a guessed delay
    # A replica whose /health is slow under load does not leave the Service on one or two late answers.
    assert readiness["periodSeconds"] * readiness["failureThreshold"] >= 15
    assert liveness["periodSeconds"] * liveness["failureThreshold"] >= 60


def test_hf_token_is_referenced_never_inlined() -> None:
    children = _render({**BASE, "model": {"name": "Qwen/Qwen3-8B", "source": {
        "huggingFace": {"tokenSecretRef": {"name": "hf", "key": "token"}}}}})
    (server,) = _pod(children)["containers"]
    token = next(e for e in server["env"] if e["name"] == "HF_TOKEN")
    assert token == {"name": "HF_TOKEN", "valueFrom": {"secretKeyRef": {"name": "hf", "key": "token"}}}


def test_pvc_source_mounts_read_only_and_goes_offline() -> None:
    children = _render({**BASE, "model": {"name": "Qwen/Qwen3-8B", "source": {
        "pvc": {"claimName": "models", "path": "/qwen3-8b"}}}})
    (server,) = _pod(children)["containers"]
    assert server["args"][1] == "/models/qwen3-8b"
    assert {"name": "HF_HUB_OFFLINE", "value": "1"} in server["env"]
    assert {"name": "model", "mountPath": "/models", "readOnly": True} in server["volumeMounts"]


def test_autoscaling_leaves_replicas_to_the_hpa_and_adds_a_pdb() -> None:
    children = _render({**BASE, "autoscaling": {"enabled": True, "minReplicas": 2, "maxReplicas": 6,
                                                "gpuUtilization": {"enabled": True, "targetPercent": 85}}})
    assert "replicas" not in children["Deployment"]["spec"]
    hpa = children["HorizontalPodAutoscaler"]["spec"]
    assert (hpa["minReplicas"], hpa["maxReplicas"]) == (2, 6)
    names = [m["pods"]["metric"]["name"] for m in hpa["metrics"]]
    assert names == ["vllm_num_requests_waiting", "vllm_kv_cache_usage_ratio", "dcgm_gpu_utilization_percent"]
    assert [m["pods"]["target"]["averageValue"] for m in hpa["metrics"]] == ["5", "800m", "85"]
    assert hpa["behavior"]["scaleUp"]["stabilizationWindowSeconds"] == 0
    assert hpa["behavior"]["scaleDown"]["stabilizationWindowSeconds"] == 600
    assert children["PodDisruptionBudget"]["spec"]["maxUnavailable"] == 1


def test_one_fixed_replica_has_no_pdb_and_optional_kinds_follow_capabilities() -> None:
    children = _render(BASE, caps=Capabilities())
    assert set(children) == {"Deployment", "Service"}
    assert children["Deployment"]["spec"]["replicas"] == 1
    with_monitoring = _render({**BASE, "monitoring": {"prometheusRule": True}})
    assert {"ServiceMonitor", "PrometheusRule"} <= set(with_monitoring)


def test_memory_includes_shm_and_kv_offload() -> None:
    children = _render({**BASE, "parallelism": {"tensor": 2}, "resources": {"memory": "64Gi"},
                        "engine": {"kvOffloadGiB": 16}})
    (server,) = _pod(children)["containers"]
    assert server["resources"]["limits"]["memory"] == "88Gi"  # 64 + 8 (shm for 2 GPUs) + 16
    args = server["args"]
    assert args[args.index("--kv-offloading-size") + 1] == "16"
    assert args[args.index("--kv-offloading-backend") + 1] == "native"


def test_a_cpu_fleet_requests_no_gpu_and_stays_off_gpu_nodes() -> None:
    children = _render({"model": {"name": "Qwen/Qwen2.5-0.5B-Instruct"}, "device": "CPU",
                        "engine": {"image": "example.org/vllm-cpu:0.32.0",
                                   "env": [{"name": "VLLM_CPU_KVCACHE_SPACE", "value": "2"}]},
                        "resources": {"cpu": "4", "memory": "8Gi"}})
    pod = _pod(children)
    (server,) = pod["containers"]
    assert server["image"] == "example.org/vllm-cpu:0.32.0"
    assert server["resources"]["requests"] == {"cpu": "4", "memory": "9Gi"}  # 8Gi + the 1Gi /dev/shm
    assert server["resources"]["limits"] == server["resources"]["requests"]
    assert "tolerations" not in pod and "nodeSelector" not in pod
    assert "--gpu-memory-utilization" not in server["args"]
    assert {"name": "VLLM_CPU_KVCACHE_SPACE", "value": "2"} in server["env"]


def test_a_cpu_fleet_without_resources_renders_no_resources_block() -> None:
    pod = _pod(_render({"model": {"name": "Qwen/Qwen2.5-0.5B-Instruct"}, "device": "CPU",
                        "engine": {"image": "example.org/vllm-cpu:0.32.0"}}))
    assert pod["containers"][0]["resources"] == {}
