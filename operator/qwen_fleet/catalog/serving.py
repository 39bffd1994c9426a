"""How each Qwen family is served: task, vLLM's reasoning and tool-call parsers, the thinking switch, YaRN.

These are family facts, the same for every size of a release; the planner turns them into defaults a spec can
override (``spec.serving``, ``engine.ropeScaling``). docs/qwen-layer.md gives the source of each one.

Parser names are the keys vLLM 0.32 registers (``vllm/reasoning/__init__.py``,
``vllm/tool_parsers/__init__.py``); the contract test starts the engine with them.
"""

from __future__ import annotations

from dataclasses import dataclass

# The two tool-call formats Qwen chat templates produce, and the vLLM 0.32 parsers that read them.
# hermes: `<tool_call>{"name": ..., "arguments": {...}}</tool_call>` (Qwen2.5, Qwen3, Qwen3-2507).
# xml: `<tool_call><function=NAME><parameter=KEY>VALUE</parameter></function></tool_call>` (Qwen3-Coder,
# Qwen3.5/3.6); vLLM 0.32 registers qwen3_coder and qwen3_xml as the same class (Qwen3EngineToolParser).
TOOL_PARSERS_BY_FORMAT: dict[str, tuple[str, ...]] = {
    "hermes": ("hermes", "qwen3_json"),
    "xml": ("qwen3_coder", "qwen3_xml"),
}
# `<think>...</think>` reasoning. vLLM 0.32's qwen3 parser starts in the reasoning state unless the request's
# chat_template_kwargs say enable_thinking=false, so it also reads the Thinking-2507 templates, which open
# `<think>` in the prompt; deepseek_r1 reads the same markers without the switch.
REASONING_PARSERS = ("qwen3", "deepseek_r1")

# Qwen2.5 and Qwen3 cards: "we advise adding the rope_scaling configuration only when processing long contexts
# is required" with {"rope_type": "yarn", "factor": 4.0, "original_max_position_embeddings": 32768}.
QWEN_YARN_ORIGINAL_CONTEXT = 32768
QWEN_YARN_MAX_FACTOR = 4.0


@dataclass(frozen=True)
class YarnFacts:
    """YaRN rope scaling as the model card documents it."""

    original_context: int  # original_max_position_embeddings
    max_factor: float  # the largest factor the card documents
    rope_theta: float  # config.json rope_theta: rope_parameters is replaced whole, so it is repeated
    # The card's "extensible up to N tokens" where it is below max_factor x original_context.
    max_context: int | None = None
    # Further rope_parameters keys of the config.json, repeated for the same reason as rope_theta.
    rope_extra: tuple[tuple[str, object], ...] = ()
    # Where rope_parameters lives: "" for a text model, "text_config" for a multimodal config (Qwen3.5/3.6).
    config_key: str = ""

    @property
    def longest(self) -> int:
        """The longest context the card documents."""
        return self.max_context or int(self.max_factor * self.original_context)


@dataclass(frozen=True)
class ServingFacts:
    """Serving facts of a model family; the defaults a spec starts from."""

    task: str = "generate"  # generate | embed | score
    reasoning_parser: str | None = None  # None: the model writes no reasoning block
    tool_format: str | None = None  # key of TOOL_PARSERS_BY_FORMAT; None: no tool calls
    thinking_switch: bool = False  # the chat template reads enable_thinking (hybrid thinking models)
    yarn: YarnFacts | None = None  # None: no documented rope scaling; beyond native_context is refused
    mtp: bool = False  # the checkpoint ships a multi-token-prediction layer (vLLM speculative method "mtp")
    # Pooling models whose checkpoint is a causal LM: the hf_overrides that make vLLM serve it as `task`.
    hf_overrides: tuple[tuple[str, object], ...] = ()

    @property
    def default_tool_parser(self) -> str | None:
        return TOOL_PARSERS_BY_FORMAT[self.tool_format][0] if self.tool_format else None


