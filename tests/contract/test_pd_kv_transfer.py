"""Prefill on one real vLLM CPU engine, decode on another, the KV cache moved between them by a vLLM KV connector;
the answer is identical, token for token under greedy sampling, to a single engine's.

Three engines of the tiny Qwen2 model, started one after another: a reference with no connector, a prefill
engine (A) and a decode engine (B), both with the connector. A prompt of several KV blocks goes to A with
``max_tokens`` 1 (its prefill), then to B for the whole answer. Each engine's own counters say where the prompt's
KV came from (``vllm:prompt_tokens_by_source``): on A every prompt token is ``local_compute``; on B the prompt's
full blocks are ``external_kv_transfer`` and only the tail is computed there.

Connectors (docs/disaggregation.md has those tried and why the others cannot run here):

* ``ExampleConnector`` (vLLM's reference connector, formerly SharedStorageConnector): A writes each layer's KV
  of the prompt's full blocks to a shared directory (safetensors), B finds the prompt there by its token hash and
  loads it; nothing to install.
"""

from __future__ import annotations

import json
from collections.abc import Iterator
from contextlib import ExitStack
from pathlib import Path
from typing import Any

import pytest
from prometheus_client.parser import text_string_to_metric_families

from tests.support.vllm_server import VllmServer

pytestmark = [pytest.mark.vllm, pytest.mark.slow]

BLOCK = 128  # vLLM's CPU default block size, given explicitly: the prefix a connector moves is whole blocks
ENGINE_ARGS = ["--max-model-len", "1024", "--max-num-seqs", "4", "--dtype", "bfloat16", "--block-size", str(BLOCK),
               "--no-enable-prefix-caching"]
# Byte-level tokenizer without merges: one token per byte. 300 tokens = 2 full blocks + 44.
PROMPT = ("The prefill engine computes this prompt's KV cache; the decode engine receives it and writes the "
          "answer. " * 4)[:300]
ANSWER_TOKENS = 24


def _kv_config(connector: str, role: str, shared: Path) -> dict[str, Any]:
    if connector == "ExampleConnector":
        return {"kv_connector": "ExampleConnector", "kv_role": role,
                "kv_connector_extra_config": {"shared_storage_path": str(shared)}}
    raise ValueError(connector)


def _completion(server: VllmServer, max_tokens: int, **extra: Any) -> dict[str, Any]:
    status, reply = server.post_json("/v1/completions", {
        "model": server.served_model_name, "prompt": PROMPT, "max_tokens": max_tokens, "temperature": 0,
        "ignore_eos": True, "return_token_ids": True, **extra}, timeout=600)
    assert status == 200, reply
    assert reply["usage"] == {**reply["usage"], "prompt_tokens": len(PROMPT), "completion_tokens": max_tokens}
    return dict(reply)


def _by_source(server: VllmServer) -> dict[str, float]:
    """``vllm:prompt_tokens_by_source_total`` by its ``source`` label."""
    status, text = server.get("/metrics")
    assert status == 200, text
    out: dict[str, float] = {}
    for family in text_string_to_metric_families(text):
        for s in family.samples:
            if s.name == "vllm:prompt_tokens_by_source_total":
                out[s.labels["source"]] = out.get(s.labels["source"], 0.0) + float(s.value)
    return out


@pytest.fixture(scope="module")
def reference_tokens(vllm_python: str, tiny_qwen_dir: Path, tmp_path_factory: pytest.TempPathFactory) -> list[int]:
    """The greedy answer of one engine with no connector, prefill and decode in one place."""
    log = tmp_path_factory.mktemp("pd-reference") / "vllm.log"
    with VllmServer(ENGINE_ARGS, {}, tiny_qwen_dir, python=vllm_python, log_path=log) as server:
        reply = _completion(server, ANSWER_TOKENS)
    return list(reply["choices"][0]["token_ids"])


@pytest.fixture
def pd_pair(request: pytest.FixtureRequest, vllm_python: str, tiny_qwen_dir: Path, tmp_path: Path
            ) -> Iterator[tuple[VllmServer, VllmServer]]:
    connector = request.param
    shared = tmp_path / "kv"
    shared.mkdir()
    with ExitStack() as stack:
        pair = []
        for name, role in (("prefill", "kv_producer"), ("decode", "kv_consumer")):
            argv = [*ENGINE_ARGS, "--kv-transfer-config", json.dumps(_kv_config(connector, role, shared))]
            server = VllmServer(argv, {}, tiny_qwen_dir, python=vllm_python, log_path=tmp_path / f"{name}.log")
            pair.append(stack.enter_context(server))
        yield pair[0], pair[1]


@pytest.mark.timeout(2700)  # three engine starts, one after another, on a loaded 2-core machine (~5 min each)
@pytest.mark.parametrize("pd_pair", ["ExampleConnector"], indirect=True)
def test_prefill_on_one_engine_and_decode_on_another_answer_as_one_engine(
        pd_pair: tuple[VllmServer, VllmServer], reference_tokens: list[int]) -> None:
    prefill, decode = pd_pair
    _completion(prefill, 1)
    on_prefill = _by_source(prefill)
    answer = _completion(decode, ANSWER_TOKENS)
    on_decode = _by_source(decode)
    moved = len(PROMPT) - 1 - (len(PROMPT) - 1) % BLOCK  # the full blocks before the last prompt token
    print(f"prompt tokens by source: prefill {on_prefill}, decode {on_decode}")
    assert on_prefill.get("local_compute") == len(PROMPT) and not on_prefill.get("external_kv_transfer")
    assert on_decode.get("external_kv_transfer") == moved
    assert on_decode.get("local_compute") == len(PROMPT) - moved
    assert answer["choices"][0]["token_ids"] == reference_tokens
