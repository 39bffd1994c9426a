"""One table of invalid QwenInference specs, used against both layers: the real apiserver (CRD schema and CEL)
and the pydantic models (``qwen-fleet render``). Each case names what a person should read in the error.
"""

from __future__ import annotations

import copy
import re
from dataclasses import dataclass
from typing import Any

BASE: dict[str, Any] = {"model": {"name": "Qwen/Qwen3-4B-Instruct-2507"}}


@dataclass(frozen=True)
class Case:
    id: str
    spec: dict[str, Any]  # merged over BASE (a value of None deletes the key)
    apiserver: str  # substring of the apiserver's message
    pydantic: str  # substring of the pydantic error
    name: str = "bad"


def merged(patch: dict[str, Any], base: dict[str, Any] | None = None) -> dict[str, Any]:
    out = copy.deepcopy(base if base is not None else BASE)
    for key, value in patch.items():
        if value is None:
            out.pop(key, None)
        elif isinstance(value, dict) and isinstance(out.get(key), dict):
            out[key] = merged(value, out[key])
        else:
            out[key] = copy.deepcopy(value)
    return out


def _rule(id: str, spec: dict[str, Any], message: str) -> Case:
    """A cross-field rule: both layers carry the very same message."""
    return Case(id, spec, message, message)


def _unknown_flag(token: str, hint: str) -> Case:
    """A flag vLLM 0.32 does not have, or an abbreviation: refused at apply, naming the flag meant."""
    key = "--" + token[2:].split("=", maxsplit=1)[0].replace("_", "-") if token.startswith("--") else token
    case_id = "extra-args-unknown-" + re.sub("[^a-z0-9]+", "-", key).strip("-")
    return _rule(case_id, {"engine": {"extraArgs": ["--seed", "7", token, "x"]}},
                 f"engine.extraArgs: {key} is not a flag of vLLM 0.32.0 (write flags in full); {hint}")


# Misspelt, removed and abbreviated flags, with what the message suggests.
UNKNOWN_FLAGS: list[tuple[str, str]] = [
    ("--tool-call-parsr", "did you mean --tool-call-parser?"),
    ("--enable-auto-tool-choise", "did you mean --enable-auto-tool-choice?"),
    ("--reasoning-parsr", "did you mean --reasoning-parser?"),
    ("--max-loraz", "did you mean --max-loras?"),
    ("--uvicorn-log-levl", "did you mean --uvicorn-log-level?"),
    ("--hf_overide", "did you mean --hf-overrides?"),
    ("--limit-mm-per-promt", "did you mean --limit-mm-per-prompt?"),
    ("--speculative_confg=x", "did you mean --speculative-config?"),
    ("--kv-transfer-confg", "did you mean --kv-transfer-config?"),
    ("--disable-log-requests", "did you mean --enable-log-requests?"),
    ("--enabel-prefix-caching", "did you mean --enable-prefix-caching?"),
    ("--gpu-memory-utilisation", "did you mean --gpu-memory-utilization?"),
    ("-tp2", "did you mean -tp?"),
    ("--tokenizer-mod", "did you mean --tokenizer-mode?"),
    ("--enable-prompt-token", "did you mean --enable-prompt-tokens-details?"),
    ("--chat-templat", "it could be any of --chat-template, --chat-template-content-format"),
    ("--max-num", "it could be any of --max-num-active-seqs, --max-num-batched-tokens"),
    ("--enable", "it abbreviates"),
    ("--foo; rm -rf /", "see docs/vllm-contract.md for the flags"),
]


