"""The one place that maps the typed spec to vLLM command-line flags.

The argument contract test parses this list with the real vLLM argument parser of the pinned version and
checks every parsed value against the spec.
"""

from __future__ import annotations

from qwen_fleet.api import QwenInference
from qwen_fleet.plan import Plan
from qwen_fleet.render.common import number

SERVER_COMMAND = ["python3", "-m", "vllm.entrypoints.openai.api_server"]


def _toggle(flag: str, value: bool | None) -> list[str]:
    if value is None:
        return []
    return [f"--{flag}"] if value else [f"--no-{flag}"]


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
    valued: list[tuple[str, object]] = [
        ("max-model-len", engine.max_model_len),
        ("max-num-seqs", engine.max_num_seqs),
        ("max-num-batched-tokens", engine.max_num_batched_tokens),
        ("block-size", engine.block_size),
        ("gpu-memory-utilization", engine.gpu_memory_utilization),
        ("dtype", engine.dtype),
        ("quantization", engine.quantization),
        ("kv-cache-dtype", engine.kv_cache_dtype),
        ("cpu-offload-gb", engine.cpu_offload_gi_b),
        ("scheduling-policy", engine.scheduling_policy),
    ]
    for flag, value in valued:
        if value is None:
            continue
        args += [f"--{flag}", number(value) if isinstance(value, float) else str(value)]
    if engine.kv_offload_gi_b:
        args += ["--kv-offloading-backend", "native", "--kv-offloading-size", number(engine.kv_offload_gi_b)]
    args += _toggle("enforce-eager", engine.enforce_eager)
    args += _toggle("enable-prefix-caching", engine.enable_prefix_caching)
    args += _toggle("enable-chunked-prefill", engine.enable_chunked_prefill)
    if spec.model.trust_remote_code:
        args.append("--trust-remote-code")
    args += ["--shutdown-timeout", str(engine.shutdown_timeout_seconds)]
    return args + list(engine.extra_args)
