"""The QwenInference resource: spec, status, and the constants that name it."""

from __future__ import annotations

from typing import Any, Literal

from pydantic import Field

from qwen_fleet.api.base import ApiModel, NamedObject, Rule
from qwen_fleet.api.engine import EngineSpec, ModelSpec
from qwen_fleet.api.fleet import GpuSpec, NcclSpec, Parallelism, Resources, Scheduling, ServiceSpec
from qwen_fleet.api.pools import MAX_POOLS, POOL_SPEC_RULES, Pool
from qwen_fleet.api.routing import RoutingSpec
from qwen_fleet.api.scaling import Autoscaling, Monitoring, Rollout
from qwen_fleet.api.security import ENV_SPEC_RULES, LWS_NAME_RULE, PodSecurity
from qwen_fleet.api.serving import ServingSpec, ServingStatus
from qwen_fleet.group import API_VERSION

KIND = "QwenInference"
PLURAL = "qweninferences"
SINGULAR = "qweninference"
SHORT_NAMES = ("qwi",)
CATEGORIES = ("qwenfleet",)
# Children are named after the resource plus short suffixes, and the name is a label value and a DNS-1035
# Service name: 52 leaves room for the longest suffix and for pod-name hashes.
MAX_NAME_LENGTH = 52
Device = Literal["GPU", "CPU"]


