"""LoRA memory: the adapter buffers vLLM 0.32 preallocates on every GPU when `--enable-lora` is set. Pure.

vLLM does not load adapters into memory it finds later: at start it wraps every LoRA-capable layer
(``lora/model_manager.py::_create_lora_modules``: every linear layer, the fused MoE experts, and the token
embedding and LM head of models that register ``embedding_modules``) and gives each an A and a B buffer for
``--max-loras`` adapters of ``--max-lora-rank``, in the model dtype (``LoRAConfig.lora_dtype`` auto). Those
buffers exist before the KV cache is sized, so they come out of the KV cache (or do not fit at all).

Shapes, per wrapped layer, for ``max_loras`` adapters of rank ``r`` on ``t`` tensor-parallel ranks
(``lora/layers/base_linear.py::create_lora_weights``, ``fused_moe.py``, ``vocab_parallel_embedding.py``,
``logits_processor.py``; ``fully_sharded_loras`` off, vLLM's default):

- column-parallel (a merged layer has one slice per packed projection): A ``slices x r x in``,
  B ``r x out / t`` summed over the slices (``qkv_proj``: q, k, v; ``gate_up_proj``: gate, up)
- row-parallel: A ``r x in / t``, B ``out x r`` (``o_proj``, ``down_proj``, Gated DeltaNet ``out_proj``)
- fused MoE, per local expert: w1 and w3 A ``r x hidden``, B ``intermediate / t x r``; w2 A
  ``r x intermediate / t``, B ``hidden x r``; the router is a replicated ``hidden -> experts`` layer
- token embedding: A ``vocab x r``, B ``hidden x r``; LM head (through its logits processor): A
  ``r x hidden``, B ``vocab x r``; both unsharded.

KV heads fewer than ``t`` are replicated (each rank holds one).
"""

from __future__ import annotations

from qwen_fleet.catalog.types import ModelFacts
from qwen_fleet.plan.capacity_vllm import cdiv, dtype_bytes, model_dtype

# Families whose vLLM 0.32 model classes register embedding_modules (Qwen3ForCausalLM, Qwen3MoeForCausalLM,
# Qwen3_5 / Qwen3-VL): their token embedding and LM head get adapter buffers too. Qwen2ForCausalLM does not.
_EMBEDDING_LORA_FAMILIES = ("qwen3", "qwen3.5", "qwen3.6", "qwen3-next", "qwen3-vl")


def _column(rank: int, width_in: int, widths_out: tuple[int, ...]) -> int:
    return len(widths_out) * rank * width_in + rank * sum(widths_out)


def _row(rank: int, width_in_shard: int, width_out: int) -> int:
    return rank * width_in_shard + width_out * rank


def missing_widths(model: ModelFacts) -> tuple[str, ...]:
    """The MLP widths the catalog lacks to size this model's LoRA buffers (empty: it can)."""
    need = ["moe_intermediate_size"] if model.is_moe else ["intermediate_size"]
    if model.is_moe and model.is_hybrid:  # Qwen3.5 / Qwen3-Next MoE run one shared expert beside the routed
        need.append("shared_expert_intermediate_size")
    return tuple(name for name in need if getattr(model, name) is None)


def _attention_elements(model: ModelFacts, rank: int, tp: int) -> int:
    # Qwen3.5/3.6 and Qwen3-Next gate the attention output: their q projection is twice as wide.
    gate = 2 if model.is_hybrid else 1
    q = model.num_attention_heads * model.head_dim * gate // tp
    kv = max(1, model.num_kv_heads // tp) * model.head_dim
    return _column(rank, model.hidden_size, (q, kv, kv)) + _row(
        rank, model.num_attention_heads * model.head_dim // tp, model.hidden_size)


def _linear_attention_elements(model: ModelFacts, rank: int, tp: int) -> int:
    la = model.linear_attention
    assert la is not None
    qk = 2 * la.num_key_heads * la.key_head_dim
    v = la.num_value_heads * la.value_head_dim
    # in_proj_qkvz packs (qkv, z), in_proj_ba packs (b, a) (vLLM's Qwen3.5 packed_modules_mapping).
    return (_column(rank, model.hidden_size, ((qk + v) // tp, v // tp))
            + _column(rank, model.hidden_size, (la.num_value_heads // tp, la.num_value_heads // tp))
            + _row(rank, v // tp, model.hidden_size))


def _mlp_elements(model: ModelFacts, rank: int, tp: int, ep: int) -> int:
    hidden = model.hidden_size
    if not model.is_moe:
        width = (model.intermediate_size or 0) // tp
        return _column(rank, hidden, (width, width)) + _row(rank, width, hidden)
    # Expert parallelism gives each GPU whole experts (E / ep of them) instead of a 1/tp slice of each.
    local_experts = (model.num_experts or 0) // ep
    expert = (model.moe_intermediate_size or 0) // (tp if ep == 1 else 1)
    out = local_experts * rank * (3 * hidden + 3 * expert)
    out += rank * (hidden + (model.num_experts or 0))  # the router
    if model.shared_expert_intermediate_size:
        shared = model.shared_expert_intermediate_size // tp
        out += _column(rank, hidden, (shared, shared)) + _row(rank, shared, hidden)
        out += rank * (hidden + 1)  # shared_expert_gate
    return out


def lora_bytes_per_gpu(
    model: ModelFacts,
    *,
    max_loras: int,
    max_rank: int,
    tensor_parallel: int = 1,
    pipeline_parallel: int = 1,
    expert_parallel_size: int = 1,
    dtype: str = "auto",
) -> int | None:
    """Bytes of LoRA buffers on the busiest GPU; None when the catalog lacks an MLP width to size them.

    ``expert_parallel_size``: GPUs the experts spread over with expert parallelism (tensor x data), else 1.
    """
    if max_loras <= 0:
        return 0
    if missing_widths(model):
        return None
    tp, pp = tensor_parallel, pipeline_parallel
    full = cdiv(model.full_attention_layers, pp)
    linear = cdiv(model.linear_attention_layers, pp) if model.is_hybrid else 0
    per_adapter = (full * _attention_elements(model, max_rank, tp)
                   + (linear * _linear_attention_elements(model, max_rank, tp) if linear else 0)
                   + (full + linear) * _mlp_elements(model, max_rank, tp, expert_parallel_size))
    if model.family in _EMBEDDING_LORA_FAMILIES:
        ends = 2 if pp == 1 else 1  # the first stage holds the embedding, the last the LM head
        per_adapter += ends * max_rank * (model.vocab_size + model.hidden_size)
    return per_adapter * max_loras * dtype_bytes(model_dtype(model, dtype))


def lora_refusal(model_name: str, max_loras: int, max_rank: int, lora_bytes: int) -> str:
    """Why a plan that fits without adapters does not fit with them, and the ways out."""
    return (f"{max_loras} LoRA adapter slot(s) of rank {max_rank} need {lora_bytes / 1024**3:.2f} GiB per GPU for "
            f"{model_name} (vLLM preallocates them beside the weights), and then the KV cache no longer fits: "
            f"lower serving.maxLoraRank to the largest rank your adapters use, serve fewer serving.adapters, or "
            "use more GPUs (parallelism.tensor) or a larger GPU")


def lora_warning(model: ModelFacts) -> str:
    return (f"LoRA buffers not counted for {model.name}: the catalog lacks its {', '.join(missing_widths(model))} "
            "(the KV cache will be smaller than planned)")
