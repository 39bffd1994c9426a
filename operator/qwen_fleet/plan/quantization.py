"""Weight bytes of a quantized checkpoint, from the format's own numbers. Pure.

Every ``engine.quantization`` value the CRD accepts is one of three kinds:

* sized: bits per weight follow from the method and its parameters (``QuantScheme``): the catalog's checkpoint
  carries its own scheme; without one (a method vLLM applies at load, or a repo the catalog does not know) the
  method's usual scheme below is used;
* unsized: the checkpoint's config decides everything (``torchao``): planned as unknown, with a warning;
* refused: a method that only reads pre-quantized weights, on a catalog checkpoint that does not carry it
  (seed 000's ``awq`` on ``Qwen/Qwen3-4B-Instruct-2507``: vLLM fails at load), or a checkpoint quantized with
  another format.

Layers a format leaves alone stay in the model dtype: embeddings, the LM head, norms and a vision encoder always;
attention and shared experts too for formats that quantize only the MLP or the routed experts.
"""

from __future__ import annotations

from dataclasses import dataclass

from qwen_fleet.catalog import all_models
from qwen_fleet.catalog import quant_schemes as S
from qwen_fleet.catalog.types import ModelFacts, QuantScheme

__all__ = [
    "CHECKPOINT_ONLY",
    "METHOD_SCHEMES",
    "ON_THE_FLY",
    "UNSIZED",
    "QuantChoice",
    "choose_scheme",
    "embedding_params",
    "norm_params",
    "quantized_params",
    "quantized_variants",
    "routed_expert_params",
]

# The usual scheme of each method (the defaults of the tools that write it, and what Qwen publishes).
METHOD_SCHEMES: dict[str, QuantScheme] = {
    "awq": S.AWQ_INT4,
    "awq_marlin": S.AWQ_INT4,
    "auto_awq": S.AWQ_INT4,
    "gptq": S.GPTQ_INT4,
    "gptq_marlin": S.GPTQ_INT4,
    "auto_gptq": S.GPTQ_INT4,
    "fp8": S.FP8_DYNAMIC,
    "fbgemm_fp8": S.FBGEMM_FP8,
    "modelopt": S.MODELOPT_FP8,
    "modelopt_fp4": S.NVFP4,
    "mxfp4": S.MXFP4,
    "moe_wna16": S.MOE_WNA16,
    "experts_int8": S.EXPERTS_INT8,
    "bitsandbytes": S.BNB_NF4,
}
# The checkpoint's quantization_config decides bits and layers, and the catalog holds no such checkpoint.
UNSIZED = frozenset({"compressed-tensors", "torchao", "quark", "inc"})
# Methods vLLM applies to a 16-bit checkpoint while loading it (torchao too, from --hf-overrides).
ON_THE_FLY = frozenset({"fp8", "experts_int8", "bitsandbytes", "torchao"})
# Methods that read weights someone quantized beforehand: a 16-bit checkpoint fails at load.
CHECKPOINT_ONLY = frozenset(set(METHOD_SCHEMES) | UNSIZED) - ON_THE_FLY
# Spellings vLLM accepts for a checkpoint of each format (the marlin kernels, vLLM's auto_* wrappers).
_COMPATIBLE = {
    "awq": frozenset({"awq", "awq_marlin", "auto_awq", "moe_wna16"}),
    "gptq": frozenset({"gptq", "gptq_marlin", "auto_gptq", "moe_wna16"}),
    "fp8": frozenset({"fp8"}),
}


@dataclass(frozen=True)
class QuantChoice:
    """What the planner sizes the weights with. ``scheme`` None: 16-bit weights (unquantized, or unknown)."""

    method: str | None
    scheme: QuantScheme | None = None
    unknown: bool = False  # sized at 16-bit for want of facts: an upper bound, never a refusal
    refusal: tuple[str, str] | None = None  # (reason, message) when vLLM would fail at load
    warning: str | None = None


def quantized_variants(model: ModelFacts) -> tuple[ModelFacts, ...]:
    """The catalog's pre-quantized checkpoints of ``model`` (Qwen's own FP8/AWQ/GPTQ repos)."""
    return tuple(m for m in all_models() if m.base_model == model.name and m.weight_quantization)