class QwenInferenceSpec(ApiModel, rules=[
    Rule(cel="!(has(self.replicas) && self.autoscaling.enabled)",
         check=lambda s: not (s.replicas is not None and s.autoscaling.enabled),
         message="spec.replicas cannot be set while autoscaling is enabled: the autoscaler owns "
                 "the replica count (use autoscaling.minReplicas/maxReplicas)"),
    Rule(cel="!self.nccl.preflight.enabled || self.device == 'CPU' || "
             "self.parallelism.tensor * self.parallelism.pipeline * self.parallelism.data >= 2",
         check=lambda s: not s.nccl.preflight.enabled or s.device == "CPU" or s.parallelism.gpus_per_replica >= 2,
         message="nccl.preflight needs at least 2 GPUs per replica (parallelism.tensor x pipeline x data "
                 ">= 2) on device GPU; on device CPU it runs 2 gloo processes"),
    Rule(cel="self.device != 'CPU' || (self.parallelism.tensor * self.parallelism.pipeline * "
             "self.parallelism.data == 1 && self.parallelism.nodes == 1)",
         check=lambda s: s.device != "CPU" or (s.parallelism.gpus_per_replica == 1 and s.parallelism.nodes == 1),
         message="device CPU runs one engine process per replica: parallelism.tensor x pipeline x data and "
                 "nodes must be 1"),
    Rule(cel="!has(self.gpu.sharing) || (self.device == 'GPU' && self.parallelism.tensor * "
             "self.parallelism.pipeline * self.parallelism.data == 1 && self.parallelism.nodes == 1)",
         check=lambda s: s.gpu.sharing is None or (s.device == "GPU" and s.parallelism.gpus_per_replica == 1
                                                   and s.parallelism.nodes == 1),
         message="gpu.sharing gives each engine one MIG slice or one time-sliced share of a GPU: "
                 "parallelism.tensor, pipeline and data must be 1 (NCCL does not run across MIG slices, and "
                 "shares of one GPU add no memory or compute); use whole GPUs (remove gpu.sharing) for tensor "
                 "parallelism"),
    Rule(cel="self.device != 'CPU' || has(self.engine.image)",
         check=lambda s: s.device != "CPU" or s.engine.image is not None,
         message="device CPU needs engine.image, a CPU build of vLLM: the default image is vLLM's CUDA build"),
    Rule(cel="self.device != 'CPU' || (!has(self.gpu.product) && !has(self.gpu.memoryGiB) && "
             "!has(self.engine.gpuMemoryUtilization))",
         check=lambda s: s.device != "CPU" or (s.gpu.product is None and s.gpu.memory_gi_b is None
                                               and s.engine.gpu_memory_utilization is None),
         message="gpu.product, gpu.memoryGiB and engine.gpuMemoryUtilization do not apply to device CPU"),
    Rule(cel="!has(self.routing) || !has(self.routing.priorityClasses) || size(self.routing.priorityClasses) == 0 || "
             "!has(self.engine.schedulingPolicy) || self.engine.schedulingPolicy == 'priority'",
         check=lambda s: s.routing is None or not s.routing.priority_classes
         or s.engine.scheduling_policy in (None, "priority"),
         message="routing.priorityClasses need vLLM's priority scheduling: remove engine.schedulingPolicy fcfs "
                 "(the classes turn on --scheduling-policy priority)"),
    Rule(cel="!has(self.routing) || !has(self.engine.enablePrefixCaching) || self.engine.enablePrefixCaching || "
             "self.routing.scorers.prefixCache == 0",
         check=lambda s: s.routing is None or s.engine.enable_prefix_caching is not False
         or s.routing.scorers.prefix_cache == 0,
         message="routing.scorers.prefixCache must be 0 with engine.enablePrefixCaching: false: the endpoint picker "
                 "would send requests after prefix hits vLLM does not have"),
    *POOL_SPEC_RULES,
    *ENV_SPEC_RULES,
    Rule(cel="!has(self.routing) || !has(self.routing.canary) || !has(self.pools) || size(self.pools) == 0",
         check=lambda s: s.routing is None or s.routing.canary is None or not s.pools,
         message="routing.canary cannot be combined with spec.pools: the canary share is one weighted backend of "
                 "the route, and a pooled fleet's route has a rule per pool; remove one of the two"),
    Rule(cel="!has(self.routing) || !has(self.autoscaling.scaleToZero)",
         check=lambda s: s.routing is None or s.autoscaling.scale_to_zero is None,
         message="spec.routing cannot be combined with autoscaling.scaleToZero: the endpoint picker sends each "
                 "request straight to a pod and holds none while the fleet has no pod; scale to zero sends clients "
                 "through the KEDA HTTP add-on's interceptor instead (status.endpoint). Remove one of the two"),
]):
    """Desired state of a vLLM fleet serving one Qwen model."""

    # The scale subresource (specReplicasPath, crd.py) reads spec.replicas as an int64 on every write.
    __read_as_int64__ = ("replicas",)

    model: ModelSpec = Field(description="The model to serve.")
    device: Device = Field(default="GPU", description="What the engine runs on. GPU: each replica requests "
                           "parallelism.tensor x pipeline x data GPUs (gpu.resourceName) and tolerates their taint. "
                           "CPU: no GPU is requested or tolerated, for small models, rerankers and CI; "
                           "engine.image must be a CPU build of vLLM, parallelism stays 1, and the KV cache "
                           "size is vLLM's VLLM_CPU_KVCACHE_SPACE (GiB, in engine.env).")
    engine: EngineSpec = Field(default_factory=EngineSpec, description="vLLM engine settings.")
    serving: ServingSpec = Field(default_factory=ServingSpec, description="Task, reasoning and tool-call "
                                 "parsers, thinking default; unset fields take the Qwen family's default.")
    parallelism: Parallelism = Field(default_factory=Parallelism, description="GPUs per replica.")
    gpu: GpuSpec = Field(default_factory=GpuSpec, description="GPU type and resource name.")
    nccl: NcclSpec = Field(default_factory=NcclSpec, description="NCCL environment and preflight check.")
    resources: Resources = Field(default_factory=Resources, description="CPU, memory and /dev/shm.")
    scheduling: Scheduling = Field(default_factory=Scheduling, description="Node placement.")
    service: ServiceSpec = Field(default_factory=ServiceSpec, description="The Service in front.")
    replicas: int | None = Field(default=None, ge=0, le=1000, description="Replica count without "
                                 "autoscaling (default 1). Also the scale subresource: kubectl scale qwi.")
    autoscaling: Autoscaling = Field(default_factory=Autoscaling, description="Queue-depth autoscaling.")
    monitoring: Monitoring = Field(default_factory=Monitoring, description="ServiceMonitor and alerts.")
    rollout: Rollout = Field(default_factory=Rollout, description="Rollout and drain.")
    security: PodSecurity = Field(default_factory=PodSecurity, description="Who the fleet's pods run as "
                                  "(non-root, numeric) and opt-in capabilities; every pod passes the Pod "
                                  "Security Standard restricted profile unless ipcLock is set.")
    routing: RoutingSpec | None = Field(default=None, description="Inference-aware routing (opt-in): an "
                                        "InferencePool over the serving pods, the Gateway API Inference "
                                        "Extension's endpoint picker, an HTTPRoute to a named Gateway, request "
                                        "priority classes. Needs the InferencePool CRD (and HTTPRoute's with a "
                                        "gateway, InferenceObjective's with priorityClasses).")
    pools: list[Pool] = Field(default_factory=list, min_length=2, max_length=MAX_POOLS, description="Length-aware "
                              "pools (opt-in; needs routing): one endpoint over several Deployments of this model, "
                              "<fleet>-<pool>, each for requests up to its maxRequestTokens, with its own "
                              "maxModelLen, maxNumSeqs and replicas. Listed from the shortest to the longest. The "
                              "HTTPRoute sends a request to the pool named in its routing.poolHeader header, else "
                              "to routing.defaultPool. Cannot be added to or removed from an existing resource.")

    @property
    def gpus_per_replica(self) -> int:
        return 0 if self.device == "CPU" else self.parallelism.gpus_per_replica

    @property
    def gpus_per_pod(self) -> int:
        return 0 if self.device == "CPU" else self.parallelism.gpus_per_pod


