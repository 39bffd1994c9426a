"""Weight bytes of quantized checkpoints, worked by hand from each format's layout (plan/quantization.py).

Every figure below is arithmetic on the catalog's architecture facts, written out in the comment beside it:
quantized weights at the format's bits per weight, everything it leaves alone (embeddings, LM head, norms; for
MoE-only formats attention and shared layers too) at 2 bytes.
"""

from __future__ import annotations

from typing import get_args

import pytest

from qwen_fleet.api.engine import Quantization
from qwen_fleet.catalog import find_model
from qwen_fleet.catalog import quant_schemes as S
from qwen_fleet.catalog.types import ModelFacts
from qwen_fleet.plan.capacity import CapacityInput, plan_capacity
from qwen_fleet.plan.quantization import METHOD_SCHEMES, UNSIZED, choose_scheme
from qwen_fleet.plan.weights import weight_bytes


def _model(name: str) -> ModelFacts:
    model = find_model(name)
    assert model is not None, name
    return model


# Qwen3-8B: 8.2e9 parameters; untied embeddings 2 x 151,936 x 4,096 = 1,244,659,712; norms (2 x 36 + 1) x 4,096 =
# 299,008; quantized linear layers 8.2e9 - 1,244,659,712 - 299,008 = 6,955,041,280; the rest at 2 bytes =
# 2,489,917,440.
# Qwen2.5-7B-Instruct: 7.61e9; embeddings 2 x 152,064 x 3,584 = 1,089,994,752; norms 57 x 3,584 = 204,288; linear
# 6,519,800,960; the rest 2,180,398,080 bytes.
# Qwen3-4B-Instruct-2507: 4.0e9; tied embedding 151,936 x 2,560 = 388,956,160; norms 73 x 2,560 = 186,880; linear
# 3,610,856,960; the rest 778,286,080 bytes.
# Qwen3-30B-A3B: routed experts 48 layers x 128 experts x 3 x 2,048 x 768 = 28,991,029,248; the rest of 30.5e9,
# 1,508,970,752 parameters (attention, router, embeddings, norms), at 2 bytes = 3,017,941,504.
HAND_WORKED = [
    # NVFP4: 4 bits + one FP8 scale per 16 = 4.5 bits = 0.5625 B: 6,955,041,280 x 0.5625 = 3,912,210,720 + rest
    ("Qwen/Qwen3-8B", S.NVFP4, 4.5, 6_402_128_160),
    # W4A16 g128 (compressed-tensors, symmetric): 4 + 16/128 = 4.125 bits: 3,586,190,160 + rest
    ("Qwen/Qwen3-8B", S.W4A16, 4.125, 6_076_110_600),
    # W8A8 int8 per channel: 8 bits (one scale per 4,096+ weights, counted 0): 6,955,041,280 + rest
    ("Qwen/Qwen3-8B", S.W8A8_INT8, 8.0, 9_444_958_720),
    # Qwen3-8B-AWQ: 4 bits + fp16 scale + 4-bit zero per 128 = 4.15625 bits: 3,613,360,290 + rest
    ("Qwen/Qwen3-8B-AWQ", None, 4.15625, 6_103_278_730),
    # GPTQ-Int4 g128: 4 + (16 + 4)/128 = 4.15625 bits: 3,387,459,874 + 2,180,398,080
    ("Qwen/Qwen2.5-7B-Instruct-GPTQ-Int4", None, 4.15625, 5_567_638_422),
    # GPTQ-Int8 g128: 8 + (16 + 8)/128 = 8.1875 bits: 6,672,608,795 + 2,180,398,080
    ("Qwen/Qwen2.5-7B-Instruct-GPTQ-Int8", None, 8.1875, 8_853_006_875),
    # FP8 block 128x128, one FP32 scale per 16,384 weights: 8 + 32/16,384 = 8.001953125 bits: 3,611,738,516 + rest
    ("Qwen/Qwen3-4B-Instruct-2507-FP8", None, 8.001953125, 4_390_024_596),
    # MXFP4 on the experts: 4 bits + one E8M0 scale per 32 = 4.25 bits: 15,401,484,288 + 3,017,941,504
    ("Qwen/Qwen3-30B-A3B", S.MXFP4, 4.25, 18_419_425_792),
    # experts_int8 (MoE-only, on the fly): experts at 1 byte = 28,991,029,248 + 3,017,941,504
    ("Qwen/Qwen3-30B-A3B", S.EXPERTS_INT8, 8.0, 32_008_970_752),
]


