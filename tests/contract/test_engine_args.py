"""The argument list the operator renders parses in the real vLLM parser of the pinned version, and the parsed
values are the spec's: every example, plus a generated corpus of valid specs (hypothesis)."""

from __future__ import annotations

import json
import os
import subprocess
from pathlib import Path
from typing import Any

import hypothesis.strategies as st
import pytest
import yaml
from hypothesis import HealthCheck, given, settings

from qwen_fleet.api import QwenInference
from qwen_fleet.catalog import all_models, find_gpu
from qwen_fleet.config import OperatorConfig
from qwen_fleet.plan import make_plan
from qwen_fleet.plan.planner import capacity_input
from qwen_fleet.plan.propose import propose_layouts
from qwen_fleet.render.engine_args import engine_args, multi_node_args

pytestmark = pytest.mark.vllm
HERE = Path(__file__).resolve().parent
EXAMPLES = sorted((HERE.parents[1] / "examples").glob("*.yaml"))
QUANTIZATIONS = ["awq", "awq_marlin", "gptq", "gptq_marlin", "fp8", "compressed-tensors", "moe_wna16", "experts_int8",
                 "fbgemm_fp8", "auto_awq", "auto_gptq", "modelopt", "mxfp4", "torchao", "inc"]


def parse_with_vllm(python: str, argvs: list[list[str]]) -> list[dict[str, Any]]:
    env = {**{k: v for k, v in os.environ.items() if k not in ("PYTHONPATH", "VIRTUAL_ENV")},
           "VLLM_TARGET_DEVICE": "cpu"}
    out = subprocess.run([python, str(HERE / "vllm_args_probe.py")], input=json.dumps(argvs), text=True,
                         capture_output=True, env=env, timeout=600, check=False)
    assert out.returncode == 0, out.stderr[-3000:]
    return list(json.loads(out.stdout))


# The test's own copy of the family defaults docs/qwen-layer.md documents: (task, reasoning parser, tool parser).
FAMILY_DEFAULTS: dict[str, tuple[str, str, str | None]] = {
    "Qwen/Qwen3-4B-Instruct-2507": ("generate", "", "hermes"),
    "Qwen/Qwen2.5-7B-Instruct": ("generate", "", "hermes"),
    "Qwen/Qwen2.5-7B-Instruct-AWQ": ("generate", "", "hermes"),
    "Qwen/Qwen3.6-27B": ("generate", "qwen3", "qwen3_coder"),
    "Qwen/Qwen3.5-397B-A17B": ("generate", "qwen3", "qwen3_coder"),
    "Qwen/Qwen3.5-9B": ("generate", "qwen3", "qwen3_coder"),
    "Qwen/Qwen3-Next-80B-A3B-Instruct": ("generate", "", "hermes"),
    "Qwen/Qwen3-30B-A3B-Instruct-2507": ("generate", "", "hermes"),
    "Qwen/Qwen3-235B-A22B-Instruct-2507-FP8": ("generate", "", "hermes"),
    "Qwen/Qwen3-8B": ("generate", "qwen3", "hermes"),
    "Qwen/Qwen3-4B-Thinking-2507": ("generate", "qwen3", "hermes"),
    "Qwen/Qwen3-Coder-30B-A3B-Instruct": ("generate", "", "qwen3_coder"),
    "Qwen/Qwen3-VL-8B-Instruct": ("generate", "", "hermes"),
    "Qwen/Qwen3-Reranker-0.6B": ("score", "", None),
    "Qwen/Qwen3-Embedding-0.6B": ("embed", "", None),
    "Qwen/Qwen3-Reranker-0.6B-custom": ("generate", "", None),  # not in the catalog
    "some-org/custom-model": ("generate", "", None),
}
# Of FAMILY_DEFAULTS, the ones whose checkpoint has an MTP layer.
MTP_MODELS = {"Qwen/Qwen3.6-27B", "Qwen/Qwen3.5-397B-A17B", "Qwen/Qwen3.5-9B", "Qwen/Qwen3-Next-80B-A3B-Instruct"}
# Of FAMILY_DEFAULTS, the catalogued ones with a vision encoder (serving.multimodal on any other catalogued
# model is Stalled and not rendered; models outside the catalog get what the spec asks).
VISION_MODELS = {"Qwen/Qwen3.6-27B", "Qwen/Qwen3.5-397B-A17B", "Qwen/Qwen3.5-9B", "Qwen/Qwen3-VL-8B-Instruct"}
# Of FAMILY_DEFAULTS, those whose YaRN form goes under text_config (multimodal configs), and the rope_parameters
# keys the cards' vLLM command repeats beside the YaRN ones (Qwen3.5/3.6 and Qwen3-Next cards).
NESTED_ROPE_MODELS = {"Qwen/Qwen3.6-27B", "Qwen/Qwen3.5-397B-A17B", "Qwen/Qwen3.5-9B"}
CARD_ROPE_KEYS = {"Qwen/Qwen3.6-27B": {"mrope_interleaved": True, "mrope_section": [11, 11, 10],
                                      "partial_rotary_factor": 0.25},
                  "Qwen/Qwen3-Next-80B-A3B-Instruct": {"partial_rotary_factor": 0.25}}
