"""Quantization formats as numbers: what one stored weight costs in each (data; the sizing is plan/quantization.py).

Each figure is the format's own layout: NVFP4 (ModelOpt) stores 4-bit E2M1 values with one FP8 E4M3 scale per
16 (plus one FP32 scale per tensor); MXFP4 (OCP microscaling) one E8M0 scale per 32; AWQ and GPTQ 4- or 8-bit
integers with an fp16 scale and a packed zero point per group of 128 input values (GPTQ stores the zeros even for
symmetric checkpoints); compressed-tensors W4A16 symmetric groups of 128 with a 16-bit scale and no zero point;
Qwen's FP8 checkpoints E4M3 weights with one FP32 inverse scale per 128 x 128 block.
"""

from __future__ import annotations

from qwen_fleet.catalog.types import QuantScheme

AWQ_INT4 = QuantScheme("awq", 4, 128, scale_bits=16, zero_bits=4, label="AWQ int4 g128")
GPTQ_INT4 = QuantScheme("gptq", 4, 128, scale_bits=16, zero_bits=4, label="GPTQ-Int4 g128")
GPTQ_INT8 = QuantScheme("gptq", 8, 128, scale_bits=16, zero_bits=8, label="GPTQ-Int8 g128")
# Qwen3.5 GPTQ-Int4: config.json `dynamic` leaves attention, Gated DeltaNet, shared experts, MTP and vision in BF16.
GPTQ_INT4_MLP = QuantScheme("gptq", 4, 128, scale_bits=16, zero_bits=4, scope="mlp", label="GPTQ-Int4 g128 (MLP)")
FP8_BLOCK = QuantScheme("fp8", 8, 128 * 128, scale_bits=32, label="FP8 block 128x128")
FP8_DYNAMIC = QuantScheme("fp8", 8, None, label="FP8 per-tensor (on the fly)")
NVFP4 = QuantScheme("modelopt_fp4", 4, 16, scale_bits=8, label="NVFP4")
MXFP4 = QuantScheme("mxfp4", 4, 32, scale_bits=8, scope="experts", label="MXFP4")
W4A16 = QuantScheme("compressed-tensors", 4, 128, scale_bits=16, label="W4A16 g128")
W8A8_INT8 = QuantScheme("compressed-tensors", 8, None, label="W8A8 int8 per-channel")
W8A8_FP8 = QuantScheme("compressed-tensors", 8, None, label="FP8 W8A8 per-channel")
FBGEMM_FP8 = QuantScheme("fbgemm_fp8", 8, None, label="FP8 per-channel")
MODELOPT_FP8 = QuantScheme("modelopt", 8, None, label="ModelOpt FP8 per-tensor")
# vLLM's kernel for GPTQ/AWQ MoE checkpoints, without the checkpoint's facts: the experts at int4 g128, the rest at
# 16-bit (an upper bound if the checkpoint quantized more).
MOE_WNA16 = QuantScheme("moe_wna16", 4, 128, scale_bits=16, zero_bits=4, scope="experts", label="MoE WNA16")
# Quantizes the routed experts to int8 per channel while loading; attention and shared layers stay 16-bit.
EXPERTS_INT8 = QuantScheme("experts_int8", 8, None, scope="experts", label="experts int8 (on the fly)")
BNB_NF4 = QuantScheme("bitsandbytes", 4, 64, scale_bits=32, label="NF4 block 64")
