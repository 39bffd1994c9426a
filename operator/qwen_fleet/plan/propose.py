"""The smallest layouts that fit: what to ask for when a model does not fit, or before writing a spec. Pure.

For a model and a GPU type the planner tries, for each way to hold the weights (the checkpoint as published, each
of Qwen's quantized checkpoints of it, and FP8 quantized while loading where the GPU runs it), layouts in order of
GPUs: tensor parallel within one node (sizes that divide the heads, up to the GPUs a node has), then one pipeline
stage per node across nodes. The first layout that holds the target context (else the longest of the native
context, 128k, 64k, 32k, 16k, 8k, 4k) is that option's proposal; replicas are added when a target concurrency is
more than one replica holds. Every proposal is a spec (``Proposal.spec``) that the planner accepts as it is.
"""

from __future__ import annotations

from dataclasses import dataclass, replace
from math import ceil
from typing import Any

from qwen_fleet.catalog.types import GpuFacts, ModelFacts
from qwen_fleet.plan.capacity import Capacity, CapacityInput, plan_capacity, valid_tensor_sizes
from qwen_fleet.plan.parallel import Layout
from qwen_fleet.plan.quantization import quantized_variants

__all__ = ["Constraints", "Proposal", "format_proposals", "propose_layouts"]

_CONTEXT_STEPS = (131072, 65536, 32768, 16384, 8192, 4096)
_FP8_MIN_CAPABILITY = (8, 0)  # FP8 weights run natively from 8.9, as weight-only Marlin kernels on 8.0-8.6


@dataclass(frozen=True)
class Constraints:
    """The user's limits: GPUs one node has, nodes one replica may span, the context and concurrency wanted."""

    max_gpus_per_node: int = 8
    max_nodes: int = 4
    context: int | None = None  # None: the native context, else the longest step that fits
    concurrency: int | None = None  # sequences of `context` tokens held at once, over all replicas
    gpu_memory_utilization: float = 0.92  # vLLM 0.32's default, what a spec without the field gets


@dataclass(frozen=True)
class Proposal:
    model: ModelFacts  # the checkpoint to serve (a quantized release of the asked model, or the model itself)
    quantization: str | None  # engine.quantization to set; None: the checkpoint's own format, or none
    layout: Layout
    capacity: Capacity
    replicas: int = 1

    @property
    def gpus(self) -> int:
        return self.layout.gpus_per_replica * self.replicas

    def spec(self, gpu: GpuFacts, *, gpu_memory_utilization: float | None = None) -> dict[str, Any]:
        """The QwenInference spec of this proposal (camelCase, as kubectl takes it)."""
        engine: dict[str, Any] = {"maxModelLen": self.capacity.max_model_len}
        if self.quantization:
            engine["quantization"] = self.quantization
        if gpu_memory_utilization is not None:
            engine["gpuMemoryUtilization"] = gpu_memory_utilization
        parallelism = {"tensor": self.layout.tensor, "pipeline": self.layout.pipeline, "nodes": self.layout.nodes}
        return {"model": {"name": self.model.name}, "gpu": {"product": gpu.product}, "parallelism": parallelism,
                "engine": engine, "replicas": self.replicas}


def _weight_options(model: ModelFacts, gpu: GpuFacts) -> list[tuple[ModelFacts, str | None]]:
    options: list[tuple[ModelFacts, str | None]] = [(model, None)]
    options += [(variant, None) for variant in quantized_variants(model)]
    capability = gpu.compute_capability or (0, 0)
    if model.weight_quantization is None and capability >= _FP8_MIN_CAPABILITY:
        options.append((model, "fp8"))
    return options


def _layouts(model: ModelFacts, limits: Constraints) -> list[Layout]:
    sizes = valid_tensor_sizes(model, limits.max_gpus_per_node)
    out = [Layout(tensor=tp) for tp in sizes]
    if sizes:
        per_node = sizes[-1]
        out += [Layout(tensor=per_node, pipeline=n, nodes=n) for n in range(2, limits.max_nodes + 1)
                if n <= model.num_layers]
    return sorted(out, key=lambda layout: layout.gpus_per_replica)


def _fit(model: ModelFacts, quantization: str | None, gpu: GpuFacts, layout: Layout,
         limits: Constraints) -> Capacity | None:
    base = CapacityInput(model=model, gpu_memory_gib=gpu.memory_gib, tensor_parallel=layout.tensor,
                         pipeline_parallel=layout.pipeline, quantization=quantization,
                         gpu_memory_utilization=limits.gpu_memory_utilization)
    contexts = [limits.context] if limits.context else [model.native_context] + [
        c for c in _CONTEXT_STEPS if c < model.native_context]
    for context in contexts:
        cap = plan_capacity(replace(base, max_model_len=context))
        if cap.feasible and cap.max_concurrency >= 1:
            return cap
    return None


def propose_layouts(model: ModelFacts, gpu: GpuFacts, limits: Constraints = Constraints(),
                    count: int = 4) -> list[Proposal]:
    """The smallest layout of each way to hold the weights, fewest GPUs first (at most ``count``)."""
    if model.engine_unsupported:
        return []
    proposals = []
    for checkpoint, quantization in _weight_options(model, gpu):
        for layout in _layouts(checkpoint, limits):
            cap = _fit(checkpoint, quantization, gpu, layout, limits)
            if cap is None:
                continue
            replicas = ceil(limits.concurrency / int(cap.max_concurrency)) if limits.concurrency else 1
            proposals.append(Proposal(checkpoint, quantization, layout, cap, replicas))
            break
    # Fewest GPUs, longest context; at a tie a published checkpoint before quantizing while loading.
    proposals.sort(key=lambda p: (p.gpus, -p.capacity.max_model_len, p.quantization is not None,
                                  -p.capacity.max_concurrency))
    return proposals[:count]


def format_proposals(proposals: list[Proposal], gpu: GpuFacts) -> list[str]:
    """One line per proposal: GPUs, nodes, parallel sizes, weights, context and concurrency."""
    lines = []
    for p in proposals:
        layout, cap = p.layout, p.capacity
        if p.quantization:
            weights = f"{p.quantization} on the fly"
        else:
            weights = p.model.quant_scheme.label if p.model.quant_scheme else p.model.dtype
        replicas = f", {p.replicas} replicas ({p.gpus} GPUs)" if p.replicas > 1 else ""
        lines.append(
            f"{p.model.name} ({weights}): {layout.gpus_per_replica} x {gpu.short_name} per replica on "
            f"{layout.nodes} node(s){replicas} (tensor {layout.tensor}, pipeline {layout.pipeline}, "
            f"data {layout.data}, expert {'on' if layout.expert else 'off'}): maxModelLen {cap.max_model_len:,}, "
            f"{cap.max_concurrency:.1f} sequences at that length per replica")
    return lines