CARD_ROPE_KEYS["Qwen/Qwen3.5-397B-A17B"] = CARD_ROPE_KEYS["Qwen/Qwen3.5-9B"] = CARD_ROPE_KEYS["Qwen/Qwen3.6-27B"]
NOT_CATALOGUED = {"some-org/custom-model", "Qwen/Qwen3-Reranker-0.6B-custom"}
RERANKER_OVERRIDES = {"architectures": ["Qwen3ForSequenceClassification"], "classifier_from_token": ["no", "yes"],
                      "is_original_qwen3_reranker": True}


def _cr(spec: dict[str, Any], name: str = "gen") -> QwenInference:
    return QwenInference.model_validate({"metadata": {"name": name, "namespace": "ns"}, "spec": spec})


def expected(cr: QwenInference) -> dict[str, Any]:
    """What vLLM must have parsed, field by field, for this spec."""
    e = cr.spec.engine
    plan = make_plan(cr, OperatorConfig())
    want: dict[str, Any] = {
        "model": plan.model_ref, "served_model_name": [plan.served_model_name], "port": cr.spec.service.port,
        "tensor_parallel_size": cr.spec.parallelism.tensor, "pipeline_parallel_size": cr.spec.parallelism.pipeline,
        "shutdown_timeout": e.shutdown_timeout_seconds, "trust_remote_code": cr.spec.model.trust_remote_code,
    }
    optional = {"max_model_len": e.max_model_len, "max_num_seqs": e.max_num_seqs,
                "max_num_batched_tokens": e.max_num_batched_tokens, "block_size": e.block_size,
                "gpu_memory_utilization": e.gpu_memory_utilization, "dtype": e.dtype, "quantization": e.quantization,
                "kv_cache_dtype": e.kv_cache_dtype, "enforce_eager": e.enforce_eager,
                "enable_prefix_caching": e.enable_prefix_caching, "enable_chunked_prefill": e.enable_chunked_prefill,
                "cpu_offload_gb": e.cpu_offload_gi_b, "scheduling_policy": e.scheduling_policy,
                "revision": cr.spec.model.revision}
    want.update({k: v for k, v in optional.items() if v is not None})
    if e.kv_offload_gi_b:
        want.update(kv_offloading_size=e.kv_offload_gi_b, kv_offloading_backend="native")
    return want | expected_serving(cr)


