"""The vLLM Deployment: GPUs, NCCL environment, /dev/shm, probes patient enough for a model load, drain."""

from __future__ import annotations

import copy
import math
from typing import Any

from qwen_fleet.api import QwenInference
from qwen_fleet.plan import HF_HOME, MODEL_MOUNT, Plan
from qwen_fleet.preflight.report import SCRIPT_MOUNT_PATH, SCRIPT_NAME, preflight_command
from qwen_fleet.render.common import (
    CONTAINER_NAME,
    HTTP_PORT_NAME,
    metadata,
    pod_labels,
    selector_labels,
)
from qwen_fleet.render.engine_args import SERVER_COMMAND, engine_args
from qwen_fleet.render.security import (
    container_security_context,
    pod_security_context,
    user_env,
    writable_mounts,
    writable_volumes,
)

PREFLIGHT_CONTAINER = "nccl-preflight"
PREFLIGHT_MOUNT = SCRIPT_MOUNT_PATH.rsplit("/", 1)[0]
PREFLIGHT_SCRIPT = SCRIPT_NAME
GPU_TOLERATION = {"key": "nvidia.com/gpu", "operator": "Exists", "effect": "NoSchedule"}
DRAIN_MARGIN_SECONDS = 15  # termination grace beyond preStop + vLLM's shutdown timeout


def preflight_config_map_name(cr: QwenInference) -> str:
    return f"{cr.name}-nccl-preflight"


def model_cache_claim_name(cr: QwenInference) -> str:
    return f"{cr.name}-model-cache"


def _flag(value: bool) -> str:
    return "1" if value else "0"


def nccl_env(cr: QwenInference) -> list[dict[str, Any]]:
    """NCCL/torch.distributed variables, identical in the server and the preflight container."""
    nccl = cr.spec.nccl
    env: list[dict[str, Any]] = [
        {"name": "TORCH_NCCL_ASYNC_ERROR_HANDLING", "value": _flag(nccl.async_error_handling)}]
    if nccl.debug:
        env.append({"name": "NCCL_DEBUG", "value": nccl.debug})
    if nccl.ib_disable is not None:
        env.append({"name": "NCCL_IB_DISABLE", "value": _flag(nccl.ib_disable)})
    if nccl.p2p_disable is not None:
        env.append({"name": "NCCL_P2P_DISABLE", "value": _flag(nccl.p2p_disable)})
    if nccl.socket_ifname:
        env.append({"name": "NCCL_SOCKET_IFNAME", "value": nccl.socket_ifname})
    env += [env_var(v) for v in nccl.env]
    return env


def env_var(var: Any) -> dict[str, Any]:
    out: dict[str, Any] = {"name": var.name}
    if var.value is not None:
        out["value"] = var.value
    if var.value_from is not None:
        out["valueFrom"] = var.value_from.model_dump(by_alias=True, exclude_none=True)
    return out


# Engine settings the operator sets by default; an engine.env entry of the same name replaces ours.
# VLLM_V1_OUTPUT_PROC_CHUNK_SIZE: the API server's output loop yields to the event loop only between chunks of
# this many request outputs of one engine step (vLLM's default 128). When the engine steps faster than the
# API server turns outputs into responses, a step holds fewer outputs than a chunk and the loop never yields:
# /metrics, /health and new requests wait until the burst has drained, so every scrape sees an idle engine
# and the queue-depth autoscaler reads 0 under load. 4 makes it yield within any batch of more than 4.
# docs/vllm-contract.md ("Metrics under load") has the measurements.
ENGINE_ENV_DEFAULTS: tuple[tuple[str, str], ...] = (("VLLM_V1_OUTPUT_PROC_CHUNK_SIZE", "4"),)


# ModelScope's cache (snapshot_download's default cache_dir) on the same volume as Hugging Face's, so the cache
# claim and the prefetch Job serve both sources.
MODELSCOPE_CACHE = f"{HF_HOME}/modelscope"


def _secret_env(name: str, ref: Any) -> dict[str, Any]:
    # Referenced, never copied: the token value never passes through the operator.
    return {"name": name, "valueFrom": {"secretKeyRef": {"name": ref.name, "key": ref.key}}}


