"""Qwen2.5 Instruct (2024): standard GQA attention with QKV bias.

The configs carry no `head_dim`; transformers derives it as hidden / heads, written out here so the
tests can check it. `native_context` is the Instruct configs' `max_position_embeddings` (32768);
the cards reach 131,072 tokens only with YaRN rope scaling switched on by hand. Parameter counts,
layers, heads and tied embeddings are the Qwen2.5-LLM blog's model table; widths and vocab come from
config.json.
"""

from __future__ import annotations

from qwen_fleet.catalog.serving import QWEN25_INSTRUCT, QWEN25_INSTRUCT_SMALL, ServingFacts
from qwen_fleet.catalog.types import ModelFacts

_HF = "https://huggingface.co/"
_BLOG = "https://qwenlm.github.io/blog/qwen2.5-llm/"
_CONTEXT = 32768
# The three smallest sizes keep the 151936-entry embedding; 7B and up pad it to 152064.
_VOCAB_SMALL = 151936
_VOCAB_LARGE = 152064


def _instruct(
    size: str,
    *,
    params: float,
    layers: int,
    heads: int,
    kv_heads: int,
    head_dim: int,
    hidden: int,
    vocab: int,
    tied: bool,
    intermediate: int,
    serving: ServingFacts = QWEN25_INSTRUCT,
) -> ModelFacts:
    repo = f"Qwen/Qwen2.5-{size}-Instruct"
    return ModelFacts(
        name=repo,
        family="qwen2.5",
        params_billion=params,
        num_layers=layers,
        full_attention_layers=layers,
        num_attention_heads=heads,
        num_kv_heads=kv_heads,
        head_dim=head_dim,
        hidden_size=hidden,
        vocab_size=vocab,
        native_context=_CONTEXT,
        tie_word_embeddings=tied,
        intermediate_size=intermediate,
        serving=serving,
        sources=(f"{_HF}{repo}/blob/main/config.json", f"{_HF}{repo}", _BLOG),
    )


QWEN25_7B_INSTRUCT = _instruct(
    "7B",
    params=7.61,
    layers=28,
    heads=28,
    kv_heads=4,
    head_dim=128,
    hidden=3584,
    vocab=_VOCAB_LARGE,
    tied=False,
    intermediate=18944,
)

QWEN25_MODELS: tuple[ModelFacts, ...] = (
    _instruct(
        "0.5B",
        serving=QWEN25_INSTRUCT_SMALL,
        params=0.49,
        layers=24,
        heads=14,
        kv_heads=2,
        head_dim=64,
        hidden=896,
        vocab=_VOCAB_SMALL,
        tied=True,
        intermediate=4864,
    ),
    _instruct(
        "1.5B",
        serving=QWEN25_INSTRUCT_SMALL,
        params=1.54,
        layers=28,
        heads=12,
        kv_heads=2,
        head_dim=128,
        hidden=1536,
        vocab=_VOCAB_SMALL,
        tied=True,
        intermediate=8960,
    ),
    _instruct(
        "3B",
        serving=QWEN25_INSTRUCT_SMALL,
        params=3.09,
        layers=36,
        heads=16,
        kv_heads=2,
        head_dim=128,
        hidden=2048,
        vocab=_VOCAB_SMALL,
        tied=True,
        intermediate=11008,
    ),
    QWEN25_7B_INSTRUCT,
    _instruct(
        "14B",
        params=14.7,
        layers=48,
        heads=40,
        kv_heads=8,
        head_dim=128,
        hidden=5120,
        vocab=_VOCAB_LARGE,
        tied=False,
        intermediate=13824,
    ),
    _instruct(
        "32B",
        params=32.5,
        layers=64,
        heads=40,
        kv_heads=8,
        head_dim=128,
        hidden=5120,
        vocab=_VOCAB_LARGE,
        tied=False,
        intermediate=27648,
    ),
    _instruct(
        "72B",
        params=72.7,
        layers=80,
        heads=64,
        kv_heads=8,
        head_dim=128,
        hidden=8192,
        vocab=_VOCAB_LARGE,
        tied=False,
        intermediate=29568,
    ),
)
