"""``spec.serving`` and ``engine.ropeScaling``: what the server offers on top of the engine, per Qwen family.

Every field is optional: unset, the planner takes the family's default from the catalog (catalog/serving.py)
and reports what it chose in ``status.serving``. What needs the catalog to judge (a parser the family's output
does not match, YaRN beyond the documented factor) is the planner's to refuse (Stalled); what does not is
refused here, at apply.
"""

from __future__ import annotations

from typing import Literal

from pydantic import Field

from qwen_fleet.api.base import TOKEN, ApiModel, Rule
from qwen_fleet.api.security import ApiKeySecretRef

Task = Literal["generate", "embed", "score"]
# vLLM 0.32 registry names that read Qwen output; "none" switches a family default off.
ReasoningParser = Literal["qwen3", "deepseek_r1", "none"]
ToolCallParser = Literal["hermes", "qwen3_json", "qwen3_coder", "qwen3_xml", "none"]

_GENERATE_ONLY = "!has(self.task) || self.task == 'generate' || "


class Speculative(ApiModel, rules=[
    Rule(cel="(has(self.method) && self.method == 'ngram') || (!has(self.promptLookupMin) && "
             "!has(self.promptLookupMax))",
         check=lambda s: s.method == "ngram" or (s.prompt_lookup_min is None and s.prompt_lookup_max is None),
         message="serving.speculative.promptLookupMin and promptLookupMax apply to method ngram only"),
    Rule(cel="!has(self.promptLookupMin) || !has(self.promptLookupMax) || "
             "self.promptLookupMin <= self.promptLookupMax",
         check=lambda s: s.prompt_lookup_min is None or s.prompt_lookup_max is None
         or s.prompt_lookup_min <= s.prompt_lookup_max,
         message="serving.speculative.promptLookupMin must not exceed promptLookupMax"),
    Rule(cel="(has(self.method) && (self.method == 'draft' || self.method == 'eagle3')) == has(self.model)",
         check=lambda s: (s.method in ("draft", "eagle3")) == (s.model is not None),
         message="serving.speculative.model names the draft model of method draft or the EAGLE-3 head of method "
                 "eagle3, and only of them"),
]):
    """Speculative decoding: the model's own multi-token-prediction (MTP) layer (Qwen3.5/3.6, Qwen3-Next),
    n-gram prompt lookup (any model: drafts by copying what followed the last n tokens earlier in the prompt),
    a smaller draft model of the same tokenizer family, or an EAGLE-3 head trained for the target."""

    method: Literal["mtp", "ngram", "draft", "eagle3"] = Field(
        default="mtp", description="mtp: the checkpoint's MTP layer drafts tokens (refused for a model without "
        "one; its KV cache is planned). ngram: prompt lookup, no draft weights or KV cache. draft: the smaller "
        "model named in model drafts (same tokenizer family; its weights and KV cache are planned). eagle3: the "
        "EAGLE-3 head named in model drafts from the target's hidden states (a head is trained for one target "
        "checkpoint; its layer's KV cache and its weights are planned from the target's geometry).")
    model: str | None = Field(default=None, max_length=256, pattern=TOKEN, description="draft: Hugging Face repo "
                              "id of the draft model, e.g. Qwen/Qwen3-0.6B for a Qwen3 target. eagle3: the "
                              "EAGLE-3 head's repo id, trained for this target.")
    num_speculative_tokens: int = Field(default=1, ge=1, le=8, description="Tokens drafted per step (the "
                                        "Qwen3.5/3.6 MTP layer is one layer, applied repeatedly).")
    prompt_lookup_min: int | None = Field(default=None, ge=1, le=32, description="ngram: shortest n-gram matched "
                                          "in the prompt (vLLM prompt_lookup_min; default: vLLM's).")
    prompt_lookup_max: int | None = Field(default=None, ge=1, le=32, description="ngram: longest n-gram matched "
                                          "in the prompt (vLLM prompt_lookup_max; default: vLLM's).")

    def config(self) -> dict[str, str | int]:
        """vLLM's --speculative-config for this spec."""
        if self.method == "draft" and self.model is not None:
            # vLLM names the method of a separate draft model itself (draft_model) from the model it is given.
            return {"model": self.model, "num_speculative_tokens": self.num_speculative_tokens}
        if self.method == "eagle3" and self.model is not None:
            return {"method": "eagle3", "model": self.model, "num_speculative_tokens": self.num_speculative_tokens}
        out: dict[str, str | int] = {"method": self.method, "num_speculative_tokens": self.num_speculative_tokens}
        if self.prompt_lookup_min is not None:
            out["prompt_lookup_min"] = self.prompt_lookup_min
        if self.prompt_lookup_max is not None:
            out["prompt_lookup_max"] = self.prompt_lookup_max
        return out


