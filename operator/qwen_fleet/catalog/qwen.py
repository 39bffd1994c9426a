"""All Qwen model facts, current generation first, plus the pre-quantized repos the examples use.

A pre-quantized repo shares its base model's architecture exactly (same layers, heads, KV heads,
context), so it is derived from the base entry instead of copying numbers that could drift apart.
"""

from __future__ import annotations

from dataclasses import replace

from qwen_fleet.catalog import quant_schemes as S
from qwen_fleet.catalog.qwen3 import (
    QWEN3_4B,
    QWEN3_4B_2507,
    QWEN3_8B,
    QWEN3_14B,
    QWEN3_32B,
    QWEN3_235B_A22B_2507,
    QWEN3_MODELS,
)
from qwen_fleet.catalog.qwen3_more import QWEN3_MORE_MODELS
from qwen_fleet.catalog.qwen25 import QWEN25_7B_INSTRUCT, QWEN25_MODELS
from qwen_fleet.catalog.qwen35 import QWEN35_MODELS
from qwen_fleet.catalog.types import ModelFacts, QuantScheme

_HF = "https://huggingface.co/"
# vLLM's AWQ kernels take float16 activations only (AWQConfig.get_supported_act_dtypes -> [half]).
_VLLM_AWQ = "https://docs.vllm.ai/en/v0.15.0/api/vllm/model_executor/layers/quantization/awq/"
_VLLM_FP8 = "https://docs.vllm.ai/en/v0.32.0/features/quantization/llm_compressor/fp8/"
_ORACLE_235B_FP8_CONFIG = ("https://github.com/oracle/accelerated-data-science/blob/"
                           "0e785b9fd36fb354019e0924b94ac2b0ec6f235a/tests/unitary/with_extras/aqua/test_data/"
                           "recommend/config-json-files/Qwen3-235B-A22B-Instruct-2507-FP8.json")

_QWEN_GPTQ = "https://qwen.readthedocs.io/en/latest/quantization/gptq.html"
# The FP8 release's config.json, vendored by alibaba/InferSim (also the source of the 122B's text_config).
_INFERSIM_122B_FP8 = ("https://github.com/alibaba/InferSim/blob/86bc5507f9b1c35b41e2bebadcb2ef58ba28a36d/"
                      "hf_configs/qwen3.5-122B-A10B_config.json")

QUANTIZATION_METHODS = ("awq", "gptq", "fp8")


def quantized_variant(
    base: ModelFacts,
    name: str,
    *,
    method: str,
    dtype: str,
    scheme: QuantScheme,
    extra_sources: tuple[str, ...] = (),
    unverified_fields: tuple[str, ...] = (),
) -> ModelFacts:
    """`base`'s architecture under another repo name with pre-quantized weights.

    `dtype` is the dtype vLLM runs the unquantized parts and activations in, which for AWQ is
    float16 whatever the base model was trained in.
    """
    if method not in QUANTIZATION_METHODS:
        raise ValueError(f"unknown quantization method {method!r}; expected one of {QUANTIZATION_METHODS}")
    if scheme.method != method:
        raise ValueError(f"{name}: scheme {scheme.label} is {scheme.method}, not {method}")
    return replace(
        base,
        name=name,
        weight_quantization=method,
        quant_scheme=scheme,
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
        scheme=S.AWQ_INT4,
        extra_sources=(_VLLM_AWQ,),
    ),
    quantized_variant(
        QWEN3_4B,
        "Qwen/Qwen3-4B-AWQ",
        method="awq",
        dtype="float16",
        scheme=S.AWQ_INT4,
        extra_sources=(_VLLM_AWQ,),
    ),
    # Official FP8 release: fine-grained (block 128) FP8 weights; layers left unquantized stay in
    # the base dtype. Native FP8 matmuls need compute capability >= 8.9; Ampere runs it weight-only.
    quantized_variant(
        QWEN3_8B,
        "Qwen/Qwen3-8B-FP8",
        method="fp8",
        scheme=S.FP8_BLOCK,
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
        scheme=S.FP8_BLOCK,
        # The repo's config.json (`torch_dtype` bfloat16), vendored as a test fixture by
        # oracle/accelerated-data-science (docs/catalog.md, "Verified since").
        dtype="bfloat16",
        extra_sources=(_VLLM_FP8, _ORACLE_235B_FP8_CONFIG),
    ),
)



def _fp8(base: ModelFacts, *extra_sources: str) -> ModelFacts:
    """Qwen's own block-128 FP8 release of ``base`` (config.json: quant_method fp8, fmt e4m3, activation_scheme
    dynamic, weight_block_size [128, 128]; lm_head, embeddings and norms not converted), run in bfloat16."""
    return quantized_variant(base, f"{base.name}-FP8", method="fp8", dtype="bfloat16", scheme=S.FP8_BLOCK,
                             extra_sources=(_VLLM_FP8, *extra_sources))


def _awq(base: ModelFacts) -> ModelFacts:
    """Qwen's own AWQ release of ``base`` (config.json: quant_method awq, bits 4, group_size 128, zero_point true,
    version gemm), run in float16 as vLLM's AWQ kernels require."""
    return quantized_variant(base, f"{base.name}-AWQ", method="awq", dtype="float16", scheme=S.AWQ_INT4,
                             extra_sources=(_VLLM_AWQ,))


def _gptq(base: ModelFacts, bits: int) -> ModelFacts:
    """Qwen2.5's GPTQ releases (Qwen's docs: AutoGPTQ, group size 128, desc_act false), run in float16."""
    return quantized_variant(base, f"{base.name}-GPTQ-Int{bits}", method="gptq", dtype="float16",
                             scheme=S.GPTQ_INT4 if bits == 4 else S.GPTQ_INT8, extra_sources=(_QWEN_GPTQ,))


def _by_name(models: tuple[ModelFacts, ...], name: str) -> ModelFacts:
    return next(m for m in models if m.name == name)


# Qwen's own quantized releases (docs/catalog.md, "Quantized checkpoints", says how each was confirmed).
QWEN_QUANTIZED_RELEASES: tuple[ModelFacts, ...] = (
    _fp8(QWEN3_4B_2507),
    _fp8(QWEN3_4B),
    _fp8(QWEN3_14B),
    _fp8(QWEN3_32B),
    _awq(QWEN3_8B),
    _awq(QWEN3_14B),
    _awq(QWEN3_32B),
    _gptq(QWEN25_7B_INSTRUCT, 4),
    _gptq(QWEN25_7B_INSTRUCT, 8),
    _fp8(_by_name(QWEN35_MODELS, "Qwen/Qwen3.5-27B")),
    _fp8(_by_name(QWEN35_MODELS, "Qwen/Qwen3.6-27B")),
    _fp8(_by_name(QWEN35_MODELS, "Qwen/Qwen3.5-35B-A3B")),
    _fp8(_by_name(QWEN35_MODELS, "Qwen/Qwen3.6-35B-A3B")),
    _fp8(_by_name(QWEN35_MODELS, "Qwen/Qwen3.5-122B-A10B"), _INFERSIM_122B_FP8),
    _fp8(_by_name(QWEN35_MODELS, "Qwen/Qwen3.5-397B-A17B")),
)

ALL_MODELS: tuple[ModelFacts, ...] = (QWEN35_MODELS + QWEN3_MODELS + QWEN3_MORE_MODELS + QWEN25_MODELS
                                      + QUANTIZED_MODELS + QWEN_QUANTIZED_RELEASES)
