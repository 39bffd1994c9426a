"""The QwenBatch resource: OpenAI batch JSONL through a fleet (``fleetRef``) or on its own GPUs (``dedicated``).

One-of choices (input source, output sink, mode) are written as optional sub-objects with a rule that exactly
one is set, as core Kubernetes does for volume sources; each rule carries its CEL and its Python check side
by side (api/base.py), so `kubectl apply` and `qwen-fleet` refuse the same specs with the same words.
"""

from __future__ import annotations

from typing import Any, Literal

from pydantic import Field

from qwen_fleet.api.base import (
    DNS_LABEL,
    DNS_SUBDOMAIN,
    IMAGE,
    LABEL_VALUE,
    QUALIFIED_NAME,
    RESOURCE_NAME,
    TOKEN,
    ApiModel,
    NamedObject,
    Quantity,
    Rule,
    map_keys_rule,
)
from qwen_fleet.api.engine import EnvVar, PvcSource
from qwen_fleet.api.fleet import LabelValue, Toleration
from qwen_fleet.api.resource import NAME_FORMAT_RULE, Condition
from qwen_fleet.batchrun.sinks import CONFIGMAP_LIMIT, FlushPolicy
from qwen_fleet.group import API_VERSION

BATCH_KIND = "QwenBatch"
BATCH_PLURAL = "qwenbatches"
BATCH_SINGULAR = "qwenbatch"
BATCH_SHORT_NAMES = ("qwb",)
# The Job is named after the batch, and its pods after the Job (plus 6 characters): 52 as for QwenInference.
BATCH_MAX_NAME_LENGTH = 52
# vLLM schedules the lower value first (--scheduling-policy priority); interactive requests carry 0 unless
# they say otherwise, so 10 puts batch lines behind them.
DEFAULT_BATCH_PRIORITY = 10
# A relative path inside a claim: no leading '/', no '..' segment, the TOKEN alphabet.
RELATIVE_PATH = r"^[A-Za-z0-9._+=@:-]+(/[A-Za-z0-9._+=@:-]+)*$"
CONFIGMAP_KEY = r"^[-._a-zA-Z0-9]+$"
# The Job's pod template cannot change, and a batch half done with one spec and half with another has no
# meaning: a different batch is a new QwenBatch (pointed at the same output, it resumes).
# The runner keeps every custom_id of the input in memory and reads the input twice: bound it by default.
DEFAULT_MAX_INPUT_BYTES = 1 << 30
DEFAULT_MAX_INPUT_LINES = 1_000_000
CONFIGMAP_OUTPUT_MESSAGE = (f"output.configMap holds at most {CONFIGMAP_LIMIT} bytes and the answers of an input "
                            "larger than that cannot fit: use output.pvc, or (for an input from a url or pvc) set "
                            f"input.maxBytes to at most {CONFIGMAP_LIMIT}")
IMMUTABLE_SPEC_MESSAGE = ("spec is immutable: delete the QwenBatch and create it again (with the same output it "
                          "resumes where it stopped)")


def _exactly_one(fields: tuple[str, ...], where: str) -> Rule:
    cel = " + ".join(f"(has(self.{f}) ? 1 : 0)" for f in fields) + " == 1"
    snake = {f: "".join(f"_{c.lower()}" if c.isupper() else c for c in f) for f in fields}
    names = ", ".join(fields[:-1]) + f" or {fields[-1]}"
    return Rule(cel=cel, check=lambda s: sum(getattr(s, snake[f]) is not None for f in fields) == 1,
                message=f"{where} needs exactly one of {names}")


def _no_dot_dot(path: str) -> bool:
    return ".." not in path.split("/")


_PATH_RULE = Rule(cel="!self.path.split('/').exists(p, p == '..')", check=lambda s: _no_dot_dot(s.path),
                  message="path must stay inside the claim: no '..' segment")


