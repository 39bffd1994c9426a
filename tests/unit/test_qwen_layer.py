"""The Qwen layer: family defaults for task, parsers, thinking and YaRN, their overrides, and the refusals."""

from __future__ import annotations

import json
from typing import Any

import pytest
from pydantic import ValidationError

from qwen_fleet.api import QwenInference
from qwen_fleet.config import OperatorConfig
from qwen_fleet.plan import make_plan
from qwen_fleet.render.engine_args import engine_args


def plan_of(model: str, **spec: Any) -> Any:
    cr = QwenInference.model_validate({"metadata": {"name": "q", "namespace": "ns"},
                                       "spec": {"model": {"name": model}, **spec}})
    return cr, make_plan(cr, OperatorConfig())


def flags(model: str, **spec: Any) -> list[str]:
    cr, plan = plan_of(model, **spec)
    assert plan.feasible, plan.problems
    return engine_args(cr, plan)


def value(args: list[str], flag: str) -> str | None:
    return args[args.index(flag) + 1] if flag in args else None


@pytest.mark.parametrize(("model", "reasoning", "tools"), [
    ("Qwen/Qwen3-8B", "qwen3", "hermes"),
    ("Qwen/Qwen3-4B-Thinking-2507", "qwen3", "hermes"),
    ("Qwen/Qwen3-4B-Instruct-2507", None, "hermes"),
    ("Qwen/Qwen2.5-7B-Instruct", None, "hermes"),
    ("Qwen/Qwen3-Coder-30B-A3B-Instruct", None, "qwen3_coder"),
    ("Qwen/Qwen3.6-27B", "qwen3", "qwen3_coder"),
    ("Qwen/Qwen3-Reranker-0.6B", None, None),
    ("Qwen/Qwen3-Embedding-0.6B", None, None),
    ("some-org/custom-model", None, None),
])
def test_family_defaults(model: str, reasoning: str | None, tools: str | None) -> None:
    args = flags(model)
    assert value(args, "--reasoning-parser") == reasoning
    assert value(args, "--tool-call-parser") == tools
    assert ("--enable-auto-tool-choice" in args) == (tools is not None)
    assert "--default-chat-template-kwargs" not in args  # the template's own default unless asked


def test_defaults_are_reported_in_the_plan_status() -> None:
    _, plan = plan_of("Qwen/Qwen3.6-27B")
    status = plan.serving.status().model_dump(by_alias=True, exclude_none=True)
    assert status == {"task": "generate", "reasoningParser": "qwen3", "toolCallParser": "qwen3_coder",
                      "source": "catalog"}


def test_spec_overrides_and_switches_off() -> None:
    args = flags("Qwen/Qwen3-8B", serving={"reasoningParser": "deepseek_r1", "toolCallParser": "none",
                                           "thinking": False})
    assert value(args, "--reasoning-parser") == "deepseek_r1"
    assert "--tool-call-parser" not in args and "--enable-auto-tool-choice" not in args
    assert json.loads(value(args, "--default-chat-template-kwargs") or "") == {"enable_thinking": False}
    assert "--reasoning-parser" not in flags("Qwen/Qwen3-8B", serving={"reasoningParser": "none"})


def test_pooling_tasks_render_runner_and_conversion() -> None:
    rerank = flags("Qwen/Qwen3-Reranker-0.6B")
    assert value(rerank, "--runner") == "pooling" and "--convert" not in rerank
    assert json.loads(value(rerank, "--hf-overrides") or "") == {
        "architectures": ["Qwen3ForSequenceClassification"], "classifier_from_token": ["no", "yes"],
        "is_original_qwen3_reranker": True}
    embed = flags("Qwen/Qwen3-Embedding-0.6B")
    assert (value(embed, "--runner"), value(embed, "--convert")) == ("pooling", "embed")
    assert "--hf-overrides" not in embed
    # A model the catalog does not know takes the spec's task as is.
    custom = flags("some-org/embedder", serving={"task": "embed"})
    assert (value(custom, "--runner"), value(custom, "--convert")) == ("pooling", "embed")


