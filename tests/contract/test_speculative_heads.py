"""Speculative decoding with trained draft heads, served by the real vLLM CPU engine from the Deployment the
operator renders:

- method mtp: a tiny Qwen3-Next (Gated DeltaNet layers, a mixture of experts, and an MTP module under ``mtp.*`` as
  the published checkpoints ship it); vLLM resolves the drafter (``Qwen3NextMTP``) and loads it beside the target;
- method eagle3: the suite's tiny Qwen2 with a tiny EAGLE-3 head (tests/support/tiny_eagle.py), which drafts from
  the target's hidden states.

In both the spec-decode counters move. With random weights the acceptance rate says nothing about Qwen; the test
is that the path the operator renders for each method runs on the engine. On the CPU engine the MTP fleet needs
``engine.enablePrefixCaching: false``: with prefix caching a hybrid model's state is copied in vLLM's "align" mode
by a Triton kernel the CPU build lacks (vLLM 0.32, ``v1/worker/mamba_utils.py:1226``, ``TypeError: 'function'
object is not subscriptable`` on the first request; seen 2026-12-03); GPUs run that kernel (docs/qwen-layer.md).
"""

from __future__ import annotations

import copy
from pathlib import Path

import pytest

from tests.support.serving import SPEC, RenderedServer, rendered_server
from tests.support.tiny_eagle import make_tiny_eagle3
from tests.support.tiny_qwen import TinyQwen, make_tiny_model

pytestmark = pytest.mark.vllm

DRAFTED = "vllm:spec_decode_num_draft_tokens_total"
ACCEPTED = "vllm:spec_decode_num_accepted_tokens_total"
DRAFTS = "vllm:spec_decode_num_drafts_total"


def _complete_two_prompts(server: RenderedServer) -> tuple[dict[str, float], str]:
    """Start the engine, two greedy 16-token completions (both must come back whole); its metrics and log."""
    with server:
        for prompt in ("alpha beta gamma " * 8, "one two three four five"):
            status, body = server.post_json("/v1/completions", {"model": server.served_model_name, "prompt": prompt,
                                                                "max_tokens": 16, "temperature": 0})
            assert status == 200, body
            assert body["usage"]["completion_tokens"] == 16
        return server.metrics(), server.log()


def test_the_models_own_mtp_layer_drafts_on_the_cpu_engine(vllm_python: str, tmp_path: Path) -> None:
    model_dir = make_tiny_model(tmp_path / "tiny-qwen3-next-mtp", TinyQwen(kind="qwen3_next", layers=4, mtp_layers=1),
                                python=vllm_python)
    assert (model_dir / "model-mtp.safetensors").exists()
    spec = copy.deepcopy(SPEC)
    spec["model"]["name"] = "qwen-fleet/tiny-qwen3-next"
    spec["engine"]["enablePrefixCaching"] = False
    spec["serving"] = {"speculative": {"method": "mtp", "numSpeculativeTokens": 1}}
    server = rendered_server(vllm_python, model_dir, tmp_path / "vllm.log", spec)
    argv = " ".join(server.argv())
    assert '--speculative-config {"method": "mtp", "num_speculative_tokens": 1}' in argv
    assert "--no-enable-prefix-caching" in argv
    metrics, log = _complete_two_prompts(server)
    # the engine built the MTP drafter from the checkpoint's mtp.* weights, not some other method
    assert "Resolved architecture: Qwen3NextMTP" in log
    assert "Loading drafter model" in log
    # one draft token per decode step: the drafts and their tokens move together, acceptance is bounded by them
    assert metrics.get(DRAFTS, 0) > 0, sorted(k for k in metrics if "spec" in k)
    assert metrics[DRAFTED] == metrics[DRAFTS]
    assert 0 <= metrics[ACCEPTED] <= metrics[DRAFTED]
    print(f"mtp acceptance: {metrics[ACCEPTED]:.0f} of {metrics[DRAFTED]:.0f} drafted tokens")


def test_an_eagle3_head_drafts_from_the_targets_hidden_states(vllm_python: str, tiny_qwen_dir: Path,
                                                              tmp_path: Path) -> None:
    head_dir = make_tiny_eagle3(tiny_qwen_dir, tmp_path / "tiny-eagle3", vllm_python)
    spec = copy.deepcopy(SPEC)
    spec["serving"] = {"speculative": {"method": "eagle3", "model": str(head_dir), "numSpeculativeTokens": 2}}
    server = rendered_server(vllm_python, tiny_qwen_dir, tmp_path / "vllm.log", spec)
    assert f'{{"method": "eagle3", "model": "{head_dir}", "num_speculative_tokens": 2}}' in server.argv()
    metrics, log = _complete_two_prompts(server)
    assert "EAGLE drafter KV cache initialized" in log
    # two tokens drafted per step: drafted tokens are twice the drafts, acceptance bounded by them
    assert metrics.get(DRAFTS, 0) > 0, sorted(k for k in metrics if "spec" in k)
    assert metrics[DRAFTED] == 2 * metrics[DRAFTS]
    assert 0 <= metrics[ACCEPTED] <= metrics[DRAFTED]
    print(f"eagle3 acceptance: {metrics[ACCEPTED]:.0f} of {metrics[DRAFTED]:.0f} drafted tokens")
