"""LoRA memory in the planner: the adapter buffers vLLM 0.32 preallocates, counted per GPU and taken from the KV cache.

The expected figures are worked out here by hand from the buffer shapes in vLLM's ``lora/layers`` (A is
``rank x in``, B is ``out x rank``; column-parallel layers split ``out`` over the tensor ranks, row-parallel
ones ``in``), and the models' config.json widths, not by calling the planner's helpers.
"""

from __future__ import annotations

from typing import Any

import pytest

from qwen_fleet.api import QwenInference
from qwen_fleet.catalog import find_model
from qwen_fleet.catalog.types import LinearAttentionFacts, ModelFacts
from qwen_fleet.config import OperatorConfig
from qwen_fleet.plan import make_plan
from qwen_fleet.plan.capacity import CapacityInput, plan_capacity

BF16 = 2


def capacity(model: str, **kw: Any) -> Any:
    facts = find_model(model)
    assert facts is not None
    return plan_capacity(CapacityInput(model=facts, gpu_memory_gib=80.0, **kw))


def test_qwen3_8b_two_adapters_rank_64() -> None:
    # hidden 4096, 32 q heads / 8 kv heads x 128, MLP 12288, 36 layers, vocab 151936; one GPU.
    qkv = 3 * 64 * 4096 + 64 * (4096 + 1024 + 1024)  # A per q/k/v slice, B of each slice
    o_proj = 64 * 4096 + 4096 * 64
    gate_up = 2 * 64 * 4096 + 64 * (12288 + 12288)
    down = 64 * 12288 + 4096 * 64
    assert (qkv, o_proj, gate_up, down) == (1_179_648, 524_288, 2_097_152, 1_048_576)
    layers = 36 * 4_849_664
    embeddings = 2 * 64 * (151936 + 4096)  # Qwen3 registers embed_tokens and lm_head for LoRA
    expected = (layers + embeddings) * 2 * BF16
    assert expected == 778_240_000
    assert capacity("Qwen/Qwen3-8B", max_loras=2, max_lora_rank=64).lora_bytes_per_gpu == expected


def test_qwen25_7b_one_adapter_rank_16_on_two_gpus() -> None:
    # hidden 3584, 28 q / 4 kv heads x 128, MLP 18944, 28 layers; tensor 2 halves q, kv, MLP shards.
    # Qwen2ForCausalLM registers no embedding modules: no buffers for embeddings or the LM head.
    qkv = 3 * 16 * 3584 + 16 * (1792 + 256 + 256)
    o_proj = 16 * 1792 + 3584 * 16
    gate_up = 2 * 16 * 3584 + 16 * (9472 + 9472)
    down = 16 * 9472 + 3584 * 16
    assert qkv + o_proj + gate_up + down == 921_600
    expected = 28 * 921_600 * 1 * BF16
    cap = capacity("Qwen/Qwen2.5-7B-Instruct", max_loras=1, max_lora_rank=16, tensor_parallel=2)
    assert cap.lora_bytes_per_gpu == expected == 51_609_600


def test_qwen3_30b_a3b_counts_every_expert() -> None:
    # hidden 2048, 32 q / 4 kv heads x 128, 128 experts of width 768, 48 layers, vocab 151936.
    qkv = 3 * 8 * 2048 + 8 * (4096 + 512 + 512)
    o_proj = 8 * 4096 + 2048 * 8
    experts = 128 * (2 * 8 * 2048 + 2 * 768 * 8 + 8 * 768 + 2048 * 8)  # w1, w3 A and B; w2 A and B
    router = 8 * 2048 + 128 * 8
    per_layer = qkv + o_proj + experts + router
    assert per_layer == 8_807_424
    expected = (48 * per_layer + 2 * 8 * (151936 + 2048)) * BF16
    assert capacity("Qwen/Qwen3-30B-A3B", max_loras=1, max_lora_rank=8).lora_bytes_per_gpu == expected == 850_440_192


def test_the_kv_cache_shrinks_by_exactly_the_lora_buffers() -> None:
    without = capacity("Qwen/Qwen3-8B", max_model_len=8192)
    with_lora = capacity("Qwen/Qwen3-8B", max_model_len=8192, max_loras=2, max_lora_rank=64)
    assert without.kv_cache_bytes_per_gpu - with_lora.kv_cache_bytes_per_gpu == 778_240_000
    assert without.lora_bytes_per_gpu == 0