@pytest.mark.parametrize(("model", "serving", "reason", "fix"), [
    ("Qwen/Qwen3-4B-Instruct-2507", {"reasoningParser": "qwen3"}, "ReasoningParserUnsupported",
     "Remove serving.reasoningParser"),
    ("Qwen/Qwen2.5-7B-Instruct", {"reasoningParser": "deepseek_r1"}, "ReasoningParserUnsupported",
     "reasoning field"),
    ("Qwen/Qwen3.6-27B", {"toolCallParser": "hermes"}, "ToolCallParserMismatch", "use qwen3_coder or qwen3_xml"),
    ("Qwen/Qwen3-8B", {"toolCallParser": "qwen3_xml"}, "ToolCallParserMismatch", "use hermes or qwen3_json"),
    ("Qwen/Qwen3-4B-Instruct-2507", {"thinking": True}, "ThinkingSwitchUnsupported", "remove serving.thinking"),
    ("Qwen/Qwen3-4B-Thinking-2507", {"thinking": False}, "ThinkingSwitchUnsupported", "remove serving.thinking"),
    ("Qwen/Qwen3-8B", {"task": "embed"}, "ServingTaskUnsupported", "Qwen/Qwen3-Embedding-0.6B"),
    ("Qwen/Qwen3-Reranker-0.6B", {"task": "generate"}, "ServingTaskUnsupported", "remove serving.task"),
    ("Qwen/Qwen3-Embedding-0.6B", {"toolCallParser": "hermes"}, "ChatSettingsOnPoolingModel",
     "remove serving.reasoningParser, serving.toolCallParser and serving.thinking"),
])
def test_a_family_that_cannot_use_the_setting_is_stalled(model: str, serving: dict[str, Any], reason: str,
                                                        fix: str) -> None:
    _, plan = plan_of(model, serving=serving)
    assert [p.reason for p in plan.problems] == [reason]
    assert fix in plan.problems[0].message


def test_qwen3_thinking_switch_is_accepted() -> None:
    args = flags("Qwen/Qwen3.6-27B", serving={"thinking": False})
    assert json.loads(value(args, "--default-chat-template-kwargs") or "") == {"enable_thinking": False}


# --- YaRN ------------------------------------------------------------------------------------------------


def yarn(args: list[str]) -> dict[str, Any]:
    return dict(json.loads(value(args, "--hf-overrides") or "{}"))


def test_maxmodellen_beyond_native_gets_the_factor_qwen_documents() -> None:
    args = flags("Qwen/Qwen2.5-7B-Instruct", engine={"maxModelLen": 131072}, gpu={"memoryGiB": 80})
    assert yarn(args) == {"max_position_embeddings": 131072, "rope_parameters": {
        "rope_type": "yarn", "factor": 4.0, "original_max_position_embeddings": 32768, "rope_theta": 1000000.0}}
    # Only as far as needed: 65,536 tokens take factor 2.
    assert yarn(flags("Qwen/Qwen3-8B", engine={"maxModelLen": 65536}))["rope_parameters"]["factor"] == 2.0
    # Within the native window nothing is scaled (Qwen3's config window is 40960).
    assert "--hf-overrides" not in flags("Qwen/Qwen3-8B", engine={"maxModelLen": 40960})


def test_yarn_makes_the_long_context_warning_go_away() -> None:
    _, plan = plan_of("Qwen/Qwen2.5-7B-Instruct", engine={"maxModelLen": 65536}, gpu={"memoryGiB": 80})
    assert plan.feasible and not any("native context" in w for w in plan.warnings), plan.warnings
    assert plan.serving.rope_scaling_factor == 2.0


def test_explicit_rope_scaling_wins() -> None:
    args = flags("Qwen/Qwen3-8B", engine={"maxModelLen": 32768, "ropeScaling": {"factor": 3}})
    assert yarn(args)["rope_parameters"]["factor"] == 3.0
    assert yarn(args)["max_position_embeddings"] == 98304