class ConfigMapSource(ApiModel):
    """A key of a ConfigMap in the batch's namespace."""

    name: str = Field(max_length=253, pattern=DNS_SUBDOMAIN, description="ConfigMap name.")
    key: str = Field(default="input.jsonl", max_length=253, pattern=CONFIGMAP_KEY,
                     description="Key holding the JSONL (default input.jsonl).")


class PvcFile(ApiModel, rules=[_PATH_RULE]):
    """A file on a PersistentVolumeClaim in the batch's namespace."""

    claim_name: str = Field(max_length=253, pattern=DNS_SUBDOMAIN, description="PersistentVolumeClaim name.")
    path: str = Field(max_length=1024, pattern=RELATIVE_PATH, description="Path of the JSONL file inside the "
                      "claim, relative to its root.")


class BatchInput(ApiModel, rules=[_exactly_one(("configMap", "pvc", "url"), "input")]):
    """Where the requests are: OpenAI batch JSONL, one {custom_id, method, url, body} per line."""

    config_map: ConfigMapSource | None = Field(default=None, description="A ConfigMap key (up to ~1 MiB).")
    pvc: PvcFile | None = Field(default=None, description="A file on a claim.")
    url: str | None = Field(default=None, max_length=2048, pattern=r"^https?://[^\s]+$",
                            description="An http(s) URL the Job downloads the JSONL from. Status, Events and "
                            "logs name it without its query string and credentials.")
    max_bytes: int = Field(default=DEFAULT_MAX_INPUT_BYTES, ge=1, le=1 << 40, description="The largest input "
                           "accepted, in bytes (default 1 GiB): a larger one fails the batch with that reason, "
                           "and a download stops there.")
    max_lines: int = Field(default=DEFAULT_MAX_INPUT_LINES, ge=1, le=100_000_000, description="The most lines "
                           "accepted (default 1,000,000): the runner keeps each line's custom_id in memory.")


class ConfigMapSink(ApiModel):
    name: str = Field(max_length=253, pattern=DNS_SUBDOMAIN, description="ConfigMap the Job writes: keys "
                      "output.jsonl and errors.jsonl. Created if missing; it is not deleted with the batch. "
                      "A ConfigMap holds at most 1 MiB: use a claim for more.")
    flush_seconds: int = Field(default=int(FlushPolicy.seconds), ge=1, le=300, description="At most one write "
                               "of the ConfigMap per this many seconds (and one at the end); a write also waits "
                               "until the new records add a quarter to what is written, so all writes together "
                               "stay within a few times the final size.")


class PvcDirectory(ApiModel, rules=[_PATH_RULE]):
    claim_name: str = Field(max_length=253, pattern=DNS_SUBDOMAIN, description="PersistentVolumeClaim name.")
    path: str = Field(max_length=1024, pattern=RELATIVE_PATH, description="Directory inside the claim: the "
                      "Job writes output.jsonl and errors.jsonl there.")


class BatchOutput(ApiModel, rules=[_exactly_one(("configMap", "pvc"), "output")]):
    """Where results go, in the OpenAI batch output format: output.jsonl (2xx answers) and errors.jsonl."""

    config_map: ConfigMapSink | None = Field(default=None, description="A ConfigMap (small batches).")
    pvc: PvcDirectory | None = Field(default=None, description="A directory on a claim.")


class FleetRef(ApiModel):
    name: str = Field(max_length=63, pattern=DNS_LABEL, description="A QwenInference in the batch's namespace.")


class DedicatedResources(ApiModel):
    cpu: Quantity | None = Field(default=None, description="CPU request and limit.")
    memory: Quantity | None = Field(default=None, description="Memory request and limit.")


