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
from qwen_fleet.config import OperatorConfig
from qwen_fleet.plan import make_plan
from qwen_fleet.render.engine_args import engine_args

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
    return want


def _check(cr: QwenInference, parsed: dict[str, Any]) -> None:
    assert "error" not in parsed, (parsed, engine_args(cr, make_plan(cr, OperatorConfig())))
    for field, value in expected(cr).items():
        assert parsed[field] == value, (field, parsed[field], value)


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
        "maxModelLen": maybe(st.integers(16, 262144)),
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
        "shutdownTimeoutSeconds": draw(st.integers(0, 3600)),
    }
    floor = max(engine["maxNumSeqs"] or 1, engine["maxModelLen"] or 1 if engine["enableChunkedPrefill"] is False
                else 1)
    engine["maxNumBatchedTokens"] = maybe(st.integers(floor, 1_048_576))
    spec: dict[str, Any] = {
        "model": {"name": draw(st.sampled_from(["Qwen/Qwen3-4B-Instruct-2507", "Qwen/Qwen2.5-7B-Instruct",
                                                "Qwen/Qwen3.6-27B", "some-org/custom-model"])),
                  "trustRemoteCode": draw(st.booleans())},
        "engine": {k: v for k, v in engine.items() if v is not None},
        "parallelism": {"tensor": draw(st.sampled_from([1, 2, 4, 8])), "pipeline": draw(st.sampled_from([1, 2]))},
        "service": {"port": draw(st.integers(1024, 65535))},
    }
    if draw(st.booleans()):
        spec["model"]["revision"] = draw(st.sampled_from(["main", "v1.0", "a" * 40]))
    return spec


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


@settings(max_examples=250, deadline=None, derandomize=True, suppress_health_check=list(HealthCheck))
@given(engine_specs())
def test_generated_specs_parse_with_the_spec_values(parser: Parser, spec: dict[str, Any]) -> None:
    cr = _cr(spec, f"gen-{len(CHECKED)}")
    _check(cr, parser(engine_args(cr, make_plan(cr, OperatorConfig()))))
    CHECKED.append(cr.name)


def test_the_generated_corpus_was_large_enough() -> None:
    """Runs after the property test in this module: at least 200 distinct generated specs were parsed."""
    assert len(CHECKED) >= 200, len(CHECKED)