@pytest.mark.parametrize(("model", "engine", "reason", "fix"), [
    ("Qwen/Qwen2.5-7B-Instruct", {"maxModelLen": 1000000}, "RopeScalingFactorUnsupported",
     "set engine.maxModelLen to 131072 or less"),
    ("Qwen/Qwen3-4B-Instruct-2507", {"maxModelLen": 300000}, "LongContextUnsupported",
     "set engine.maxModelLen to 262144 or less"),
    ("Qwen/Qwen3-0.6B", {"ropeScaling": {}}, "LongContextUnsupported", "remove engine.ropeScaling"),
    ("Qwen/Qwen3-8B", {"maxModelLen": 131072, "ropeScaling": {"factor": 2}}, "MaxModelLenExceedsRopeScaling",
     "raise engine.ropeScaling.factor"),
    ("Qwen/Qwen3-8B", {"ropeScaling": {"factor": 8}}, "RopeScalingFactorUnsupported", "up to 4"),
    ("some-org/custom", {"ropeScaling": {"factor": 2}}, "RopeScalingNeedsModelFacts", "ropeTheta"),
])
def test_long_context_beyond_what_qwen_documents_is_stalled(model: str, engine: dict[str, Any], reason: str,
                                                           fix: str) -> None:
    _, plan = plan_of(model, engine=engine)
    assert reason in [p.reason for p in plan.problems], plan.problems
    assert any(fix in p.message for p in plan.problems if p.reason == reason)


# The Qwen3.5/3.6 cards' vLLM command (Processing Ultra-Long Texts), with the factor the length needs and
# max_position_embeddings raised beside it; written out here from the card, not from the catalog.
QWEN36_CARD_ROPE = {"mrope_interleaved": True, "mrope_section": [11, 11, 10], "rope_type": "yarn",
                    "rope_theta": 10000000.0, "partial_rotary_factor": 0.25, "factor": 4.0,
                    "original_max_position_embeddings": 262144}
BIG = {"parallelism": {"tensor": 4}, "gpu": {"product": "NVIDIA-H200"}}


def test_qwen36_yarn_is_nested_under_text_config_in_the_cards_form() -> None:
    args = flags("Qwen/Qwen3.6-27B", engine={"maxModelLen": 1010000}, **BIG)
    assert yarn(args) == {"text_config": {"max_position_embeddings": 1048576, "rope_parameters": QWEN36_CARD_ROPE}}
    # 524,288 tokens: the card's own example takes factor 2.
    half = yarn(flags("Qwen/Qwen3.5-9B", engine={"maxModelLen": 524288}, gpu={"memoryGiB": 80}))
    assert half["text_config"]["rope_parameters"]["factor"] == 2.0
    assert half["text_config"]["max_position_embeddings"] == 524288
    # Within the native 262,144 nothing is scaled.
    assert "--hf-overrides" not in flags("Qwen/Qwen3.6-27B", engine={"maxModelLen": 262144}, **BIG)


def test_qwen3_next_yarn_repeats_theta_and_partial_rotary_factor() -> None:
    args = flags("Qwen/Qwen3-Next-80B-A3B-Instruct", engine={"maxModelLen": 1010000}, **BIG)
    assert yarn(args) == {"max_position_embeddings": 1048576, "rope_parameters": {
        "rope_type": "yarn", "factor": 4.0, "original_max_position_embeddings": 262144, "rope_theta": 10000000.0,
        "partial_rotary_factor": 0.25}}
    _, plan = plan_of("Qwen/Qwen3-Next-80B-A3B-Thinking", engine={"maxModelLen": 600000}, **BIG)
    assert plan.feasible and plan.serving.rope_scaling_factor == 3.0, plan.problems


@pytest.mark.parametrize(("model", "engine", "fix"), [
    ("Qwen/Qwen3.6-27B", {"maxModelLen": 1040000}, "set engine.maxModelLen to 1010000 or less"),
    ("Qwen/Qwen3.5-397B-A17B", {"maxModelLen": 2000000}, "set engine.maxModelLen to 1010000 or less"),
    ("Qwen/Qwen3-Next-80B-A3B-Instruct", {"ropeScaling": {"factor": 8}}, "up to 4"),
])
def test_hybrid_yarn_beyond_the_cards_window_is_stalled(model: str, engine: dict[str, Any], fix: str) -> None:
    _, plan = plan_of(model, engine=engine, **BIG)
    problems = [p for p in plan.problems if p.reason == "RopeScalingFactorUnsupported"]
    assert problems and fix in problems[0].message, plan.problems
    assert plan.serving.rope_scaling_factor is None and not plan.serving.hf_overrides