class Adapter(ApiModel, rules=[Rule(
    cel="has(self.repo) != has(self.path)",
    check=lambda a: (a.repo is None) != (a.path is None),
    message="an adapter names exactly one of repo (Hugging Face) or path (on the model's claim)",
)]):
    """A LoRA adapter vLLM loads at start and serves under its own model name (--lora-modules)."""

    name: str = Field(description="Model name clients send to use the adapter.", min_length=1, max_length=128,
                      pattern=TOKEN)
    repo: str | None = Field(default=None, description="Hugging Face repo id of the adapter (vLLM downloads "
                             "it at start).", max_length=256, pattern=TOKEN)
    path: str | None = Field(default=None, description="Directory of the adapter on the model's claim "
                             "(model.source.pvc), relative to the claim's root.", max_length=1024,
                             pattern=r"^[A-Za-z0-9._@+=-][A-Za-z0-9._/@+=-]*$")


# vLLM 0.32 builds the Qwen3-VL / Qwen3.5 vision encoder unless every modality it serves (image, video) has a
# per-prompt limit of 0 (model_executor/models/interfaces.py::_mark_tower_model); an unset modality means 999.
VISION_MODALITIES = ("image", "video")


class MediaLimits(ApiModel, rules=[Rule(
    cel="has(self.image) || has(self.video)",
    check=lambda m: m.image is not None or m.video is not None,
    message="serving.multimodal.limitsPerPrompt names image, video or both",
)]):
    """Most media items one prompt may carry (--limit-mm-per-prompt); an unset modality keeps vLLM's 999."""

    image: int | None = Field(default=None, ge=0, le=1024, description="Images per prompt; 0 refuses images.")
    video: int | None = Field(default=None, ge=0, le=1024, description="Videos per prompt; 0 refuses videos.")

    def as_dict(self) -> dict[str, int]:
        return {k: v for k in VISION_MODALITIES if (v := getattr(self, k)) is not None}


class Multimodal(ApiModel, rules=[Rule(
    cel="!has(self.languageModelOnly) || !self.languageModelOnly || !has(self.limitsPerPrompt)",
    check=lambda m: not (m.language_model_only and m.limits_per_prompt is not None),
    message="serving.multimodal.languageModelOnly serves no media at all: remove limitsPerPrompt (or set "
            "languageModelOnly false)",
)]):
    """Media input of a vision-language model (Qwen3-VL, Qwen3.5/3.6). Unset: vLLM's default, 999 of each."""

    language_model_only: bool | None = Field(default=None, description="Serve text only (--language-model-"
                                             "only): vLLM neither builds nor loads the vision encoder, and "
                                             "the planner gives its memory to the KV cache.")
    limits_per_prompt: MediaLimits | None = Field(default=None, description="Media items per prompt "
                                                  "(--limit-mm-per-prompt). image: 0 and video: 0 together "
                                                  "also leave the vision encoder out.")

    @property
    def skips_vision_encoder(self) -> bool:
        """Whether vLLM 0.32 leaves the vision encoder out (no weights loaded, no encoder profiling)."""
        limits = self.limits_per_prompt.as_dict() if self.limits_per_prompt else {}
        return bool(self.language_model_only) or all(limits.get(m) == 0 for m in VISION_MODALITIES)


