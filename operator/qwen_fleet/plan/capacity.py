"""Capacity planning: does a Qwen model fit a GPU setup, and how many tokens and sequences will it hold?

Pure: facts in (``catalog.types.ModelFacts``, GPU memory, engine settings), numbers and problems out.
The operator reports the result in the CR's status and refuses (``Stalled``) plans with problems; the
``qwen-fleet plan`` command prints it as a table.

The memory model, per GPU (docs/capacity.md says what is exact and what is estimated):

    usable   = gpu_memory x gpu_memory_utilization
    weights  = parameters x bytes/parameter (dtype or quantization), / tensor, over pipeline stages,
               minus what ``--cpu-offload-gb`` moves to host memory
    overhead = activation peak of vLLM's profiling run + non-torch allocations (estimated)
    kv_cache = usable - weights - overhead            -> blocks and tokens exactly as vLLM computes them
"""

from __future__ import annotations

from dataclasses import dataclass

from qwen_fleet.catalog.types import ModelFacts
from qwen_fleet.plan.capacity_vllm import (
    GIB,
    KvPool,
    cdiv,
    cpu_kv_cache_tokens,
    dtype_bytes,
    kv_bytes_per_token,
    kv_bytes_per_token_per_gpu,
    kv_pool,
    model_dtype,
    state_bytes_per_sequence,
)
from qwen_fleet.plan.lora import lora_bytes_per_gpu, lora_refusal, lora_warning
from qwen_fleet.plan.quantization import choose_scheme
from qwen_fleet.plan.weights import (
    bytes_per_quantized_param,
    expert_bytes_moved_per_gpu,
    vision_bytes,
    weight_bytes,
    weight_bytes_per_gpu,
)

__all__ = [
    "Capacity",
    "CapacityInput",
    "Problem",
    "cpu_kv_cache_tokens",
    "default_max_num_batched_tokens",
    "kv_bytes_per_token",
    "overhead_bytes_per_gpu",
    "plan_capacity",
    "valid_tensor_sizes",
    "vision_bytes",
    "weight_bytes",
    "weight_bytes_per_gpu",
]

# Allocations outside torch's caching allocator that vLLM's profiling counts against the KV cache
# (cuBLAS/cuDNN workspaces, NCCL buffers): an estimate.
NON_TORCH_BYTES = GIB // 2
NCCL_BYTES = GIB // 4
# Activation peak of the profiling forward pass: about this many hidden-sized vectors per batched token
# (QKV, attention output, the MLP's gate/up/down, residuals), plus float32 logits for every sequence.
ACTIVATION_VECTORS_PER_TOKEN = 16
LOGIT_COPIES = 2


@dataclass(frozen=True)
class CapacityInput:
    """One engine configuration to plan. Names and defaults follow vLLM's flags."""

    model: ModelFacts
    gpu_memory_gib: float
    tensor_parallel: int = 1
    pipeline_parallel: int = 1
    data_parallel: int = 1  # each rank holds its own weights and KV cache; only experts may be shared out
    expert_parallel: bool = False  # experts spread over tensor x data GPUs instead of split by tensor
    gpu_memory_utilization: float = 0.9
    max_model_len: int | None = None  # None: the model's native context, as vLLM derives it
    max_num_seqs: int | None = None  # None: vLLM's default for the GPU class
    max_num_batched_tokens: int | None = None
    block_size: int | None = None  # None: vLLM's default (16 on GPUs)
    dtype: str = "auto"
    quantization: str | None = None  # None: the published checkpoint's own (ModelFacts.weight_quantization)
    kv_cache_dtype: str = "auto"
    cpu_offload_gib: float = 0.0
    prefix_caching: bool = True  # vLLM's default; decides the state blocks of hybrid models
    mamba_ssm_cache_dtype: str = "auto"
    overhead_gib: float | None = None  # override the activation/non-torch estimate with a measured figure
    max_loras: int = 0  # --max-loras when LoRA is on (0: off)
    max_lora_rank: int = 16  # --max-lora-rank (vLLM's default)
    vision_encoder: bool = True  # False: vLLM builds no vision encoder (--language-model-only, all limits 0)
    draft_weight_bytes: int = 0  # a draft model's weights (speculative method draft), split like the target's


@dataclass(frozen=True)
class Problem:
    """Why a plan cannot run. ``reason`` is CamelCase (a condition reason); ``message`` has the numbers."""

    reason: str
    message: str