def test_unknown_model_yarn_with_all_facts_renders() -> None:
    args = flags("some-org/custom", engine={"maxModelLen": 16384, "ropeScaling": {
        "factor": 4, "originalMaxPositionEmbeddings": 4096, "ropeTheta": 10000}})
    assert yarn(args)["max_position_embeddings"] == 16384


def test_bfloat16_on_a_t4_is_stalled_with_the_fix() -> None:
    _, plan = plan_of("Qwen/Qwen2.5-1.5B-Instruct", engine={"dtype": "bfloat16"}, gpu={"product": "Tesla-T4"})
    assert [p.reason for p in plan.problems] == ["BFloat16Unsupported"]
    assert "set engine.dtype to half" in plan.problems[0].message
    for dtype in ("half", None):  # unset: vLLM's auto falls back to float16 on Turing
        engine = {"dtype": dtype} if dtype else {}
        assert plan_of("Qwen/Qwen2.5-1.5B-Instruct", engine=engine, gpu={"product": "Tesla-T4"})[1].feasible
    assert plan_of("Qwen/Qwen2.5-1.5B-Instruct", engine={"dtype": "bfloat16"},
                   gpu={"product": "NVIDIA-L20"})[1].feasible


# --- MTP speculative decoding ------------------------------------------------------------------------------


def test_mtp_on_qwen36_renders_the_speculative_config_and_counts_its_kv() -> None:
    spec = {"engine": {"maxModelLen": 32768}, "gpu": {"product": "NVIDIA-H100-80GB-HBM3"},
            "parallelism": {"tensor": 2}}
    args = flags("Qwen/Qwen3.6-27B", serving={"speculative": {"numSpeculativeTokens": 2}}, **spec)
    assert json.loads(value(args, "--speculative-config") or "") == {"method": "mtp", "num_speculative_tokens": 2}
    _, with_mtp = plan_of("Qwen/Qwen3.6-27B", serving={"speculative": {}}, **spec)
    _, without = plan_of("Qwen/Qwen3.6-27B", **spec)
    # 16 full-attention layers, plus the MTP layer's: 17/16 of the KV bytes per token.
    assert with_mtp.capacity.kv_bytes_per_token * 16 == without.capacity.kv_bytes_per_token * 17
    assert with_mtp.serving.status().speculative_tokens == 1


@pytest.mark.parametrize(("model", "overrides"), [
    ("Qwen/Qwen3.6-27B", {"text_config": {"max_position_embeddings": 1048576, "rope_parameters": QWEN36_CARD_ROPE}}),
    ("Qwen/Qwen3-Next-80B-A3B-Instruct", {"max_position_embeddings": 1048576, "rope_parameters": {
        "rope_type": "yarn", "factor": 4.0, "original_max_position_embeddings": 262144, "rope_theta": 10000000.0,
        "partial_rotary_factor": 0.25}}),
])
def test_mtp_with_yarn_scales_the_target_once_and_gives_the_draft_nothing_of_its_own(
        model: str, overrides: dict[str, Any]) -> None:
    # vLLM 0.32 builds the MTP module from the target's ModelConfig, whose text config carries these dict
    # hf_overrides; the draft ModelConfig it builds beside it takes none, and --speculative-config has no field
    # for them (docs/qwen-layer.md, "MTP with YaRN"). So YaRN is rendered once, for the target, and the
    # speculative config stays method + token count.
    args = flags(model, engine={"maxModelLen": 1010000}, serving={"speculative": {"numSpeculativeTokens": 2}}, **BIG)
    assert args.count("--hf-overrides") == 1 and yarn(args) == overrides
    assert json.loads(value(args, "--speculative-config") or "") == {"method": "mtp", "num_speculative_tokens": 2}