def hub_env(cr: QwenInference) -> list[dict[str, Any]]:
    """Where the weights come from and where they are kept: the same in the engine and the prefetch Job."""
    source = cr.spec.model.source
    env: list[dict[str, Any]] = []
    if source.hugging_face is not None:
        if source.hugging_face.endpoint:
            env.append({"name": "HF_ENDPOINT", "value": source.hugging_face.endpoint})
        if source.hugging_face.token_secret_ref is not None:
            env.append(_secret_env("HF_TOKEN", source.hugging_face.token_secret_ref))
    elif source.model_scope is not None:
        env.append({"name": "MODELSCOPE_CACHE", "value": MODELSCOPE_CACHE})
        if source.model_scope.domain:
            env.append({"name": "MODELSCOPE_DOMAIN", "value": source.model_scope.domain})
        if source.model_scope.token_secret_ref is not None:
            env.append(_secret_env("MODELSCOPE_API_TOKEN", source.model_scope.token_secret_ref))
    return env


def prefetched(cr: QwenInference) -> bool:
    """The weights are in the cache claim before the engine starts (model.cache.prefetch)."""
    cache = cr.spec.model.cache
    return cache is not None and cache.prefetch.enabled and cr.spec.model.source.downloads


def _server_env(cr: QwenInference) -> list[dict[str, Any]]:
    source = cr.spec.model.source
    mine = {v.name for v in cr.spec.engine.env}
    env: list[dict[str, Any]] = [*user_env(), {"name": "HF_HOME", "value": HF_HOME}]
    env += [{"name": name, "value": value} for name, value in ENGINE_ENV_DEFAULTS if name not in mine]
    if cr.spec.serving.api_key_secret_ref is not None:
        env.append(_secret_env("VLLM_API_KEY", cr.spec.serving.api_key_secret_ref))
    # Weights on a filled claim or fetched by the prefetch Job: never reach out to a hub (HF_HUB_OFFLINE also
    # makes vLLM's ModelScope download local_files_only, weight_utils.maybe_download_from_modelscope).
    if source.pvc is not None or prefetched(cr):
        env.append({"name": "HF_HUB_OFFLINE", "value": "1"})
    if source.model_scope is not None:
        env.append({"name": "VLLM_USE_MODELSCOPE", "value": "True"})  # vLLM 0.32 envs.py: "1" or "true"
    return env + hub_env(cr) + nccl_env(cr) + [env_var(v) for v in cr.spec.engine.env]


def _resources(cr: QwenInference, plan: Plan) -> dict[str, Any]:
    amounts: dict[str, str] = {}
    if plan.gpus_per_pod:
        amounts[cr.spec.gpu.requested_resource] = str(plan.gpus_per_pod)
    if plan.cpu is not None:
        amounts["cpu"] = plan.cpu
    if plan.memory is not None:
        amounts["memory"] = plan.memory
    if not amounts:
        return {}
    # requests == limits: extended resources require it, and a GPU pod should not be CPU-throttled randomly.
    return {"requests": dict(amounts), "limits": dict(amounts)}


def _health() -> dict[str, Any]:
    return {"path": "/health", "port": HTTP_PORT_NAME}


# Probe timing (docs/autoscaling.md, "Cold start defaults"). A replica serves once its readiness probe passes,
# and the kubelet only starts that probe after the startup probe succeeded; so the two periods add straight to
# every start (from zero, a rollout, a recreated pod) while the model is long loaded. Both probe often: /health
# is a cheap local call. The startup probe's patience is its period times its failure threshold, the spec's
# startupTimeoutSeconds (a slow answer costs one failure, not a kill); liveness only starts after it, so a
# loading model is never killed for being slow.
STARTUP_PERIOD_SECONDS = 2
READINESS_PERIOD_SECONDS = 2
# Readiness leaves the Service after ~16 s of failed /health (8 x 2 s), as before with 3 x 5 s: vLLM's /health
# can be slow under load, and a busy replica taken out of rotation moves its load onto the others.
READINESS_FAILURE_THRESHOLD = 8


