"""The real vLLM engine serves the tiny Qwen2 model: the API, probes and metrics the operator relies on."""

from __future__ import annotations

from typing import Any

import pytest

from qwen_fleet.plan.capacity_vllm import GIB, cpu_kv_cache_tokens, kv_pool
from tests.contract.conftest import TINY_KV_SPACE_GIB
from tests.support.queue_watch import peaks_under_load
from tests.support.tiny_qwen import TinyQwen
from tests.support.vllm_server import VllmServer

pytestmark = pytest.mark.vllm

# Names the chart's probes, the HPA and the dashboards read (FACTS.md lists what 0.32 exports).
GAUGES = ("vllm:num_requests_running", "vllm:num_requests_waiting", "vllm:kv_cache_usage_perc")
COUNTERS = (
    "vllm:prompt_tokens_total",
    "vllm:generation_tokens_total",
    "vllm:request_success_total",
    "vllm:num_preemptions_total",
    "vllm:prefix_cache_queries_total",
)
HISTOGRAMS = (
    "vllm:time_to_first_token_seconds",
    "vllm:inter_token_latency_seconds",
    "vllm:e2e_request_latency_seconds",
    "vllm:request_queue_time_seconds",
)


def chat(server: VllmServer, content: str, max_tokens: int) -> tuple[int, Any]:
    return server.post_json(
        "/v1/chat/completions",
        {
            "model": server.served_model_name,
            "messages": [{"role": "user", "content": content}],
            "max_tokens": max_tokens,
            "ignore_eos": True,  # random weights: make the length deterministic
        },
    )


def test_health_and_models(tiny_vllm: VllmServer) -> None:
    assert tiny_vllm.get("/health")[0] == 200
    status, body = tiny_vllm.get("/v1/models")
    assert status == 200, body
    assert '"id":"qwen-tiny"' in body.replace(" ", "")
    assert '"max_model_len":1024' in body.replace(" ", "")


def test_chat_and_completions_answer(tiny_vllm: VllmServer) -> None:
    status, reply = chat(tiny_vllm, "Hello, who are you?", max_tokens=12)
    assert status == 200, reply
    choice = reply["choices"][0]
    assert choice["message"]["role"] == "assistant"
    assert isinstance(choice["message"]["content"], str)
    assert reply["usage"]["completion_tokens"] == 12
    assert choice["finish_reason"] == "length"
    # The ChatML template wrapped the message: the prompt is longer than the raw bytes of the text.
    assert reply["usage"]["prompt_tokens"] > len(b"Hello, who are you?")

    status, reply = tiny_vllm.post_json(
        "/v1/completions",
        {"model": "qwen-tiny", "prompt": "abc", "max_tokens": 5, "ignore_eos": True},
    )
    assert status == 200, reply
    # Byte-level BPE without merges: one token per byte, no BOS.
    assert (reply["usage"]["prompt_tokens"], reply["usage"]["completion_tokens"]) == (3, 5)


def test_unknown_model_is_rejected(tiny_vllm: VllmServer) -> None:
    status, _ = tiny_vllm.post_json("/v1/completions", {"model": "not-served", "prompt": "a", "max_tokens": 1})
    assert status == 404


def test_metrics_names(tiny_vllm: VllmServer) -> None:
    assert chat(tiny_vllm, "count", max_tokens=4)[0] == 200
    names = tiny_vllm.metrics()
    for name in GAUGES + COUNTERS:
        assert name in names, f"{name} missing from /metrics"
    for name in HISTOGRAMS:
        assert f"{name}_bucket" in names, name
        assert f"{name}_count" in names, name
    assert names["vllm:generation_tokens_total"] >= 4
    assert names["vllm:request_success_total"] >= 1
    assert "vllm:gpu_cache_usage_perc" not in names  # renamed kv_cache_usage_perc; dashboards must follow


def test_queue_depth_is_observable(tiny_vllm: VllmServer) -> None:
    """More concurrent requests than --max-num-seqs 8: the surplus waits, and the gauge shows it."""
    peaks = peaks_under_load(tiny_vllm, 24, 900, lambda p: p.waiting >= 1 and p.running >= 1 and p.kv > 0)
    print(f"queue peaks under 24 clients at max-num-seqs 8: {peaks}")
    assert peaks.failed == 0, peaks.errors
    assert peaks.done > 0
    assert 1 <= peaks.running <= 8  # --max-num-seqs caps the batch ...
    assert 1 <= peaks.waiting <= 16  # ... and the rest queue, visibly (the HPA's signal)
    assert 0 < peaks.kv < 1


def test_kv_cache_size_matches_planner(tiny_vllm: VllmServer, tiny_qwen: TinyQwen, engine_avx512_bf16: bool) -> None:
    """FACTS.md's figure: 2 layers x 1 KV head x 64 x bf16 = 512 B/token, so 1 GiB holds 2,097,152."""
    planned = cpu_kv_cache_tokens(tiny_qwen.facts(), TINY_KV_SPACE_GIB * GIB, 1024, avx512_bf16=engine_avx512_bf16)
    assert planned == 2_097_152
    assert tiny_vllm.kv_cache_tokens() == planned
    pool = kv_pool(tiny_qwen.facts(), device="cpu")
    assert tiny_vllm.max_concurrency() == pytest.approx(pool.max_concurrency(GIB, 1024), abs=0.005)