def test_mtp_on_a_model_without_an_mtp_layer_is_stalled() -> None:
    _, plan = plan_of("Qwen/Qwen3-8B", serving={"speculative": {"numSpeculativeTokens": 2}})
    assert [p.reason for p in plan.problems] == ["SpeculativeDecodingUnsupported"]
    assert "remove serving.speculative" in plan.problems[0].message
    assert "use serving.speculative.method ngram" in plan.problems[0].message


def test_ngram_prompt_lookup_on_any_model_adds_no_kv() -> None:
    """ngram drafts from the prompt itself: no draft weights, no KV cache of its own, no MTP layer needed."""
    spec = {"engine": {"maxModelLen": 8192}, "gpu": {"product": "NVIDIA-A10G"}}
    ngram = {"speculative": {"method": "ngram", "numSpeculativeTokens": 4, "promptLookupMin": 2, "promptLookupMax": 5}}
    args = flags("Qwen/Qwen3-8B", serving=ngram, **spec)
    assert json.loads(value(args, "--speculative-config") or "") == {
        "method": "ngram", "num_speculative_tokens": 4, "prompt_lookup_min": 2, "prompt_lookup_max": 5}
    _, with_ngram = plan_of("Qwen/Qwen3-8B", serving=ngram, **spec)
    _, without = plan_of("Qwen/Qwen3-8B", **spec)
    assert with_ngram.feasible and with_ngram.capacity.kv_bytes_per_token == without.capacity.kv_bytes_per_token
    status = with_ngram.serving.status()
    assert (status.speculative_method, status.speculative_tokens) == ("ngram", 4)
    # A model the catalog does not know gets it as written.
    assert json.loads(value(flags("some-org/custom", serving={"speculative": {"method": "ngram"}}),
                            "--speculative-config") or "") == {"method": "ngram", "num_speculative_tokens": 1}


def test_a_draft_model_renders_its_repo_and_is_planned_weights_and_kv() -> None:
    spec = {"engine": {"maxModelLen": 8192}, "gpu": {"product": "NVIDIA-A10G"}}
    draft = {"speculative": {"method": "draft", "model": "Qwen/Qwen3-0.6B", "numSpeculativeTokens": 3}}
    args = flags("Qwen/Qwen3-8B", serving=draft, **spec)
    assert json.loads(value(args, "--speculative-config") or "") == {"model": "Qwen/Qwen3-0.6B",
                                                                      "num_speculative_tokens": 3}
    _, with_draft = plan_of("Qwen/Qwen3-8B", serving=draft, **spec)
    _, without = plan_of("Qwen/Qwen3-8B", **spec)
    assert with_draft.serving.status().speculative_method == "draft"
    # Qwen3-0.6B: 0.6e9 x 2 B = 1.2e9 B of weights = 1.12 GiB more per GPU.
    assert with_draft.capacity.weights_gi_b_per_gpu == pytest.approx(without.capacity.weights_gi_b_per_gpu + 1.12,
                                                                     abs=0.01)
    # Its KV: 28 layers x 8 KV heads x 128 x 2 x 2 B = 114,688 B per token, 28 of the 8B's 36 layers of 4,096 B
    # x 8 heads x 2 x 2 B / 36 = 4,096 B: 147,456 + 114,688 = 262,144 B per token.
    assert (without.capacity.kv_bytes_per_token, with_draft.capacity.kv_bytes_per_token) == (147_456, 262_144)