@dataclass(frozen=True)
class Capacity:
    """What one configuration holds, per GPU unless said otherwise."""

    input: CapacityInput
    weight_bytes_per_gpu: int
    overhead_bytes_per_gpu: int
    kv_bytes_per_token: int  # whole model: all full-attention layers, all KV heads
    kv_bytes_per_token_per_gpu: int
    state_bytes_per_sequence: int  # linear-attention state per sequence, whole model (0: standard model)
    kv_cache_bytes_per_gpu: int  # memory left for the block pool (0 when nothing is left)
    block_size: int  # after vLLM's alignment for hybrid models
    num_blocks: int
    kv_cache_tokens: int  # what vLLM logs as "GPU KV cache size: N tokens"
    max_concurrency: float  # sequences of max_model_len tokens held at once (vLLM's "Maximum concurrency")
    max_model_len: int
    max_num_seqs: int
    max_num_batched_tokens: int
    problems: tuple[Problem, ...] = ()
    warnings: tuple[str, ...] = ()
    lora_bytes_per_gpu: int = 0  # adapter buffers vLLM preallocates with --enable-lora (plan/lora.py)
    vision_bytes_per_gpu: int = 0  # the vision encoder's weights, in weight_bytes_per_gpu unless left out

    @property
    def feasible(self) -> bool:
        return not self.problems

    @property
    def max_concurrent_sequences(self) -> int:
        return int(self.max_concurrency)

    @property
    def gpus(self) -> int:
        return self.input.tensor_parallel * self.input.pipeline_parallel


def valid_tensor_sizes(model: ModelFacts, max_gpus: int = 8) -> list[int]:
    """Tensor-parallel sizes vLLM accepts for ``model``: they divide the attention heads and divide the
    KV heads, or are a multiple of them (KV heads are then replicated); hybrids also split their
    linear-attention heads evenly. Sizes must also divide the MLP width, which the catalog does not
    carry; Qwen MLP widths are multiples of 128, so powers of two are safe and the only sizes offered."""
    return [tp for tp in range(1, max_gpus + 1) if not _tensor_size_problem(model, tp)]


def _tensor_size_problem(model: ModelFacts, tp: int) -> str:
    kv = model.num_kv_heads
    if model.num_attention_heads % tp:
        return f"the {model.num_attention_heads} attention heads"
    if (tp <= kv and kv % tp) or (tp > kv and tp % kv):
        return f"the {kv} KV heads (nor is it a multiple of them)"
    la = model.linear_attention
    if la is not None and (la.num_key_heads % tp or la.num_value_heads % tp):
        return f"the {la.num_key_heads}/{la.num_value_heads} linear-attention key/value heads"
    if tp & (tp - 1):
        return "the MLP width for certain (only powers of two are planned)"
    return ""


def default_max_num_batched_tokens(gpu_memory_gib: float) -> tuple[int, int]:
    """vLLM 0.32's API-server defaults (max_num_batched_tokens, max_num_seqs) by GPU memory
    (``EngineArgs.get_batch_defaults``; A100-80GB is treated as the small class there)."""
    if gpu_memory_gib >= 160:
        return 16384, 1024
    if gpu_memory_gib >= 70:
        return 8192, 1024
    return 2048, 256


def overhead_bytes_per_gpu(
    model: ModelFacts,
    *,
    max_num_batched_tokens: int,
    max_num_seqs: int,
    tensor_parallel: int = 1,
    pipeline_parallel: int = 1,
    dtype: str = "auto",
) -> int:
    """Estimated non-KV, non-weight memory: the profiling run's activation peak, float32 logits for
    ``max_num_seqs`` sequences, and non-torch allocations (plus NCCL buffers when sharded)."""
    act = max_num_batched_tokens * model.hidden_size * dtype_bytes(model_dtype(model, dtype))
    act *= ACTIVATION_VECTORS_PER_TOKEN
    logits = min(max_num_seqs, max_num_batched_tokens) * model.vocab_size * 4 * LOGIT_COPIES
    nccl = NCCL_BYTES if tensor_parallel * pipeline_parallel > 1 else 0
    return act + logits + NON_TORCH_BYTES + nccl