CASES: list[Case] = [
    _rule("min-above-max", {"autoscaling": {"enabled": True, "minReplicas": 5, "maxReplicas": 2}},
          "autoscaling.minReplicas must not exceed autoscaling.maxReplicas"),
    _rule("autoscaling-without-max", {"autoscaling": {"enabled": True}},
          "autoscaling.maxReplicas is required when autoscaling is enabled"),
    _rule("replicas-with-autoscaling", {"replicas": 2, "autoscaling": {"enabled": True, "maxReplicas": 3}},
          "spec.replicas cannot be set while autoscaling is enabled"),
    _rule("keda-scale-to-zero", {"autoscaling": {"enabled": True, "engine": "keda", "minReplicas": 0, "maxReplicas": 3,
                                                 "keda": {"prometheusAddress": "http://prometheus.monitoring:9090"}}},
          "autoscaling.minReplicas 0 (scale to zero) is not supported yet with engine keda"),
    _rule("hpa-scale-to-zero", {"autoscaling": {"enabled": True, "minReplicas": 0, "maxReplicas": 3}},
          "autoscaling.minReplicas must be at least 1 with engine hpa"),
    _rule("keda-without-prometheus", {"autoscaling": {"enabled": True, "engine": "keda", "maxReplicas": 3}},
          "autoscaling.keda.prometheusAddress is required with engine keda"),
    Case("keda-prometheus-not-a-url", {"autoscaling": {"enabled": True, "engine": "keda", "maxReplicas": 3,
                                                       "keda": {"prometheusAddress": "prometheus:9090"}}},
         "spec.autoscaling.keda.prometheusAddress: Invalid value", "String should match pattern"),
    Case("autoscaling-engine-unknown", {"autoscaling": {"engine": "vpa"}},
         'spec.autoscaling.engine: Unsupported value: "vpa"', "Input should be 'hpa' or 'keda'"),
    Case("gpu-mem-util-above-1", {"engine": {"gpuMemoryUtilization": 1.5}},
         "spec.engine.gpuMemoryUtilization: Invalid value: 1.5", "less than or equal to 1"),
    Case("gpu-mem-util-zero", {"engine": {"gpuMemoryUtilization": 0}},
         "spec.engine.gpuMemoryUtilization: Invalid value: 0", "greater than 0"),
    _rule("batched-below-model-len-no-chunking",
          {"engine": {"maxModelLen": 8192, "maxNumBatchedTokens": 2048, "enableChunkedPrefill": False}},
          "engine.maxNumBatchedTokens must be at least engine.maxModelLen when enableChunkedPrefill is false"),
    _rule("batched-below-num-seqs", {"engine": {"maxNumSeqs": 256, "maxNumBatchedTokens": 128}},
          "engine.maxNumBatchedTokens must be at least engine.maxNumSeqs"),
    Case("tensor-zero", {"parallelism": {"tensor": 0}}, "spec.parallelism.tensor: Invalid value: 0",
         "greater than or equal to 1"),
    Case("pipeline-negative", {"parallelism": {"pipeline": -1}}, "spec.parallelism.pipeline: Invalid value: -1",
         "greater than or equal to 1"),
    Case("nodes-above-16", {"parallelism": {"nodes": 32}}, "spec.parallelism.nodes: Invalid value: 32",
         "less than or equal to 16"),
    _rule("too-many-gpus", {"parallelism": {"tensor": 64, "pipeline": 8}},
          "parallelism.tensor x pipeline x data (GPUs per replica) must be at most 256"),
    _rule("too-many-gpus-per-pod", {"parallelism": {"tensor": 16, "pipeline": 8}},
          "more than 16 GPUs per pod (GPUs per replica / parallelism.nodes): no node has that many; raise "
          "parallelism.nodes"),
    # Multi-node, data and expert parallel: combinations vLLM 0.32 refuses or that leave pods uneven.
    _rule("nodes-do-not-divide-gpus", {"parallelism": {"tensor": 4, "nodes": 3}},
          "must divide evenly over parallelism.nodes"),
    _rule("nodes-more-than-gpus", {"parallelism": {"nodes": 2}},
          "must divide evenly over parallelism.nodes"),
    _rule("data-rank-split-unevenly", {"parallelism": {"tensor": 2, "data": 3, "nodes": 2}},
          "a data-parallel rank (tensor x pipeline GPUs) must fit in one pod or span whole pods"),
    _rule("data-local-inconsistent", {"parallelism": {"data": 8, "dataLocal": 8, "nodes": 2}},
          "parallelism.dataLocal (data-parallel ranks per pod) x parallelism.nodes must equal parallelism.data"),
    _rule("data-local-above-data", {"parallelism": {"data": 2, "dataLocal": 4}},
          "parallelism.dataLocal (data-parallel ranks per pod) x parallelism.nodes must equal parallelism.data"),
    _rule("expert-on-one-gpu", {"parallelism": {"expert": True}},
          "parallelism.expert spreads the experts over tensor x data GPUs"),
    _rule("expert-over-pipeline-only", {"parallelism": {"expert": True, "pipeline": 4}},
          "parallelism.expert spreads the experts over tensor x data GPUs"),
    Case("data-zero", {"parallelism": {"data": 0}}, "spec.parallelism.data: Invalid value: 0",
         "greater than or equal to 1"),
    _rule("extra-args-data-parallel-size", {"engine": {"extraArgs": ["--data-parallel-size", "4"]}},
          "--data-parallel-size is parallelism.data"),
    _rule("extra-args-data-parallel-short", {"engine": {"extraArgs": ["-dp=4"]}},
          "engine.extraArgs must not repeat a flag that a typed field owns"),
    _rule("extra-args-expert-parallel", {"engine": {"extraArgs": ["--enable_expert_parallel"]}},
          "--enable-expert-parallel is parallelism.expert"),
    _rule("extra-args-nnodes", {"engine": {"extraArgs": ["--nnodes=2", "--node-rank=0"]}},
          "--nnodes is parallelism.nodes"),
    _rule("extra-args-headless", {"engine": {"extraArgs": ["--headless"]}},
          "engine.extraArgs must not repeat a flag that a typed field owns"),
    _rule("cpu-with-tensor-parallel", {"device": "CPU", "engine": {"image": "my/vllm-cpu:1"},
                                       "parallelism": {"tensor": 2}},
          "device CPU runs one engine process per replica: parallelism.tensor x pipeline x data and nodes must be 1"),
    _rule("cpu-without-image", {"device": "CPU"},
          "device CPU needs engine.image, a CPU build of vLLM: the default image is vLLM's CUDA build"),
    _rule("cpu-with-gpu-product", {"device": "CPU", "engine": {"image": "my/vllm-cpu:1"},
                                   "gpu": {"product": "NVIDIA-A10G"}},
          "gpu.product, gpu.memoryGiB and engine.gpuMemoryUtilization do not apply to device CPU"),
    _rule("cpu-with-gpu-memory-utilization", {"device": "CPU", "engine": {"image": "my/vllm-cpu:1",
                                                                          "gpuMemoryUtilization": 0.5}},
          "gpu.product, gpu.memoryGiB and engine.gpuMemoryUtilization do not apply to device CPU"),
    Case("unknown-device", {"device": "TPU"}, 'spec.device: Unsupported value: "TPU"', "Input should be 'GPU'"),
    Case("unknown-quantization", {"engine": {"quantization": "int3-magic"}},
         'spec.engine.quantization: Unsupported value: "int3-magic"', "Input should be 'awq'"),
    Case("unknown-kv-cache-dtype", {"engine": {"kvCacheDtype": "fp4"}},
         'spec.engine.kvCacheDtype: Unsupported value: "fp4"', "Input should be 'auto'"),
    Case("unknown-dtype", {"engine": {"dtype": "int8"}}, 'spec.engine.dtype: Unsupported value: "int8"',
         "Input should be 'auto'"),
    Case("odd-block-size", {"engine": {"blockSize": 24}}, "spec.engine.blockSize: Unsupported value: 24",
         "Input should be 8, 16"),
    Case("unknown-scheduling-policy", {"engine": {"schedulingPolicy": "lifo"}},
         'spec.engine.schedulingPolicy: Unsupported value: "lifo"', "Input should be 'fcfs' or 'priority'"),
    _rule("extra-args-repeat-max-num-seqs", {"engine": {"extraArgs": ["--max-num-seqs=512"]}},
          "engine.extraArgs must not repeat a flag that a typed field owns"),
    _rule("extra-args-repeat-underscore", {"engine": {"extraArgs": ["--max_model_len", "4096"]}},
          "engine.extraArgs must not repeat a flag that a typed field owns"),
    _rule("extra-args-repeat-tp-short", {"engine": {"extraArgs": ["-tp", "2"]}},
          "engine.extraArgs must not repeat a flag that a typed field owns"),
    _rule("extra-args-repeat-negated", {"engine": {"extraArgs": ["--no-enable-prefix-caching"]}},
          "engine.extraArgs must not repeat a flag that a typed field owns"),
    # an abbreviation of a typed field's flag is that flag (vLLM's parser has allow_abbrev on)
    _rule("extra-args-abbreviates-max-num-seqs", {"engine": {"extraArgs": ["--max-num-seq=64"]}},
          "engine.extraArgs must not repeat a flag that a typed field owns"),
    _rule("extra-args-abbreviates-tp-short", {"engine": {"extraArgs": ["-t", "2"]}},
          "engine.extraArgs must not repeat a flag that a typed field owns"),
    _rule("extra-args-abbreviates-negated", {"engine": {"extraArgs": ["--no-enable-prefix"]}},
          "engine.extraArgs must not repeat a flag that a typed field owns"),
    *[_unknown_flag(token, hint) for token, hint in UNKNOWN_FLAGS],
    # a value no flag takes: vLLM's parser makes it the ignored model_tag positional
    _rule("extra-args-value-after-a-switch", {"engine": {"extraArgs": ["--enable-log-requests", "true"]}},
          'engine.extraArgs: "true" is not the value of the flag before it (vLLM would ignore it)'),
    _rule("extra-args-second-value", {"engine": {"extraArgs": ["--seed", "1", "2"]}},
          'engine.extraArgs: "2" is not the value of the flag before it (vLLM would ignore it)'),
    _rule("extra-args-value-first", {"engine": {"extraArgs": ["auto", "--tokenizer-mode"]}},
          'engine.extraArgs: "auto" is not the value of the flag before it (vLLM would ignore it)'),
    _rule("env-owned-variable", {"engine": {"env": [{"name": "NCCL_DEBUG", "value": "INFO"}]}},
          "engine.env must not set a variable the operator owns"),
    _rule("nccl-env-not-nccl", {"nccl": {"env": [{"name": "OMP_NUM_THREADS", "value": "4"}]}},
          "nccl.env may only set NCCL_* and TORCH_NCCL_* variables"),
    Case("negative-shm", {"resources": {"shmSize": "-1Gi"}}, "spec.resources.shmSize",
         "is not a Kubernetes quantity"),
    Case("negative-memory-int", {"resources": {"memory": -5}}, "spec.resources.memory",
         "must be zero or more"),
    Case("garbage-cpu", {"resources": {"cpu": "lots"}}, "spec.resources.cpu", "is not a Kubernetes quantity"),
    Case("negative-kv-offload", {"engine": {"kvOffloadGiB": -8}}, "spec.engine.kvOffloadGiB: Invalid value: -8",
         "greater than or equal to 0"),
    Case("negative-replicas", {"replicas": -1}, "spec.replicas: Invalid value: -1", "greater than or equal to 0"),
    Case("kv-target-above-100", {"autoscaling": {"enabled": True, "maxReplicas": 2,
                                                 "kvCacheUsage": {"targetPercent": 150}}},
         "spec.autoscaling.kvCacheUsage.targetPercent: Invalid value: 150", "less than or equal to 100"),
    Case("queue-target-zero", {"autoscaling": {"queueDepth": {"targetPerReplica": 0}}},
         "spec.autoscaling.queueDepth.targetPerReplica: Invalid value: 0", "greater than 0"),
    Case("service-port-out-of-range", {"service": {"port": 70000}}, "spec.service.port: Invalid value: 70000",
         "less than or equal to 65535"),
    Case("service-type-unknown", {"service": {"type": "ExternalName"}},
         'spec.service.type: Unsupported value: "ExternalName"', "Input should be 'ClusterIP'"),
    _rule("swap-space-removed", {"engine": {"swapSpace": 8}},
          "engine.swapSpace was removed from vLLM (--swap-space is gone); use engine.kvOffloadGiB"),
    _rule("worker-use-ray-removed", {"engine": {"workerUseRay": True}},
          "engine.workerUseRay was removed from vLLM"),
    _rule("max-parallel-requests-not-vllm", {"engine": {"maxParallelRequests": 64}},
          "engine.maxParallelRequests is not a vLLM setting; the concurrency limit is engine.maxNumSeqs"),
    _rule("two-model-sources", {"model": {"source": {"huggingFace": {}, "pvc": {"claimName": "models"}}}},
          "model.source must name exactly one of huggingFace, modelScope or pvc"),
    _rule("modelscope-and-huggingface", {"model": {"source": {"huggingFace": {}, "modelScope": {}}}},
          "model.source must name exactly one of huggingFace, modelScope or pvc"),
    _rule("prefetch-into-a-filled-claim", {"model": {"source": {"pvc": {"claimName": "models"}},
                                                     "cache": {"size": "10Gi", "prefetch": {"enabled": True}}}},
          "model.cache.prefetch downloads into the cache claim; a pvc source is already filled"),
    Case("modelscope-domain-with-scheme", {"model": {"source": {"modelScope": {"domain": "https://modelscope.cn"}}}},
         "spec.model.source.modelScope.domain: Invalid value", "String should match pattern"),
    Case("hub-endpoint-not-a-url", {"model": {"source": {"huggingFace": {"endpoint": "hf-mirror.com"}}}},
         "spec.model.source.huggingFace.endpoint: Invalid value", "String should match pattern"),
    Case("prefetch-deadline-too-short", {"model": {"cache": {"size": "10Gi", "prefetch": {
        "enabled": True, "activeDeadlineSeconds": 5}}}},
         "spec.model.cache.prefetch.activeDeadlineSeconds: Invalid value", "greater than or equal to 60"),
    Case("model-name-missing", {"model": {"name": None}}, "spec.model.name: Required value", "Field required"),
    Case("model-name-with-space", {"model": {"name": "Qwen/Qwen3 4B"}}, "spec.model.name: Invalid value",
         "String should match pattern"),
    _rule("preflight-on-one-gpu", {"nccl": {"preflight": {"enabled": True}}},
          "nccl.preflight needs at least 2 GPUs per replica"),
    _rule("rollout-both-zero", {"rollout": {"maxSurge": 0, "maxUnavailable": 0}},
          "rollout.maxSurge and rollout.maxUnavailable cannot both be 0"),
    Case("rollout-surge-garbage", {"rollout": {"maxSurge": "lots"}}, "spec.rollout.maxSurge",
         "must be a number of pods or a percentage"),
    Case("gpu-memory-negative", {"gpu": {"memoryGiB": -24}}, "spec.gpu.memoryGiB: Invalid value: -24",
         "greater than 0"),
    Case("unknown-field", {"engine": {"maxNumSequences": 64}}, 'unknown field "spec.engine.maxNumSequences"',
         "Extra inputs are not permitted"),
    Case("max-num-seqs-huge", {"engine": {"maxNumSeqs": 10**12}}, "spec.engine.maxNumSeqs: Invalid value",
         "less than or equal to 65536"),
    Case("over-long-name", {}, "metadata.name must be at most 52 characters",
         "metadata.name must be at most 52 characters", name="q" * 53),
    Case("name-starting-with-digit", {}, "metadata.name must start with a letter",
         "metadata.name must start with a letter", name="7b-qwen"),
    # Found by the fuzz of tests/chaos: each was accepted by one layer only, or reached a child and failed there.
    Case("string-for-boolean", {"engine": {"enforceEager": "true"}}, "spec.engine.enforceEager: Invalid value",
         "Input should be a valid boolean"),
    Case("string-for-integer", {"engine": {"maxNumSeqs": "64"}}, "spec.engine.maxNumSeqs: Invalid value",
         "Input should be a valid integer"),
    Case("quantity-unparseable", {"resources": {"memory": ".3e4.4"}}, "must be a Kubernetes quantity",
         "is not a Kubernetes quantity"),
    Case("quantity-beyond-int64", {"resources": {"memory": "1e9999"}}, "must be a Kubernetes quantity",
         "too large for a Kubernetes quantity"),
    Case("surge-bare-number-string", {"rollout": {"maxSurge": "33"}}, "spec.rollout.maxSurge",
         "percentage from 0% to 100%"),
    Case("surge-over-100-percent", {"rollout": {"maxSurge": "150%"}}, "spec.rollout.maxSurge",
         "percentage from 0% to 100%"),
    Case("model-name-unicode-space", {"model": {"name": "Qwen/Qwen3\u00a04B"}}, "spec.model.name",
         "String should match pattern"),
    Case("gpu-resource-without-domain", {"gpu": {"resourceName": "0"}}, "spec.gpu.resourceName",
         "String should match pattern"),
    Case("image-not-a-reference", {"engine": {"image": "vllm/vllm-openai:v0.32.0!!"}}, "spec.engine.image",
         "String should match pattern"),
    _rule("toleration-empty-key-equal", {"scheduling": {"tolerations": [{"operator": "Equal", "value": "x"}]}},
          "a toleration without a key must use operator Exists"),
    _rule("toleration-seconds-not-noexecute", {"scheduling": {"tolerations": [
        {"key": "k", "operator": "Exists", "effect": "NoSchedule", "tolerationSeconds": 30}]}},
          "tolerationSeconds applies only to effect NoExecute"),
    _rule("service-annotation-bad-key", {"service": {"annotations": {"not a key!": "x"}}},
          "service.annotations keys must be qualified names"),
    _rule("node-selector-bad-key", {"scheduling": {"nodeSelector": {"-bad": "x"}}},
          "scheduling.nodeSelector keys must be qualified names"),
    _rule("env-value-and-value-from", {"engine": {"env": [{"name": "X", "value": "1", "valueFrom": {
        "secretKeyRef": {"name": "s", "key": "k"}}}]}}, "an environment variable takes value or valueFrom, not both"),
    Case("env-secret-name-not-dns", {"engine": {"env": [{"name": "X", "valueFrom": {
        "secretKeyRef": {"name": "Not_A_Name", "key": "k"}}}]}}, "spec.engine.env[0].valueFrom.secretKeyRef.name",
         "String should match pattern"),
    Case("affinity-unknown-key", {"scheduling": {"affinity": {"nodeAfinity": {}}}},
         'unknown field "spec.scheduling.affinity.nodeAfinity"', "Extra inputs are not permitted"),
    # The Qwen layer (api/serving.py): what needs no catalog is refused at apply.
    _rule("parser-on-pooling-task", {"serving": {"task": "embed", "toolCallParser": "hermes"}},
          "serving.reasoningParser, toolCallParser, thinking and speculative apply to generation only"),
    _rule("speculative-on-pooling-task", {"serving": {"task": "score", "speculative": {"numSpeculativeTokens": 2}}},
          "serving.reasoningParser, toolCallParser, thinking and speculative apply to generation only"),
    _rule("adapter-repo-and-path", {"serving": {"adapters": [{"name": "a", "repo": "o/r", "path": "x"}]}},
          "an adapter names exactly one of repo (Hugging Face) or path (on the model's claim)"),
    _rule("adapter-names-repeat", {"serving": {"adapters": [{"name": "a", "repo": "o/r"}, {"name": "a", "path": "x"}]}},
          "serving.adapters names must be unique"),
    _rule("adapters-on-embed", {"serving": {"task": "embed", "adapters": [{"name": "a", "repo": "o/r"}]}},
          "serving.adapters apply to task generate only"),
    Case("speculative-too-many-tokens", {"serving": {"speculative": {"numSpeculativeTokens": 9}}},
         "spec.serving.speculative.numSpeculativeTokens: Invalid value: 9", "less than or equal to 8"),
    _rule("thinking-without-reasoning-parser", {"serving": {"thinking": True, "reasoningParser": "none"}},
          "serving.thinking: true with reasoningParser: none returns the thinking text inside the answer"),
    Case("unknown-tool-parser", {"serving": {"toolCallParser": "llama3_json"}},
         'spec.serving.toolCallParser: Unsupported value: "llama3_json"', "Input should be 'hermes'"),
    Case("unknown-task", {"serving": {"task": "classify"}}, 'spec.serving.task: Unsupported value: "classify"',
         "Input should be 'generate'"),
    Case("yarn-factor-one", {"engine": {"ropeScaling": {"factor": 1}}},
         "spec.engine.ropeScaling.factor: Invalid value: 1", "greater than 1"),
    _rule("yarn-beyond-16m-tokens",
          {"engine": {"ropeScaling": {"factor": 64, "originalMaxPositionEmbeddings": 1048576}}},
          "engine.ropeScaling.factor x originalMaxPositionEmbeddings must be at most 16777216 tokens"),
    _rule("language-model-only-with-media-limits",
          {"serving": {"multimodal": {"languageModelOnly": True, "limitsPerPrompt": {"image": 2}}}},
          "serving.multimodal.languageModelOnly serves no media at all: remove limitsPerPrompt"),
    _rule("media-limits-name-nothing", {"serving": {"multimodal": {"limitsPerPrompt": {}}}},
          "serving.multimodal.limitsPerPrompt names image, video or both"),
    Case("media-limit-negative", {"serving": {"multimodal": {"limitsPerPrompt": {"video": -1}}}},
         "spec.serving.multimodal.limitsPerPrompt.video: Invalid value: -1", "greater than or equal to 0"),
    Case("media-limit-unknown-modality", {"serving": {"multimodal": {"limitsPerPrompt": {"audio": 1}}}},
         'unknown field "spec.serving.multimodal.limitsPerPrompt.audio"', "Extra inputs are not permitted"),
    _rule("extra-args-repeat-media-limits", {"engine": {"extraArgs": ["--limit-mm-per-prompt", '{"image":0}']}},
          "engine.extraArgs must not repeat a flag that a typed field owns"),
    _rule("mig-profile-of-another-gpu", {"gpu": {"product": "NVIDIA-H200", "sharing": {"mig": "1g.10gb"}}},
          "gpu.sharing.mig 1g.10gb is not a MIG profile of NVIDIA-H200: use one of 1g.18gb, 1g.35gb, 2g.35gb, "
          "3g.71gb, 4g.71gb, 7g.141gb"),
    _rule("extra-args-repeat-reasoning-parser", {"engine": {"extraArgs": ["--reasoning-parser=qwen3"]}},
          "engine.extraArgs must not repeat a flag that a typed field owns"),
]
