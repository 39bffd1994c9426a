"""The Qwen layer of the plan: task, parsers, thinking default and YaRN, from the spec and the family. Pure.

A spec field wins over the family default (catalog/serving.py). What the family's output cannot support is a
Problem (Stalled) whose message names the fix: a reasoning parser on a model that writes no <think> block would
move the whole answer into the reasoning field; a tool parser of the other format would never see a call; YaRN
beyond the factor the card documents degrades quality, and a maxModelLen above the native context without it
makes vLLM refuse to start.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field, replace
from typing import Any, Literal

from qwen_fleet.api.resource import QwenInferenceSpec
from qwen_fleet.api.serving import VISION_MODALITIES, MediaLimits, ServingStatus
from qwen_fleet.catalog import ModelFacts, all_models, find_gpu, find_model
from qwen_fleet.catalog.serving import TOOL_PARSERS_BY_FORMAT, YarnFacts
from qwen_fleet.plan.capacity import Problem, valid_tensor_sizes


@dataclass(frozen=True)
class ServingPlan:
    """What render turns into flags (render/engine_args.py)."""

    task: str
    reasoning_parser: str | None = None
    tool_call_parser: str | None = None
    thinking: bool | None = None
    rope_scaling_factor: float | None = None
    speculative_tokens: int | None = None  # tokens drafted per step (None: no speculative decoding)
    speculative_config: dict[str, str | int] = field(default_factory=dict)  # --speculative-config
    adapters: tuple[tuple[str, str], ...] = ()  # LoRA: (served name, what --lora-modules' path gets)
    max_lora_rank: int | None = None
    language_model_only: bool = False  # --language-model-only
    media_limits: tuple[tuple[str, int], ...] = ()  # --limit-mm-per-prompt, (modality, count)
    hf_overrides: dict[str, Any] = field(default_factory=dict)  # pooling conversion and/or rope_parameters
    from_catalog: bool = False

    @property
    def skips_vision_encoder(self) -> bool:
        limits = dict(self.media_limits)
        return self.language_model_only or all(limits.get(m) == 0 for m in VISION_MODALITIES)

    def _speculative_method(self) -> Literal["mtp", "ngram", "draft", "eagle3"] | None:
        if not self.speculative_tokens:
            return None
        method = self.speculative_config.get("method")
        return method if method in ("ngram", "mtp", "eagle3") else "draft"  # type: ignore[return-value]

    def status(self) -> ServingStatus:
        return ServingStatus(task=self.task, reasoning_parser=self.reasoning_parser,  # type: ignore[arg-type]
                             tool_call_parser=self.tool_call_parser, thinking=self.thinking,
                             rope_scaling_factor=self.rope_scaling_factor,
                             speculative_tokens=self.speculative_tokens,
                             speculative_method=self._speculative_method(),
                             adapters=[name for name, _ in self.adapters] or None,
                             language_model_only=self.skips_vision_encoder or None,
                             limits_per_prompt=MediaLimits(**dict(self.media_limits)) if self.media_limits else None,
                             source="catalog" if self.from_catalog else "spec")


def _off(value: str | None) -> str | None:
    return None if value in (None, "none") else value


def plan_serving(spec: QwenInferenceSpec, served_model_name: str = "") -> tuple[ServingPlan, list[Problem]]:
    plan, problems = _plan_serving(spec)
    adapters, adapter_problems = _adapters(spec, served_model_name)
    if adapters and plan.task != "generate":
        adapters, adapter_problems = (), [Problem(
            "AdaptersOnPoolingModel", f"{spec.model.name} is served for {plan.task}: remove serving.adapters "
            "(the operator serves LoRA adapters for generation only)")]
    plan = replace(plan, adapters=adapters, max_lora_rank=spec.serving.max_lora_rank) if adapters else plan
    media, media_problems = _multimodal(spec)
    return replace(plan, **media), _dtype_problems(spec) + problems + adapter_problems + media_problems


def _multimodal(spec: QwenInferenceSpec) -> tuple[dict[str, Any], list[Problem]]:
    """Media limits and language-model-only mode; refused (and not rendered) for a catalogued text-only model."""
    wanted, model = spec.serving.multimodal, find_model(spec.model.name)
    if wanted is None:
        return {}, []
    if model is not None and not model.is_multimodal:
        return {}, [Problem("MultimodalUnsupported",
                            f"{model.name} is a text-only model (no vision encoder): remove serving.multimodal, "
                            "or serve a vision-language model (Qwen3-VL, e.g. Qwen/Qwen3-VL-8B-Instruct, or "
                            "Qwen3.5/3.6)")]
    limits = wanted.limits_per_prompt.as_dict() if wanted.limits_per_prompt else {}
    return {"language_model_only": bool(wanted.language_model_only), "media_limits": tuple(limits.items())}, []


def skips_vision_encoder(spec: QwenInferenceSpec) -> bool:
    """Whether the rendered engine leaves a catalogued vision-language model's encoder out (the planner then
    does not count its weights)."""
    model = find_model(spec.model.name)
    wanted = spec.serving.multimodal
    return model is not None and model.is_multimodal and wanted is not None and wanted.skips_vision_encoder


def _adapters(spec: QwenInferenceSpec, served_model_name: str) -> tuple[tuple[tuple[str, str], ...], list[Problem]]:
    """LoRA adapters: a repo id vLLM downloads, or a directory on the model's claim (mounted at /models)."""
    from qwen_fleet.plan import MODEL_MOUNT  # plan/__init__ imports this module

    out, problems = [], []
    for adapter in spec.serving.adapters:
        if adapter.name == served_model_name:
            problems.append(Problem("AdapterNameTaken", f"adapter {adapter.name} has the served model's own "
                                    "name: rename it (clients pick the adapter by name)"))
        if adapter.path is not None and spec.model.source.pvc is None:
            problems.append(Problem("AdapterPathNeedsClaim", f"adapter {adapter.name} names a path, but the "
                                    "model has no claim (model.source.pvc) to read it from: use repo instead"))
        out.append((adapter.name, adapter.repo or f"{MODEL_MOUNT}/{(adapter.path or '').strip('/')}"))
    return tuple(out), problems