def choose_scheme(model: ModelFacts, requested: str | None) -> QuantChoice:
    """The scheme of ``model`` served with ``--quantization requested`` (None: the checkpoint's own)."""
    carried = model.weight_quantization
    method = requested or carried
    if method is None:
        return QuantChoice(None)
    if carried is not None:
        if requested is not None and requested not in _COMPATIBLE.get(carried, frozenset({carried})):
            return QuantChoice(method, refusal=("QuantizationMismatch", _mismatch(model, requested)))
        scheme = model.quant_scheme or METHOD_SCHEMES.get(carried)
        if scheme is None:
            return _unknown(model, method)
        return QuantChoice(method, scheme)
    if method in CHECKPOINT_ONLY:
        return QuantChoice(method, refusal=("QuantizationNotInCheckpoint", _not_in_checkpoint(model, method)))
    if method in METHOD_SCHEMES:
        return QuantChoice(method, METHOD_SCHEMES[method])
    return _unknown(model, method)


def _unknown(model: ModelFacts, method: str) -> QuantChoice:
    return QuantChoice(method, unknown=True, warning=(
        f"quantization {method!r} of {model.name}: its bits and quantized layers come from the checkpoint's own "
        "config, which the catalog does not hold; weights are planned at 16-bit, an upper bound, and the memory "
        "checks only warn"))


def _not_in_checkpoint(model: ModelFacts, method: str) -> str:
    variants = quantized_variants(model)
    same = [v.name for v in variants if method in _COMPATIBLE.get(v.weight_quantization or "", frozenset())]
    listed = ", ".join(f"{v.name} ({v.weight_quantization})" for v in variants)
    if same:
        use = f"serve {' or '.join(same)} instead (model.name)"
    elif variants:
        use = f"Qwen publishes no {method} checkpoint of it; its quantized checkpoints: {listed}"
    else:
        use = f"Qwen publishes no quantized checkpoint of it with {method}"
    return (f"{model.name} holds {model.dtype} weights, not weights quantized with {method}: vLLM fails at load "
            f"(--quantization {method} reads weights quantized beforehand). {use}; or set engine.quantization "
            "fp8 to quantize the weights while loading (on the fly), or leave it unset.")


def _mismatch(model: ModelFacts, requested: str) -> str:
    carried = model.weight_quantization
    accepted = ", ".join(sorted(_COMPATIBLE.get(carried or "", frozenset({carried or ""}))))
    return (f"{model.name} is a {carried} checkpoint: vLLM refuses --quantization {requested} for it (the method "
            f"in its config.json wins); set engine.quantization to one of {accepted}, or leave it unset.")


def norm_params(model: ModelFacts) -> int:
    """RMSNorm weights: two per layer and a final one, hidden-sized (QK-norms add head_dim each, ignored)."""
    return (2 * model.num_layers + 1) * model.hidden_size


def embedding_params(model: ModelFacts) -> int:
    return model.vocab_size * model.hidden_size * (1 if model.tie_word_embeddings else 2)


def dense_mlp_params(model: ModelFacts) -> int:
    """gate, up and down projections of every layer of a dense model (0 for a MoE model)."""
    if model.is_moe or not model.intermediate_size:
        return 0
    return 3 * model.num_layers * model.hidden_size * model.intermediate_size


def routed_expert_params(model: ModelFacts) -> float:
    """Routed experts' weights: gate, up and down of every expert of every layer (every Qwen MoE layer is sparse);
    without the expert width in the catalog, the estimate from total and active counts (plan/parallel.py)."""
    if not model.is_moe:
        return 0.0
    if model.moe_intermediate_size and model.num_experts:
        return float(3 * model.num_layers * model.num_experts * model.hidden_size * model.moe_intermediate_size)
    from qwen_fleet.plan.parallel import expert_params_billion  # parallel.py imports capacity, which imports us

    return expert_params_billion(model) * 1e9


def quantized_params(model: ModelFacts, scheme: QuantScheme, params: float, vision: float) -> float:
    """Parameters stored in the low-bit format, out of ``params`` (the checkpoint's, vision encoder included)."""
    experts = routed_expert_params(model)
    if scheme.scope == "experts":
        return experts
    if scheme.scope == "mlp":
        return experts if model.is_moe else float(dense_mlp_params(model))
    return params - embedding_params(model) - norm_params(model) - vision
