"""``spec.model`` and ``spec.engine``: what to serve and how vLLM batches it."""

from __future__ import annotations

from typing import Annotated, Literal

from pydantic import Field

from qwen_fleet.api.base import DNS_SUBDOMAIN, IMAGE, TOKEN, ApiModel, Quantity, Rule
from qwen_fleet.api.engine_flags import (
    cel_each_flag_key,
    cel_known_or_owned,
    cel_no_stray_value,
    cel_owned,
    cel_stray_value_message,
    cel_unknown_flag_message,
    cel_with_tables,
    first_stray_value,
    first_unknown_flag,
    flag_key,
    owned_dest,
    stray_value_message,
    unknown_flag_message,
    vllm_flags,
)
from qwen_fleet.api.security import (
    RESERVED_ENV,
    SECRET_FLAGS_MESSAGE,
    SECRET_KEYS,
    cel_no_reserved,
    cel_unique_names,
    first_reserved,
    not_a_flag_rule,
    reserved_env_message,
    secret_flag,
    unique_names,
)
from qwen_fleet.api.serving import RopeScaling

Quantization = Literal[
    "awq", "awq_marlin", "auto_awq", "gptq", "gptq_marlin", "auto_gptq", "fp8", "fbgemm_fp8",
    "compressed-tensors", "moe_wna16", "experts_int8", "modelopt", "modelopt_fp4", "mxfp4", "torchao",
    "quark", "inc",
]
KvCacheDtype = Literal["auto", "fp8", "fp8_e4m3", "fp8_e5m2"]
Dtype = Literal["auto", "half", "float16", "bfloat16", "float", "float32"]

# Flags the typed fields own; ``extraArgs`` may not repeat them (vLLM would take whichever came last, and a
# reviewer reading the spec would be misled), in any form vLLM's parser reads as them: with underscores, as
# ``--no-`` switches, as short options (-tp, -pp, -q) and as abbreviations (``--max-num-seq``).
OWNED_FLAGS: tuple[str, ...] = (
    "model", "revision", "tokenizer-revision", "served-model-name", "port", "host", "trust-remote-code",
    "max-model-len", "max-num-seqs", "max-num-batched-tokens", "block-size", "gpu-memory-utilization",
    "dtype", "quantization", "kv-cache-dtype", "enforce-eager", "enable-prefix-caching",
    "enable-chunked-prefill", "kv-offloading-size", "kv-offloading-backend", "cpu-offload-gb",
    "scheduling-policy", "tensor-parallel-size", "pipeline-parallel-size", "shutdown-timeout",
    "download-dir",
    # parallelism.data / dataLocal / expert / nodes, and the multi-node launch rendered from them: a
    # --data-parallel-size slipped in here would multiply the GPUs vLLM wants without the pod asking for them.
    "data-parallel-size", "data-parallel-size-local", "data-parallel-rank", "data-parallel-start-rank",
    "data-parallel-address", "data-parallel-rpc-port", "data-parallel-backend", "data-parallel-hybrid-lb",
    "data-parallel-external-lb", "data-parallel-multi-port-external-lb", "enable-expert-parallel",
    "nnodes", "node-rank", "master-addr", "master-port", "headless",
    # spec.serving and engine.ropeScaling (api/serving.py)
    "runner", "convert", "hf-overrides", "reasoning-parser", "tool-call-parser", "enable-auto-tool-choice",
    "default-chat-template-kwargs", "speculative-config", "enable-lora", "lora-modules", "max-loras",
    "max-lora-rank", "language-model-only", "limit-mm-per-prompt",
)
# Every option string of those flags in vLLM's own table (--no-enforce-eager, -tp, ...).
OWNED_OPTIONS = frozenset(option for flag in vllm_flags().flags if flag.dest.replace("_", "-") in OWNED_FLAGS
                          for option in flag.options)
# Environment variables the operator, the device plugin or vLLM's launch sets (api/security.py).
OWNED_ENV = tuple(RESERVED_ENV)



def owned_flag(arg: str) -> bool:
    """Whether vLLM reads this extraArgs token as a flag a typed field owns."""
    key = flag_key(arg)
    return key is not None and owned_dest(key, OWNED_OPTIONS)



