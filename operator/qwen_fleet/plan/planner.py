"""Capacity judgement of a spec, from the catalog's model and GPU facts. Pure.

Blocks (Stalled) a spec whose weights cannot fit, whose tensor size does not divide the attention heads, or
whose maxModelLen exceeds what the KV cache can hold for one sequence. A model or GPU the catalog does not know
is never blocked: the plan says it was skipped, with a warning.
"""

from __future__ import annotations

from dataclasses import replace
from math import ceil

from qwen_fleet.api.resource import CapacityStatus, QwenInferenceSpec
from qwen_fleet.catalog import find_gpu, find_model
from qwen_fleet.catalog.types import ModelFacts
from qwen_fleet.plan.capacity import Capacity, CapacityInput, Problem, plan_capacity
from qwen_fleet.plan.capacity_vllm import dtype_bytes, kv_bytes_per_token, model_dtype
from qwen_fleet.plan.parallel import Layout, parallel_problems, parallel_warnings
from qwen_fleet.plan.propose import Constraints, format_proposals, propose_layouts
from qwen_fleet.plan.serving import draft_model, effective_context, mtp_layers, skips_vision_encoder
from qwen_fleet.plan.weights import weight_bytes

GIB = 1024**3
# vLLM 0.32's --gpu-memory-utilization default (read from its argument parser by the contract test).
VLLM_DEFAULT_GPU_MEMORY_UTILIZATION = 0.92
VLLM_DEFAULT_MAX_LORA_RANK = 16  # LoRAConfig.max_lora_rank


def gpu_memory_gib(spec: QwenInferenceSpec) -> float | None:
    """Memory one engine plans with: gpu.memoryGiB, else a MIG slice's (the catalog's profile of the GPU, else
    the figure its name states), else the catalog GPU's."""
    if spec.gpu.memory_gi_b:
        return spec.gpu.memory_gi_b
    gpu = find_gpu(spec.gpu.product) if spec.gpu.product else None
    sharing = spec.gpu.sharing
    if sharing is not None and sharing.mig is not None:
        profile = gpu.mig_profile(sharing.mig) if gpu else None
        return profile.memory_gib if profile else sharing.mig_memory_gib
    return gpu.memory_gib if gpu else None


def mig_problems(spec: QwenInferenceSpec) -> list[Problem]:
    """A MIG profile the GPU cannot make. The CRD refuses it for the catalog's product labels; this catches the
    other spellings find_gpu knows (aliases, NVML names)."""
    gpu = find_gpu(spec.gpu.product) if spec.gpu.product else None
    mig = spec.gpu.sharing.mig if spec.gpu.sharing is not None else None
    if gpu is None or mig is None or gpu.mig_profile(mig) is not None:
        return []
    if not gpu.mig_profiles:
        return [Problem("MigProfileUnsupported",
                        f"{gpu.short_name} has no MIG profiles in the catalog (NVIDIA documents MIG for A100, "
                        "H100, H200, H20 and B200): remove gpu.sharing.mig, or use gpu.sharing.timeSlices")]
    return [Problem("MigProfileUnsupported",
                    f"gpu.sharing.mig {mig} is not a MIG profile of {gpu.product}: use one of "
                    f"{', '.join(p.name for p in gpu.mig_profiles)}")]


def capacity_input(spec: QwenInferenceSpec, memory_gib: float) -> CapacityInput | None:
    model = find_model(spec.model.name)
    if model is None:
        return None
    engine = spec.engine
    extra = mtp_layers(spec, model) + draft_kv_layers(spec, model) + eagle3_layers(spec)
    return CapacityInput(
        # YaRN raises the context; an MTP draft adds one full-attention layer of KV cache per token, a draft model
        # its own layers' worth (draft_kv_layers).
        model=replace(model, native_context=effective_context(spec, model), num_layers=model.num_layers + extra,
                      full_attention_layers=model.full_attention_layers + extra),
        draft_weight_bytes=_draft_weight_bytes(spec) + eagle3_weight_bytes(spec, model),
        gpu_memory_gib=memory_gib,
        tensor_parallel=spec.parallelism.tensor,
        pipeline_parallel=spec.parallelism.pipeline,
        data_parallel=spec.parallelism.data,
        expert_parallel=spec.parallelism.expert,
        gpu_memory_utilization=engine.gpu_memory_utilization or VLLM_DEFAULT_GPU_MEMORY_UTILIZATION,
        max_model_len=engine.max_model_len,
        max_num_seqs=engine.max_num_seqs,
        max_num_batched_tokens=engine.max_num_batched_tokens,
        block_size=engine.block_size,
        dtype=engine.dtype or "auto",
        quantization=engine.quantization,
        kv_cache_dtype=engine.kv_cache_dtype or "auto",
        cpu_offload_gib=engine.cpu_offload_gi_b or 0.0,
        prefix_caching=engine.enable_prefix_caching if engine.enable_prefix_caching is not None else True,
        # --max-loras is the adapter count (render/engine_args.py); vLLM's --max-lora-rank default is 16.
        max_loras=len(spec.serving.adapters),
        max_lora_rank=spec.serving.max_lora_rank or VLLM_DEFAULT_MAX_LORA_RANK,
        vision_encoder=not skips_vision_encoder(spec),
    )