def _probes(cr: QwenInference) -> dict[str, Any]:
    startup_timeout = cr.spec.engine.startup_timeout_seconds
    return {
        "startupProbe": {"httpGet": _health(), "periodSeconds": STARTUP_PERIOD_SECONDS, "timeoutSeconds": 5,
                         "failureThreshold": math.ceil(startup_timeout / STARTUP_PERIOD_SECONDS)},
        "readinessProbe": {"httpGet": _health(), "periodSeconds": READINESS_PERIOD_SECONDS, "timeoutSeconds": 3,
                           "failureThreshold": READINESS_FAILURE_THRESHOLD},
        "livenessProbe": {"httpGet": _health(), "periodSeconds": 15, "timeoutSeconds": 10,
                          "failureThreshold": 4},
    }


def _volumes(cr: QwenInference, plan: Plan) -> tuple[list[dict[str, Any]], list[dict[str, Any]]]:
    spec = cr.spec
    volumes: list[dict[str, Any]] = [{"name": "dshm", "emptyDir": {"medium": "Memory", "sizeLimit": plan.shm_size}},
                                     *writable_volumes()]
    mounts: list[dict[str, Any]] = [{"name": "dshm", "mountPath": "/dev/shm"}, *writable_mounts()]
    pvc = spec.model.source.pvc
    if pvc is not None:
        volumes.append({"name": "model", "persistentVolumeClaim": {"claimName": pvc.claim_name,
                                                                    "readOnly": pvc.read_only}})
        mounts.append({"name": "model", "mountPath": MODEL_MOUNT, "readOnly": pvc.read_only})
        # HF_HOME writable all the same: the non-root engine cannot create it in the image (transformers keeps
        # its modules cache there, huggingface_hub its lock files).
        volumes.append({"name": "hf-cache", "emptyDir": {}})
        mounts.append({"name": "hf-cache", "mountPath": HF_HOME})
    elif spec.model.cache is not None:
        volumes.append({"name": "hf-cache", "persistentVolumeClaim": {"claimName": model_cache_claim_name(cr)}})
        mounts.append({"name": "hf-cache", "mountPath": HF_HOME})
    else:
        volumes.append({"name": "hf-cache", "emptyDir": {}})
        mounts.append({"name": "hf-cache", "mountPath": HF_HOME})
    if spec.nccl.preflight.enabled:
        volumes.append({"name": "nccl-preflight", "configMap": {"name": preflight_config_map_name(cr)}})
    return volumes, mounts


# The preflight's latency bar when the spec sets none: the seeds' 50 us for NCCL between GPUs; on device CPU none
# (0 turns it off): a gloo all-reduce between two processes goes through loopback TCP and takes tens of
# microseconds to milliseconds, depending on the CPU and its load, not on any fabric.
DEFAULT_PREFLIGHT_LATENCY_US = {"GPU": 50.0, "CPU": 0.0}
# Device CPU: two gloo processes (the smallest all-reduce with a peer), and a 16 MiB bandwidth message instead
# of 256 MiB: a CPU moves well under 1 GB/s through gloo, so 256 MiB would add minutes for a figure not judged
# unless minBusBandwidthGBps is set.
CPU_PREFLIGHT_RANKS = 2
CPU_PREFLIGHT_LARGE_BYTES = 16 * 2**20


def _preflight_container(cr: QwenInference, plan: Plan, resources: dict[str, Any]) -> dict[str, Any]:
    check = cr.spec.nccl.preflight
    latency = check.max_small_message_latency_microseconds
    cpu = cr.spec.device == "CPU"
    command = preflight_command(
        max_small_latency_us=DEFAULT_PREFLIGHT_LATENCY_US[cr.spec.device] if latency is None else latency,
        min_bus_bandwidth_gbps=check.min_bus_bandwidth_g_bps,
        backend="gloo" if cpu else "nccl",
        nproc=CPU_PREFLIGHT_RANKS if cpu else None,
        large_bytes=CPU_PREFLIGHT_LARGE_BYTES if cpu else None,
    )
    return {
        "name": PREFLIGHT_CONTAINER,
        "image": plan.image,
        "imagePullPolicy": "IfNotPresent",
        "command": command[:2],
        "args": command[2:],
        # Exactly the server's NCCL environment: the check must see the fabric vLLM will use.
        "env": [*user_env(), *nccl_env(cr)],
        "resources": copy.deepcopy(resources),
        "volumeMounts": [{"name": "dshm", "mountPath": "/dev/shm"}, *writable_mounts(),
                         {"name": "nccl-preflight", "mountPath": PREFLIGHT_MOUNT, "readOnly": True}],
        "securityContext": container_security_context(cr, engine=True),
        # The JSON report is the termination message; on a crash the log tail is the next best thing.
        "terminationMessagePolicy": "FallbackToLogsOnError",
    }