ConditionStatus = Literal["True", "False", "Unknown"]


class Condition(ApiModel):
    """A metav1.Condition: Ready, Reconciling, Stalled (kstatus) and more specific ones."""

    type: str = Field(max_length=316, pattern=r"^([a-z0-9]([-a-z0-9.]*[a-z0-9])?/)?[A-Za-z0-9_.-]+$",
                      description="Condition type, e.g. Ready.")
    status: ConditionStatus = Field(description="True, False or Unknown.")
    observed_generation: int | None = Field(default=None, ge=0, description="Generation the condition "
                                            "was computed for.")
    last_transition_time: str = Field(description="When the status last changed (RFC 3339).",
                                      json_schema_extra={"format": "date-time"})
    reason: str = Field(max_length=1024, pattern=r"^[A-Za-z]([A-Za-z0-9_,:]*[A-Za-z0-9_])?$",
                        description="One-word CamelCase reason.")
    message: str = Field(default="", max_length=32768, description="Human-readable detail.")


class CapacityStatus(ApiModel):
    """What the planner computed for one replica."""

    source: Literal["catalog", "spec", "unknown"] = Field(description="Where the model facts came from: "
                                                           "the built-in catalog, the spec, or unknown "
                                                           "(not planned).")
    gpu_memory_gi_b: float | None = Field(default=None, alias="gpuMemoryGiB", description="Memory of one "
                                          "GPU used for planning.")
    weights_gi_b_per_gpu: float | None = Field(default=None, alias="weightsGiBPerGpu",
                                               description="Weight memory per GPU.")
    kv_cache_gi_b_per_gpu: float | None = Field(default=None, alias="kvCacheGiBPerGpu",
                                                description="Memory left for the KV cache per GPU.")
    lora_gi_b_per_gpu: float | None = Field(default=None, alias="loraGiBPerGpu",
                                            description="LoRA adapter buffers vLLM preallocates per GPU "
                                            "(serving.adapters x maxLoraRank), taken from the KV cache.")
    vision_encoder_gi_b_per_gpu: float | None = Field(default=None, alias="visionEncoderGiBPerGpu",
                                                      description="Weights of the vision encoder per GPU "
                                                      "(vision-language models): inside weightsGiBPerGpu, or, "
                                                      "with status.serving.languageModelOnly, left out of it "
                                                      "and given to the KV cache.")
    kv_bytes_per_token: int | None = Field(default=None, description="KV-cache bytes per token (all GPUs).")
    kv_cache_tokens: int | None = Field(default=None, description="Tokens the KV cache holds.")
    max_model_len: int | None = Field(default=None, description="Sequence length planned for.")
    max_concurrent_sequences: float | None = Field(default=None, description="Sequences of maxModelLen "
                                                   "that fit in the KV cache at once.")
    warnings: list[str] = Field(default_factory=list, description="Planner warnings.")


