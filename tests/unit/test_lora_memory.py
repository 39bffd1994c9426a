"""LoRA memory in the planner: the adapter buffers vLLM 0.32 preallocates, counted per GPU and taken from the KV cache.

The expected figures are worked out here by hand from the buffer shapes in vLLM's ``lora/layers`` (A is
``rank x in``, B is ``out x rank``; column-parallel layers split ``out`` over the tensor ranks, row-parallel
ones ``in``), and the models' config.json widths, not by calling the planner's helpers.
"""

from __future__ import annotations

from typing import Any

from qwen_fleet.api import QwenInference
from qwen_fleet.catalog import find_model
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


def test_a_model_without_mlp_widths_is_planned_with_a_warning() -> None:
    cap = capacity("Qwen/Qwen3.5-122B-A10B", max_loras=1, tensor_parallel=4)
    assert cap.lora_bytes_per_gpu == 0
    assert any("LoRA buffers not counted" in w and "moe_intermediate_size" in w for w in cap.warnings)


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
