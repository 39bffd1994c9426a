"""``spec.parallelism``, ``gpu``, ``nccl``, ``resources``, ``scheduling``, ``service``: the pods and their GPUs."""

from __future__ import annotations

from typing import Annotated, Any, Literal

from pydantic import Field

from qwen_fleet.api.base import (
    DNS_SUBDOMAIN,
    LABEL_VALUE,
    QUALIFIED_NAME,
    RESOURCE_NAME,
    ApiModel,
    Quantity,
    Rule,
    map_keys_rule,
)
from qwen_fleet.api.engine import EnvVar
from qwen_fleet.api.security import (
    cel_no_reserved,
    cel_unique_names,
    first_reserved,
    reserved_env_message,
    unique_names,
)
from qwen_fleet.catalog.gpus import ALL_GPUS

_GPUS = "self.tensor * self.pipeline * self.data"


def _gpus(p: Any) -> int:
    return int(p.tensor * p.pipeline * p.data)


class Parallelism(ApiModel, rules=[
    Rule(cel=_GPUS + " <= 256", check=lambda p: _gpus(p) <= 256,
         message="parallelism.tensor x pipeline x data (GPUs per replica) must be at most 256"),
    Rule(cel="(" + _GPUS + ") % self.nodes == 0", check=lambda p: _gpus(p) % p.nodes == 0,
         message="parallelism.tensor x pipeline x data (GPUs per replica) must divide evenly over "
                 "parallelism.nodes: every pod of a replica gets the same number of GPUs; change nodes or "
                 "data"),
    Rule(cel="(" + _GPUS + ") / self.nodes <= 16", check=lambda p: _gpus(p) // p.nodes <= 16,
         message="more than 16 GPUs per pod (GPUs per replica / parallelism.nodes): no node has that "
                 "many; raise parallelism.nodes"),
    # vLLM infers the data-parallel ranks of a pod as (GPUs per pod) / (tensor x pipeline): a rank either
    # fits in one pod, or spans whole pods; anything else leaves a rank split unevenly across pods.
    Rule(cel="((" + _GPUS + ") / self.nodes) % (self.tensor * self.pipeline) == 0 || "
             "(self.tensor * self.pipeline) % ((" + _GPUS + ") / self.nodes) == 0",
         check=lambda p: (_gpus(p) // p.nodes) % (p.tensor * p.pipeline) == 0
         or (p.tensor * p.pipeline) % (_gpus(p) // p.nodes) == 0,
         message="a data-parallel rank (tensor x pipeline GPUs) must fit in one pod or span whole pods: "
                 "make GPUs per pod (tensor x pipeline x data / nodes) a multiple or a divisor of "
                 "tensor x pipeline"),
    Rule(cel="!has(self.dataLocal) || self.dataLocal * self.nodes == self.data",
         check=lambda p: p.data_local is None or p.data_local * p.nodes == p.data,
         message="parallelism.dataLocal (data-parallel ranks per pod) x parallelism.nodes must equal "
                 "parallelism.data; leave dataLocal unset to derive it"),
    Rule(cel="!self.expert || self.tensor * self.data >= 2",
         check=lambda p: not p.expert or p.tensor * p.data >= 2,
         message="parallelism.expert spreads the experts over tensor x data GPUs: with one GPU there is "
                 "nothing to spread; raise parallelism.data (or tensor)"),
]):
    """How one replica spreads over GPUs and pods. GPUs per replica = tensor x pipeline x data; a replica
    with ``nodes`` > 1 is a LeaderWorkerSet group of that many pods (one leader, nodes - 1 workers)."""

    tensor: int = Field(default=1, ge=1, le=64, description="Tensor-parallel size "
                        "(--tensor-parallel-size): GPUs that split every layer. Must divide the model's "
                        "attention heads; the planner checks.")
    pipeline: int = Field(default=1, ge=1, le=64, description="Pipeline-parallel size "
                          "(--pipeline-parallel-size): GPUs that split the layer stack.")
    data: int = Field(default=1, ge=1, le=64, description="Data-parallel ranks of one replica in total "
                      "(--data-parallel-size): engine copies that share one API server and, with expert, "
                      "the experts. Meant for MoE models; a dense model is better served by more replicas.")
    data_local: int | None = Field(default=None, ge=1, le=64, description="Data-parallel ranks per pod "
                                   "(--data-parallel-size-local). Default: data / nodes.")
    expert: bool = Field(default=False, description="Expert parallelism (--enable-expert-parallel): the "
                         "experts of a MoE model are spread over tensor x data GPUs instead of each being "
                         "split by tensor. MoE models only; the planner refuses it for dense models.")
    nodes: int = Field(default=1, ge=1, le=16, description="Pods (nodes) per replica. Above 1 a replica "
                       "is a LeaderWorkerSet group: vLLM's multi-node launch without Ray "
                       "(--nnodes/--node-rank/--master-addr, --headless workers).")

    @property
    def gpus_per_replica(self) -> int:
        return _gpus(self)

    @property
    def gpus_per_pod(self) -> int:
        return _gpus(self) // self.nodes

    @property
    def expert_size(self) -> int:
        """GPUs the experts spread over with expert parallelism (vLLM: tensor x data)."""
        return self.tensor * self.data if self.expert else 1


MIG_PROFILE = r"^[1-7]g\.[0-9]{1,3}gb$"
TIME_SLICED_RESOURCE = "nvidia.com/gpu.shared"


class GpuSharing(ApiModel, rules=[Rule(
    cel="has(self.mig) != has(self.timeSlices)",
    check=lambda g: (g.mig is None) != (g.time_slices is None),
    message="gpu.sharing names exactly one of mig (a MIG profile) or timeSlices (engines per time-sliced GPU)",
)]):
    """One GPU shared by several engines: a MIG slice, or a time-sliced share (NVIDIA device plugin)."""

    mig: str | None = Field(default=None, pattern=MIG_PROFILE, description="MIG profile of the slice each engine "
                            "gets, e.g. 1g.10gb, 2g.20gb, 3g.40gb (A100/H100 80GB) or 1g.18gb (H200): the pod "
                            "requests nvidia.com/mig-<profile> (the device plugin's mixed MIG strategy) and the "
                            "planner uses the slice's memory. With a catalogued gpu.product, only the profiles "
                            "NVIDIA documents for it are accepted.")
    time_slices: int | None = Field(default=None, ge=2, le=48, description="Engines sharing one time-sliced GPU "
                                    "(the device plugin's replicas, renameByDefault: true): the pod requests "
                                    "nvidia.com/gpu.shared, and engine.gpuMemoryUtilization must leave room for "
                                    "the others (at most 1/timeSlices).")

    @property
    def resource_name(self) -> str:
        return f"nvidia.com/mig-{self.mig}" if self.mig else TIME_SLICED_RESOURCE

    @property
    def mig_memory_gib(self) -> float | None:
        """The slice's memory as its profile names it (GB, 10^9 bytes): at or below what NVML reports."""
        return int(self.mig.split(".")[1][:-2]) * 1e9 / 1024**3 if self.mig else None


# The MIG profiles NVIDIA documents per gpu.product label (catalog/mig.py); other spellings of a catalogued GPU
# are checked by the planner (MigProfileUnsupported).
MIG_PROFILES_BY_PRODUCT = {g.product: tuple(p.name for p in g.mig_profiles) for g in ALL_GPUS if g.mig_profiles}
_CEL_MIG = "{" + ", ".join(f"'{k}': {list(v)}" for k, v in MIG_PROFILES_BY_PRODUCT.items()) + "}"
_CEL_MIG_TEXT = "{" + ", ".join(f"'{k}': '{', '.join(v)}'" for k, v in MIG_PROFILES_BY_PRODUCT.items()) + "}"


def _mig_fits(g: Any) -> bool:
    return g.sharing is None or g.sharing.mig is None or g.product is None \
        or g.product not in MIG_PROFILES_BY_PRODUCT or g.sharing.mig in MIG_PROFILES_BY_PRODUCT[g.product]


class GpuSpec(ApiModel, rules=[Rule(
    cel="!has(self.sharing) || !has(self.resourceName) || self.resourceName == 'nvidia.com/gpu'",
    check=lambda g: g.sharing is None or g.resource_name == "nvidia.com/gpu",
    message="gpu.sharing sets the resource the pod requests (nvidia.com/mig-<profile> or nvidia.com/gpu.shared): "
            "leave gpu.resourceName unset",
), Rule(
    cel="!has(self.sharing) || !has(self.sharing.mig) || !has(self.product) || !(self.product in " + _CEL_MIG
        + ") || self.sharing.mig in " + _CEL_MIG + "[self.product]",
    check=_mig_fits,
    message="gpu.sharing.mig must be a MIG profile NVIDIA documents for gpu.product",
    message_expression="'gpu.sharing.mig ' + self.sharing.mig + ' is not a MIG profile of ' + self.product + "
                       "': use one of ' + " + _CEL_MIG_TEXT + "[self.product]",
    message_for=lambda g: f"gpu.sharing.mig {g.sharing.mig} is not a MIG profile of {g.product}: use one of "
                          f"{', '.join(MIG_PROFILES_BY_PRODUCT[g.product])}",
)]):
    """The GPU type replicas run on."""

    product: str | None = Field(default=None, max_length=63, pattern=LABEL_VALUE, description="GPU model "
                                "as NVIDIA GPU feature discovery labels nodes (nvidia.com/gpu.product), "
                                "e.g. NVIDIA-A10G or NVIDIA-H100-80GB-HBM3. Pods are pinned to it and the "
                                "planner reads its memory.")
    resource_name: str = Field(default="nvidia.com/gpu", max_length=253,
                               pattern=RESOURCE_NAME,
                               description="Extended resource that counts GPUs on nodes.")
    memory_gi_b: float | None = Field(default=None, alias="memoryGiB", gt=0, le=4096,
                                      description="GPU memory in GiB for planning, when the product is not "
                                      "in the catalog or to override it.")
    sharing: GpuSharing | None = Field(default=None, description="Share one GPU between engines (MIG slice or "
                                       "time-slicing). One GPU per replica only: parallelism stays 1.")

    @property
    def requested_resource(self) -> str:
        """The extended resource a pod requests: the sharing's, else resourceName."""
        return self.sharing.resource_name if self.sharing else self.resource_name


class NcclPreflight(ApiModel):
    """An all-reduce check in an init container before vLLM starts: NCCL across the GPUs of a multi-GPU replica;
    on device CPU, torch.distributed's gloo backend between 2 processes in the pod."""

    enabled: bool = Field(default=False, description="Run the all-reduce preflight before serving (device GPU: "
                          "NCCL, at least 2 GPUs per replica; device CPU: gloo, 2 processes).")
    max_small_message_latency_microseconds: float | None = Field(
        default=None, gt=0, le=1_000_000, description="Fail when the all-reduce latency of a small message "
        "(8 B to 64 KiB) exceeds this many microseconds. Default: 50 on device GPU; not judged on device CPU, "
        "where a gloo all-reduce over loopback takes from tens of microseconds to milliseconds.")
    min_bus_bandwidth_g_bps: float = Field(
        default=0, ge=0, le=100_000, alias="minBusBandwidthGBps",
        description="Fail when the large-message all-reduce bus bandwidth (nccl-tests definition) is below "
        "this many GB/s; 0 only reports it.")


class NcclSpec(ApiModel, rules=[Rule(
    cel="!has(self.env) || self.env.all(e, e.name.startsWith('NCCL_') || e.name.startsWith('TORCH_NCCL_'))",
    check=lambda n: all(e.name.startswith(("NCCL_", "TORCH_NCCL_")) for e in n.env),
    message="nccl.env may only set NCCL_* and TORCH_NCCL_* variables; use engine.env for others",
), Rule(
    cel=cel_no_reserved("self.env"),
    check=lambda n: first_reserved(n.env) is None,
    message=reserved_env_message("nccl.env"),
), Rule(cel=cel_unique_names("self.env"), check=lambda n: unique_names(n.env),
        message="nccl.env names must be unique (a second definition of a name would hide the first)")]):
    """NCCL and torch.distributed settings for multi-GPU replicas (set on every GPU pod)."""

    debug: Literal["VERSION", "WARN", "INFO", "TRACE"] | None = Field(
        default="WARN", description="NCCL_DEBUG: WARN reports fabric errors; INFO/TRACE for debugging.")
    ib_disable: bool | None = Field(default=None, description="NCCL_IB_DISABLE: true where the nodes have "
                                    "no InfiniBand/RoCE (unset lets NCCL detect).")
    p2p_disable: bool | None = Field(default=None, alias="p2pDisable", description="NCCL_P2P_DISABLE: true only as a "
                                     "workaround for broken peer-to-peer; it costs bandwidth.")
    socket_ifname: str | None = Field(default=None, max_length=256, pattern=r"^[A-Za-z0-9^=,._:-]+$",
                                      description="NCCL_SOCKET_IFNAME: network interface(s) for NCCL's "
                                      "socket transport, e.g. eth0 or ^lo,docker.")
    async_error_handling: bool = Field(default=True, description="TORCH_NCCL_ASYNC_ERROR_HANDLING=1: a "
                                       "hung or failed collective aborts the process so the pod restarts "
                                       "instead of hanging.")
    env: list[EnvVar] = Field(default_factory=list, max_length=32,
                              description="More NCCL_*/TORCH_NCCL_* variables.")
    preflight: NcclPreflight = Field(default_factory=NcclPreflight,
                                     description="All-reduce latency and bandwidth check before serving.")


class Resources(ApiModel):
    """CPU and memory of each replica (GPUs come from parallelism)."""

    cpu: Quantity | None = Field(default=None, description="CPU request and limit, e.g. 8.")
    memory: Quantity | None = Field(default=None, description="Memory request and limit, e.g. 64Gi. The "
                                    "shared-memory volume and kvOffloadGiB are added on top.")
    shm_size: Quantity | None = Field(default=None, description="Size of the memory-backed /dev/shm. "
                                      "Default: 1Gi for one GPU, 4Gi per GPU (at most 32Gi) for tensor "
                                      "or pipeline parallelism, where workers exchange tensors through it.")


class Toleration(ApiModel, rules=[
    Rule(cel="(has(self.key) && self.key != '') || (has(self.operator) && self.operator == 'Exists')",
         check=lambda t: bool(t.key) or t.operator == "Exists",
         message="a toleration without a key must use operator Exists (it then tolerates every taint)"),
    Rule(cel="!(has(self.operator) && self.operator == 'Exists' && has(self.value) && self.value != '')",
         check=lambda t: not (t.operator == "Exists" and t.value),
         message="a toleration with operator Exists takes no value"),
    Rule(cel="!has(self.tolerationSeconds) || (has(self.effect) && self.effect == 'NoExecute')",
         check=lambda t: t.toleration_seconds is None or t.effect == "NoExecute",
         message="tolerationSeconds applies only to effect NoExecute"),
]):
    """A core Toleration."""

    key: str | None = Field(default=None, max_length=316, pattern="^(" + QUALIFIED_NAME[1:-1] + ")?$",
                            description="Taint key; empty with Exists matches all.")
    operator: Literal["Exists", "Equal"] | None = Field(default=None, description="Exists or Equal.")
    value: str | None = Field(default=None, max_length=63, pattern=LABEL_VALUE,
                              description="Taint value for Equal.")
    effect: Literal["NoSchedule", "PreferNoSchedule", "NoExecute"] | None = Field(
        default=None, description="Taint effect; empty matches all.")
    toleration_seconds: int | None = Field(default=None, ge=0, le=10**9, description="How long a NoExecute "
                                           "taint is tolerated.")


class Affinity(ApiModel):
    """A core Affinity: its three parts are passed through as written (the apiserver checks them)."""

    node_affinity: dict[str, Any] | None = Field(default=None, description="A core NodeAffinity.")
    pod_affinity: dict[str, Any] | None = Field(default=None, description="A core PodAffinity.")
    pod_anti_affinity: dict[str, Any] | None = Field(default=None, description="A core PodAntiAffinity.")


LabelValue = Annotated[str, Field(max_length=63, pattern=LABEL_VALUE)]


class Scheduling(ApiModel, rules=[map_keys_rule("nodeSelector", QUALIFIED_NAME, "scheduling.nodeSelector")]):
    """Where replicas may run, beyond the GPU product."""

    node_selector: dict[str, LabelValue] = Field(default_factory=dict, max_length=32,
                                                 description="Extra node labels to match.")
    tolerations: list[Toleration] = Field(default_factory=list, max_length=32, description="Extra "
                                          "tolerations; the nvidia.com/gpu taint is always tolerated.")
    affinity: Affinity | None = Field(default=None, description="A core Affinity, passed through.")
    priority_class_name: str | None = Field(default=None, max_length=253, pattern=DNS_SUBDOMAIN,
                                            description="PriorityClass of the pods.")
    runtime_class_name: str | None = Field(default=None, max_length=253, pattern=DNS_SUBDOMAIN,
                                           description="RuntimeClass, e.g. nvidia where the GPU runtime is "
                                           "not the default.")
    topology_key: str | None = Field(default=None, max_length=316, pattern=QUALIFIED_NAME,
                                     description="Multi-node replicas (parallelism.nodes > 1): a node label "
                                     "whose domain (rack, NVLink or network block) holds one whole group and "
                                     "no other, so a group's traffic stays inside it (LeaderWorkerSet "
                                     "exclusive topology). Ignored for single-node replicas.")


class ServiceSpec(ApiModel, rules=[map_keys_rule("annotations", QUALIFIED_NAME, "service.annotations")]):
    """The Service in front of the replicas: OpenAI-compatible API and /metrics on one port."""

    type: Literal["ClusterIP", "NodePort", "LoadBalancer"] = Field(default="ClusterIP",
                                                                   description="Service type.")
    port: int = Field(default=8000, ge=1, le=65535, description="Port of the Service and of vLLM.")
    annotations: dict[str, Annotated[str, Field(max_length=4096)]] = Field(
        default_factory=dict, max_length=64, description="Annotations for the Service (e.g. load-balancer "
        "settings).")