def expected_serving(cr: QwenInference) -> dict[str, Any]:
    s = cr.spec.serving
    family_task, family_reasoning, family_tool = FAMILY_DEFAULTS[cr.spec.model.name]
    task = s.task or family_task
    reasoning, tool = "", None
    if task == "generate":
        reasoning = family_reasoning if s.reasoning_parser is None else s.reasoning_parser.replace("none", "")
        tool = family_tool if s.tool_call_parser is None else (None if s.tool_call_parser == "none"
                                                               else s.tool_call_parser)
    spec_method = s.speculative.method if s.speculative is not None else None
    mtp = task == "generate" and spec_method == "mtp" and cr.spec.model.name in MTP_MODELS | NOT_CATALOGUED
    adapters = s.adapters if task == "generate" else []  # else Stalled, not rendered
    lora = {"enable_lora": True if adapters else None, "max_loras": len(adapters) or 1,
            "max_lora_rank": (s.max_lora_rank or 16) if adapters else 16,
            "lora_modules": [{"name": a.name, "path": a.repo or "/models/" + (a.path or "").strip("/")}
                             for a in adapters] or None}
    speculative = {"method": "mtp", "num_speculative_tokens": s.speculative.num_speculative_tokens} \
        if mtp and s.speculative else None
    if task == "generate" and s.speculative is not None and spec_method == "ngram":  # any model
        lookup = {"prompt_lookup_min": s.speculative.prompt_lookup_min,
                  "prompt_lookup_max": s.speculative.prompt_lookup_max}
        speculative = {"method": "ngram", "num_speculative_tokens": s.speculative.num_speculative_tokens,
                       **{k: v for k, v in lookup.items() if v is not None}}
    if task == "generate" and s.speculative is not None and spec_method == "draft":  # vLLM names the method
        speculative = {"model": s.speculative.model, "num_speculative_tokens": s.speculative.num_speculative_tokens}
    media = s.multimodal if cr.spec.model.name in VISION_MODELS | NOT_CATALOGUED else None
    limits = media.limits_per_prompt if media else None
    multimodal = {"language_model_only": bool(media and media.language_model_only),
                  "limit_mm_per_prompt": {k: v for k, v in (("image", limits.image), ("video", limits.video))
                                          if v is not None} if limits else {}}
    return lora | multimodal | {"speculative_config": speculative,
            "reasoning_parser": reasoning, "tool_call_parser": tool, "enable_auto_tool_choice": tool is not None,
            "default_chat_template_kwargs": None if s.thinking is None or task != "generate"
            else {"enable_thinking": s.thinking},
            "runner": "pooling" if task in ("embed", "score") else "auto",
            "convert": "embed" if task == "embed" else "auto"}


def _check_overrides(cr: QwenInference, parsed: dict[str, Any]) -> None:
    """hf_overrides carry the reranker conversion and/or a YaRN form vLLM 0.32 honours."""
    overrides = dict(parsed["hf_overrides"])
    task = cr.spec.serving.task or FAMILY_DEFAULTS[cr.spec.model.name][0]
    if cr.spec.model.name == "Qwen/Qwen3-Reranker-0.6B" and task == "score":
        assert {k: overrides.pop(k) for k in RERANKER_OVERRIDES} == RERANKER_OVERRIDES
    name = cr.spec.model.name
    nested = overrides.pop("text_config", None) if name in NESTED_ROPE_MODELS else None
    body = dict(nested) if nested is not None else overrides
    rope = body.pop("rope_parameters", None)
    longest = body.pop("max_position_embeddings", None)
    assert overrides == {} and body == {}, (overrides, body)
    asked, length = cr.spec.engine.rope_scaling, cr.spec.engine.max_model_len
    if rope is None:
        assert longest is None
        return
    assert rope["rope_type"] == "yarn" and rope["rope_theta"] > 0
    for key, card_value in CARD_ROPE_KEYS.get(name, {}).items():  # rope_parameters is replaced whole at top level
        assert rope[key] == card_value, (key, rope)
    # vLLM 0.32 takes a YaRN model's max_position_embeddings as already scaled: it must be raised with the factor.
    assert longest == int(rope["factor"] * rope["original_max_position_embeddings"]), (rope, longest)
    if asked and asked.factor:
        assert rope["factor"] == asked.factor
    if length:
        assert length <= longest