CONFIG_KEY = r"^[-._a-zA-Z0-9]+$"


class SecretKeyRef(ApiModel):
    """A key of a Secret in the same namespace; the operator references it and never copies its value."""

    name: str = Field(description="Name of the Secret.", min_length=1, max_length=253, pattern=DNS_SUBDOMAIN)
    key: str = Field(default="token", description="Key inside the Secret.", min_length=1, max_length=253,
                     pattern=CONFIG_KEY)


# An http(s) base URL of a hub mirror, without query or fragment.
HUB_URL = r"^https?://[A-Za-z0-9]([-A-Za-z0-9.]*[A-Za-z0-9])?(:[0-9]{1,5})?(/[-A-Za-z0-9._~/]*)?$"
# A host[:port], as ModelScope's MODELSCOPE_DOMAIN takes it (the library adds https://).
HOST_PORT = r"^[A-Za-z0-9]([-A-Za-z0-9.]*[A-Za-z0-9])?(:[0-9]{1,5})?$"


class HuggingFaceSource(ApiModel):
    """Download the weights from the Hugging Face Hub at pod start."""

    token_secret_ref: SecretKeyRef | None = Field(
        default=None, description="Secret key holding a Hugging Face token (gated or private models). "
        "Passed to the pod as HF_TOKEN through secretKeyRef.")
    endpoint: str | None = Field(default=None, max_length=512, pattern=HUB_URL, description="Base URL of a "
                                 "Hugging Face Hub mirror (HF_ENDPOINT), e.g. https://hf-mirror.com. Default: "
                                 "https://huggingface.co.")


class ModelScopeSource(ApiModel):
    """Download the weights from ModelScope (vLLM's VLLM_USE_MODELSCOPE=True): model.name is a ModelScope
    model id such as Qwen/Qwen3-8B."""

    token_secret_ref: SecretKeyRef | None = Field(
        default=None, description="Secret key holding a ModelScope access token (private models). Passed to "
        "the pod as MODELSCOPE_API_TOKEN through secretKeyRef.")
    domain: str | None = Field(default=None, max_length=253, pattern=HOST_PORT, description="Host of a "
                               "ModelScope site or mirror (MODELSCOPE_DOMAIN, reached over https), e.g. "
                               "www.modelscope.ai. Default: www.modelscope.cn.")


class PvcSource(ApiModel):
    """Serve weights already present on a PersistentVolumeClaim (no download)."""

    claim_name: str = Field(description="Name of the PersistentVolumeClaim holding the model.",
                            min_length=1, max_length=253, pattern=DNS_SUBDOMAIN)
    path: str = Field(default="/", description="Directory of the model inside the claim.", max_length=1024,
                      pattern=r"^/[A-Za-z0-9._/@+=-]*$")
    read_only: bool = Field(default=True, description="Mount the claim read-only.")


class ModelSource(ApiModel, rules=[Rule(
    cel="(has(self.huggingFace) ? 1 : 0) + (has(self.modelScope) ? 1 : 0) + (has(self.pvc) ? 1 : 0) == 1",
    check=lambda s: (s.hugging_face is not None) + (s.model_scope is not None) + (s.pvc is not None) == 1,
    message="model.source must name exactly one of huggingFace, modelScope or pvc",
)]):
    """Where the weights come from: exactly one of huggingFace, modelScope or pvc."""

    hugging_face: HuggingFaceSource | None = Field(default=None, alias="huggingFace",
                                                   description="Download from the Hugging Face Hub.")
    model_scope: ModelScopeSource | None = Field(default=None, alias="modelScope",
                                                 description="Download from ModelScope.")
    pvc: PvcSource | None = Field(default=None, description="Read from a PersistentVolumeClaim.")

    @property
    def downloads(self) -> bool:
        """The engine (or the prefetch Job) downloads the weights: a hub source, not a filled claim."""
        return self.pvc is None


class ModelPrefetch(ApiModel):
    """A Job that downloads the model into the cache claim once, before any replica starts."""

    enabled: bool = Field(default=False, description="Download the model into the cache claim with a "
                          "Job (hf download or modelscope download in the engine image) and start the "
                          "replicas only once it succeeded; they then run offline (HF_HUB_OFFLINE=1).")
    backoff_limit: int = Field(default=3, ge=0, le=20, description="Retries of the download pod before the "
                               "Job fails (Job backoffLimit).")
    active_deadline_seconds: int | None = Field(default=None, ge=60, le=7 * 24 * 3600, description="Fail "
                                                "the Job when the download takes longer than this (Job "
                                                "activeDeadlineSeconds). Default: no limit.")


