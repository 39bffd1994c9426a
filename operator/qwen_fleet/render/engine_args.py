"""The one place that maps the typed spec to vLLM command-line flags.

The argument contract test parses this list with the real vLLM argument parser of the pinned version and
checks every parsed value against the spec.
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field, fields
from typing import Any

from qwen_fleet.api import QwenInference
from qwen_fleet.plan import Plan
from qwen_fleet.plan.serving import ServingPlan
from qwen_fleet.render.common import number

SERVER_COMMAND = ["python3", "-m", "vllm.entrypoints.openai.api_server"]
# Workers of a multi-node group run no API server: `vllm serve --headless` starts only their engine ranks
# (the api_server module above has no headless mode; it would start a second API server).
HEADLESS_WORKER_COMMAND = ["vllm", "serve"]
# torch.distributed rendezvous of a multi-node group, on the leader (vLLM's --master-port).
MASTER_PORT = 29500
# Filled by the LeaderWorkerSet pod webhook into every container; the kubelet expands $(VAR) in args.
LEADER_ADDRESS = "$(LWS_LEADER_ADDRESS)"
WORKER_INDEX = "$(LWS_WORKER_INDEX)"


def _valued(flag: str) -> Any:
    return field(default=None, metadata={"valued": flag})


def _switch(flag: str) -> Any:
    return field(default=None, metadata={"switch": flag})


@dataclass(frozen=True)
class EngineSettings:
    """The engine settings a server (``engine_args``) and a ``vllm run-batch`` Job (render/batch.py) pass alike,
    each with its vLLM flag: the one mapping from these names to vLLM's flags. Unset (None) is left to vLLM.
    Valued flags go out in field order, a float as ``number`` writes it; a switch is ``--flag`` or ``--no-flag``."""

    max_model_len: int | None = _valued("--max-model-len")
    max_num_seqs: int | None = _valued("--max-num-seqs")
    max_num_batched_tokens: int | None = _valued("--max-num-batched-tokens")
    block_size: int | None = _valued("--block-size")
    gpu_memory_utilization: float | None = _valued("--gpu-memory-utilization")
    dtype: str | None = _valued("--dtype")
    quantization: str | None = _valued("--quantization")
    kv_cache_dtype: str | None = _valued("--kv-cache-dtype")
    cpu_offload_gib: float | None = _valued("--cpu-offload-gb")
    scheduling_policy: str | None = _valued("--scheduling-policy")
    enforce_eager: bool | None = _switch("enforce-eager")
    enable_prefix_caching: bool | None = _switch("enable-prefix-caching")
    enable_chunked_prefill: bool | None = _switch("enable-chunked-prefill")

    def valued_args(self) -> list[str]:
        args: list[str] = []
        for f in fields(self):
            value = getattr(self, f.name)
            if "valued" in f.metadata and value is not None:
                args += [f.metadata["valued"], number(value) if isinstance(value, float) else str(value)]
        return args

    def switch_args(self) -> list[str]:
        args: list[str] = []
        for f in fields(self):
            value = getattr(self, f.name)
            if "switch" in f.metadata and value is not None:
                args.append(f"--{f.metadata['switch']}" if value else f"--no-{f.metadata['switch']}")
        return args


def _data_expert_args(cr: QwenInference) -> list[str]:
    par = cr.spec.parallelism
    args = []
    if par.data > 1:
        args += ["--data-parallel-size", str(par.data)]
    if par.data_local is not None:
        args += ["--data-parallel-size-local", str(par.data_local)]
    if par.expert:
        args.append("--enable-expert-parallel")
    return args


def multi_node_args(cr: QwenInference, *, leader: bool) -> list[str]:
    """vLLM's own multi-node launch (no Ray): every pod names the group size, its rank and the leader's
    rendezvous; vLLM derives each pod's slice of the (data, pipeline, tensor) world from them, data-parallel
    ranks included (their address defaults to --master-addr)."""
    args = ["--nnodes", str(cr.spec.parallelism.nodes), "--node-rank", "0" if leader else WORKER_INDEX,
            "--master-addr", LEADER_ADDRESS, "--master-port", str(MASTER_PORT)]
    return args if leader else [*args, "--headless"]


def engine_args(cr: QwenInference, plan: Plan) -> list[str]:
    spec = cr.spec
    engine = spec.engine
    args = ["--model", plan.model_ref]
    if spec.model.revision and spec.model.source.pvc is None:
        args += ["--revision", spec.model.revision]
    args += [
        "--served-model-name", plan.served_model_name,
        "--port", str(spec.service.port),
        "--tensor-parallel-size", str(spec.parallelism.tensor),
        "--pipeline-parallel-size", str(spec.parallelism.pipeline),
    ]
    args += _data_expert_args(cr)
    settings = EngineSettings(
        max_model_len=engine.max_model_len, max_num_seqs=engine.max_num_seqs,
        max_num_batched_tokens=engine.max_num_batched_tokens, block_size=engine.block_size,
        gpu_memory_utilization=engine.gpu_memory_utilization, dtype=engine.dtype, quantization=engine.quantization,
        kv_cache_dtype=engine.kv_cache_dtype, cpu_offload_gib=engine.cpu_offload_gi_b,
        scheduling_policy=engine.scheduling_policy or _routing_policy(cr), enforce_eager=engine.enforce_eager,
        enable_prefix_caching=engine.enable_prefix_caching, enable_chunked_prefill=engine.enable_chunked_prefill)
    args += settings.valued_args()
    if engine.kv_offload_gi_b:
        args += ["--kv-offloading-backend", "native", "--kv-offloading-size", number(engine.kv_offload_gi_b)]
    args += settings.switch_args()
    if spec.model.trust_remote_code:
        args.append("--trust-remote-code")
    args += ["--shutdown-timeout", str(engine.shutdown_timeout_seconds)]
    if plan.serving is not None:
        args += serving_args(plan.serving)
    return args + list(engine.extra_args)


def serving_args(serving: ServingPlan) -> list[str]:
    """The Qwen layer's flags: pooling runner, hf_overrides (reranker conversion, YaRN), parsers, MTP, LoRA,
    media limits, thinking."""
    args: list[str] = []
    if serving.task == "embed":
        args += ["--runner", "pooling", "--convert", "embed"]
    elif serving.task == "score":
        args += ["--runner", "pooling"]
    if serving.hf_overrides:
        args += ["--hf-overrides", json.dumps(serving.hf_overrides, sort_keys=True, separators=(",", ":"))]
    if serving.reasoning_parser:
        args += ["--reasoning-parser", serving.reasoning_parser]
    if serving.tool_call_parser:
        args += ["--enable-auto-tool-choice", "--tool-call-parser", serving.tool_call_parser]
    if serving.speculative_tokens:
        args += ["--speculative-config", json.dumps(serving.speculative_config)]
    if serving.adapters:
        args += ["--enable-lora", "--max-loras", str(len(serving.adapters)), "--lora-modules",
                 *(json.dumps({"name": name, "path": path}) for name, path in serving.adapters)]
        if serving.max_lora_rank:
            args += ["--max-lora-rank", str(serving.max_lora_rank)]
    if serving.language_model_only:
        args.append("--language-model-only")
    if serving.media_limits:
        args += ["--limit-mm-per-prompt", json.dumps(dict(serving.media_limits), separators=(",", ":"))]
    if serving.thinking is not None:
        args += ["--default-chat-template-kwargs", json.dumps({"enable_thinking": serving.thinking})]
    return args


def _routing_policy(cr: QwenInference) -> str | None:
    """routing.priorityClasses give requests a vLLM priority: without priority scheduling vLLM ignores it."""
    routing = cr.spec.routing
    return "priority" if routing is not None and routing.priority_classes else None
