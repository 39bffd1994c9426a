"""Table tests of the capacity arithmetic (the engine itself checks it in tests/contract)."""

from __future__ import annotations

from dataclasses import replace

import pytest

from qwen_fleet.catalog import all_models, find_gpu, find_model
from qwen_fleet.catalog.types import GpuFacts, LinearAttentionFacts, ModelFacts
from qwen_fleet.plan.advice import format_capacity_table, suggest_batching
from qwen_fleet.plan.capacity import (
    CapacityInput,
    plan_capacity,
    valid_tensor_sizes,
    weight_bytes,
    weight_bytes_per_gpu,
)
from qwen_fleet.plan.capacity_vllm import (
    GIB,
    aligned_hybrid_block_size,
    cpu_kv_cache_tokens,
    kv_bytes_per_token,
    kv_bytes_per_token_per_gpu,
    kv_pool,
    linear_state_bytes_per_layer,
    state_bytes_per_sequence,
)

# Facts as published in the config.json files (FACTS.md); built here so the tests do not depend on
# the catalog's data, which has its own tests.
QWEN25_7B = ModelFacts(
    name="Qwen/Qwen2.5-7B-Instruct",
    family="qwen2.5",
    params_billion=7.61,
    num_layers=28,
    full_attention_layers=28,
    num_attention_heads=28,
    num_kv_heads=4,
    head_dim=128,
    hidden_size=3584,
    vocab_size=152064,
    native_context=32768,
)
QWEN3_8B = replace(
    QWEN25_7B,
    name="Qwen/Qwen3-8B",
    family="qwen3",
    params_billion=8.19,
    num_layers=36,
    full_attention_layers=36,
    num_attention_heads=32,
    num_kv_heads=8,
    hidden_size=4096,
    vocab_size=151936,
    native_context=40960,
)
QWEN35_27B = ModelFacts(
    name="Qwen/Qwen3.5-27B",
    family="qwen3.5",
    params_billion=27.0,
    num_layers=64,
    full_attention_layers=16,
    num_attention_heads=24,
    num_kv_heads=4,
    head_dim=256,
    hidden_size=5120,
    vocab_size=248320,
    native_context=262144,
    linear_attention=LinearAttentionFacts(
        num_key_heads=16, num_value_heads=48, key_head_dim=128, value_head_dim=128, conv_kernel_size=4
    ),
)
QWEN3_NEXT_80B = ModelFacts(
    name="Qwen/Qwen3-Next-80B-A3B-Instruct",
    family="qwen3-next",
    params_billion=80.0,
    num_layers=48,
    full_attention_layers=12,
    num_attention_heads=16,
    num_kv_heads=2,
    head_dim=256,
    hidden_size=2048,
    vocab_size=151936,
    native_context=262144,
    num_experts=512,
    experts_per_token=10,
    linear_attention=LinearAttentionFacts(
        num_key_heads=16, num_value_heads=32, key_head_dim=128, value_head_dim=128, conv_kernel_size=4
    ),
)
# FACTS.md's tiny Qwen2 (tests/support/tiny_qwen.py); the engine logs 2,097,152 tokens for 1 GiB.
TINY = ModelFacts(
    name="tiny",
    family="qwen2.5",
    params_billion=361_600 / 1e9,
    num_layers=2,
    full_attention_layers=2,
    num_attention_heads=2,
    num_kv_heads=1,
    head_dim=64,
    hidden_size=128,
    vocab_size=512,
    native_context=4096,
    tie_word_embeddings=True,
)
A10G = GpuFacts(
    product="NVIDIA-A10G", memory_gib=22.48828125, short_name="A10G", interconnect="PCIe", fp8=False
)
H100 = GpuFacts(
    product="NVIDIA-H100-80GB-HBM3", memory_gib=79.6, short_name="H100-80GB", interconnect="NVLink", fp8=True
)


