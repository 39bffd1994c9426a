"""Contract fixtures. The tiny Qwen2 model and the shared serving engine (``serving_vllm``, started from the
operator's rendered Deployment) live in the root conftest; ``tiny_vllm`` is that engine under the name these
tests use. Tests that need another KV-cache configuration start engines of their own (one at a time: on a
2-core machine two starting engines slow each other down).
"""

from __future__ import annotations

import subprocess

import pytest

from tests.support.serving import KV_SPACE_GIB, RenderedServer

TINY_KV_SPACE_GIB = KV_SPACE_GIB


@pytest.fixture
def tiny_vllm(serving_vllm: RenderedServer) -> RenderedServer:
    """The session's shared serving engine (FACTS.md's recipe: --max-model-len 1024, --max-num-seqs 8, bf16,
    1 GiB of KV space), started from the operator's rendered Deployment; see tests/support/serving.py."""
    return serving_vllm


@pytest.fixture(scope="session")
def engine_avx512_bf16(vllm_python: str) -> bool:
    """Whether the engine's torch sees AVX-512 BF16 on this CPU: vLLM's CPU platform then keeps hybrid models'
    SSM state in float32 (docs/capacity.md), which changes their KV-cache figures. Asked of the engine's own
    interpreter, the same call vLLM makes, so the expectation follows the machine the test runs on."""
    probe = "import torch; print(int(torch.cpu._is_avx512_bf16_supported()))"
    out = subprocess.run([vllm_python, "-c", probe], check=True, capture_output=True, text=True, timeout=300)
    return out.stdout.strip().splitlines()[-1] == "1"