_YARN_1M_THETA = YarnFacts(QWEN_YARN_ORIGINAL_CONTEXT, QWEN_YARN_MAX_FACTOR, rope_theta=1_000_000.0)

# Qwen2.5 Instruct 7B and up document YaRN to 131,072; the blog's table gives 0.5B-3B 32K and no extension.
QWEN25_INSTRUCT = ServingFacts(tool_format="hermes", yarn=_YARN_1M_THETA)
QWEN25_INSTRUCT_SMALL = ServingFacts(tool_format="hermes")
# Qwen3 (April 2025): one model thinks or not per request (enable_thinking); 4B and up document YaRN to 131,072.
QWEN3_HYBRID = ServingFacts(reasoning_parser="qwen3", tool_format="hermes", thinking_switch=True,
                            yarn=_YARN_1M_THETA)
# 0.6B and 1.7B: the Qwen3 blog's table gives them a 32K context and no extension.
QWEN3_HYBRID_SMALL = ServingFacts(reasoning_parser="qwen3", tool_format="hermes", thinking_switch=True)
# 2507: separate Instruct (never thinks) and Thinking (always thinks) checkpoints, 262,144 native.
QWEN3_INSTRUCT_2507 = ServingFacts(tool_format="hermes")
QWEN3_THINKING_2507 = ServingFacts(reasoning_parser="qwen3", tool_format="hermes")
QWEN3_CODER = ServingFacts(tool_format="xml")
# Qwen3.5/3.6 and Qwen3-Next cards: "262,144 natively and extensible up to 1,010,000 tokens" with YaRN factor
# 4.0 over original_max_position_embeddings 262144; rope_theta 10,000,000 and a rotary dimension of 64 of the
# 256-wide heads (partial_rotary_factor 0.25). Qwen3.5/3.6 keep rope_parameters in text_config with interleaved
# M-RoPE sections; the cards' vLLM command repeats all of them (docs/qwen-layer.md).
QWEN_HYBRID_LONG_CONTEXT = 1_010_000
_YARN_QWEN35 = YarnFacts(262144, 4.0, rope_theta=10_000_000.0, max_context=QWEN_HYBRID_LONG_CONTEXT,
                         rope_extra=(("mrope_interleaved", True), ("mrope_section", (11, 11, 10)),
                                     ("partial_rotary_factor", 0.25)), config_key="text_config")
_YARN_QWEN3_NEXT = YarnFacts(262144, 4.0, rope_theta=10_000_000.0, max_context=QWEN_HYBRID_LONG_CONTEXT,
                             rope_extra=(("partial_rotary_factor", 0.25),))
# Qwen3.5/3.6 think by default, switch with enable_thinking and call tools in the XML format.
# Their checkpoints also hold one MTP layer (docs/catalog.md), usable as a speculative-decoding draft.
QWEN35 = ServingFacts(reasoning_parser="qwen3", tool_format="xml", thinking_switch=True, mtp=True,
                      yarn=_YARN_QWEN35)
QWEN3_EMBEDDING = ServingFacts(task="embed")
# vLLM's Qwen3-Reranker recipe: the original checkpoint is a causal LM scored on the "no"/"yes" logits.
QWEN3_RERANKER = ServingFacts(task="score", hf_overrides=(
    ("architectures", ("Qwen3ForSequenceClassification",)),
    ("classifier_from_token", ("no", "yes")),
    ("is_original_qwen3_reranker", True),
))
# Qwen3-Next ships one MTP layer (vLLM's qwen3_next_mtp, served as method "mtp"); tools in the Hermes format.
QWEN3_NEXT_INSTRUCT = ServingFacts(tool_format="hermes", mtp=True, yarn=_YARN_QWEN3_NEXT)
QWEN3_NEXT_THINKING = ServingFacts(reasoning_parser="qwen3", tool_format="hermes", mtp=True, yarn=_YARN_QWEN3_NEXT)
GENERIC = ServingFacts()