def draft_kv_layers(spec: QwenInferenceSpec, model: ModelFacts) -> int:
    """A draft model's KV cache per token, in layers of the target's (vLLM keeps both in one pool, so every
    token costs the two): the draft's bytes per token over one target layer's, rounded up."""
    draft = draft_model(spec)
    if draft is None:
        return 0
    kv_cache_dtype = spec.engine.kv_cache_dtype or "auto"
    per_layer = kv_bytes_per_token(model, kv_cache_dtype) / model.full_attention_layers
    return ceil(kv_bytes_per_token(draft, kv_cache_dtype) / per_layer)


def eagle3_layers(spec: QwenInferenceSpec) -> int:
    """An EAGLE-3 head is one decoder layer with the target's attention geometry: vLLM allocates its KV cache from
    the target's pool, one full-attention layer's worth per token."""
    wanted = spec.serving.speculative
    return 1 if wanted is not None and wanted.method == "eagle3" and spec.serving.task in (None, "generate") else 0


def eagle3_weight_bytes(spec: QwenInferenceSpec, model: ModelFacts) -> int:
    """An EAGLE-3 head's weights from the target's geometry (a head is trained for one target, so it has the
    target's hidden size and heads): ``fc`` folding three hidden states (3h x h), q/k/v reading the embedding and
    the hidden state (2h wide), o, a gated MLP, and an LM head over the target's vocabulary (an upper bound: heads
    that draft over a reduced vocabulary, e.g. 32,000 tokens, are smaller); split over the tensor ranks like a draft
    model's (vLLM shards the layer and the LM head; only ``fc`` is replicated); at the engine's dtype."""
    if not eagle3_layers(spec):
        return 0
    h, hd = model.hidden_size, model.head_dim
    q, kv = model.num_attention_heads * hd, model.num_kv_heads * hd
    intermediate = model.intermediate_size or 4 * h  # a head's MLP is dense; 4h where the catalog lacks it
    params = 3 * h * h + 2 * h * (q + 2 * kv) + q * h + 3 * h * intermediate + model.vocab_size * h
    return params * dtype_bytes(model_dtype(model, spec.engine.dtype or "auto"))


def _draft_weight_bytes(spec: QwenInferenceSpec) -> int:
    draft = draft_model(spec)
    return weight_bytes(draft, spec.engine.dtype or "auto") if draft is not None else 0


def to_status(cap: Capacity, memory_gib: float) -> CapacityStatus:
    return CapacityStatus(
        source="catalog",
        gpu_memory_gi_b=round(memory_gib, 2),
        weights_gi_b_per_gpu=round(cap.weight_bytes_per_gpu / GIB, 2),
        kv_cache_gi_b_per_gpu=round(cap.kv_cache_bytes_per_gpu / GIB, 2),
        kv_bytes_per_token=cap.kv_bytes_per_token,
        kv_cache_tokens=cap.kv_cache_tokens,
        max_model_len=cap.max_model_len,
        max_concurrent_sequences=round(cap.max_concurrency, 1),
        lora_gi_b_per_gpu=round(cap.lora_bytes_per_gpu / GIB, 2) if cap.lora_bytes_per_gpu else None,
        vision_encoder_gi_b_per_gpu=round(cap.vision_bytes_per_gpu / GIB, 2) if cap.vision_bytes_per_gpu else None,
        warnings=list(cap.warnings),
    )


def layout_of(spec: QwenInferenceSpec) -> Layout:
    p = spec.parallelism
    return Layout(tensor=p.tensor, pipeline=p.pipeline, data=p.data, expert=p.expert, nodes=p.nodes)


