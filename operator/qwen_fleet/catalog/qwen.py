"""All Qwen model facts, current generation first, plus the pre-quantized repos the examples use.

A pre-quantized repo shares its base model's architecture exactly (same layers, heads, KV heads,
context), so it is derived from the base entry instead of copying numbers that could drift apart.
"""

from __future__ import annotations

from dataclasses import replace

from qwen_fleet.catalog.qwen3 import QWEN3_4B, QWEN3_8B, QWEN3_235B_A22B_2507, QWEN3_MODELS
from qwen_fleet.catalog.qwen3_more import QWEN3_MORE_MODELS
from qwen_fleet.catalog.qwen25 import QWEN25_7B_INSTRUCT, QWEN25_MODELS
from qwen_fleet.catalog.qwen35 import QWEN35_MODELS
from qwen_fleet.catalog.types import ModelFacts

_HF = "https://huggingface.co/"
# vLLM's AWQ kernels take float16 activations only (AWQConfig.get_supported_act_dtypes -> [half]).
_VLLM_AWQ = "https://docs.vllm.ai/en/v0.15.0/api/vllm/model_executor/layers/quantization/awq/"
_VLLM_FP8 = "https://docs.vllm.ai/en/v0.32.0/features/quantization/llm_compressor/fp8/"
_ORACLE_235B_FP8_CONFIG = ("https://github.com/oracle/accelerated-data-science/blob/"
                           "0e785b9fd36fb354019e0924b94ac2b0ec6f235a/tests/unitary/with_extras/aqua/test_data/"
                           "recommend/config-json-files/Qwen3-235B-A22B-Instruct-2507-FP8.json")

QUANTIZATION_METHODS = ("awq", "gptq", "fp8")


def quantized_variant(
    base: ModelFacts,
    name: str,
    *,
    method: str,
    dtype: str,
    extra_sources: tuple[str, ...] = (),
    unverified_fields: tuple[str, ...] = (),
) -> ModelFacts:
    """`base`'s architecture under another repo name with pre-quantized weights.

    `dtype` is the dtype vLLM runs the unquantized parts and activations in, which for AWQ is
    float16 whatever the base model was trained in.
    """
    if method not in QUANTIZATION_METHODS:
        raise ValueError(f"unknown quantization method {method!r}; expected one of {QUANTIZATION_METHODS}")
    return replace(
        base,
        name=name,
        weight_quantization=method,
        dtype=dtype,
        base_model=base.name,
        aliases=(),
        unverified_fields=unverified_fields,
        sources=(f"{_HF}{name}", f"{_HF}{name}/blob/main/config.json", *extra_sources, *base.sources),
    )


QUANTIZED_MODELS: tuple[ModelFacts, ...] = (
    quantized_variant(
        QWEN25_7B_INSTRUCT,
        "Qwen/Qwen2.5-7B-Instruct-AWQ",
        method="awq",
        dtype="float16",
        extra_sources=(_VLLM_AWQ,),
    ),
    quantized_variant(
        QWEN3_4B,
        "Qwen/Qwen3-4B-AWQ",
        method="awq",
        dtype="float16",
        extra_sources=(_VLLM_AWQ,),
    ),
    # Official FP8 release: fine-grained (block 128) FP8 weights; layers left unquantized stay in
    # the base dtype. Native FP8 matmuls need compute capability >= 8.9; Ampere runs it weight-only.
    quantized_variant(
        QWEN3_8B,
        "Qwen/Qwen3-8B-FP8",
        method="fp8",
        # vLLM serving this repo with dtype left at auto resolved dtype=torch.bfloat16 (ROCm/ROCm#5567's log).
        dtype="bfloat16",
        extra_sources=(_VLLM_FP8, "https://github.com/ROCm/ROCm/issues/5567"),
    ),
    # The same block-128 FP8 format for the 2507 MoE flagship: at about 1 byte per parameter it fits one
    # 8 x 80 GB node, where the bfloat16 repo (~470 GB) needs two.
    quantized_variant(
        QWEN3_235B_A22B_2507,
        "Qwen/Qwen3-235B-A22B-Instruct-2507-FP8",
        method="fp8",
        # The repo's config.json (`torch_dtype` bfloat16), vendored as a test fixture by
        # oracle/accelerated-data-science (docs/catalog.md, "Verified since").
        dtype="bfloat16",
        extra_sources=(_VLLM_FP8, _ORACLE_235B_FP8_CONFIG),
    ),
)

ALL_MODELS: tuple[ModelFacts, ...] = (QWEN35_MODELS + QWEN3_MODELS + QWEN3_MORE_MODELS + QWEN25_MODELS
                                      + QUANTIZED_MODELS)