def plan_capacity(inp: CapacityInput) -> Capacity:
    """Weights, KV cache and concurrency of one configuration, with the problems that stop it."""
    model, tp, pp = inp.model, inp.tensor_parallel, inp.pipeline_parallel
    problems = list(_parallelism_problems(inp))
    default_tokens, default_seqs = default_max_num_batched_tokens(inp.gpu_memory_gib)
    max_num_seqs = inp.max_num_seqs or default_seqs
    max_len = inp.max_model_len or model.native_context
    batched = inp.max_num_batched_tokens or default_tokens
    choice = choose_scheme(model, inp.quantization)
    if choice.refusal is not None:
        problems.append(Problem(*choice.refusal))
    quant = choice.scheme
    tp_ok, pp_ok = max(tp, 1), max(pp, 1)
    weights = weight_bytes_per_gpu(model, tp_ok, pp_ok, inp.dtype, quant, vision_encoder=inp.vision_encoder)
    if inp.expert_parallel and inp.data_parallel > 1:
        weights -= expert_bytes_moved_per_gpu(model, tp_ok, pp_ok, inp.data_parallel,
                                              bytes_per_quantized_param(model, quant, inp.dtype))
    weights += cdiv(inp.draft_weight_bytes, tp_ok)  # vLLM runs the draft at the target's tensor size
    weights = max(0, weights - int(inp.cpu_offload_gib * GIB))
    lora = lora_bytes_per_gpu(model, max_loras=inp.max_loras, max_rank=inp.max_lora_rank, tensor_parallel=tp_ok,
                              pipeline_parallel=pp_ok, dtype=inp.dtype,
                              expert_parallel_size=tp_ok * inp.data_parallel if inp.expert_parallel else 1)
    overhead = (
        int(inp.overhead_gib * GIB)
        if inp.overhead_gib is not None
        else overhead_bytes_per_gpu(
            model,
            max_num_batched_tokens=batched,
            max_num_seqs=max_num_seqs,
            tensor_parallel=tp_ok,
            pipeline_parallel=pp_ok,
            dtype=inp.dtype,
        )
    )
    usable = int(inp.gpu_memory_gib * GIB * inp.gpu_memory_utilization)
    kv_space = max(0, usable - weights - overhead - (lora or 0))
    pool = kv_pool(
        model,
        device="gpu",
        tensor_parallel=tp_ok,
        pipeline_parallel=pp_ok,
        block_size=inp.block_size,
        kv_cache_dtype=inp.kv_cache_dtype,
        dtype=inp.dtype,
        prefix_caching=inp.prefix_caching,
        mamba_ssm_cache_dtype=inp.mamba_ssm_cache_dtype,
    )
    if not problems:
        problems += _memory_problems(
            inp,
            usable=usable,
            weights=weights,
            overhead=overhead,
            kv_space=kv_space,
            pool=pool,
            max_len=max_len,
        )
    if problems and lora and not _memory_problems(inp, usable=usable, weights=weights, overhead=overhead,
                                                  kv_space=kv_space + lora, pool=pool, max_len=max_len):
        problems = [p for p in problems if p.reason not in _MEMORY_REASONS] + [
            Problem("LoraAdaptersDoNotFit", lora_refusal(model.name, inp.max_loras, inp.max_lora_rank, lora))]
    unsized = [p.message for p in problems if choice.unknown and p.reason in _MEMORY_REASONS]
    problems = [p for p in problems if p.message not in unsized]  # unknown bits: the 16-bit figure only warns
    concurrency = pool.max_concurrency(kv_space, max_len)
    return Capacity(
        input=inp,
        weight_bytes_per_gpu=weights,
        overhead_bytes_per_gpu=overhead,
        kv_bytes_per_token=kv_bytes_per_token(model, inp.kv_cache_dtype, inp.dtype),
        kv_bytes_per_token_per_gpu=kv_bytes_per_token_per_gpu(
            model, tp_ok, pp_ok, inp.kv_cache_dtype, inp.dtype
        ),
        state_bytes_per_sequence=state_bytes_per_sequence(model, 1, inp.dtype, inp.mamba_ssm_cache_dtype),
        kv_cache_bytes_per_gpu=kv_space,
        block_size=pool.block_size,
        num_blocks=pool.num_blocks(kv_space),
        kv_cache_tokens=pool.capacity_tokens(kv_space, max_len),
        max_concurrency=concurrency,
        max_model_len=max_len,
        max_num_seqs=max_num_seqs,
        max_num_batched_tokens=batched,
        problems=tuple(problems),
        warnings=tuple(([choice.warning] if choice.warning else []) + unsized
                       + _warnings(inp, max_len, max_num_seqs, concurrency)
                       + ([lora_warning(model)] if inp.max_loras and lora is None else [])),
        lora_bytes_per_gpu=lora or 0,
        # vLLM shards the encoder's linear layers over the tensor ranks (mm_encoder_tp_mode "weights").
        vision_bytes_per_gpu=cdiv(vision_bytes(model, inp.dtype), tp_ok),
    )