def _dtype_problems(spec: QwenInferenceSpec) -> list[Problem]:
    """bfloat16 needs compute capability 8.0 (Ampere); vLLM's `auto` already falls back to float16 below it."""
    gpu = find_gpu(spec.gpu.product) if spec.gpu.product else None
    if spec.engine.dtype != "bfloat16" or gpu is None or gpu.compute_capability is None \
            or gpu.compute_capability >= (8, 0):
        return []
    cc = ".".join(map(str, gpu.compute_capability))
    return [Problem("BFloat16Unsupported",
                    f"{gpu.short_name} (compute capability {cc}) has no bfloat16: set engine.dtype to half (or "
                    "leave it unset: vLLM then picks float16 on this GPU)")]


def _plan_serving(spec: QwenInferenceSpec) -> tuple[ServingPlan, list[Problem]]:
    model = find_model(spec.model.name)
    wanted = spec.serving
    if model is None:
        rope, problems = _rope_without_catalog(spec)
        return ServingPlan(task=wanted.task or "generate", reasoning_parser=_off(wanted.reasoning_parser),
                           tool_call_parser=_off(wanted.tool_call_parser), thinking=wanted.thinking,
                           rope_scaling_factor=rope[0] if rope else None,
                           speculative_tokens=wanted.speculative.num_speculative_tokens if wanted.speculative else None,
                           speculative_config=wanted.speculative.config() if wanted.speculative else {},
                           hf_overrides=rope[1] if rope else {}), problems
    facts = model.serving
    task = wanted.task or facts.task
    generating = task == "generate"
    reasoning = (wanted.reasoning_parser or facts.reasoning_parser) if generating else None
    tools = (wanted.tool_call_parser or facts.default_tool_parser) if generating else None
    problems = _family_problems(spec, model, task)
    rope, rope_problems = _rope_with_catalog(spec, model)
    overrides = {key: list(v) if isinstance(v, tuple) else v for key, v in facts.hf_overrides} \
        if task == facts.task else {}
    if rope:
        overrides.update(rope[1])
    drafted = _speculative_tokens(spec, model) if generating else None
    return ServingPlan(task=task, reasoning_parser=_off(reasoning), tool_call_parser=_off(tools),
                       thinking=wanted.thinking if generating else None,
                       speculative_tokens=drafted,
                       speculative_config=wanted.speculative.config() if drafted and wanted.speculative else {},
                       rope_scaling_factor=rope[0] if rope else None, hf_overrides=overrides, from_catalog=True), \
        problems + rope_problems