def test_an_eagle3_head_renders_its_repo_and_is_planned_from_the_targets_geometry() -> None:
    spec = {"engine": {"maxModelLen": 8192}, "gpu": {"product": "NVIDIA-A10G"}}
    head = {"speculative": {"method": "eagle3", "model": "AngelSlim/Qwen3-8B_eagle3", "numSpeculativeTokens": 3}}
    args = flags("Qwen/Qwen3-8B", serving=head, **spec)
    assert json.loads(value(args, "--speculative-config") or "") == {
        "method": "eagle3", "model": "AngelSlim/Qwen3-8B_eagle3", "num_speculative_tokens": 3}
    _, with_head = plan_of("Qwen/Qwen3-8B", serving=head, **spec)
    _, without = plan_of("Qwen/Qwen3-8B", **spec)
    assert with_head.serving.status().speculative_method == "eagle3"
    # Qwen3-8B (h 4,096, 32 x 128 q, 8 x 128 kv, MLP 12,288, vocab 151,936): fc 3h^2 = 50,331,648; q/k/v over 2h:
    # 8,192 x 6,144 = 50,331,648; o 16,777,216; MLP 3 x 4,096 x 12,288 = 150,994,944; LM head 622,329,856:
    # 890,765,312 x 2 B = 1,781,530,624 B = 1.66 GiB more per GPU.
    assert with_head.capacity.weights_gi_b_per_gpu == pytest.approx(without.capacity.weights_gi_b_per_gpu + 1.66,
                                                                    abs=0.01)
    # One more full-attention layer of the target's KV: 147,456 / 36 = 4,096 B -> 151,552 B per token.
    assert with_head.capacity.kv_bytes_per_token == 151_552


@pytest.mark.parametrize("serving", [
    {"speculative": {"method": "eagle3"}},
    {"speculative": {"method": "ngram", "model": "AngelSlim/Qwen3-8B_eagle3"}},
])
def test_an_eagle3_head_needs_its_model_and_only_it_takes_one(serving: dict[str, object]) -> None:
    with pytest.raises(ValidationError, match="EAGLE-3 head of method eagle3"):
        QwenInference.model_validate({"metadata": {"name": "x"}, "spec": {"model": {"name": "Qwen/Qwen3-8B"},
                                                                          "serving": serving}})


@pytest.mark.parametrize(("target", "draft", "reason"), [
    ("Qwen/Qwen3.6-27B", "Qwen/Qwen3-0.6B", "DraftTokenizerMismatch"),  # 248,320-entry vocabulary vs Qwen3's
    ("Qwen/Qwen3-8B", "Qwen/Qwen2.5-0.5B-Instruct", "DraftTokenizerMismatch"),  # Qwen2.5 lacks Qwen3's <think>
    ("Qwen/Qwen3-4B", "Qwen/Qwen3-8B", "DraftNotSmaller"),
    # Same tokenizer, but vocab_size 151,936 vs 152,064: vLLM 0.32 refuses a draft of another vocabulary size.
    ("Qwen/Qwen2.5-7B-Instruct", "Qwen/Qwen2.5-0.5B-Instruct", "DraftVocabularyMismatch"),
    ("Qwen/Qwen2.5-7B-Instruct", "Qwen/Qwen-7B", "DraftModelUnsupported"),
])
def test_bad_draft_pairings_are_stalled(target: str, draft: str, reason: str) -> None:
    _, plan = plan_of(target, serving={"speculative": {"method": "draft", "model": draft}})
    assert [p.reason for p in plan.problems] == [reason]


def test_a_draft_whose_heads_the_target_tensor_size_does_not_divide_is_stalled() -> None:
    # vLLM runs the draft at the target's tensor size: Qwen3-0.6B's 16 attention heads split 8 ways (Qwen3-235B-A22B
    # at tensor 8 with a 0.6B draft is fine), not 32 (the 235B's 64 heads and 4 KV heads would take it).
    serving = {"speculative": {"method": "draft", "model": "Qwen/Qwen3-0.6B"}}
    _, plan = plan_of("Qwen/Qwen3-235B-A22B", serving=serving, parallelism={"tensor": 8})
    assert "DraftTensorSizeMismatch" not in [p.reason for p in plan.problems]
    _, plan = plan_of("Qwen/Qwen3-235B-A22B", serving=serving, parallelism={"tensor": 32, "nodes": 2})
    assert "DraftTensorSizeMismatch" in [p.reason for p in plan.problems]


def test_status_carries_the_serving_defaults_and_the_crd_accepts_them() -> None:
    from qwen_fleet.api.resource import QwenInferenceStatus
    from qwen_fleet.reconcile.status import Observed, Outcome, compute_status

    _, plan = plan_of("Qwen/Qwen2.5-7B-Instruct", engine={"maxModelLen": 131072}, gpu={"memoryGiB": 80})
    status = compute_status(None, 1, Outcome.applied(), plan, Observed(), "2026-11-30T00:00:00Z")
    assert status["serving"] == {"task": "generate", "toolCallParser": "hermes", "ropeScalingFactor": 4.0,
                                 "source": "catalog"}
    QwenInferenceStatus.model_validate(status)  # the schema the CRD is generated from takes it