def _placement(cr: QwenInference) -> dict[str, Any]:
    sched = cr.spec.scheduling
    node_selector = dict(sched.node_selector)
    if cr.spec.gpu.product:
        node_selector["nvidia.com/gpu.product"] = cr.spec.gpu.product
    out: dict[str, Any] = {}
    if node_selector:
        out["nodeSelector"] = node_selector
    gpu = [dict(GPU_TOLERATION)] if cr.spec.device == "GPU" else []  # a CPU fleet stays off GPU nodes
    tolerations = gpu + [t.model_dump(by_alias=True, exclude_none=True) for t in sched.tolerations]
    if tolerations:
        out["tolerations"] = tolerations
    affinity = sched.affinity.model_dump(by_alias=True, exclude_none=True) if sched.affinity else {}
    if affinity:
        out["affinity"] = affinity
    if sched.priority_class_name:
        out["priorityClassName"] = sched.priority_class_name
    if sched.runtime_class_name:
        out["runtimeClassName"] = sched.runtime_class_name
    return out


def render_deployment(cr: QwenInference, plan: Plan) -> dict[str, Any]:
    spec = cr.spec
    resources = _resources(cr, plan)
    volumes, mounts = _volumes(cr, plan)
    container: dict[str, Any] = {
        "name": CONTAINER_NAME,
        "image": plan.image,
        "imagePullPolicy": "IfNotPresent",
        "command": list(SERVER_COMMAND),
        "args": engine_args(cr, plan),
        "ports": [{"name": HTTP_PORT_NAME, "containerPort": spec.service.port, "protocol": "TCP"}],
        "env": _server_env(cr),
        "resources": resources,
        "volumeMounts": mounts,
        **_probes(cr),
        "securityContext": container_security_context(cr, engine=True),
        # When the engine exits with an error, the tail of its log becomes the termination message, so status
        # can say why (a flag vLLM refuses, a max length the model does not allow) without reading logs.
        "terminationMessagePolicy": "FallbackToLogsOnError",
    }
    if spec.rollout.pre_stop_seconds:
        container["lifecycle"] = {"preStop": {"sleep": {"seconds": spec.rollout.pre_stop_seconds}}}
    pod_spec: dict[str, Any] = {
        "containers": [container],
        "volumes": volumes,
        # Service links would inject e.g. VLLM_PORT=tcp://... for a Service named "vllm", which vLLM reads.
        "enableServiceLinks": False,
        "automountServiceAccountToken": False,
        "securityContext": pod_security_context(cr),  # the restricted profile (render/security.py)
        "terminationGracePeriodSeconds": spec.rollout.pre_stop_seconds + spec.engine.shutdown_timeout_seconds
        + DRAIN_MARGIN_SECONDS,
        **_placement(cr),
    }
    if spec.nccl.preflight.enabled:
        pod_spec["initContainers"] = [_preflight_container(cr, plan, resources)]
    port = str(spec.service.port)
    template_annotations = {"prometheus.io/scrape": "true", "prometheus.io/port": port,
                            "prometheus.io/path": "/metrics", "kubectl.kubernetes.io/default-container": "vllm"}
    deployment: dict[str, Any] = {
        "apiVersion": "apps/v1",
        "kind": "Deployment",
        "metadata": metadata(cr),
        "spec": {
            "selector": {"matchLabels": selector_labels(cr)},
            "revisionHistoryLimit": 3,
            # A rollout may legitimately wait for a long model download and load.
            "progressDeadlineSeconds": spec.engine.startup_timeout_seconds + 600,
            "strategy": {"type": "RollingUpdate", "rollingUpdate": {
                "maxSurge": spec.rollout.max_surge, "maxUnavailable": spec.rollout.max_unavailable}},
            "template": {
                "metadata": {"labels": pod_labels(cr, plan.image), "annotations": template_annotations},
                "spec": pod_spec,
            },
        },
    }
    if plan.replicas is not None:  # under autoscaling the HPA owns replicas; we never send the field
        deployment["spec"]["replicas"] = plan.replicas
    return deployment
