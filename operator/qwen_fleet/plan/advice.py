"""Advice from a capacity plan: the batching settings that fit, and the plan as a table. Pure."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

from qwen_fleet.catalog.types import GpuFacts, ModelFacts
from qwen_fleet.plan.capacity import Capacity, CapacityInput, plan_capacity
from qwen_fleet.plan.capacity_vllm import GIB

__all__ = ["TABLE_COLUMNS", "BatchingAdvice", "format_capacity_table", "suggest_batching"]


def _gib(n: int) -> str:
    return f"{n / GIB:.2f}"


@dataclass(frozen=True)
class BatchingAdvice:
    """Continuous-batching settings for one model on one GPU type, and why."""

    max_model_len: int
    max_num_seqs: int  # what the KV cache holds at max_model_len (capped by the requested/default)
    max_num_batched_tokens: int
    gpu_memory_utilization: float
    capacity: Capacity
    notes: tuple[str, ...]


def suggest_batching(
    model: ModelFacts,
    gpu: GpuFacts,
    *,
    max_model_len: int,
    max_num_seqs: int | None = None,
    max_num_batched_tokens: int | None = None,
    gpu_memory_utilization: float = 0.9,
    tensor_parallel: int = 1,
    quantization: str | None = None,
    kv_cache_dtype: str = "auto",
) -> BatchingAdvice:
    """How many sequences of ``max_model_len`` tokens fit, next to the ``max_num_seqs`` asked for.

    E.g. the seed's advice for Qwen2.5-7B-Instruct on an A10G (max_num_seqs 64, max_num_batched_tokens
    2048, gpu_memory_utilization 0.8): the result says what max_num_seqs the KV cache really holds.
    """
    cap = plan_capacity(
        CapacityInput(
            model=model,
            gpu_memory_gib=gpu.memory_gib,
            tensor_parallel=tensor_parallel,
            gpu_memory_utilization=gpu_memory_utilization,
            max_model_len=max_model_len,
            max_num_seqs=max_num_seqs,
            max_num_batched_tokens=max_num_batched_tokens,
            quantization=quantization,
            kv_cache_dtype=kv_cache_dtype,
        )
    )
    fits = cap.max_concurrent_sequences if cap.feasible else 0
    seqs = max(1, min(cap.max_num_seqs, fits)) if fits else 0
    notes = [p.message for p in cap.problems]
    if cap.feasible and fits < cap.max_num_seqs:
        notes.append(
            f"{gpu.short_name}: the KV cache ({cap.kv_cache_tokens:,} tokens) holds {fits} sequences "
            f"of {max_model_len:,} tokens, fewer than max_num_seqs {cap.max_num_seqs}; use "
            f"max_num_seqs {seqs}, a shorter max_model_len, an FP8 KV cache or more GPUs."
        )
    elif cap.feasible:
        notes.append(
            f"{gpu.short_name}: the KV cache ({cap.kv_cache_tokens:,} tokens) holds {fits} sequences of "
            f"{max_model_len:,} tokens; max_num_seqs {cap.max_num_seqs} never waits for KV blocks."
        )
    return BatchingAdvice(
        max_model_len=max_model_len,
        max_num_seqs=seqs,
        max_num_batched_tokens=cap.max_num_batched_tokens,
        gpu_memory_utilization=gpu_memory_utilization,
        capacity=cap,
        notes=tuple(notes),
    )


TABLE_COLUMNS = ("MODEL", "GPUS", "WEIGHTS/GPU", "KV/GPU", "KV TOKENS", "CONTEXT", "SEQS@CONTEXT", "STATUS")


def format_capacity_table(rows: Sequence[Capacity]) -> str:
    """A fixed-width table of plans, one row each; sizes in GiB. STATUS is ``ok`` or the problem reasons."""
    lines = [TABLE_COLUMNS]
    for cap in rows:
        status = ",".join(p.reason for p in cap.problems) or ("ok" if not cap.warnings else "ok (warnings)")
        lines.append(
            (
                cap.input.model.name,
                f"{cap.input.tensor_parallel}x{cap.input.pipeline_parallel}",
                _gib(cap.weight_bytes_per_gpu),
                _gib(cap.kv_cache_bytes_per_gpu),
                f"{cap.kv_cache_tokens:,}",
                f"{cap.max_model_len:,}",
                f"{cap.max_concurrency:.1f}",
                status,
            )
        )
    widths = [max(len(row[i]) for row in lines) for i in range(len(TABLE_COLUMNS))]
    return "\n".join(
        "  ".join(c.ljust(w) for c, w in zip(row, widths, strict=True)).rstrip() for row in lines
    )