def _check(cr: QwenInference, parsed: dict[str, Any]) -> None:
    plan = make_plan(cr, OperatorConfig())
    assert "error" not in parsed, (parsed, engine_args(cr, plan))
    for field, value in expected(cr).items():
        assert parsed[field] == value, (field, parsed[field], value)
    _check_overrides(cr, parsed)
    if cr.spec.model.name in VISION_MODELS:
        # The planner counts the encoder's weights exactly when vLLM's own rule builds it.
        planned = capacity_input(cr.spec, 80.0)
        assert planned is not None and planned.vision_encoder == parsed["vision_tower_built"], parsed


def test_examples_parse_in_the_real_vllm_parser(vllm_python: str) -> None:
    crs = [QwenInference.model_validate(yaml.safe_load(p.read_text())) for p in EXAMPLES]
    parsed = parse_with_vllm(vllm_python, [engine_args(cr, make_plan(cr, OperatorConfig())) for cr in crs])
    for cr, result in zip(crs, parsed, strict=True):
        _check(cr, result)
    reranker = next(r for cr, r in zip(crs, parsed, strict=True) if cr.name == "qwen3-reranker")
    assert reranker["runner"] == "pooling"
    assert reranker["hf_overrides"]["is_original_qwen3_reranker"] is True


def test_a_wrong_flag_is_caught_by_the_real_parser(vllm_python: str) -> None:
    """The probe can fail: a removed seed-era flag is refused by vLLM itself."""
    (result,) = parse_with_vllm(vllm_python, [["--model", "m", "--swap-space", "8"]])
    assert "error" in result and "swap-space" in result["error"]


@st.composite
def engine_specs(draw: st.DrawFn) -> dict[str, Any]:
    maybe = lambda s: draw(st.one_of(st.none(), s))  # noqa: E731
    engine: dict[str, Any] = {
        "maxModelLen": maybe(st.one_of(st.integers(16, 262144),
                                       st.sampled_from([65536, 131072, 524288, 1_000_000, 1_010_000]))),
        "maxNumSeqs": maybe(st.integers(1, 2048)),
        "blockSize": maybe(st.sampled_from([8, 16, 32, 64, 128, 256])),
        "gpuMemoryUtilization": maybe(st.floats(0.05, 1.0).map(lambda x: round(x, 3))),
        "dtype": maybe(st.sampled_from(["auto", "half", "float16", "bfloat16", "float", "float32"])),
        "quantization": maybe(st.sampled_from(QUANTIZATIONS)),
        "kvCacheDtype": maybe(st.sampled_from(["auto", "fp8", "fp8_e4m3", "fp8_e5m2"])),
        "enforceEager": maybe(st.booleans()),
        "enablePrefixCaching": maybe(st.booleans()),
        "enableChunkedPrefill": maybe(st.booleans()),
        "kvOffloadGiB": maybe(st.sampled_from([0.5, 1, 8, 16.5, 64])),
        "cpuOffloadGiB": maybe(st.sampled_from([0, 1, 4, 10.5])),
        "schedulingPolicy": maybe(st.sampled_from(["fcfs", "priority"])),
        "ropeScaling": maybe(st.fixed_dictionaries({}, optional={
            "factor": st.sampled_from([1.5, 2, 3, 4]), "originalMaxPositionEmbeddings": st.sampled_from([4096, 32768]),
            "ropeTheta": st.sampled_from([10000.0, 1000000.0])})),
        "shutdownTimeoutSeconds": draw(st.integers(0, 3600)),
    }
    floor = max(engine["maxNumSeqs"] or 1, engine["maxModelLen"] or 1 if engine["enableChunkedPrefill"] is False
                else 1)
    engine["maxNumBatchedTokens"] = maybe(st.integers(floor, 1_048_576))
    spec: dict[str, Any] = {
        "model": {"name": draw(st.sampled_from(sorted(FAMILY_DEFAULTS))), "trustRemoteCode": draw(st.booleans())},
        "serving": draw(serving_specs()),
        "engine": {k: v for k, v in engine.items() if v is not None},
        "parallelism": {"tensor": draw(st.sampled_from([1, 2, 4, 8])), "pipeline": draw(st.sampled_from([1, 2]))},
        "service": {"port": draw(st.integers(1024, 65535))},
    }
    if draw(st.booleans()):
        spec["model"]["revision"] = draw(st.sampled_from(["main", "v1.0", "a" * 40]))
    return spec


