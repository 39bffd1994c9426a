"""Contract fixtures: a tiny random-weight Qwen2 model (made once per session) and a real vLLM CPU server
on it (one per module that uses it, stopped before the next module starts engines of its own: on a
2-core machine two engines at once slow each other down).

The engine venv comes from the root conftest's ``vllm_python`` (hack/vllm-venv.sh builds it when it is
missing); nothing here skips. A server start costs a minute or two on a small machine, so tests share
this one wherever they can; tests that need a different KV-cache configuration start their own.
"""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.support.tiny_qwen import TinyQwen, make_tiny_model
from tests.support.vllm_server import VllmServer

# FACTS.md's serving recipe for the tiny model.
TINY_SERVER_ARGS = ["--max-model-len", "1024", "--max-num-seqs", "8", "--dtype", "bfloat16"]
TINY_KV_SPACE_GIB = 1


@pytest.fixture(scope="session")
def tiny_qwen() -> TinyQwen:
    return TinyQwen()


@pytest.fixture(scope="session")
def tiny_qwen_dir(tmp_path_factory: pytest.TempPathFactory, vllm_python: str, tiny_qwen: TinyQwen) -> Path:
    return make_tiny_model(tmp_path_factory.mktemp("tiny-qwen2"), tiny_qwen, python=vllm_python)


@pytest.fixture(scope="module")
def tiny_vllm(tmp_path_factory: pytest.TempPathFactory, vllm_python: str, tiny_qwen_dir: Path) -> Iterator[VllmServer]:
    """A serving vLLM (``/health`` answers) on the tiny model, with FACTS.md's arguments."""
    server = VllmServer(
        TINY_SERVER_ARGS,
        {"VLLM_CPU_KVCACHE_SPACE": str(TINY_KV_SPACE_GIB)},
        tiny_qwen_dir,
        python=vllm_python,
        log_path=tmp_path_factory.mktemp("tiny-vllm") / "vllm.log",
    )
    with server:
        yield server
