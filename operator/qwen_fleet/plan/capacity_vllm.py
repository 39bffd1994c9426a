"""How vLLM 0.32 turns KV-cache memory into blocks and tokens, restated as pure arithmetic.

Given the bytes a worker may spend on its KV cache, the engine's own figures follow exactly from the
model's geometry; this module reproduces them (checked against the real CPU engine by
tests/contract/test_capacity_vs_vllm.py). What it mirrors, in vLLM 0.32's source:

* page of one layer for one token, full attention: ``2 (K,V) x kv_heads_per_rank x head_dim x bytes``,
  ``kv_heads_per_rank = max(1, kv_heads // tp)`` (``ModelConfig.get_num_kv_heads``: KV heads are
  replicated when tp > kv_heads); FP8 KV caches store one byte per element.
* Gated DeltaNet (linear attention) state of one layer for one sequence (``MambaStateShapeCalculator.
  gated_delta_net_state_shape``): a conv state of ``(2 x key_heads x key_dim + value_heads x value_dim) / tp``
  channels x ``(conv_kernel - 1)`` positions in the model dtype, and a recurrent state of
  ``value_heads / tp x value_dim x key_dim`` in the SSM-state dtype.
* hybrid models (``Platform._align_hybrid_block_size``): the attention block grows, in steps of the kernel
  block, until one attention page holds a whole recurrent state; state pages are padded to that size.
* grouping (``_get_kv_cache_groups_uniform_page_size``): layers of one kind are split into groups of
  ``min(#full, #linear)`` layers (or the max when the two counts are within 1.5x); one block of the pool
  holds one page for every layer of a group, so ``bytes_per_block = layers_per_group x page``.
* the CPU platform (``CpuPlatform.check_and_update_config``): on a CPU with AVX-512 BF16 (or AMX), where
  ``torch.cpu._is_avx512_bf16_supported()`` is true, an ``auto`` SSM-state dtype becomes ``float32`` for the
  accelerated Gated DeltaNet kernels ("Reset SSM cache type to float32"); elsewhere it stays the model dtype.
  The state page then doubles its recurrent part, so the aligned block and the token count change with the
  CPU: ``cpu_kv_cache_tokens(..., avx512_bf16=...)`` takes that as an input. GPUs have no such rule.
* ``num_blocks = kv_bytes // bytes_per_block``; a request of ``max_model_len`` tokens needs
  ``cdiv(max_model_len, block_size)`` blocks per attention group plus 1 block per state group (2 when
  prefix caching puts the state cache in ``align`` mode); the engine logs
  ``KV cache size = int(num_blocks / blocks_per_request x max_model_len)`` tokens
  (``get_kv_cache_capacity``), and refuses to start when ``kv_bytes < (blocks_per_request + 1) x
  bytes_per_block`` (one block is the pool's permanent null block).
"""

from __future__ import annotations

from dataclasses import dataclass

from qwen_fleet.catalog.types import ModelFacts

GIB = 1024**3

DTYPE_BYTES = {
    "float32": 4,
    "float": 4,
    "bfloat16": 2,
    "float16": 2,
    "half": 2,
    "fp8": 1,
    "fp8_e4m3": 1,
    "fp8_e5m2": 1,
    "fp8_inc": 1,
    "fp8_ds_mla": 1,
}
# Engine defaults that shape the pool (CacheConfig.DEFAULT_BLOCK_SIZE; CpuPlatform.check_and_update_config).
DEFAULT_BLOCK_SIZE = {"gpu": 16, "cpu": 128}
# Smallest kernel block of the attention backend: FlashAttention takes multiples of 16, CPU_ATTN of 32.
KERNEL_BLOCK_ALIGNMENT = {"gpu": 16, "cpu": 32}
# Families whose published config.json sets ``mamba_ssm_dtype: float32`` (vLLM honours it for Qwen3.5).
FLOAT32_SSM_FAMILIES = frozenset({"qwen3.5", "qwen3.6"})