class DedicatedSpec(ApiModel):
    """Run the batch with `vllm run-batch` on GPUs of its own (no fleet needed)."""

    model: str = Field(max_length=256, pattern=TOKEN, description="Model repo id (or a path in the image). With "
                       "modelClaim, the name the lines' body.model use (--served-model-name).")
    revision: str | None = Field(default=None, max_length=128, pattern=TOKEN, description="Model revision.")
    model_claim: PvcSource | None = Field(default=None, description="Read the weights from this claim (mounted at "
                                          "/models, the model directory at its path) instead of downloading them: "
                                          "air-gapped clusters, or the claim a fleet serves from.")
    image: str | None = Field(default=None, max_length=512, pattern=IMAGE, description="vLLM image (default: "
                              "the operator's default engine image).")
    gpus: int = Field(default=1, ge=0, le=16, description="GPUs of the pod; vLLM's --tensor-parallel-size. 0 "
                      "runs a CPU build of vLLM (image must be one).")
    gpu_resource_name: str = Field(default="nvidia.com/gpu", max_length=316, pattern=RESOURCE_NAME,
                                   description="Extended resource the GPUs are requested as.")
    resources: DedicatedResources = Field(default_factory=DedicatedResources, description="CPU and memory.")
    max_model_len: int | None = Field(default=None, ge=16, le=10_000_000, description="--max-model-len.")
    max_num_seqs: int | None = Field(default=None, ge=1, le=65536, description="--max-num-seqs.")
    gpu_memory_utilization: float | None = Field(default=None, gt=0, le=1,
                                                 description="--gpu-memory-utilization.")
    dtype: Literal["auto", "bfloat16", "float16", "float32"] | None = Field(default=None, description="--dtype.")
    enforce_eager: bool | None = Field(default=None, description="--enforce-eager: no CUDA graphs or torch.compile "
                                       "(a CPU image without a C compiler needs it).")
    queue_name: str | None = Field(default=None, max_length=63, pattern=LABEL_VALUE, description="Kueue "
                                   "LocalQueue: the Job gets kueue.x-k8s.io/queue-name and is created "
                                   "suspended, for Kueue to admit it onto free GPUs.")
    node_selector: dict[str, str] = Field(default_factory=dict, description="Node labels the pod needs.")
    env: list[EnvVar] = Field(default_factory=list, max_length=64, description="Extra environment of the vLLM "
                              "container (e.g. VLLM_CPU_KVCACHE_SPACE for a CPU build); replaces a default of "
                              "the same name.")


class BatchScheduling(ApiModel, rules=[map_keys_rule("nodeSelector", QUALIFIED_NAME, "scheduling.nodeSelector")]):
    """Where the batch's pod may run. Through a fleet it is a light client (100m CPU), and with no placement it
    goes to any schedulable node; dedicated, dedicated.nodeSelector and the GPU toleration are added to this."""

    node_selector: dict[str, LabelValue] = Field(default_factory=dict, max_length=32,
                                                 description="Node labels the pod needs.")
    tolerations: list[Toleration] = Field(default_factory=list, max_length=32, description="Taints the pod "
                                          "tolerates.")
    priority_class_name: str | None = Field(default=None, max_length=253, pattern=DNS_SUBDOMAIN,
                                            description="PriorityClass of the pod.")


class QwenBatchSpec(ApiModel, rules=[
    _exactly_one(("fleetRef", "dedicated"), "spec"),
    Rule(cel="!has(self.dedicated) || has(self.output.pvc)",
         check=lambda s: s.dedicated is None or s.output.pvc is not None,
         message="dedicated mode needs output.pvc: vllm run-batch writes files, not ConfigMaps"),
    Rule(cel=f"!has(self.output.configMap) || has(self.input.configMap) || self.input.maxBytes <= {CONFIGMAP_LIMIT}",
         check=lambda s: s.output.config_map is None or s.input.config_map is not None
         or s.input.max_bytes <= CONFIGMAP_LIMIT,
         message=CONFIGMAP_OUTPUT_MESSAGE),
]):
    """Desired state of one batch."""

    input: BatchInput = Field(description="The requests (OpenAI batch JSONL).")
    output: BatchOutput = Field(description="Where results and errors go.")
    fleet_ref: FleetRef | None = Field(default=None, description="Send the requests to this QwenInference's "
                                       "Service, behind interactive traffic (priority).")
    dedicated: DedicatedSpec | None = Field(default=None, description="Run vllm run-batch on own GPUs.")
    scheduling: BatchScheduling = Field(default_factory=BatchScheduling, description="Where the Job's pod "
                                        "runs (both modes).")
    concurrency: int = Field(default=4, ge=1, le=256, description="Requests in flight at once (fleet mode).")
    priority: int = Field(default=DEFAULT_BATCH_PRIORITY, ge=-1_000_000, le=1_000_000, description="vLLM "
                          "request priority added to each body (fleet mode): lower runs first, interactive "
                          "requests default to 0. Takes effect on a fleet with engine.schedulingPolicy: "
                          "priority.")
    max_retries: int = Field(default=3, ge=0, le=20, description="Retries of one line on a connection error, "
                             "429 or 5xx, before it is written to errors.jsonl.")
    request_timeout_seconds: int = Field(default=600, ge=1, le=86400, description="Timeout of one request.")
    backoff_limit: int = Field(default=3, ge=0, le=100, description="Failed pods before the Job (and the "
                               "batch) is Failed; a new pod resumes where the last stopped.")
    active_deadline_seconds: int | None = Field(default=None, ge=1, description="Job deadline.")