@pytest.mark.parametrize(
    ("model", "kv_dtype", "dtype", "expected"),
    [
        (QWEN25_7B, "auto", "auto", 57_344),  # 2 x 28 x 4 x 128 x 2 B (FACTS.md)
        (QWEN25_7B, "fp8", "auto", 28_672),  # FP8 halves it
        (QWEN25_7B, "fp8_e5m2", "auto", 28_672),
        (QWEN25_7B, "auto", "float32", 114_688),  # the KV cache follows the model dtype
        (replace(QWEN25_7B, dtype="float32"), "auto", "auto", 57_344),  # vLLM downcasts float32 checkpoints
        (QWEN3_8B, "auto", "auto", 147_456),  # 2 x 36 x 8 x 128 x 2 B
        (QWEN35_27B, "auto", "auto", 65_536),  # only the 16 full-attention layers: 2 x 16 x 4 x 256 x 2 B
        (TINY, "auto", "auto", 512),  # FACTS.md: 1 GiB -> 2,097,152 tokens
    ],
)
def test_kv_bytes_per_token(model: ModelFacts, kv_dtype: str, dtype: str, expected: int) -> None:
    assert kv_bytes_per_token(model, kv_dtype, dtype) == expected


@pytest.mark.parametrize(
    ("tp", "pp", "expected"),
    [
        (1, 1, 57_344),
        (2, 1, 28_672),
        (4, 1, 14_336),  # one KV head per rank
        (8, 1, 14_336),  # 8 ranks > 4 KV heads: each rank keeps a replica of one head, no further saving
        (1, 2, 28_672),  # 14 layers per stage
        (1, 3, 20_480),  # 28 layers over 3 stages: the busiest has 10
    ],
)
def test_kv_bytes_per_token_per_gpu_sharding(tp: int, pp: int, expected: int) -> None:
    assert kv_bytes_per_token_per_gpu(QWEN25_7B, tp, pp) == expected


@pytest.mark.parametrize(
    ("model", "expected"),
    [
        (
            QWEN25_7B,
            [1, 2, 4],
        ),  # 28 heads: 7 divides them, but 7 is neither a divisor nor a multiple of 4 KV heads
        (QWEN3_8B, [1, 2, 4, 8]),
        (QWEN35_27B, [1, 2, 4, 8]),  # 24 heads, 4 KV heads, 16/48 linear heads
        (TINY, [1, 2]),  # 2 heads; tp 2 replicates the one KV head
    ],
)
def test_valid_tensor_sizes(model: ModelFacts, expected: list[int]) -> None:
    assert valid_tensor_sizes(model) == expected


def test_hybrid_state_geometry() -> None:
    # conv: (2 x 16 x 128 + 48 x 128) channels x 3 positions x 2 B; SSM: 48 x 128 x 128 x 4 B (Qwen3.5
    # configs keep the recurrent state in float32).
    per_layer = 10_240 * 3 * 2 + 48 * 128 * 128 * 4
    assert linear_state_bytes_per_layer(QWEN35_27B) == per_layer == 3_207_168
    assert state_bytes_per_sequence(QWEN35_27B) == 48 * per_layer
    assert state_bytes_per_sequence(QWEN35_27B, mamba_ssm_cache_dtype="bfloat16") == 48 * (61_440 + 1_572_864)
    assert linear_state_bytes_per_layer(QWEN35_27B, tensor_parallel=4) == per_layer // 4
    assert state_bytes_per_sequence(QWEN25_7B) == 0
    # Qwen3-Next keeps the state in the model dtype (bf16): 49,152 + 1,048,576 bytes per layer.
    assert linear_state_bytes_per_layer(QWEN3_NEXT_80B) == 1_097_728