_MEMORY_REASONS = ("WeightsDoNotFit", "NoMemoryForKVCache", "MaxModelLenExceedsKVCache")


def _parallelism_problems(inp: CapacityInput) -> list[Problem]:
    model, tp, pp = inp.model, inp.tensor_parallel, inp.pipeline_parallel
    if tp < 1 or pp < 1:
        return [Problem("InvalidParallelism", f"Tensor ({tp}) and pipeline ({pp}) sizes must be at least 1.")]
    problems = []
    if what := _tensor_size_problem(model, tp):
        sizes = ", ".join(map(str, valid_tensor_sizes(model)))
        problems.append(
            Problem(
                "TensorSizeDoesNotDivideHeads",
                f"Tensor-parallel size {tp} does not divide {what} of {model.name}; "
                f"valid sizes up to 8: {sizes}.",
            )
        )
    if pp > model.num_layers:
        problems.append(
            Problem(
                "PipelineSizeExceedsLayers",
                f"Pipeline-parallel size {pp} exceeds the {model.num_layers} layers of {model.name}.",
            )
        )
    return problems


def _memory_problems(
    inp: CapacityInput, *, usable: int, weights: int, overhead: int, kv_space: int, pool: KvPool, max_len: int
) -> list[Problem]:
    where = f"{inp.gpu_memory_gib:g} GiB x {inp.gpu_memory_utilization:g} utilization"
    per = f"per GPU (tensor {inp.tensor_parallel} x pipeline {inp.pipeline_parallel})"
    if weights > usable:
        return [
            Problem(
                "WeightsDoNotFit",
                f"{inp.model.name} needs {_gib(weights)} GiB of weights {per}, more than the "
                f"{_gib(usable)} GiB usable ({where}); use more GPUs, quantization or a larger GPU.",
            )
        ]
    if kv_space <= 0 or pool.num_blocks(kv_space) < 2:
        return [
            Problem(
                "NoMemoryForKVCache",
                f"After {_gib(weights)} GiB of weights and ~{_gib(overhead)} GiB of activations {per}, "
                f"nothing of the {_gib(usable)} GiB usable ({where}) is left for the KV cache.",
            )
        ]
    if not pool.fits_one_sequence(kv_space, max_len):
        longest = pool.longest_sequence(kv_space)
        return [
            Problem(
                "MaxModelLenExceedsKVCache",
                f"One sequence of max_model_len {max_len:,} tokens needs "
                f"{_gib((pool.blocks_per_sequence(max_len) + 1) * pool.bytes_per_block)} GiB of KV cache "
                f"{per} but only {_gib(kv_space)} GiB is free; the longest that fits is "
                f"{longest:,} tokens.",
            )
        ]
    return []


def _warnings(inp: CapacityInput, max_len: int, max_num_seqs: int, concurrency: float) -> list[str]:
    out = []
    if max_len > inp.model.native_context:
        out.append(
            f"max_model_len {max_len:,} is above the native context {inp.model.native_context:,} of "
            f"{inp.model.name}: quality degrades without RoPE scaling (YaRN), and vLLM refuses it "
            "unless VLLM_ALLOW_LONG_MAX_MODEL_LEN=1."
        )
    # Only for an explicit max_num_seqs: vLLM's defaults (256, 1024) rarely all fit at full length, by design.
    if inp.max_num_seqs is not None and 1 <= concurrency < max_num_seqs:
        out.append(
            f"max_num_seqs {max_num_seqs} exceeds the {int(concurrency)} sequences of {max_len:,} "
            "tokens the KV cache holds; vLLM preempts (recomputes) requests when long ones coincide."
        )
    return out


def _gib(n: int) -> str:
    return f"{n / GIB:.2f}"