class QwenBatchStatus(ApiModel):
    """Observed state. Counts and throughput are reported by the Job's runner; conditions by the operator."""

    observed_generation: int | None = Field(default=None, description="Generation last acted on.")
    conditions: list[Condition] = Field(default_factory=list, description="Ready, Reconciling, Stalled "
                                        "(kstatus) and Complete / Failed (kubectl wait --for=condition=Complete).",
                                        json_schema_extra={"x-kubernetes-list-type": "map",
                                                           "x-kubernetes-list-map-keys": ["type"]})
    job: str | None = Field(default=None, description="The Job doing the work.")
    state: Literal["Pending", "Running", "Complete", "Failed", "Stalled"] | None = Field(
        default=None, description="Summary for the STATUS column; conditions are the API.")
    start_time: str | None = Field(default=None, description="When the Job started (RFC 3339).")
    completion_time: str | None = Field(default=None, description="When the Job completed (RFC 3339).")
    total: int | None = Field(default=None, description="Lines in the input.")
    completed: int | None = Field(default=None, description="Lines in output.jsonl (answered 2xx).")
    failed: int | None = Field(default=None, description="Lines in errors.jsonl (malformed, refused, or out "
                               "of retries).")
    prompt_tokens: int | None = Field(default=None, description="Prompt tokens of the completed lines.")
    completion_tokens: int | None = Field(default=None, description="Completion tokens of the completed lines.")
    tokens_per_second: float | None = Field(default=None, description="Completion tokens per second of the "
                                            "current attempt.")
    eta_seconds: int | None = Field(default=None, description="Seconds left at the current rate.")
    progress_time: str | None = Field(default=None, description="When the runner last reported (RFC 3339).")


BATCH_NAME_RULE = Rule(
    cel=f"size(self.metadata.name) <= {BATCH_MAX_NAME_LENGTH}",
    check=lambda r: len(r.metadata.get("name", "")) <= BATCH_MAX_NAME_LENGTH,
    message=f"metadata.name must be at most {BATCH_MAX_NAME_LENGTH} characters: the Job and its pods are "
            "named after it",
)


class QwenBatch(NamedObject, ApiModel, rules=[BATCH_NAME_RULE, NAME_FORMAT_RULE]):
    """A batch of OpenAI-format requests run by a Job, through a fleet or on dedicated GPUs."""

    # The Literal and its default must be written out; tests/unit/test_group.py holds them to API_VERSION.
    api_version: Literal["qwenfleet.io/v1alpha1"] = Field(default="qwenfleet.io/v1alpha1", alias="apiVersion",
                                                          description=API_VERSION)
    kind: Literal["QwenBatch"] = Field(default="QwenBatch", description="QwenBatch")
    metadata: dict[str, Any] = Field(default_factory=dict, description="Standard object metadata.")
    spec: QwenBatchSpec = Field(description="Desired state.")
    status: QwenBatchStatus | None = Field(default=None, description="Observed state.")