@st.composite
def serving_specs(draw: st.DrawFn) -> dict[str, Any]:
    maybe = lambda s: draw(st.one_of(st.none(), s))  # noqa: E731
    task = maybe(st.sampled_from(["generate", "embed", "score"]))
    serving: dict[str, Any] = {"task": task}
    if task in (None, "generate"):  # parsers and thinking are for chat generation (a CEL rule)
        serving |= {"reasoningParser": maybe(st.sampled_from(["qwen3", "deepseek_r1", "none"])),
                    "toolCallParser": maybe(st.sampled_from(["hermes", "qwen3_json", "qwen3_coder", "qwen3_xml",
                                                             "none"])),
                    "thinking": maybe(st.booleans()),
                    "speculative": maybe(st.one_of(
                        st.fixed_dictionaries({}, optional={"numSpeculativeTokens": st.integers(1, 8)}),
                        st.fixed_dictionaries({"method": st.just("ngram")}, optional={
                            "numSpeculativeTokens": st.integers(1, 8), "promptLookupMin": st.integers(1, 3),
                            "promptLookupMax": st.integers(3, 8)}),
                        st.fixed_dictionaries({"method": st.just("draft"), "model": st.sampled_from(
                            ["Qwen/Qwen3-0.6B", "some-org/draft"])}, optional={
                            "numSpeculativeTokens": st.integers(1, 8)}))),
                    "adapters": maybe(st.lists(st.sampled_from([
                        {"name": "sql", "repo": "some-org/sql-lora"}, {"name": "chat-de", "path": "adapters/de"},
                        {"name": "x", "path": "a/b/"}]), min_size=1, max_size=3, unique_by=lambda a: a["name"])),
                    "maxLoraRank": maybe(st.sampled_from([8, 16, 64, 512]))}
        if serving["thinking"] and serving["reasoningParser"] == "none":
            serving["thinking"] = None
    image, video = st.integers(0, 8), st.integers(0, 2)
    limits = st.one_of(st.fixed_dictionaries({"image": image, "video": video}), st.fixed_dictionaries({"image": image}),
                       st.fixed_dictionaries({"video": video}))
    # Language-model-only is drawn twice as often as media limits: it renders only on the few vision models of
    # FAMILY_DEFAULTS, and the corpus check below wants it at least 10 times.
    serving["multimodal"] = maybe(st.integers(0, 2).flatmap(lambda pick: st.fixed_dictionaries(
        {"limitsPerPrompt": limits}, optional={"languageModelOnly": st.just(False)}) if pick == 0
        else st.just({"languageModelOnly": True})))
    return {k: v for k, v in serving.items() if v is not None}


class Parser:
    """The real vLLM parser in a long-lived process: one argv per line, so each generated spec costs a round trip
    rather than an engine import."""

    def __init__(self, python: str) -> None:
        env = {**{k: v for k, v in os.environ.items() if k not in ("PYTHONPATH", "VIRTUAL_ENV")},
               "VLLM_TARGET_DEVICE": "cpu"}
        self.proc = subprocess.Popen([python, str(HERE / "vllm_args_probe.py"), "--serve"], env=env, text=True,
                                     stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=subprocess.DEVNULL)
        assert self.proc.stdout is not None and self.proc.stdin is not None
        self.out, self.inp = self.proc.stdout, self.proc.stdin
        assert json.loads(self.out.readline()) == {"ready": True}

    def __call__(self, argv: list[str]) -> dict[str, Any]:
        self.inp.write(json.dumps(argv) + "\n")
        self.inp.flush()
        return dict(json.loads(self.out.readline()))

    def close(self) -> None:
        self.inp.close()
        self.proc.wait(timeout=30)