class ColdStartStatus(ApiModel):
    """One start from zero replicas, from the pod's own timestamps (whole seconds, as the API keeps them)."""

    pod: str = Field(description="The first pod made after the fleet was at zero.")
    created_at: str = Field(description="The pod's creation (KEDA has just set the replica count to 1).",
                            json_schema_extra={"format": "date-time"})
    ready_at: str = Field(description="When the pod turned Ready (its readiness probe, /health, passed).",
                          json_schema_extra={"format": "date-time"})
    seconds: int = Field(ge=0, description="From the pod's creation to Ready: what the first held request waited, "
                         "less KEDA's reaction (under a second: the add-on pushes its activity).")
    scheduling_seconds: int | None = Field(default=None, ge=0, description="Creation to PodScheduled.")
    container_start_seconds: int | None = Field(default=None, ge=0, description="PodScheduled to the vLLM "
                                                "container running: image pull and init containers.")
    engine_start_seconds: int | None = Field(default=None, ge=0, description="The vLLM container running to Ready: "
                                             "model load and engine warm-up.")


class AutoscalingStatus(ApiModel):
    """The autoscaler's view, mirrored: the HorizontalPodAutoscaler's (engine hpa) or the KEDA ScaledObject's
    (engine keda; docs/autoscaling.md says what is mirrored in each)."""

    engine: Literal["hpa", "keda"] | None = Field(default=None, description="The engine of the autoscaler "
                                                  "mirrored here.")
    hpa_name: str | None = Field(default=None, description="The HorizontalPodAutoscaler that sets the replica "
                                 "count: the fleet's own name (engine hpa), or keda-hpa-<name>, the one KEDA "
                                 "makes for the ScaledObject (engine keda).")
    current_replicas: int | None = Field(default=None, description="Replicas the HPA sees (engine hpa only).")
    desired_replicas: int | None = Field(default=None, description="Replicas the HPA wants (engine hpa only).")
    leading_signal: str | None = Field(default=None, description="Engine hpa: the signal whose recommendation "
                                       "the HPA takes in its last reading (queue-depth, kv-cache-usage, "
                                       "gpu-utilization, time-to-first-token, inter-token-latency): the metric "
                                       "furthest above, or least below, its target. Unset while the HPA has read "
                                       "no metric or none leads; not known with engine keda (KEDA's HPA is not read).")
    message: str = Field(default="", description="The autoscaler's conditions in words: the HPA's "
                         "ScalingActive/ScalingLimited, or the ScaledObject's Ready/Active/Fallback/Paused.")
    scaled_to_zero: bool | None = Field(default=None, description="With autoscaling.scaleToZero: whether the fleet "
                                        "has zero replicas now (requests are held by the KEDA HTTP add-on's "
                                        "interceptor until one is ready).")
    last_scaled_to_zero_time: str | None = Field(default=None, description="When the operator last saw the fleet "
                                                 "go to zero replicas (RFC 3339).",
                                                 json_schema_extra={"format": "date-time"})
    last_cold_start: ColdStartStatus | None = Field(default=None, description="The last start from zero: the "
                                                    "first pod made after the fleet was at zero, from its creation "
                                                    "to Ready.")