class CacheRetentionPolicy(ApiModel):
    """What becomes of the cache claim when model.cache is removed from the spec (as a StatefulSet's
    persistentVolumeClaimRetentionPolicy). Deleting the QwenInference deletes the claim either way."""

    when_removed: Literal["Retain", "Delete"] = Field(
        default="Retain", description="Retain: the claim and its weights stay (still owned by the QwenInference, "
        "never pruned; adding model.cache back uses them again). Delete: the claim is deleted once no pod of the "
        "fleet mounts it.")


class ModelCache(ApiModel):
    """A PersistentVolumeClaim the operator creates for the Hugging Face cache, so restarts skip the download."""

    size: Quantity = Field(description="Size of the cache claim, e.g. 100Gi.")
    storage_class_name: str | None = Field(default=None, description="StorageClass of the claim.",
                                           max_length=253, pattern=DNS_SUBDOMAIN)
    access_mode: Literal["ReadWriteOnce", "ReadWriteMany", "ReadOnlyMany", "ReadWriteOncePod"] = Field(
        default="ReadWriteMany", description="Access mode; ReadWriteMany lets replicas on many nodes share it.")
    prefetch: ModelPrefetch = Field(default_factory=ModelPrefetch, description="Fill the claim with a Job "
                                    "before the replicas start (air-gapped serving, slow downloads).")
    retention_policy: CacheRetentionPolicy = Field(default_factory=CacheRetentionPolicy, description="Whether "
                                                   "the claim outlives its removal from the spec (default: "
                                                   "Retain).")


class ModelSpec(ApiModel, rules=[Rule(
    cel="!has(self.cache) || !self.cache.prefetch.enabled || !has(self.source) || !has(self.source.pvc)",
    check=lambda m: m.cache is None or not m.cache.prefetch.enabled or m.source.pvc is None,
    message="model.cache.prefetch downloads into the cache claim; a pvc source is already filled: remove "
            "model.cache or use a huggingFace or modelScope source",
), not_a_flag_rule("name", "name"), not_a_flag_rule("revision", "revision"),
    not_a_flag_rule("servedModelName", "served_model_name")]):
    """The model to serve."""

    name: str = Field(description="Hugging Face (or ModelScope) repo id (e.g. Qwen/Qwen3-4B-Instruct-2507). It "
                      "also picks the planner's facts from the catalog; with a pvc source, source.pvc.path "
                      "locates the files.",
                      min_length=1, max_length=256, pattern=TOKEN)
    revision: str | None = Field(default=None, description="Branch, tag or commit of the repo; a 40-hex "
                                 "commit makes downloads reproducible.", max_length=128, pattern=TOKEN)
    served_model_name: str | None = Field(default=None, description="Model name clients send in requests "
                                          "and that metrics carry as model_name (default: the resource's "
                                          "name).", max_length=128, pattern=TOKEN)
    source: ModelSource = Field(default_factory=lambda: ModelSource(hugging_face=HuggingFaceSource()),
                                description="Where the weights come from (default: Hugging Face).")
    cache: ModelCache | None = Field(default=None, description="Persistent cache for downloaded weights; "
                                     "without it an emptyDir holds them for the pod's lifetime.")
    trust_remote_code: bool = Field(default=False, description="Allow the model repo's own Python code "
                                    "(vLLM --trust-remote-code). Off unless the model needs it.")


class KeyRef(ApiModel):
    """A key of a Secret or ConfigMap in the same namespace."""

    name: str = Field(description="Name of the Secret or ConfigMap.", min_length=1, max_length=253,
                      pattern=DNS_SUBDOMAIN)
    key: str = Field(description="Key inside it.", min_length=1, max_length=253, pattern=CONFIG_KEY)
    optional: bool | None = Field(default=None, description="Start even when it is missing.")