def _family_problems(spec: QwenInferenceSpec, model: ModelFacts, task: str) -> list[Problem]:
    facts, wanted, name = model.serving, spec.serving, model.name
    out = []
    if model.engine_unsupported:
        out.append(Problem("ModelUnsupportedByEngine", model.engine_unsupported))
    if task != facts.task:
        out.append(Problem("ServingTaskUnsupported",
                           f"{name} is a {facts.task} model; serving.task {task} needs a checkpoint made for "
                           f"it (e.g. Qwen/Qwen3-Embedding-0.6B for embed, Qwen/Qwen3-Reranker-0.6B for "
                           f"score): remove serving.task or change model.name"))
    if task != "generate" and (_off(wanted.reasoning_parser) or _off(wanted.tool_call_parser)
                               or wanted.thinking is not None):
        out.append(Problem("ChatSettingsOnPoolingModel",
                           f"{name} is served for {task}, which has no chat output: remove "
                           "serving.reasoningParser, serving.toolCallParser and serving.thinking"))
    if _off(wanted.reasoning_parser) and facts.reasoning_parser is None and task == "generate":
        out.append(Problem("ReasoningParserUnsupported",
                           f"{name} writes no <think> block: reasoning parser {wanted.reasoning_parser} would "
                           "return its whole answer in the reasoning field. Remove serving.reasoningParser (or "
                           "serve a thinking model, e.g. a Thinking-2507 checkpoint)"))
    tool = _off(wanted.tool_call_parser)
    if tool and task == "generate":
        fits = TOOL_PARSERS_BY_FORMAT.get(facts.tool_format or "", ())
        if tool not in fits:
            fix = f"use {' or '.join(fits)}" if fits else "remove serving.toolCallParser"
            what = f"writes {facts.tool_format} tool calls" if facts.tool_format else "has no tool-call format"
            out.append(Problem("ToolCallParserMismatch",
                               f"{name} {what}, which tool-call parser {tool} does not read: {fix}"))
    if wanted.speculative is not None and wanted.speculative.method == "mtp" and not facts.mtp:
        out.append(Problem("SpeculativeDecodingUnsupported",
                           f"{name} has no multi-token-prediction (MTP) layer to draft with (Qwen3.5/3.6 ship "
                           "one): use serving.speculative.method ngram, or remove serving.speculative"))
    out += _draft_problems(spec, model)
    if wanted.thinking is not None and not facts.thinking_switch and task == "generate":
        out.append(Problem("ThinkingSwitchUnsupported",
                           f"{name}'s chat template has no enable_thinking switch (Instruct-2507 never thinks, "
                           "Thinking-2507 always does): remove serving.thinking or pick the other checkpoint"))
    return out