class NcclGroupStatus(ApiModel):
    """The preflight of one LeaderWorkerSet group: its pods ran one all-reduce across their nodes."""

    group: int = Field(description="Group index (leaderworkerset.sigs.k8s.io/group-index), one per replica.")
    pods: list[str] = Field(default_factory=list, description="Pods of the group, leader first.")
    nodes: int | None = Field(default=None, description="Pods (nodes) in the all-reduce.")
    reported: int | None = Field(default=None, description="Pods whose preflight has ended with a report.")
    passed: bool | None = Field(default=None, description="Whether every pod of the group passed; unset while "
                                "pending.")
    outcome: Literal["passed", "below-threshold", "error", "pending"] | None = Field(
        default=None, description="The worst member's outcome (error before below-threshold), or pending until "
        "every pod has reported.")
    message: str = Field(default="", description="The verdict in words, naming the pod it comes from.")
    gpus: int | None = Field(default=None, description="GPUs in the all-reduce, across the group's nodes.")
    backend: str | None = Field(default=None, description="torch.distributed backend: nccl between GPUs, gloo "
                                "on device CPU.")
    small_message_latency_microseconds: float | None = Field(default=None, description="Worst small-message "
                                                             "all-reduce latency across the group.")
    small_message_latency_bytes: int | None = Field(default=None, description="Message size of that worst "
                                                    "latency.")
    bus_bandwidth_g_bps: float | None = Field(default=None, alias="busBandwidthGBps",
                                              description="Large-message bus bandwidth across the group (GB/s).")
    nccl_version: str | None = Field(default=None, description="NCCL version the check ran with.")
    checked_at: str | None = Field(default=None, description="When the check ran (RFC 3339).")


class NcclStatus(ApiModel):
    """Latest NCCL preflight result reported by a serving pod (the init container's termination message)."""

    passed: bool | None = Field(default=None, description="Whether the thresholds held.")
    outcome: Literal["passed", "below-threshold", "error"] | None = Field(
        default=None, description="passed, below-threshold, or error (the check could not run).")
    message: str = Field(default="", description="Result in words.")
    gpus: int | None = Field(default=None, description="GPUs in the all-reduce.")
    backend: str | None = Field(default=None, description="torch.distributed backend: nccl between GPUs, gloo "
                                "on device CPU.")
    small_message_latency_microseconds: float | None = Field(default=None, description="Worst small-message "
                                                             "(8 B to 64 KiB) all-reduce latency.")
    small_message_latency_bytes: int | None = Field(default=None, description="Message size of that worst "
                                                    "latency.")
    bus_bandwidth_g_bps: float | None = Field(default=None, alias="busBandwidthGBps",
                                              description="Large-message bus bandwidth (GB/s, nccl-tests "
                                              "definition).")
    nccl_version: str | None = Field(default=None, description="NCCL version the check ran with.")
    checked_at: str | None = Field(default=None, description="When the check ran (RFC 3339).")
    pod: str | None = Field(default=None, description="Pod that ran it.")
    groups: list[NcclGroupStatus] | None = Field(default=None, description="Multi-node fleets: the preflight "
                                                 "of each LeaderWorkerSet group, which all its pods run together.")


class PrefetchStatus(ApiModel):
    """The model prefetch Job (model.cache.prefetch), as the Job controller last reported it."""

    job: str = Field(description="Name of the Job.")
    state: Literal["Pending", "Running", "Succeeded", "Failed"] = Field(description="Pending, Running, "
                                                                         "Succeeded or Failed.")
    reason: str | None = Field(default=None, description="The Job's reason, e.g. BackoffLimitExceeded or "
                               "DeadlineExceeded when it failed.")
    message: str | None = Field(default=None, description="The Job's message.")