class ServingSpec(ApiModel, rules=[
    Rule(cel=_GENERATE_ONLY + "((!has(self.reasoningParser) || self.reasoningParser == 'none') && "
             "(!has(self.toolCallParser) || self.toolCallParser == 'none') && !has(self.thinking) && "
             "!has(self.speculative))",
         check=lambda s: s.task in (None, "generate") or (
             s.reasoning_parser in (None, "none") and s.tool_call_parser in (None, "none") and s.thinking is None
             and s.speculative is None),
         message="serving.reasoningParser, toolCallParser, thinking and speculative apply to generation only: "
                 "remove them for task embed or score"),
    Rule(cel="!has(self.adapters) || self.adapters.all(a, self.adapters.exists_one(b, b.name == a.name))",
         check=lambda s: len({a.name for a in s.adapters}) == len(s.adapters),
         message="serving.adapters names must be unique"),
    Rule(cel="!has(self.adapters) || size(self.adapters) == 0 || !has(self.task) || self.task == 'generate'",
         check=lambda s: not s.adapters or s.task in (None, "generate"),
         message="serving.adapters apply to task generate only"),
    Rule(cel="!has(self.thinking) || !has(self.reasoningParser) || self.reasoningParser != 'none' || "
             "!self.thinking",
         check=lambda s: not (s.thinking is True and s.reasoning_parser == "none"),
         message="serving.thinking: true with reasoningParser: none returns the thinking text inside the "
                 "answer's content; drop reasoningParser or set it to qwen3"),
]):
    """Task, reasoning and tool-call parsing, thinking default. Unset: the model family's default."""

    task: Task | None = Field(default=None, description="What the server does: generate (chat and "
                              "completions), embed (/v1/embeddings, e.g. Qwen3-Embedding) or score "
                              "(/v1/score and /v1/rerank, e.g. Qwen3-Reranker). Default: the catalog's task "
                              "for the model, generate for a model it does not know.")
    reasoning_parser: ReasoningParser | None = Field(default=None, description="vLLM reasoning parser "
                                                     "(--reasoning-parser): puts <think> text in the "
                                                     "message's reasoning field. Default: qwen3 for thinking "
                                                     "models (Qwen3, Qwen3.5/3.6, Thinking-2507), none "
                                                     "otherwise.")
    tool_call_parser: ToolCallParser | None = Field(default=None, description="vLLM tool-call parser "
                                                    "(--tool-call-parser, with --enable-auto-tool-choice). "
                                                    "Default: hermes for Qwen2.5/Qwen3/2507, qwen3_coder for "
                                                    "Qwen3-Coder and Qwen3.5/3.6; none switches tools off.")
    speculative: Speculative | None = Field(default=None, description="Speculative decoding (generate only): "
                                            "mtp (refused for a model without an MTP layer; the planner counts "
                                            "the MTP layer's KV cache) or ngram prompt lookup (any model).")
    adapters: list[Adapter] = Field(default_factory=list, max_length=16, description="LoRA adapters served "
                                    "beside the base model, each under its own name (--enable-lora "
                                    "--lora-modules; --max-loras is their count).")
    max_lora_rank: Literal[8, 16, 32, 64, 128, 256, 320, 512] | None = Field(
        default=None, description="Largest adapter rank (--max-lora-rank; vLLM 0.32 default 16).")
    thinking: bool | None = Field(default=None, description="Default of the chat template's "
                                  "enable_thinking (--default-chat-template-kwargs); requests may still set "
                                  "it. Only for models that switch (Qwen3 April 2025, Qwen3.5/3.6). Default: "
                                  "the template's own (thinking on).")
    multimodal: Multimodal | None = Field(default=None, description="Media limits per prompt, or text-only "
                                          "serving of a vision-language model (Qwen3-VL, Qwen3.5/3.6). Refused "
                                          "for a text-only model.")
    api_key_secret_ref: ApiKeySecretRef | None = Field(default=None, description="A Secret key holding the "
                                                       "API key clients must send (Authorization: Bearer) on "
                                                       "/v1: passed to vLLM as VLLM_API_KEY through "
                                                       "secretKeyRef, never in the spec or the Deployment. "
                                                       "/health and /metrics stay open to probes and scrapes.")


class RopeScaling(ApiModel, rules=[
    Rule(cel="!has(self.factor) || !has(self.originalMaxPositionEmbeddings) || "
             "self.factor * double(self.originalMaxPositionEmbeddings) <= 16777216.0",
         check=lambda r: r.factor is None or r.original_max_position_embeddings is None
         or r.factor * r.original_max_position_embeddings <= 16_777_216,
         message="engine.ropeScaling.factor x originalMaxPositionEmbeddings must be at most 16777216 tokens"),
]):
    """YaRN rope scaling, to serve beyond the native context. Unset fields come from the catalog."""

    type: Literal["yarn"] = Field(default="yarn", description="Scaling method; Qwen documents YaRN.")
    factor: float | None = Field(default=None, gt=1, le=64, description="Context multiplier. Default: the "
                                 "smallest whole factor that covers engine.maxModelLen (Qwen's advice: scale "
                                 "only as far as needed, it costs short-text quality).")
    original_max_position_embeddings: int | None = Field(default=None, ge=16, le=16_777_216,
                                                         description="The context the model was trained "
                                                         "at. Default: the catalog's (32768 for Qwen2.5 and "
                                                         "Qwen3, 262144 for Qwen3.5/3.6 and Qwen3-Next).")
    rope_theta: float | None = Field(default=None, gt=0, description="The model's rope_theta, repeated "
                                     "because vLLM replaces rope_parameters whole. Default: the catalog's.")


class ServingStatus(ApiModel):
    """What the planner rendered for spec.serving and engine.ropeScaling, defaults included."""

    task: Task = Field(description="generate, embed or score.")
    reasoning_parser: str | None = Field(default=None, description="--reasoning-parser, if any.")
    tool_call_parser: str | None = Field(default=None, description="--tool-call-parser, if any.")
    thinking: bool | None = Field(default=None, description="enable_thinking default, if set.")
    rope_scaling_factor: float | None = Field(default=None, description="YaRN factor, if rope scaling is on.")
    speculative_tokens: int | None = Field(default=None, description="Tokens drafted per step, if on.")
    speculative_method: Literal["mtp", "ngram", "draft", "eagle3"] | None = Field(
        default=None, description="mtp, ngram, draft or eagle3, if speculative decoding is on.")
    adapters: list[str] | None = Field(default=None, description="Names of the LoRA adapters served.")
    language_model_only: bool | None = Field(default=None, description="True when vLLM builds no vision "
                                             "encoder (multimodal.languageModelOnly, or image and video limits "
                                             "both 0): the model answers text only.")
    limits_per_prompt: MediaLimits | None = Field(default=None, description="--limit-mm-per-prompt, if set.")
    source: Literal["catalog", "spec"] = Field(description="catalog: the model's family defaults applied "
                                               "(spec fields override them); spec: the model is not in the "
                                               "catalog, only spec fields apply.")