@pytest.fixture(scope="module")
def parser(vllm_python: str) -> Any:
    p = Parser(vllm_python)
    yield p
    p.close()


CHECKED: list[str] = []


@settings(max_examples=400, deadline=None, derandomize=True, suppress_health_check=list(HealthCheck))
@given(engine_specs())
def test_generated_specs_parse_with_the_spec_values(parser: Parser, spec: dict[str, Any]) -> None:
    cr = _cr(spec, f"gen-{len(CHECKED)}")
    argv = engine_args(cr, make_plan(cr, OperatorConfig()))
    _check(cr, parser(argv))
    CHECKED.append(cr.name)
    QWEN_FLAGS_SEEN.extend(a for a in argv if a in QWEN_FLAGS)
    QWEN_FLAGS_SEEN.extend("yarn" for a in argv if '"rope_type":"yarn"' in a)


QWEN_FLAGS = ("--reasoning-parser", "--tool-call-parser", "--default-chat-template-kwargs", "--convert", "--runner",
              "--speculative-config", "--lora-modules", "--language-model-only", "--limit-mm-per-prompt")
QWEN_FLAGS_SEEN: list[str] = []


def test_the_generated_corpus_was_large_enough() -> None:
    """Runs after the property test in this module: at least 200 distinct generated specs were parsed, and the
    Qwen layer's flags (parsers, thinking, pooling runner, YaRN overrides) were among them many times each."""
    assert len(CHECKED) >= 200, len(CHECKED)
    counts = {flag: QWEN_FLAGS_SEEN.count(flag) for flag in (*QWEN_FLAGS, "yarn")}
    assert min(counts.values()) >= 10, sorted(counts.items(), key=lambda kv: kv[1])[:3]
    print(counts)


# --- the planner's proposals (issue 37) ---------------------------------------------------------------------

PROPOSAL_GPUS = ("H100", "H200", "A10G", "L40S", "B200")


def _proposed() -> list[QwenInference]:
    crs = []
    for gpu_name in PROPOSAL_GPUS:
        gpu = find_gpu(gpu_name)
        assert gpu is not None
        for model in all_models():
            for i, proposal in enumerate(propose_layouts(model, gpu)):
                crs.append(QwenInference.model_validate({"metadata": {"name": f"p{i}", "namespace": "ns"},
                                                         "spec": proposal.spec(gpu)}))
    return crs


def test_every_proposal_parses_in_vllm_with_its_sizes(parser: Parser) -> None:
    """Every layout the planner proposes (plan/propose.py) for every catalog model on H100, H200, A10G, L40S and
    B200, rendered as the operator would, parses in vLLM's parser with the proposal's sizes."""
    crs = _proposed()
    argvs = []
    for cr in crs:
        plan = make_plan(cr, OperatorConfig())
        assert plan.problems == (), (cr.spec.model.name, plan.problems)
        nodes = cr.spec.parallelism.nodes
        argvs.append(engine_args(cr, plan) + (multi_node_args(cr, leader=True) if nodes > 1 else []))
    parsed = [parser(argv) for argv in argvs]
    refused = [(cr.spec.model.name, argv, got["error"]) for cr, argv, got in zip(crs, argvs, parsed, strict=True)
               if "error" in got]
    assert refused == []
    for cr, got in zip(crs, parsed, strict=True):
        spec = cr.spec
        assert (got["model"], got["quantization"], got["max_model_len"]) == (
            spec.model.name, spec.engine.quantization, spec.engine.max_model_len)
        assert (got["tensor_parallel_size"], got["pipeline_parallel_size"]) == (
            spec.parallelism.tensor, spec.parallelism.pipeline)
    assert len(crs) > 200  # 5 GPUs x ~60 models, most with several ways to hold the weights