class PoolStatus(ApiModel):
    """One length-aware pool (spec.pools): its bounds, where it is reached, and its Deployment's counts."""

    name: str = Field(description="The pool.")
    max_request_tokens: int = Field(description="The longest request (prompt plus max_tokens) it is for.")
    max_model_len: int = Field(description="Its vLLM --max-model-len.")
    header: str | None = Field(default=None, description="What selects it: the request header and value the "
                               "HTTPRoute matches, e.g. 'x-qwen-pool: long'.")
    default: bool = Field(default=False, description="Whether requests without the header go here.")
    deployment: str = Field(description="Its Deployment.")
    inference_pool: str | None = Field(default=None, description="Its InferencePool (and endpoint picker, "
                                       "<inferencePool>-epp).")
    replicas: int = Field(default=0, description="Pods of the pool.")
    ready_replicas: int = Field(default=0, description="Pods ready to serve.")
    max_concurrent_sequences: float | None = Field(default=None, description="Sequences of maxModelLen that "
                                                   "fit in one replica's KV cache (planner).")


class TrafficShare(ApiModel):
    """One backend of the fleet's route and the percent of its requests it is given (routing.canary)."""

    fleet: str = Field(description="The QwenInference (its Service) the share goes to.")
    percent: int = Field(description="Percent of the route's requests sent there (the HTTPRoute's weights).")
    role: Literal["stable", "canary"] = Field(description="stable: this fleet; canary: routing.canary.fleet.")


class QwenInferenceStatus(ApiModel):
    """Observed state. Conditions follow kstatus: Ready, Reconciling, Stalled."""

    observed_generation: int | None = Field(default=None, description="Generation last applied.")
    conditions: list[Condition] = Field(default_factory=list, description="Current conditions: Ready, "
                                        "Reconciling and Stalled (kstatus, as Flux and Argo CD read them), "
                                        "plus ScalingActive/ScalingLimited mirrored from the HPA (engine "
                                        "hpa) or ScaledObjectReady/ScaledObjectFallback from KEDA's "
                                        "ScaledObject (engine keda), and with scaleToZero ModelCached (False: "
                                        "every cold start downloads the model; set model.cache).",
                                        json_schema_extra={"x-kubernetes-list-type": "map",
                                                           "x-kubernetes-list-map-keys": ["type"]})
    replicas: int | None = Field(default=None, description="Pods of the fleet (scale subresource).")
    ready_replicas: int | None = Field(default=None, description="Pods ready to serve.")
    updated_replicas: int | None = Field(default=None, description="Pods on the current spec.")
    available_replicas: int | None = Field(default=None, description="Pods available (ready for "
                                           "minReadySeconds).")
    selector: str | None = Field(default=None, description="Label selector of the pods, for the scale "
                                 "subresource.")
    endpoint: str | None = Field(default=None, description="OpenAI-compatible base URL inside the cluster.")
    gpus_per_replica: int | None = Field(default=None, description="GPUs each replica requests.")
    capacity: CapacityStatus | None = Field(default=None, description="Planner output.")
    autoscaling: AutoscalingStatus | None = Field(default=None, description="Autoscaler state.")
    nccl: NcclStatus | None = Field(default=None, description="NCCL preflight result.")
    serving: ServingStatus | None = Field(default=None, description="Task, parsers, thinking default and "
                                          "rope scaling in effect (spec or family default).")
    prefetch: PrefetchStatus | None = Field(default=None, description="The model prefetch Job; while it has "
                                            "not succeeded the fleet waits (Ready False, reason "
                                            "ModelPrefetching, or Stalled with ModelPrefetchFailed).")
    pools: list[PoolStatus] | None = Field(default=None, description="Length-aware pools (spec.pools), shortest "
                                           "first: the replica counts above are their sums.")
    traffic: list[TrafficShare] | None = Field(default=None, description="With routing.canary: how the "
                                               "fleet's route splits its requests, this fleet first, as applied.")