@pytest.mark.parametrize(("name", "scheme", "bits", "expected"), HAND_WORKED,
                         ids=[f"{n}-{s.label if s else 'own'}" for n, s, _, _ in HAND_WORKED])
def test_weight_bytes_worked_by_hand(name: str, scheme: S.QuantScheme | None, bits: float, expected: int) -> None:
    model = _model(name)
    own = scheme or model.quant_scheme
    assert own is not None and own.bits_per_weight == bits
    assert weight_bytes(model, quantization=scheme) == expected


def test_experts_int8_by_name_on_a_base_checkpoint() -> None:
    # The method name picks the same scheme as the table's row (it quantizes while loading, so no refusal).
    cap = plan_capacity(CapacityInput(model=_model("Qwen/Qwen3-30B-A3B"), gpu_memory_gib=139.8,
                                      quantization="experts_int8", max_model_len=8192))
    assert cap.feasible, cap.problems
    assert cap.weight_bytes_per_gpu == 32_008_970_752


def test_w4a16_is_half_the_bytes_of_w8a8_on_the_quantized_layers() -> None:
    # The old planner counted every compressed-tensors checkpoint at 1 byte per weight (W4A16 at twice its size).
    model = _model("Qwen/Qwen3-8B")
    rest = 2_489_917_440
    assert (weight_bytes(model, quantization=S.W8A8_INT8) - rest) / (weight_bytes(model, quantization=S.W4A16)
                                                                    - rest) == pytest.approx(8 / 4.125)


@pytest.mark.parametrize("method", get_args(Quantization))
def test_every_crd_value_is_sized_or_planned_as_unknown(method: str) -> None:
    assert method in METHOD_SCHEMES or method in UNSIZED


@pytest.mark.parametrize("method", sorted(UNSIZED))
def test_an_unsized_method_on_its_checkpoint_warns_and_never_refuses(method: str) -> None:
    # A checkpoint of that format the catalog holds no numbers for, far too big for the GPU at 16 bits.
    model = _model("Qwen/Qwen3-8B")
    quantized = ModelFacts(**{**model.__dict__, "name": "example/Qwen3-8B-q", "weight_quantization": method})
    cap = plan_capacity(CapacityInput(model=quantized, gpu_memory_gib=8.0))
    assert cap.problems == ()
    assert any(method in w and "upper bound" in w for w in cap.warnings)
    assert any("weights" in w and "usable" in w for w in cap.warnings)  # the 16-bit WeightsDoNotFit, as a warning


def test_seed_000_awq_on_the_2507_base_is_refused_naming_what_exists() -> None:
    cap = plan_capacity(CapacityInput(model=_model("Qwen/Qwen3-4B-Instruct-2507"), gpu_memory_gib=22.49,
                                      quantization="awq", max_model_len=8192))
    assert [p.reason for p in cap.problems] == ["QuantizationNotInCheckpoint"]
    message = cap.problems[0].message
    assert "Qwen publishes no awq checkpoint" in message
    assert "Qwen/Qwen3-4B-Instruct-2507-FP8 (fp8)" in message
    assert "engine.quantization fp8" in message


def test_awq_on_a_base_with_an_awq_release_names_it() -> None:
    cap = plan_capacity(CapacityInput(model=_model("Qwen/Qwen3-8B"), gpu_memory_gib=22.49, quantization="awq_marlin",
                                      max_model_len=8192))
    assert [p.reason for p in cap.problems] == ["QuantizationNotInCheckpoint"]
    assert "serve Qwen/Qwen3-8B-AWQ instead" in cap.problems[0].message


def test_a_checkpoint_of_another_format_is_refused() -> None:
    choice = choose_scheme(_model("Qwen/Qwen3-8B-AWQ"), "gptq")
    assert choice.refusal is not None and choice.refusal[0] == "QuantizationMismatch"
    assert choose_scheme(_model("Qwen/Qwen3-8B-AWQ"), "awq_marlin").scheme == S.AWQ_INT4


def test_fp8_on_the_fly_is_sized_at_one_byte() -> None:
    # 6,519,800,960 linear weights x 1 byte + 2,180,398,080 = 8,700,199,040
    model = _model("Qwen/Qwen2.5-7B-Instruct")
    assert choose_scheme(model, "fp8").refusal is None
    assert weight_bytes(model, quantization="fp8") == 8_700_199_040