def cdiv(a: int, b: int) -> int:
    return -(a // -b)


def dtype_bytes(name: str) -> int:
    try:
        return DTYPE_BYTES[name]
    except KeyError:
        raise ValueError(f"unknown dtype {name!r}; known: {', '.join(sorted(DTYPE_BYTES))}") from None


def model_dtype(model: ModelFacts, dtype: str = "auto") -> str:
    """The dtype the engine computes in: ``--dtype``; for ``auto`` the published weights' dtype, except
    that float32 checkpoints are downcast to bfloat16 (``_resolve_auto_dtype``: the platform's preferred
    dtype on Ampere and later GPUs and on CPUs)."""
    if dtype != "auto":
        return dtype
    return "bfloat16" if model.dtype in ("float32", "float") else model.dtype


def kv_element_bytes(model: ModelFacts, kv_cache_dtype: str = "auto", dtype: str = "auto") -> int:
    return dtype_bytes(model_dtype(model, dtype) if kv_cache_dtype == "auto" else kv_cache_dtype)


def kv_heads_per_rank(model: ModelFacts, tensor_parallel: int = 1) -> int:
    """KV heads one tensor-parallel rank holds; replicated (at least 1) when tp exceeds the KV heads."""
    return max(1, model.num_kv_heads // tensor_parallel)


def kv_bytes_per_token(model: ModelFacts, kv_cache_dtype: str = "auto", dtype: str = "auto") -> int:
    """KV-cache bytes one token costs in the whole model (all full-attention layers, all KV heads)."""
    elem = kv_element_bytes(model, kv_cache_dtype, dtype)
    return 2 * model.full_attention_layers * model.num_kv_heads * model.head_dim * elem


def kv_bytes_per_token_per_gpu(
    model: ModelFacts,
    tensor_parallel: int = 1,
    pipeline_parallel: int = 1,
    kv_cache_dtype: str = "auto",
    dtype: str = "auto",
) -> int:
    """KV-cache bytes one token costs on the busiest GPU (its share of layers; KV heads replicated)."""
    elem = kv_element_bytes(model, kv_cache_dtype, dtype)
    layers = cdiv(model.full_attention_layers, pipeline_parallel)
    return 2 * layers * kv_heads_per_rank(model, tensor_parallel) * model.head_dim * elem


def ssm_state_dtype(model: ModelFacts, mamba_ssm_cache_dtype: str = "auto", dtype: str = "auto") -> str:
    if mamba_ssm_cache_dtype != "auto":
        return mamba_ssm_cache_dtype
    return "float32" if model.family in FLOAT32_SSM_FAMILIES else model_dtype(model, dtype)


def linear_state_bytes_per_layer(
    model: ModelFacts, tensor_parallel: int = 1, dtype: str = "auto", mamba_ssm_cache_dtype: str = "auto"
) -> int:
    """Conv + recurrent state one Gated DeltaNet layer keeps per sequence on one TP rank (0 if none)."""
    la = model.linear_attention
    if la is None:
        return 0
    conv_channels = (2 * la.num_key_heads * la.key_head_dim + la.num_value_heads * la.value_head_dim) // (
        tensor_parallel
    )
    conv = conv_channels * (la.conv_kernel_size - 1) * dtype_bytes(model_dtype(model, dtype))
    ssm_elems = la.num_value_heads // tensor_parallel * la.value_head_dim * la.key_head_dim
    ssm = ssm_elems * dtype_bytes(ssm_state_dtype(model, mamba_ssm_cache_dtype, dtype))
    return conv + ssm


def state_bytes_per_sequence(
    model: ModelFacts, tensor_parallel: int = 1, dtype: str = "auto", mamba_ssm_cache_dtype: str = "auto"
) -> int:
    """Recurrent state of all linear-attention layers for one sequence, whatever its length (one rank)."""
    per_layer = linear_state_bytes_per_layer(model, tensor_parallel, dtype, mamba_ssm_cache_dtype)
    return model.linear_attention_layers * per_layer


@dataclass(frozen=True)
class KvPool:
    """The block pool of one worker, as vLLM lays it out."""

    block_size: int  # tokens per block, after hybrid alignment
    page_bytes: int  # one block of one layer (state pages padded to it)
    layers_per_group: int  # layers of one KV-cache group on this worker
    attention_groups: int  # groups of full-attention layers (one block table each)
    state_groups: int  # groups of linear-attention layers
    state_blocks_per_sequence: int  # per state group: 1, or 2 with prefix caching ("align" mode)
    state_page_bytes: int = 0  # unpadded recurrent state of one layer, for the record

    @property
    def bytes_per_block(self) -> int:
        return self.layers_per_group * self.page_bytes

    def num_blocks(self, kv_bytes: int) -> int:
        return max(0, kv_bytes) // self.bytes_per_block

    def blocks_per_sequence(self, max_model_len: int) -> int:
        attention = self.attention_groups * cdiv(max_model_len, self.block_size)
        return attention + self.state_groups * self.state_blocks_per_sequence

    def max_concurrency(self, kv_bytes: int, max_model_len: int) -> float:
        """Sequences of ``max_model_len`` tokens the pool holds at once (vLLM's "Maximum concurrency")."""
        return self.num_blocks(kv_bytes) / self.blocks_per_sequence(max_model_len)

    def capacity_tokens(self, kv_bytes: int, max_model_len: int) -> int:
        """The figure vLLM logs as "KV cache size: N tokens" (same float expression, same truncation)."""
        return int(self.max_concurrency(kv_bytes, max_model_len) * max_model_len)

    def fits_one_sequence(self, kv_bytes: int, max_model_len: int) -> bool:
        """vLLM's start-up check: one full-length request plus the null block."""
        return kv_bytes >= (self.blocks_per_sequence(max_model_len) + 1) * self.bytes_per_block

    def longest_sequence(self, kv_bytes: int) -> int:
        """The largest max_model_len that passes ``fits_one_sequence`` (0 if none)."""
        spare = kv_bytes // self.bytes_per_block - 1 - self.state_groups * self.state_blocks_per_sequence
        if spare < self.attention_groups:
            return 0
        return spare // self.attention_groups * self.block_size


def kv_pool(
    model: ModelFacts,
    *,
    device: str = "gpu",
    tensor_parallel: int = 1,
    pipeline_parallel: int = 1,
    block_size: int | None = None,
    kv_cache_dtype: str = "auto",
    dtype: str = "auto",
    prefix_caching: bool = True,
    mamba_ssm_cache_dtype: str = "auto",
) -> KvPool:
    """The pool layout for ``model`` on one worker of the busiest pipeline stage."""
    if device not in DEFAULT_BLOCK_SIZE:
        raise ValueError(f"device must be 'gpu' or 'cpu', not {device!r}")
    block = block_size or DEFAULT_BLOCK_SIZE[device]
    token_page = 2 * kv_heads_per_rank(model, tensor_parallel) * model.head_dim
    token_page *= kv_element_bytes(model, kv_cache_dtype, dtype)
    state_page = linear_state_bytes_per_layer(model, tensor_parallel, dtype, mamba_ssm_cache_dtype)
    full, linear = model.full_attention_layers, model.linear_attention_layers
    if state_page == 0 or linear == 0:
        return KvPool(
            block_size=block,
            page_bytes=block * token_page,
            layers_per_group=cdiv(full, pipeline_parallel),
            attention_groups=1,
            state_groups=0,
            state_blocks_per_sequence=0,
        )
    block = aligned_hybrid_block_size(block, token_page, state_page, KERNEL_BLOCK_ALIGNMENT[device])
    group_size = min(full, linear)
    if max(full, linear) < 1.5 * group_size:
        group_size = max(full, linear)
    return KvPool(
        block_size=block,
        page_bytes=block * token_page,
        # Pipeline stages split each group's layers; an even split is assumed (exact for pp=1).
        layers_per_group=cdiv(group_size, pipeline_parallel),
        attention_groups=cdiv(full, group_size),
        state_groups=cdiv(linear, group_size),
        state_blocks_per_sequence=2 if prefix_caching else 1,
        state_page_bytes=state_page,
    )


def aligned_hybrid_block_size(block_size: int, token_page: int, state_page: int, kernel_block: int) -> int:
    """Smallest block (a multiple of the kernel block) whose attention page holds one recurrent state."""
    step = max(kernel_block, block_size)
    needed = step * cdiv(state_page, step * token_page)
    needed = kernel_block * cdiv(needed, kernel_block)
    return max(block_size, needed)


def cpu_mamba_ssm_cache_dtype(requested: str = "auto", *, avx512_bf16: bool) -> str:
    """The SSM-state dtype the CPU engine keeps: vLLM 0.32's CPU platform sets ``float32`` where the CPU has
    AVX-512 BF16 and the request is ``auto`` (an explicit float16/bfloat16 is kept only for its 'gdn' state
    backend; we keep what was asked)."""
    if avx512_bf16 and requested == "auto":
        return "float32"
    return requested


def cpu_kv_cache_tokens(
    model: ModelFacts,
    kv_space_bytes: int,
    max_model_len: int | None = None,
    *,
    avx512_bf16: bool,
    block_size: int | None = None,
    kv_cache_dtype: str = "auto",
    dtype: str = "auto",
    prefix_caching: bool = True,
    mamba_ssm_cache_dtype: str = "auto",
) -> int:
    """What the CPU engine logs as "CPU KV cache size: N tokens" for ``VLLM_CPU_KVCACHE_SPACE`` bytes.

    On CPU the KV space is set explicitly (``VLLM_CPU_KVCACHE_SPACE`` GiB or ``--kv-cache-memory-bytes``),
    so there is nothing to estimate: the figure is exact. ``max_model_len`` defaults to the native context.
    ``avx512_bf16`` says whether the CPU that runs the engine has AVX-512 BF16: it decides the SSM-state
    dtype of hybrid models (see the module docstring); models without linear attention do not depend on it.
    """
    pool = kv_pool(
        model,
        device="cpu",
        block_size=block_size,
        kv_cache_dtype=kv_cache_dtype,
        dtype=dtype,
        prefix_caching=prefix_caching,
        mamba_ssm_cache_dtype=cpu_mamba_ssm_cache_dtype(mamba_ssm_cache_dtype, avx512_bf16=avx512_bf16),
    )
    return pool.capacity_tokens(kv_space_bytes, max_model_len or model.native_context)