def _draft_problems(spec: QwenInferenceSpec, model: ModelFacts) -> list[Problem]:
    """A draft model must share the target's tokenizer (vLLM verifies the draft's token ids with the target) and be
    smaller; a draft the catalog does not know is taken as written."""
    wanted = spec.serving.speculative
    draft = find_model(wanted.model) if wanted is not None and wanted.method == "draft" and wanted.model else None
    if draft is None:
        return []
    if draft.engine_unsupported:
        return [Problem("DraftModelUnsupported", f"serving.speculative.model: {draft.engine_unsupported}")]
    if draft.tokenizer_family != model.tokenizer_family:
        same = _smaller_drafts(model)
        hint = f" (e.g. {', '.join(same)})" if same else ""
        return [Problem("DraftTokenizerMismatch",
                        f"draft {draft.name} uses the {draft.tokenizer_family} tokenizer and {model.name} the "
                        f"{model.tokenizer_family} one: the draft's token ids would mean other text to the "
                        f"target; use a smaller {model.tokenizer_family} model{hint}, or method ngram")]
    if draft.vocab_size != model.vocab_size:
        # vLLM 0.32 (SpeculativeConfig.verify_equal_vocab_size_if_draft_model) refuses it at start.
        return [Problem("DraftVocabularyMismatch",
                        f"draft {draft.name} has a {draft.vocab_size:,}-entry vocabulary and {model.name} "
                        f"{model.vocab_size:,}: vLLM refuses a draft model of another vocabulary size (Qwen2.5 "
                        "0.5B-3B pad theirs to 151,936, 7B and up to 152,064); use a draft of the same size class, "
                        "or method ngram")]
    tp = spec.parallelism.tensor
    if tp not in valid_tensor_sizes(draft, max_gpus=max(tp, 8)):
        return [Problem("DraftTensorSizeMismatch",
                        f"vLLM runs the draft at the target's tensor size {tp}, which does not divide the heads of "
                        f"{draft.name} (sizes it takes: {', '.join(map(str, valid_tensor_sizes(draft)))}); use "
                        "another draft or method ngram")]
    if draft.params_billion >= model.params_billion:
        return [Problem("DraftNotSmaller",
                        f"draft {draft.name} ({draft.params_billion:g}B) is not smaller than {model.name} "
                        f"({model.params_billion:g}B): drafting would cost more than it saves; use a smaller "
                        "draft or method ngram")]
    return []


def _smaller_drafts(model: ModelFacts) -> list[str]:
    """Catalogued base checkpoints vLLM would take as drafts of ``model``: its tokenizer and vocabulary, smaller."""
    return [m.name for m in all_models() if m.tokenizer_family == model.tokenizer_family
            and m.vocab_size == model.vocab_size and m.params_billion < model.params_billion
            and m.serving.task == "generate" and not m.weight_quantization and m.base_model is None][:3]


def draft_model(spec: QwenInferenceSpec) -> ModelFacts | None:
    """The catalog's facts of the draft model of method draft (None: another method, or not catalogued)."""
    wanted = spec.serving.speculative
    if wanted is None or wanted.method != "draft" or not wanted.model:
        return None
    return find_model(wanted.model)


def _speculative_tokens(spec: QwenInferenceSpec, model: ModelFacts) -> int | None:
    """Tokens drafted per step: ngram on any model, MTP only where the checkpoint has the layer."""
    wanted = spec.serving.speculative
    if wanted is None or (wanted.method == "mtp" and not model.serving.mtp):
        return None
    return wanted.num_speculative_tokens


def _mtp_tokens(spec: QwenInferenceSpec, model: ModelFacts) -> int | None:
    wanted = spec.serving.speculative
    return _speculative_tokens(spec, model) if wanted is not None and wanted.method == "mtp" else None


def mtp_layers(spec: QwenInferenceSpec, model: ModelFacts) -> int:
    """Full-attention layers the MTP draft adds to the KV cache (the capacity planner counts them)."""
    return 1 if spec.serving.task in (None, "generate") and _mtp_tokens(spec, model) else 0


Rope = tuple[float, dict[str, Any]]  # factor, hf_overrides


def _yarn_overrides(factor: float, original: int, theta: float, yarn: YarnFacts | None = None) -> dict[str, Any]:
    # vLLM 0.32 takes a YaRN model's max_position_embeddings as already scaled (transformers'
    # _compute_yarn_parameters does too), so it is raised with the factor. A top-level rope_parameters is replaced
    # whole (ModelConfig._apply_dict_overrides), so rope_theta and the family's other rope keys are repeated; under
    # text_config it is merged, and the card's full form is sent all the same.
    rope: dict[str, Any] = {"rope_type": "yarn", "factor": factor, "original_max_position_embeddings": original,
                            "rope_theta": theta}
    if yarn is not None:
        rope.update((key, list(v) if isinstance(v, tuple) else v) for key, v in yarn.rope_extra)
    body = {"rope_parameters": rope, "max_position_embeddings": int(factor * original)}
    return {yarn.config_key: body} if yarn is not None and yarn.config_key else body