class FieldRef(ApiModel):
    """A field of the pod (the downward API), e.g. metadata.name or status.podIP."""

    field_path: str = Field(description="Path of the field: metadata.name, metadata.namespace, metadata.uid, "
                            "metadata.labels['key'], metadata.annotations['key'], spec.nodeName, "
                            "spec.serviceAccountName, status.hostIP(s), status.podIP(s).", min_length=1,
                            max_length=256, pattern=r"^(metadata\.(name|namespace|uid)|metadata\.(labels|annotations)"
                            r"\['[-._/A-Za-z0-9]+'\]|spec\.(nodeName|serviceAccountName)|status\.(hostIPs?|podIPs?))$")
    api_version: str | None = Field(default=None, description="Version of the schema the path is written in.",
                                    max_length=64, pattern=r"^[A-Za-z0-9./]+$")


class ResourceFieldRef(ApiModel):
    """A resource limit or request of a container."""

    resource: str = Field(description="limits.cpu, limits.memory, limits.ephemeral-storage, requests.* ...",
                          min_length=1, max_length=256,
                          pattern=r"^(limits|requests)\.(cpu|memory|ephemeral-storage|hugepages-[0-9A-Za-z]+)$")
    container_name: str | None = Field(default=None, description="Container (default: this one).",
                                       max_length=63, pattern=r"^[a-z0-9]([-a-z0-9]*[a-z0-9])?$")
    divisor: Literal["1", "1m", "1k", "1M", "1G", "1T", "1Ki", "1Mi", "1Gi", "1Ti"] | None = Field(
        default=None, description="Unit of the value.")


class EnvVarSource(ApiModel, rules=[Rule(
    cel="[has(self.secretKeyRef), has(self.configMapKeyRef), has(self.fieldRef), has(self.resourceFieldRef)]"
        ".filter(x, x).size() == 1",
    check=lambda v: sum(x is not None for x in (v.secret_key_ref, v.config_map_key_ref, v.field_ref,
                                                 v.resource_field_ref)) == 1,
    message="valueFrom must name exactly one of secretKeyRef, configMapKeyRef, fieldRef, resourceFieldRef",
)]):
    """Where an environment variable's value comes from, as in core Pods."""

    secret_key_ref: KeyRef | None = Field(default=None, description="A key of a Secret (referenced, never "
                                          "copied).")
    config_map_key_ref: KeyRef | None = Field(default=None, alias="configMapKeyRef",
                                              description="A key of a ConfigMap.")
    field_ref: FieldRef | None = Field(default=None, description="A field of the pod.")
    resource_field_ref: ResourceFieldRef | None = Field(default=None, description="A container resource.")


class EnvVar(ApiModel, rules=[Rule(
    cel="!(has(self.value) && self.value != '' && has(self.valueFrom))",
    check=lambda v: not (v.value and v.value_from is not None),
    message="an environment variable takes value or valueFrom, not both",
)]):
    """An environment variable for the vLLM container (value or valueFrom, as in core Pods)."""

    name: str = Field(description="Variable name.", min_length=1, max_length=256,
                      pattern=r"^[-._a-zA-Z][-._a-zA-Z0-9]*$")
    value: str | None = Field(default=None, description="Literal value.", max_length=32768)
    value_from: EnvVarSource | None = Field(default=None, description="A Secret or ConfigMap key, a pod field "
                                            "or a container resource.")


_MAX_TOKENS = 16_777_216
_MAX_EXTRA_ARGS = 64