NAME_RULE = Rule(
    cel=f"size(self.metadata.name) <= {MAX_NAME_LENGTH}",
    check=lambda r: len(r.metadata.get("name", "")) <= MAX_NAME_LENGTH,
    message=f"metadata.name must be at most {MAX_NAME_LENGTH} characters: child objects and pod names are "
            "derived from it",
)
NAME_FORMAT_RULE = Rule(
    cel="self.metadata.name.matches('^[a-z]([-a-z0-9]*[a-z0-9])?$')",
    check=lambda r: _dns1035(r.metadata.get("name", "")),
    message="metadata.name must start with a letter and contain only lowercase letters, digits and '-' "
            "(it names the Service)",
)


def _dns1035(name: str) -> bool:
    import re

    return bool(re.fullmatch(r"[a-z]([-a-z0-9]*[a-z0-9])?", name))  # not match: `$` allows a trailing newline


# <fleet>-<pool>-epp names the pool's endpoint picker Service: a DNS-1035 label of at most 63 characters.
POOL_NAME_RULE = Rule(
    cel="!has(self.spec.pools) || self.spec.pools.all(p, size(self.metadata.name) + size(p.name) <= 58)",
    check=lambda r: all(len(r.metadata.get("name", "")) + len(p.name) <= 58 for p in r.spec.pools),
    message="metadata.name and a pool's name together must be at most 58 characters: <name>-<pool>-epp names "
            "the pool's endpoint picker Service (63 at most)",
)


# <fleet>-model-cache is the claim the operator makes for model.cache (render/deployment.py model_cache_claim_name):
# serving from it as a pvc source would make the operator's claim the user's weights, pruned with model.cache.
OWN_CACHE_CLAIM_RULE = Rule(
    cel="!has(self.spec.model.source) || !has(self.spec.model.source.pvc) || "
        "self.spec.model.source.pvc.claimName != self.metadata.name + '-model-cache'",
    check=lambda r: r.spec.model.source is None or r.spec.model.source.pvc is None
    or r.spec.model.source.pvc.claim_name != r.metadata.get("name", "") + "-model-cache",
    message="model.source.pvc.claimName must not be <metadata.name>-model-cache: that is the claim the operator "
            "makes for model.cache; name a claim of your own",
)


CANARY_NOT_SELF_RULE = Rule(
    cel="!has(self.spec.routing) || !has(self.spec.routing.canary) || "
        "self.spec.routing.canary.fleet != self.metadata.name",
    check=lambda r: r.spec.routing is None or r.spec.routing.canary is None
    or r.spec.routing.canary.fleet != r.metadata.get("name", ""),
    message="routing.canary.fleet names this fleet itself: name the other QwenInference (the new revision) that "
            "gets the canary share",
)


class QwenInference(NamedObject, ApiModel, rules=[NAME_RULE, NAME_FORMAT_RULE, POOL_NAME_RULE,
                                                  LWS_NAME_RULE, OWN_CACHE_CLAIM_RULE, CANARY_NOT_SELF_RULE]):
    """A fleet of vLLM servers for one Qwen model, with its Service and autoscaler."""

    # The Literal and its default must be written out; tests/unit/test_group.py holds them to API_VERSION.
    api_version: Literal["qwenfleet.io/v1alpha1"] = Field(default="qwenfleet.io/v1alpha1", alias="apiVersion",
                                                          description=API_VERSION)
    kind: Literal["QwenInference"] = Field(default="QwenInference", description="QwenInference")
    metadata: dict[str, Any] = Field(default_factory=dict, description="Standard object metadata.")
    spec: QwenInferenceSpec = Field(description="Desired state.")
    status: QwenInferenceStatus | None = Field(default=None, description="Observed state.")
