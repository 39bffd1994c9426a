"""Bytes of a model's weights, in all and on the busiest GPU of a layout. Pure.

Quantized formats are sized by plan/quantization.py: the layers a format stores in low bits at its bits per
weight, everything else (embeddings, LM head, norms, a vision encoder, and what the format leaves alone) in the
model dtype.
"""

from __future__ import annotations

from qwen_fleet.catalog.types import ModelFacts, QuantScheme
from qwen_fleet.plan.capacity_vllm import cdiv, dtype_bytes, model_dtype
from qwen_fleet.plan.quantization import METHOD_SCHEMES, embedding_params, quantized_params

__all__ = ["bytes_per_quantized_param", "expert_bytes_moved_per_gpu", "vision_bytes", "weight_bytes",
           "weight_bytes_per_gpu"]

Quant = str | QuantScheme | None


def _scheme(model: ModelFacts, quantization: Quant) -> QuantScheme | None:
    """A scheme given, or a method name's (the checkpoint's own scheme when it carries that method)."""
    if isinstance(quantization, QuantScheme):
        return quantization
    method = quantization or model.weight_quantization
    if method is None:
        return None
    if model.quant_scheme is not None and method == model.weight_quantization:
        return model.quant_scheme
    return METHOD_SCHEMES.get(method)  # None for a method only its checkpoint sizes: 16-bit, an upper bound


def bytes_per_quantized_param(model: ModelFacts, quantization: Quant, dtype: str = "auto") -> float:
    """Bytes of one weight the format stores (the model dtype's when there is no format)."""
    scheme = _scheme(model, quantization)
    return scheme.bits_per_weight / 8 if scheme else float(dtype_bytes(model_dtype(model, dtype)))


def expert_bytes_moved_per_gpu(model: ModelFacts, tp: int, pp: int, dp: int, bytes_per_param: float) -> int:
    """Expert weights a GPU no longer holds when the experts spread over tensor x data GPUs (expert
    parallel) instead of each being split over the tensor ranks of every data-parallel copy."""
    from qwen_fleet.plan.parallel import expert_params_billion  # parallel.py imports capacity, which imports us

    stage_share = cdiv(model.num_layers, pp) / model.num_layers
    experts = expert_params_billion(model) * 1e9 * bytes_per_param * stage_share
    return int(experts / tp - experts / (tp * dp))


def vision_bytes(model: ModelFacts, dtype: str = "auto") -> int:
    """Bytes of a vision-language model's vision encoder, in the model dtype (0 for a text-only model)."""
    return int((model.vision_params_billion or 0.0) * 1e9 * dtype_bytes(model_dtype(model, dtype)))


def weight_bytes(model: ModelFacts, dtype: str = "auto", quantization: Quant = None, *,
                 vision_encoder: bool = True) -> int:
    """Bytes of all weights (every expert of a MoE model) as loaded by the engine; without the vision encoder
    when ``vision_encoder`` is False (vLLM then neither builds nor loads it). ``quantization``: a method name
    (None: the checkpoint's own) or a scheme."""
    full = dtype_bytes(model_dtype(model, dtype))
    vision = (model.vision_params_billion or 0.0) * 1e9
    # The checkpoint's count where known: it includes what vLLM loads beside the language model (vision encoder,
    # MTP layer). A card's count covers the language model only, so the vision encoder is added to it.
    params = model.checkpoint_params_billion * 1e9 if model.checkpoint_params_billion else \
        model.params_billion * 1e9 + vision
    if not vision_encoder:
        params -= vision
        vision = 0.0
    scheme = _scheme(model, quantization)
    if scheme is None:
        return int(params * full)
    low_bit = quantized_params(model, scheme, params, vision)
    return int(low_bit * scheme.bits_per_weight / 8 + (params - low_bit) * full)


def weight_bytes_per_gpu(
    model: ModelFacts,
    tensor_parallel: int = 1,
    pipeline_parallel: int = 1,
    dtype: str = "auto",
    quantization: Quant = None,
    *,
    vision_encoder: bool = True,
) -> int:
    """Weights on the busiest GPU: layers split over pipeline stages (an end stage also holds an
    embedding matrix), every tensor split over the tensor-parallel ranks."""
    total = weight_bytes(model, dtype, quantization, vision_encoder=vision_encoder)
    if pipeline_parallel == 1:
        return cdiv(total, tensor_parallel)
    embedding = model.vocab_size * model.hidden_size * dtype_bytes(model_dtype(model, dtype))
    embeddings = embedding_params(model) * dtype_bytes(model_dtype(model, dtype))
    layers_share = cdiv(model.num_layers, pipeline_parallel) / model.num_layers
    stage = int((total - embeddings) * layers_share) + embedding
    return cdiv(stage, tensor_parallel)