def scaled_context(overrides: dict[str, Any]) -> int | None:
    """max_position_embeddings as the YaRN overrides raise it (top level or under text_config), if they do."""
    body = overrides.get("text_config", overrides)
    value = body.get("max_position_embeddings") if isinstance(body, dict) else None
    return int(value) if value is not None else None


def _rope_with_catalog(spec: QwenInferenceSpec, model: ModelFacts) -> tuple[Rope | None, list[Problem]]:
    asked, length, yarn = spec.engine.rope_scaling, spec.engine.max_model_len, model.serving.yarn
    beyond = length is not None and length > model.native_context
    if asked is None and not beyond:
        return None, []
    if yarn is None:
        what = (f"engine.maxModelLen {length:,} exceeds the native context {model.native_context:,} of {model.name}"
                if beyond else f"engine.ropeScaling is set but {model.name}")
        return None, [Problem("LongContextUnsupported",
                              f"{what}, and Qwen documents no rope scaling for it: set engine.maxModelLen to "
                              f"{model.native_context} or less and remove engine.ropeScaling")]
    original = (asked.original_max_position_embeddings if asked else None) or yarn.original_context
    theta = (asked.rope_theta if asked else None) or yarn.rope_theta
    factor = asked.factor if asked and asked.factor else (
        float(max(2, math.ceil(length / original))) if length else yarn.max_factor)
    if factor > yarn.max_factor:
        return None, [Problem("RopeScalingFactorUnsupported",
                              f"{'engine.maxModelLen ' + format(length, ',') if length else 'engine.ropeScaling'}"
                              f" needs YaRN factor {factor:g} over {original:,} tokens, but Qwen documents up to "
                              f"{yarn.max_factor:g} ({yarn.longest:,} tokens) for {model.name}: set "
                              f"engine.maxModelLen to {yarn.longest} or less")]
    if length and length > yarn.longest:
        return None, [Problem("RopeScalingFactorUnsupported",
                              f"engine.maxModelLen {length:,} is beyond the {yarn.longest:,} tokens Qwen documents "
                              f"for {model.name} with YaRN: set engine.maxModelLen to {yarn.longest} or less")]
    if length and length > factor * original:
        return None, [_too_long(length, factor, original)]
    return (factor, _yarn_overrides(factor, original, theta, yarn)), []


def _rope_without_catalog(spec: QwenInferenceSpec) -> tuple[Rope | None, list[Problem]]:
    asked, length = spec.engine.rope_scaling, spec.engine.max_model_len
    if asked is None:
        return None, []
    if asked.factor is None or asked.original_max_position_embeddings is None or asked.rope_theta is None:
        return None, [Problem("RopeScalingNeedsModelFacts",
                              f"{spec.model.name} is not in the catalog: set engine.ropeScaling.factor, "
                              "originalMaxPositionEmbeddings and ropeTheta (from its config.json)")]
    if length and length > asked.factor * asked.original_max_position_embeddings:
        return None, [_too_long(length, asked.factor, asked.original_max_position_embeddings)]
    return (asked.factor, _yarn_overrides(asked.factor, asked.original_max_position_embeddings,
                                          asked.rope_theta)), []


def _too_long(length: int, factor: float, original: int) -> Problem:
    return Problem("MaxModelLenExceedsRopeScaling",
                   f"engine.maxModelLen {length:,} exceeds YaRN factor {factor:g} x {original:,} = "
                   f"{int(factor * original):,} tokens: raise engine.ropeScaling.factor or lower "
                   "engine.maxModelLen")


def effective_context(spec: QwenInferenceSpec, model: ModelFacts) -> int:
    """The model's context once the plan's YaRN applies (the capacity planner's "native" length)."""
    rope, problems = _rope_with_catalog(spec, model)
    scaled = scaled_context(rope[1]) if rope and not problems else None
    return scaled or model.native_context