@pytest.mark.parametrize(
    ("model", "device", "block"),
    [
        (QWEN3_NEXT_80B, "gpu", 544),  # 16 x cdiv(1,097,728, 16 x 2,048)
        (QWEN35_27B, "gpu", 784),  # 16 x cdiv(3,207,168, 16 x 4,096)
        (QWEN35_27B, "cpu", 896),  # 128 x cdiv(3,207,168, 128 x 4,096), CPU's default block is 128
        (QWEN25_7B, "gpu", 16),  # no state, no alignment
    ],
)
def test_hybrid_block_alignment(model: ModelFacts, device: str, block: int) -> None:
    pool = kv_pool(model, device=device)
    assert pool.block_size == block
    if model.linear_attention is not None:
        assert pool.page_bytes >= pool.state_page_bytes  # one attention page holds one state


def test_hybrid_grouping_and_blocks_per_sequence() -> None:
    pool = kv_pool(QWEN35_27B, device="gpu")
    # 16 full + 48 linear layers: groups of 16 layers, 1 attention group, 3 state groups.
    assert (pool.layers_per_group, pool.attention_groups, pool.state_groups) == (16, 1, 3)
    assert pool.blocks_per_sequence(8192) == cdiv_(8192, 784) + 3 * 2  # prefix caching: 2 state blocks
    no_prefix = kv_pool(QWEN35_27B, device="gpu", prefix_caching=False)
    assert no_prefix.blocks_per_sequence(8192) == cdiv_(8192, 784) + 3