def test_qwen35_122b_hybrid_moe_on_four_gpus() -> None:
    # text_config (alibaba/InferSim's copy): hidden 3072, 32 q / 2 kv heads x 256 with the output gate (q twice as
    # wide), 12 full + 36 Gated DeltaNet layers (16 key heads, 64 value heads, x 128), 256 experts of 1024 plus a
    # shared expert of 1024, vocab 248320. Rank 8, one adapter, tensor 4: each rank holds one replicated KV head.
    qkv = 3 * 8 * 3072 + 8 * (32 * 256 * 2 // 4 + 256 + 256)
    o_proj = 8 * (32 * 256 // 4) + 3072 * 8
    assert qkv + o_proj == 151_552
    in_proj_qkvz = 2 * 8 * 3072 + 8 * ((2 * 16 * 128 + 64 * 128) // 4 + 64 * 128 // 4)
    in_proj_ba = 2 * 8 * 3072 + 8 * (64 // 4 + 64 // 4)
    out_proj = 8 * (64 * 128 // 4) + 3072 * 8
    assert in_proj_qkvz + in_proj_ba + out_proj == 180_480
    experts = 256 * 8 * (3 * 3072 + 3 * (1024 // 4))
    router = 8 * (3072 + 256)
    shared = (2 * 8 * 3072 + 8 * (256 + 256)) + (8 * 256 + 3072 * 8) + 8 * (3072 + 1)  # gate_up, down, gate
    assert experts + router + shared == 20_578_312
    per_adapter = 12 * 151_552 + 36 * 180_480 + 48 * 20_578_312 + 2 * 8 * (248320 + 3072)
    expected = per_adapter * BF16
    assert expected == 2_000_194_304
    cap = capacity("Qwen/Qwen3.5-122B-A10B", max_loras=1, max_lora_rank=8, tensor_parallel=4)
    assert cap.lora_bytes_per_gpu == expected
    assert not any("LoRA buffers not counted" in w for w in cap.warnings)


# Made-up entries, not catalogue models: one MoE model without its expert width, one hybrid MoE model (which also
# runs a shared expert) without the shared expert's width.
_MOE_WITHOUT_WIDTHS = ModelFacts(
    name="example/moe-without-widths", family="qwen3", params_billion=30.0, num_layers=48,
    full_attention_layers=48, num_attention_heads=32, num_kv_heads=4, head_dim=128, hidden_size=2048,
    vocab_size=151936, native_context=40960, active_params_billion=3.0, num_experts=128, experts_per_token=8)
_HYBRID_WITHOUT_SHARED_WIDTH = ModelFacts(
    name="example/hybrid-moe-without-shared-width", family="qwen3.5", params_billion=35.0, num_layers=40,
    full_attention_layers=10, full_attention_interval=4, num_attention_heads=16, num_kv_heads=2, head_dim=256,
    hidden_size=2048, vocab_size=248320, native_context=262144, active_params_billion=3.0, num_experts=256,
    experts_per_token=8, moe_intermediate_size=512,
    linear_attention=LinearAttentionFacts(num_key_heads=16, num_value_heads=32, key_head_dim=128,
                                          value_head_dim=128, conv_kernel_size=4))


@pytest.mark.parametrize(("model", "missing"), [
    (_MOE_WITHOUT_WIDTHS, "moe_intermediate_size"),
    (_HYBRID_WITHOUT_SHARED_WIDTH, "shared_expert_intermediate_size"),
])
def test_a_model_without_mlp_widths_is_planned_with_a_warning(model: ModelFacts, missing: str) -> None:
    cap = plan_capacity(CapacityInput(model=model, gpu_memory_gib=80.0, max_loras=1, tensor_parallel=2))
    assert cap.lora_bytes_per_gpu == 0
    assert [w for w in cap.warnings if "LoRA buffers not counted" in w] == [
        f"LoRA buffers not counted for {model.name}: the catalog lacks its {missing} "
        "(the KV cache will be smaller than planned)"]
    # Without adapters there is nothing to warn about.
    plain = plan_capacity(CapacityInput(model=model, gpu_memory_gib=80.0, tensor_parallel=2))
    assert not any("LoRA buffers not counted" in w for w in plain.warnings)


def test_every_catalogued_moe_model_carries_its_widths() -> None:
    from qwen_fleet.catalog import all_models

    lacking = {m.name: [w for w in ("moe_intermediate_size", "shared_expert_intermediate_size")
                        if getattr(m, w) is None and (w == "moe_intermediate_size" or m.is_hybrid)]
               for m in all_models() if m.is_moe}
    assert {name: widths for name, widths in lacking.items() if widths} == {}


def spec_with_adapters(count: int, rank: int, max_model_len: int = 16384) -> QwenInference:
    adapters = [{"name": f"a{i}", "repo": f"org/lora-{i}"} for i in range(count)]
    return QwenInference.model_validate({"metadata": {"name": "q", "namespace": "ns"}, "spec": {
        "model": {"name": "Qwen/Qwen3-8B"}, "gpu": {"product": "NVIDIA-A10G"},
        "engine": {"maxModelLen": max_model_len}, "serving": {"adapters": adapters, "maxLoraRank": rank}}})


def test_adapters_that_no_longer_fit_are_stalled_with_the_fix() -> None:
    assert make_plan(spec_with_adapters(0, 256), OperatorConfig()).feasible  # the base model alone fits
    plan = make_plan(spec_with_adapters(4, 256), OperatorConfig())
    assert [p.reason for p in plan.problems] == ["LoraAdaptersDoNotFit"]
    message = plan.problems[0].message
    # 4 x rank 256 on Qwen3-8B: 36 x 19,398,656 + 2 x 256 x 156,032 elements per adapter, x 4 x 2 bytes.
    assert f"{(36 * 19_398_656 + 2 * 256 * 156_032) * 4 * 2 / 1024**3:.2f} GiB" in message
    assert "lower serving.maxLoraRank" in message and "fewer serving.adapters" in message


def test_adapters_that_fit_are_reported_in_the_capacity_status() -> None:
    plan = make_plan(spec_with_adapters(1, 16), OperatorConfig())
    assert plan.feasible, plan.problems
    assert plan.capacity is not None
    # rank 16, one adapter: a quarter of the rank-64 figure per adapter (every buffer is linear in the rank).
    assert plan.capacity.lora_gi_b_per_gpu == round(778_240_000 / 2 / 4 / 1024**3, 2)
