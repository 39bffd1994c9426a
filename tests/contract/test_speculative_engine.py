"""Speculative decoding served by the real vLLM CPU engine, started from the Deployment the operator renders for
serving.speculative method ngram and method draft: the engine drafts (vLLM's own spec-decode counters move) and
answers.

The acceptance rate is read from the engine's metrics (accepted / drafted tokens) and printed: with random weights
it says nothing about Qwen, only that the figures exist for a fleet's dashboards.
"""

from __future__ import annotations

import copy
from pathlib import Path

import pytest

from tests.support.serving import SPEC, rendered_server

pytestmark = pytest.mark.vllm

DRAFTED = "vllm:spec_decode_num_draft_tokens_total"
ACCEPTED = "vllm:spec_decode_num_accepted_tokens_total"


def test_ngram_speculation_drafts_and_answers(vllm_python: str, tiny_qwen_dir: Path,
                                              tmp_path: Path) -> None:
    spec = copy.deepcopy(SPEC)
    spec["serving"] = {"speculative": {"method": "ngram", "numSpeculativeTokens": 3, "promptLookupMin": 1,
                                       "promptLookupMax": 3}}
    server = rendered_server(vllm_python, tiny_qwen_dir, tmp_path / "vllm.log", spec, uniproc=True)
    assert '"method": "ngram"' in " ".join(server.argv())
    with server:
        # A prompt that repeats itself gives prompt lookup something to copy; greedy decoding of random weights
        # loops too, so later steps find their n-grams in the output as well.
        prompt = " ".join(["alpha beta gamma delta"] * 40)
        for _ in range(4):
            status, body = server.post_json("/v1/completions", {"model": server.served_model_name, "prompt": prompt,
                                                                "max_tokens": 48, "temperature": 0})
            assert status == 200, body
            assert body["usage"]["completion_tokens"] > 0
        metrics = server.metrics()
    assert metrics.get(DRAFTED, 0) > 0, sorted(k for k in metrics if "spec" in k)
    assert ACCEPTED in metrics
    print(f"ngram acceptance: {metrics[ACCEPTED]:.0f} of {metrics[DRAFTED]:.0f} drafted tokens "
          f"({metrics[ACCEPTED] / metrics[DRAFTED]:.2f})")


def test_a_draft_model_drafts_and_greedy_decoding_accepts_its_own_tokens(vllm_python: str, tiny_qwen_dir: Path,
                                                                          tmp_path: Path) -> None:
    # The tiny checkpoint drafts for itself: under greedy decoding the target picks exactly the tokens the draft
    # proposed, so every drafted token must be accepted; any other count means the draft path is broken.
    spec = copy.deepcopy(SPEC)
    spec["serving"] = {"speculative": {"method": "draft", "model": str(tiny_qwen_dir), "numSpeculativeTokens": 2}}
    server = rendered_server(vllm_python, tiny_qwen_dir, tmp_path / "vllm.log", spec, uniproc=True)
    assert f'{{"model": "{tiny_qwen_dir}", "num_speculative_tokens": 2}}' in server.argv()
    with server:
        for _ in range(3):
            status, body = server.post_json("/v1/completions", {"model": server.served_model_name,
                                                                "prompt": "alpha beta gamma " * 20, "max_tokens": 32,
                                                                "temperature": 0})
            assert status == 200, body
        metrics = server.metrics()
    assert metrics.get(DRAFTED, 0) > 0
    assert metrics[ACCEPTED] == metrics[DRAFTED]