class EngineSpec(ApiModel, rules=[
    Rule(
        cel="!has(self.maxNumBatchedTokens) || !has(self.maxModelLen) || !has(self.enableChunkedPrefill) || "
            "self.enableChunkedPrefill || self.maxNumBatchedTokens >= self.maxModelLen",
        check=lambda e: e.max_num_batched_tokens is None or e.max_model_len is None
        or e.enable_chunked_prefill is not False or e.max_num_batched_tokens >= e.max_model_len,
        message="engine.maxNumBatchedTokens must be at least engine.maxModelLen when enableChunkedPrefill is "
                "false (without chunking a whole prompt must fit in one batch)",
    ),
    Rule(
        cel="!has(self.maxNumBatchedTokens) || !has(self.maxNumSeqs) || "
            "self.maxNumBatchedTokens >= self.maxNumSeqs",
        check=lambda e: e.max_num_batched_tokens is None or e.max_num_seqs is None
        or e.max_num_batched_tokens >= e.max_num_seqs,
        message="engine.maxNumBatchedTokens must be at least engine.maxNumSeqs (each running sequence "
                "needs a token in every batch)",
    ),
    Rule(
        cel="!has(self.extraArgs) || " + cel_each_flag_key("self.extraArgs", f"!(k in {SECRET_KEYS})"),
        check=lambda e: not any(secret_flag(a) for a in e.extra_args),
        message=SECRET_FLAGS_MESSAGE,
    ),
    Rule(
        cel="!has(self.extraArgs) || " + cel_with_tables(OWNED_OPTIONS, cel_each_flag_key(
            "self.extraArgs", "!" + cel_owned("k"))),
        check=lambda e: not any(owned_flag(a) for a in e.extra_args),
        message="engine.extraArgs must not repeat a flag that a typed field owns (e.g. --max-num-seqs is "
                "engine.maxNumSeqs, --tensor-parallel-size is parallelism.tensor, --data-parallel-size is "
                "parallelism.data, --enable-expert-parallel is parallelism.expert, --nnodes is "
                "parallelism.nodes)",
    ),
    Rule(
        cel="!has(self.extraArgs) || " + cel_with_tables(OWNED_OPTIONS, cel_each_flag_key(
            "self.extraArgs", cel_known_or_owned())),
        check=lambda e: first_unknown_flag(e.extra_args, OWNED_OPTIONS) is None,
        message=f"engine.extraArgs must hold flags of vLLM {vllm_flags().vllm} written in full",
        message_expression=cel_unknown_flag_message("self.extraArgs", OWNED_OPTIONS),
        message_for=lambda e: unknown_flag_message(first_unknown_flag(e.extra_args, OWNED_OPTIONS) or ""),
    ),
    Rule(
        cel="!has(self.extraArgs) || " + cel_no_stray_value("self.extraArgs", _MAX_EXTRA_ARGS),
        check=lambda e: first_stray_value(e.extra_args) is None,
        message="engine.extraArgs must not hold a value that no flag before it takes (vLLM would ignore it)",
        message_expression=cel_stray_value_message("self.extraArgs", _MAX_EXTRA_ARGS),
        message_for=lambda e: stray_value_message(first_stray_value(e.extra_args) or ""),
    ),
    Rule(
        cel=cel_no_reserved("self.env"),
        check=lambda e: first_reserved(e.env) is None,
        message=reserved_env_message("engine.env"),
    ),
    Rule(cel=cel_unique_names("self.env"), check=lambda e: unique_names(e.env),
         message="engine.env names must be unique (a second definition of a name would hide the first)"),
    Rule(cel="!has(self.swapSpace)", check=lambda e: e.swap_space is None,
         message="engine.swapSpace was removed from vLLM (--swap-space is gone); use engine.kvOffloadGiB, "
                 "vLLM's CPU KV offload (--kv-offloading-size)"),
    Rule(cel="!has(self.workerUseRay)", check=lambda e: e.worker_use_ray is None,
         message="engine.workerUseRay was removed from vLLM (--worker-use-ray is gone); multi-GPU replicas "
                 "use vLLM's multiprocessing backend, set by parallelism.tensor / parallelism.pipeline"),
    Rule(cel="!has(self.maxParallelRequests)", check=lambda e: e.max_parallel_requests is None,
         message="engine.maxParallelRequests is not a vLLM setting; the concurrency limit is "
                 "engine.maxNumSeqs (--max-num-seqs)"),
]):
    """The vLLM engine and its continuous-batching knobs. Unset fields keep vLLM's own defaults."""

    image: str | None = Field(default=None, description="Serving image (default: the operator's "
                              "configured image, vllm/vllm-openai at the pinned engine version).",
                              max_length=512, pattern=IMAGE)
    max_model_len: int | None = Field(default=None, ge=16, le=_MAX_TOKENS, description="Longest sequence "
                                      "(prompt + output) in tokens (--max-model-len). Bounds KV-cache use "
                                      "per sequence; the planner checks one sequence fits.")
    max_num_seqs: int | None = Field(default=None, ge=1, le=65536, description="Most sequences in one "
                                     "batch (--max-num-seqs): the concurrency of one replica. Requests "
                                     "beyond it wait in the queue (vllm:num_requests_waiting).")
    max_num_batched_tokens: int | None = Field(default=None, ge=1, le=_MAX_TOKENS, description="Token "
                                               "budget of one scheduler step (--max-num-batched-tokens); "
                                               "with chunked prefill, long prompts are split to fit it.")
    block_size: Literal[8, 16, 32, 64, 128, 256] | None = Field(default=None, description="Tokens per "
                                                               "KV-cache block, PagedAttention's page "
                                                               "(--block-size).")
    gpu_memory_utilization: float | None = Field(default=None, gt=0, le=1, description="Fraction of each "
                                                 "GPU's memory vLLM may use for weights, activations and "
                                                 "KV cache (--gpu-memory-utilization, vLLM 0.32 default 0.92).")
    dtype: Dtype | None = Field(default=None, description="Weight and activation dtype (--dtype).")
    quantization: Quantization | None = Field(default=None, description="Weight quantization method "
                                              "(--quantization), e.g. awq or awq_marlin for AWQ repos, "
                                              "fp8 for FP8 weights.")
    kv_cache_dtype: KvCacheDtype | None = Field(default=None, description="KV-cache dtype "
                                                "(--kv-cache-dtype); fp8 halves KV memory per token.")
    enforce_eager: bool | None = Field(default=None, description="Disable CUDA graphs (--enforce-eager): "
                                       "less memory and faster start, slower decode.")
    enable_prefix_caching: bool | None = Field(default=None, description="Reuse KV blocks of shared "
                                               "prompt prefixes (--enable-prefix-caching).")
    enable_chunked_prefill: bool | None = Field(default=None, description="Split long prompts across "
                                                "steps so decodes keep flowing (--enable-chunked-prefill; on "
                                                "by default in vLLM's V1 engine).")
    kv_offload_gi_b: float | None = Field(default=None, alias="kvOffloadGiB", ge=0, le=4096,
                                          description="CPU memory in GiB for offloaded KV blocks "
                                          "(--kv-offloading-size with the native backend). Replaces the "
                                          "removed swap_space. Added to the pod's memory request.")
    cpu_offload_gi_b: float | None = Field(default=None, alias="cpuOffloadGiB", ge=0, le=4096,
                                           description="GiB of weights kept in CPU memory per GPU "
                                           "(--cpu-offload-gb): fits bigger models, costs speed.")
    scheduling_policy: Literal["fcfs", "priority"] | None = Field(default=None, description="Request "
                                                                  "scheduling (--scheduling-policy); "
                                                                  "priority honours each request's "
                                                                  "priority field, e.g. short requests "
                                                                  "first.")
    shutdown_timeout_seconds: int = Field(default=30, ge=0, le=3600, description="Seconds vLLM lets "
                                          "in-flight requests finish after SIGTERM (--shutdown-timeout).")
    startup_timeout_seconds: int = Field(default=1800, ge=60, le=86400, description="How long the "
                                         "startup probe waits for the model to download and load.")
    extra_args: list[Annotated[str, Field(max_length=1024)]] = Field(
        default_factory=list, max_length=_MAX_EXTRA_ARGS, description="Extra vLLM flags, appended after the ones typed "
        "fields produce. Flags that a typed field owns are refused.")
    env: list[EnvVar] = Field(default_factory=list, max_length=64, description="Extra environment "
                              "variables for the vLLM container.")
    rope_scaling: RopeScaling | None = Field(default=None, description="YaRN rope scaling (rendered as "
                                             "--hf-overrides). Set automatically when maxModelLen exceeds "
                                             "the model's native context and its family documents YaRN.")
    # Seed-era knobs that vLLM no longer has: declared so the apiserver can refuse them by name.
    swap_space: float | None = Field(default=None, description="Removed from vLLM; refused. Use "
                                     "kvOffloadGiB.")
    worker_use_ray: bool | None = Field(default=None, description="Removed from vLLM; refused.")
    max_parallel_requests: int | None = Field(default=None, description="Not a vLLM setting; refused. "
                                              "Use maxNumSeqs.")