def cdiv_(a: int, b: int) -> int:
    return -(a // -b)


def test_aligned_block_keeps_a_larger_user_block() -> None:
    assert aligned_hybrid_block_size(1024, token_page=4096, state_page=3_207_168, kernel_block=16) == 1024
    assert aligned_hybrid_block_size(16, token_page=4096, state_page=4096 * 16, kernel_block=16) == 16


@pytest.mark.parametrize(
    ("kw", "expected"),
    [
        # Figures the real CPU engine logged (tests/contract/test_capacity_vs_vllm.py re-measures them).
        ({"kv_space_bytes": GIB, "max_model_len": 1024}, 2_097_152),
        ({"kv_space_bytes": GIB, "max_model_len": 1024, "kv_cache_dtype": "fp8"}, 4_194_304),
        # 1 GiB / (256 x 256 B) = 16,384 blocks; 2000 tokens take 8 blocks: 2,048 x 2000.
        (
            {"kv_space_bytes": GIB, "max_model_len": 2000, "kv_cache_dtype": "fp8", "block_size": 256},
            4_096_000,
        ),
        # A length that is not a multiple of the block wastes the tail of its last block.
        ({"kv_space_bytes": GIB, "max_model_len": 1000}, 2_048_000),
    ],
)
@pytest.mark.parametrize("avx512_bf16", [False, True])
def test_cpu_kv_cache_tokens(kw: dict[str, int | str], expected: int, avx512_bf16: bool) -> None:
    # A model without linear attention has no SSM state: the CPU's ISA does not change its figure.
    assert cpu_kv_cache_tokens(TINY, avx512_bf16=avx512_bf16, **kw) == expected  # type: ignore[arg-type]


def test_cpu_kv_cache_tokens_hybrid() -> None:
    tiny_next = replace(
        TINY,
        family="qwen3-next",
        num_layers=4,
        full_attention_layers=1,
        linear_attention=LinearAttentionFacts(
            num_key_heads=1, num_value_heads=2, key_head_dim=128, value_head_dim=128, conv_kernel_size=4
        ),
    )
    # Logged by vLLM 0.32 on a CPU without AVX-512 BF16 (bf16 SSM state, 68,608-byte state page): block 384,
    # "CPU KV cache size: 1,242,680 tokens ... 1213.56x".
    assert cpu_kv_cache_tokens(tiny_next, GIB, 1024, avx512_bf16=False) == 1_242_680
    # Logged on an AMD EPYC with avx512_bf16 ("Reset SSM cache type to float32 ..."): the recurrent part of
    # the state doubles (134,144 bytes), "Setting attention block size to 640 tokens", and 1 GiB holds 6,553
    # blocks of 163,840 B; 2 + 3 x 2 blocks per 1,024-token request: "CPU KV cache size: 838,784 tokens".
    assert cpu_kv_cache_tokens(tiny_next, GIB, 1024, avx512_bf16=True) == 838_784
    # An explicit float32 state gives that figure on every CPU.
    assert cpu_kv_cache_tokens(tiny_next, GIB, 1024, avx512_bf16=False, mamba_ssm_cache_dtype="float32") == 838_784


def test_weights_by_dtype_and_quantization() -> None:
    assert weight_bytes(QWEN25_7B) == 15_220_000_000  # 7.61 B x 2 bytes
    assert weight_bytes(QWEN25_7B, dtype="float32") == 30_440_000_000
    embeddings = 2 * 152_064 * 3_584  # untied input and output embeddings stay 16-bit
    kept = embeddings + (2 * 28 + 1) * 3_584  # and the RMSNorm weights
    awq = weight_bytes(QWEN25_7B, quantization="awq")
    assert awq == int((7.61e9 - kept) * (0.5 + 2.5 / 128) + kept * 2)
    assert 5.5e9 < awq < 5.7e9
    fp8 = weight_bytes(QWEN25_7B, quantization="fp8")
    assert fp8 == int((7.61e9 - kept) + kept * 2)
    # A pre-quantized repo needs no flag.
    assert weight_bytes(replace(QWEN25_7B, weight_quantization="awq")) == awq
    assert weight_bytes_per_gpu(QWEN25_7B, tensor_parallel=2) == 7_610_000_000
    # Pipeline stages: 14 of 28 layers plus one embedding matrix on the busiest stage.
    stage = int((15.22e9 - embeddings * 2) * 0.5) + 152_064 * 3_584 * 2
    assert weight_bytes_per_gpu(QWEN25_7B, pipeline_parallel=2) == stage


def test_plan_seed_config_qwen25_7b_on_a10g() -> None:
    """The seed's advice: Qwen2.5-7B-Instruct on an A10G, utilization 0.8, 2048 batched tokens, 64 seqs."""
    cap = plan_capacity(
        CapacityInput(
            model=QWEN25_7B,
            gpu_memory_gib=A10G.memory_gib,
            gpu_memory_utilization=0.8,
            max_model_len=8192,
            max_num_seqs=64,
            max_num_batched_tokens=2048,
        )
    )
    assert cap.feasible, cap.problems
    assert cap.weight_bytes_per_gpu == 15_220_000_000
    usable = int(A10G.memory_gib * GIB * 0.8)
    assert cap.kv_cache_bytes_per_gpu == usable - cap.weight_bytes_per_gpu - cap.overhead_bytes_per_gpu
    assert cap.num_blocks == cap.kv_cache_bytes_per_gpu // (16 * 57_344)
    assert cap.kv_cache_tokens == cap.num_blocks * 16  # 8192 is a whole number of blocks
    assert 1 <= cap.max_concurrent_sequences < 64
    assert any("max_num_seqs 64 exceeds" in w for w in cap.warnings)


def test_plan_shards_over_tensor_parallel() -> None:
    one = plan_capacity(CapacityInput(model=QWEN25_7B, gpu_memory_gib=H100.memory_gib, max_model_len=32768))
    two = plan_capacity(
        CapacityInput(model=QWEN25_7B, gpu_memory_gib=H100.memory_gib, tensor_parallel=2, max_model_len=32768)
    )
    assert two.weight_bytes_per_gpu == one.weight_bytes_per_gpu // 2
    assert two.kv_bytes_per_token_per_gpu == one.kv_bytes_per_token_per_gpu // 2
    assert two.kv_cache_tokens > 2 * one.kv_cache_tokens  # half the bytes per token, and more room
    assert two.gpus == 2


def test_fp8_kv_cache_doubles_tokens() -> None:
    base = CapacityInput(
        model=QWEN3_8B, gpu_memory_gib=H100.memory_gib, max_model_len=16384, overhead_gib=2.0
    )
    auto = plan_capacity(base)
    fp8 = plan_capacity(replace(base, kv_cache_dtype="fp8"))
    assert fp8.kv_bytes_per_token == auto.kv_bytes_per_token // 2
    assert fp8.num_blocks == 2 * auto.num_blocks or fp8.num_blocks == 2 * auto.num_blocks + 1


def test_problem_weights_do_not_fit() -> None:
    cap = plan_capacity(CapacityInput(model=QWEN35_27B, gpu_memory_gib=A10G.memory_gib))
    assert not cap.feasible
    (problem,) = cap.problems
    assert problem.reason == "WeightsDoNotFit"
    assert "54.00 GiB" not in problem.message  # GiB, not GB: 54e9 B = 50.29 GiB
    assert "50.29 GiB of weights" in problem.message
    assert "20.24 GiB usable" in problem.message


def test_problem_tensor_size_does_not_divide_heads() -> None:
    cap = plan_capacity(CapacityInput(model=QWEN25_7B, gpu_memory_gib=80, tensor_parallel=3))
    assert [p.reason for p in cap.problems] == ["TensorSizeDoesNotDivideHeads"]
    assert "Tensor-parallel size 3 does not divide the 28 attention heads" in cap.problems[0].message
    assert "valid sizes up to 8: 1, 2, 4" in cap.problems[0].message
    kv = plan_capacity(CapacityInput(model=QWEN25_7B, gpu_memory_gib=80, tensor_parallel=7))
    assert "the 4 KV heads" in kv.problems[0].message


def test_problem_max_model_len_exceeds_kv_cache() -> None:
    # 7B on an A10G at 0.8 leaves ~1.5 GiB for KV: about 28k tokens, far below 131,072.
    cap = plan_capacity(
        CapacityInput(
            model=QWEN25_7B,
            gpu_memory_gib=A10G.memory_gib,
            gpu_memory_utilization=0.8,
            max_model_len=131072,
            overhead_gib=1.0,
        )
    )
    assert [p.reason for p in cap.problems] == ["MaxModelLenExceedsKVCache"]
    longest = kv_pool(QWEN25_7B).longest_sequence(cap.kv_cache_bytes_per_gpu)
    assert f"the longest that fits is {longest:,} tokens" in cap.problems[0].message
    assert "max_model_len 131,072" in cap.problems[0].message
    # ... and the native-context warning, since 131,072 > 32,768.
    assert any("above the native context 32,768" in w for w in cap.warnings)
    # The longest length really is the boundary vLLM checks.
    pool = kv_pool(QWEN25_7B)
    assert pool.fits_one_sequence(cap.kv_cache_bytes_per_gpu, longest)
    assert not pool.fits_one_sequence(cap.kv_cache_bytes_per_gpu, longest + 1)


def test_problem_no_memory_for_kv_cache() -> None:
    # Weights (15.22 GB = 14.17 GiB) fit under 16 GiB x 0.9, the estimated overhead does not.
    cap = plan_capacity(CapacityInput(model=QWEN25_7B, gpu_memory_gib=16, overhead_gib=1.0))
    assert [p.reason for p in cap.problems] == ["NoMemoryForKVCache"]
    assert cap.kv_cache_tokens == 0


def test_cpu_offload_moves_weights_off_the_gpu() -> None:
    base = CapacityInput(model=QWEN35_27B, gpu_memory_gib=A10G.memory_gib)
    assert plan_capacity(replace(base, cpu_offload_gib=40, max_model_len=4096)).feasible


def test_unknown_quantization_is_planned_with_a_warning() -> None:
    cap = plan_capacity(CapacityInput(model=QWEN25_7B, gpu_memory_gib=80, quantization="int3"))
    assert cap.problems == ()
    assert "quantization 'int3'" in cap.warnings[0]


def test_suggest_batching_for_the_seed_config() -> None:
    advice = suggest_batching(
        QWEN25_7B,
        A10G,
        max_model_len=4096,
        max_num_seqs=64,
        max_num_batched_tokens=2048,
        gpu_memory_utilization=0.8,
    )
    cap = advice.capacity
    assert advice.max_num_seqs == cap.max_concurrent_sequences < 64
    assert advice.max_num_batched_tokens == 2048
    assert f"use max_num_seqs {advice.max_num_seqs}" in advice.notes[0]
    # On an H100 the same request fits as asked.
    roomy = suggest_batching(QWEN25_7B, H100, max_model_len=4096, max_num_seqs=64)
    assert roomy.max_num_seqs == 64
    assert "never waits for KV blocks" in roomy.notes[0]


def test_format_capacity_table() -> None:
    rows = [
        plan_capacity(
            CapacityInput(model=QWEN25_7B, gpu_memory_gib=80, max_model_len=32768, overhead_gib=1.0)
        ),
        plan_capacity(CapacityInput(model=QWEN25_7B, gpu_memory_gib=80, tensor_parallel=3)),
    ]
    table = format_capacity_table(rows).splitlines()
    assert table[0].split() == [
        "MODEL",
        "GPUS",
        "WEIGHTS/GPU",
        "KV/GPU",
        "KV",
        "TOKENS",
        "CONTEXT",
        "SEQS@CONTEXT",
        "STATUS",
    ]
    first = table[1].split()
    assert first[:3] == ["Qwen/Qwen2.5-7B-Instruct", "1x1", "14.17"]
    assert first[4] == f"{rows[0].kv_cache_tokens:,}"
    assert first[-1] == "ok"
    assert table[2].split()[-1] == "TensorSizeDoesNotDivideHeads"
    assert len({len(line) for line in table[:1]}) == 1


def test_non_power_of_two_tensor_size_is_refused() -> None:
    # 12 heads and 2 KV heads allow 6, but the 8,960-wide MLP of Qwen2.5-1.5B does not split 6 ways.
    model = replace(QWEN25_7B, num_attention_heads=12, num_kv_heads=2)
    assert valid_tensor_sizes(model) == [1, 2, 4]
    cap = plan_capacity(CapacityInput(model=model, gpu_memory_gib=80, tensor_parallel=6))
    assert [p.reason for p in cap.problems] == ["TensorSizeDoesNotDivideHeads"]
    assert "only powers of two" in cap.problems[0].message


# -- the real catalog ------------------------------------------------------------------------------------


def test_catalog_qwen25_7b_matches_facts_md() -> None:
    model = find_model("Qwen/Qwen2.5-7B-Instruct")
    assert kv_bytes_per_token(model) == 57_344
    assert valid_tensor_sizes(model) == [1, 2, 4]


def test_catalog_qwen35_27b_state_and_block() -> None:
    model = find_model("Qwen/Qwen3.5-27B")
    assert kv_bytes_per_token(model) == 65_536
    assert state_bytes_per_sequence(model) == 48 * 3_207_168
    assert kv_pool(model).block_size == 784


@pytest.mark.parametrize("model", all_models(), ids=lambda m: m.name)
def test_every_catalog_model_plans_on_eight_h200(model: ModelFacts) -> None:
    """The largest GPU setup we plan for holds every catalog model at 32k context."""
    h200 = find_gpu("H200")
    tp = max(valid_tensor_sizes(model))
    cap = plan_capacity(
        CapacityInput(model=model, gpu_memory_gib=h200.memory_gib, tensor_parallel=tp, max_model_len=32768)
    )
    assert cap.feasible, cap.problems
    assert cap.kv_cache_tokens >= 32768
    assert cap.weight_bytes_per_gpu < h200.memory_gib * GIB * 0.9