# --- LoRA adapters -----------------------------------------------------------------------------------------


def test_adapters_render_lora_modules_and_are_listed_in_status() -> None:
    claim = {"name": "Qwen/Qwen3-8B", "source": {"pvc": {"claimName": "models", "path": "/base"}}}
    cr = QwenInference.model_validate({"metadata": {"name": "q", "namespace": "ns"}, "spec": {
        "model": claim, "serving": {"adapters": [{"name": "sql", "path": "adapters/sql/"},
                                                 {"name": "de", "repo": "some-org/de-lora"}], "maxLoraRank": 64}}})
    plan = make_plan(cr, OperatorConfig())
    args = engine_args(cr, plan)
    assert plan.feasible and "--enable-lora" in args
    assert value(args, "--max-loras") == "2" and value(args, "--max-lora-rank") == "64"
    at = args.index("--lora-modules")
    assert [json.loads(a) for a in args[at + 1:at + 3]] == [{"name": "sql", "path": "/models/adapters/sql"},
                                                            {"name": "de", "path": "some-org/de-lora"}]
    assert plan.serving.status().adapters == ["sql", "de"]


@pytest.mark.parametrize(("serving", "reason"), [
    ({"adapters": [{"name": "q", "repo": "org/lora"}]}, "AdapterNameTaken"),
    ({"adapters": [{"name": "sql", "path": "adapters/sql"}]}, "AdapterPathNeedsClaim"),
])
def test_adapter_problems(serving: dict[str, Any], reason: str) -> None:
    _, plan = plan_of("Qwen/Qwen3-8B", serving=serving)
    assert [p.reason for p in plan.problems] == [reason]


def test_adapters_on_a_pooling_model_are_stalled_and_not_rendered() -> None:
    cr, plan = plan_of("Qwen/Qwen3-Embedding-0.6B", serving={"adapters": [{"name": "a", "repo": "o/r"}]})
    assert "--enable-lora" not in engine_args(cr, plan)
    assert [p.reason for p in plan.problems] == ["AdaptersOnPoolingModel"]


# --- catalog additions -------------------------------------------------------------------------------------


def test_qwen1_is_stalled_naming_the_replacement() -> None:
    cr = QwenInference.model_validate({"metadata": {"name": "q", "namespace": "ns"}, "spec": {
        "model": {"name": "Qwen/Qwen-7B", "trustRemoteCode": True}, "gpu": {"product": "NVIDIA-A10G"}}})
    plan = make_plan(cr, OperatorConfig())
    assert [p.reason for p in plan.problems] == ["ModelUnsupportedByEngine"]
    assert "Qwen/Qwen2.5-7B-Instruct" in plan.problems[0].message


@pytest.mark.parametrize(("model", "reasoning", "tools"), [
    ("Qwen/Qwen3-Next-80B-A3B-Instruct", None, "hermes"),
    ("Qwen/Qwen3-Next-80B-A3B-Thinking", "qwen3", "hermes"),
    ("Qwen/Qwen3-Coder-480B-A35B-Instruct", None, "qwen3_coder"),
    ("Qwen/Qwen3-VL-8B-Instruct", None, "hermes"),
])
def test_new_families_get_their_parsers(model: str, reasoning: str | None, tools: str | None) -> None:
    args = flags(model)
    assert value(args, "--reasoning-parser") == reasoning
    assert value(args, "--tool-call-parser") == tools


def test_qwen3_next_takes_mtp_and_embedding_models_embed() -> None:
    args = flags("Qwen/Qwen3-Next-80B-A3B-Instruct", serving={"speculative": {}})
    assert json.loads(value(args, "--speculative-config") or "") == {"method": "mtp", "num_speculative_tokens": 1}
    assert value(flags("Qwen/Qwen3-Embedding-8B"), "--convert") == "embed"