def assess(spec: QwenInferenceSpec) -> tuple[CapacityStatus | None, list[Problem], list[str]]:
    if spec.device == "CPU":
        # The planner models GPU memory (weights and KV cache per GPU); on CPU the KV cache is a size the
        # user gives vLLM (VLLM_CPU_KVCACHE_SPACE) and the container's memory limit bounds the rest.
        return None, [], []
    sharing = mig_problems(spec)
    if sharing:
        return None, sharing, []
    model = find_model(spec.model.name)
    if model is None:
        if spec.parallelism.expert:
            warning = (f"{spec.model.name} is not in the catalog: whether it has experts for "
                       "parallelism.expert is not checked (vLLM refuses expert parallelism for dense models)")
            return CapacityStatus(source="unknown", warnings=[warning]), [], [warning]
        return _assess_known(spec)
    status, problems, warnings = _assess_known(spec)
    layout = layout_of(spec)
    extra = parallel_warnings(model, layout)
    if status is not None and extra:
        status = status.model_copy(update={"warnings": [*status.warnings, *extra]})
    return status, [*parallel_problems(model, layout), *problems], [*warnings, *extra]


def _assess_known(spec: QwenInferenceSpec) -> tuple[CapacityStatus | None, list[Problem], list[str]]:
    if find_model(spec.model.name) is None:
        warning = (f"{spec.model.name} is not in the catalog: capacity not planned (the weights, KV cache and "
                   "tensor-size checks were skipped)")
        return CapacityStatus(source="unknown", warnings=[warning]), [], [warning]
    memory = gpu_memory_gib(spec)
    if memory is None:
        warning = ("GPU memory unknown: set gpu.product to a known GPU (e.g. NVIDIA-A10G) or gpu.memoryGiB; "
                   "only the tensor-size check ran")
        inp = capacity_input(spec, 80.0)
        assert inp is not None
        cap = plan_capacity(inp)
        problems = [p for p in cap.problems if p.reason.startswith("TensorSize")]
        return CapacityStatus(source="catalog", warnings=[warning]), problems, [warning]
    inp = capacity_input(spec, memory)
    assert inp is not None
    cap = plan_capacity(inp)
    problems = _with_layouts_that_fit(spec, inp, list(cap.problems))
    problems += _time_slice_problems(spec, inp.gpu_memory_utilization)
    return to_status(cap, memory), problems, list(cap.warnings)


_DOES_NOT_FIT = ("WeightsDoNotFit", "NoMemoryForKVCache", "MaxModelLenExceedsKVCache")


def _with_layouts_that_fit(spec: QwenInferenceSpec, inp: CapacityInput, problems: list[Problem]) -> list[Problem]:
    """A spec that does not fit names the smallest layouts that do (plan/propose.py), for a whole catalog GPU."""
    gpu = find_gpu(spec.gpu.product) if spec.gpu.product and not spec.gpu.memory_gi_b else None
    model = find_model(spec.model.name)
    if gpu is None or model is None or spec.gpu.sharing is not None or \
            not any(p.reason in _DOES_NOT_FIT for p in problems):
        return problems
    limits = Constraints(max_gpus_per_node=max(8, spec.gpus_per_pod), context=spec.engine.max_model_len,
                         gpu_memory_utilization=inp.gpu_memory_utilization)
    proposals = propose_layouts(model, gpu, limits, count=3)
    fits = "; ".join(format_proposals(proposals, gpu)) if proposals else (
        f"none within {limits.max_nodes} nodes of {limits.max_gpus_per_node} {gpu.short_name}")
    return [replace(p, message=f"{p.message} Layouts that fit: {fits}.") if p.reason in _DOES_NOT_FIT else p
            for p in problems]


def _time_slice_problems(spec: QwenInferenceSpec, utilization: float) -> list[Problem]:
    """Time-sliced engines share one GPU's memory, and vLLM claims gpu_memory_utilization x the whole GPU."""
    slices = spec.gpu.sharing.time_slices if spec.gpu.sharing else None
    if not slices or utilization * slices <= 1.0:
        return []
    most = int(100 / slices) / 100
    return [Problem("TimeSlicedMemoryOvercommitted",
                    f"gpu.sharing.timeSlices {slices} puts {slices} engines on one GPU, each claiming "
                    f"gpuMemoryUtilization {utilization:g} of it ({slices * utilization:g} in all): set "
                    f"engine.gpuMemoryUtilization to {most:g} or less")]
