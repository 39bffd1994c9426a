"""The capacity planner's KV-cache arithmetic equals what the real vLLM engine logs.

Each configuration starts the CPU engine on a tiny model with an explicit KV space and compares the
planner's ``cpu_kv_cache_tokens`` with the engine's "CPU KV cache size: N tokens" line, to the token.
The configurations vary what the arithmetic depends on: KV space, layers and KV heads, model dtype,
KV-cache dtype (FP8), block size, a max_model_len that is not a multiple of the block, and a hybrid
Gated DeltaNet model (Qwen3-Next layout), whose block size and state pages vLLM aligns.

FACTS.md's configuration (2 layers, bf16, 1 GiB, len 1024) is checked on the shared serving server, in
test_tiny_vllm.py. The starts here stop at the log line (``ready="kv-cache"``) and run with
``--enforce-eager``: with an explicit KV space the engine then skips compilation and warm-up, which
do not change the KV cache.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path

import pytest

from qwen_fleet.plan.capacity_vllm import GIB, cpu_kv_cache_tokens, cpu_mamba_ssm_cache_dtype, kv_pool
from tests.support.tiny_qwen import TinyQwen, make_tiny_model
from tests.support.vllm_server import VllmServer

pytestmark = pytest.mark.vllm


@dataclass(frozen=True)
class EngineCase:
    id: str
    model: TinyQwen
    kv_space_gib: int
    max_model_len: int
    block_size: int | None = None
    kv_cache_dtype: str = "auto"
    extra_args: tuple[str, ...] = field(default=())
    ready: str = "kv-cache"

    def argv(self) -> list[str]:
        args = ["--max-model-len", str(self.max_model_len), "--max-num-seqs", "8", "--enforce-eager"]
        if self.block_size:
            args += ["--block-size", str(self.block_size)]
        if self.kv_cache_dtype != "auto":
            args += ["--kv-cache-dtype", self.kv_cache_dtype]
        return args + list(self.extra_args)

    def planned_tokens(self, avx512_bf16: bool) -> int:
        return cpu_kv_cache_tokens(
            self.model.facts(),
            self.kv_space_gib * GIB,
            self.max_model_len,
            avx512_bf16=avx512_bf16,
            block_size=self.block_size,
            kv_cache_dtype=self.kv_cache_dtype,
        )


CASES = [
    # 3 layers, 2 KV heads, a float32 checkpoint: with --dtype auto vLLM downcasts float32 to bfloat16,
    # so the KV cache is bf16: 1,536 bytes/token. 32-token blocks and a length of 1000 (32 blocks, the
    # last 24 tokens of the last one unused): 1,365,312 tokens, not the 1,398,101 that 2 GiB / 1,536 B
    # would suggest.
    EngineCase(
        id="fp32-checkpoint-3layers-2kvheads-block32-len1000-2GiB",
        model=TinyQwen(layers=3, hidden=256, intermediate=512, heads=4, kv_heads=2, dtype="float32"),
        kv_space_gib=2,
        max_model_len=1000,
        block_size=32,
    ),
    # FP8 KV cache: one byte per element, 256 bytes/token; 256-token blocks, length 2000 (8 blocks).
    # The engine sizes the cache before it picks a kernel; on CPUs without AVX-512 it then refuses FP8
    # ("FP8 KV cache on CPU requires x86 with AVX-512 or AMX."): the sizing is still the engine's own.
    EngineCase(
        id="fp8-kv-block256-len2000-1GiB",
        model=TinyQwen(),
        kv_space_gib=1,
        max_model_len=2000,
        block_size=256,
        kv_cache_dtype="fp8",
    ),
    # Hybrid (Qwen3-Next layout: 3 Gated DeltaNet layers, 1 full-attention layer). vLLM grows the block
    # until one attention page holds a recurrent state, and with prefix caching (the default) keeps 2 state
    # blocks per linear group. The state's size depends on the CPU: where torch sees AVX-512 BF16, vLLM's
    # CPU platform keeps it in float32 (134,144 B: block 640, 838,784 tokens), elsewhere in bf16 (68,608 B:
    # block 384, 1,242,680 tokens). The fixture engine_avx512_bf16 asks the engine's torch which applies,
    # and the log line that announces the reset is checked both ways. Served, not only sized.
    EngineCase(
        id="hybrid-qwen3-next-1GiB",
        model=TinyQwen(kind="qwen3_next", layers=4),
        kv_space_gib=1,
        max_model_len=1024,
        ready="health",
    ),
]


@pytest.mark.parametrize("case", CASES, ids=lambda c: c.id)
def test_engine_kv_cache_matches_planner(
    case: EngineCase, tmp_path: Path, vllm_python: str, engine_avx512_bf16: bool
) -> None:
    model_dir = make_tiny_model(tmp_path / "model", case.model, python=vllm_python)
    server = VllmServer(
        case.argv(),
        {"VLLM_CPU_KVCACHE_SPACE": str(case.kv_space_gib)},
        model_dir,
        python=vllm_python,
        log_path=tmp_path / "vllm.log",
        ready=case.ready,
        # The served case keeps the production layout: its three processes are checked below.
        uniproc=case.ready == "kv-cache",
    )
    with server:
        logged = server.kv_cache_tokens()
        concurrency = server.max_concurrency()
        if case.ready == "health":  # the engine does not only size this model: it serves it
            status, reply = server.post_json(
                "/v1/chat/completions",
                {"model": "qwen-tiny", "messages": [{"role": "user", "content": "hi"}], "max_tokens": 4},
            )
            assert status == 200, reply
            assert reply["usage"]["completion_tokens"] >= 1
        pids = server.group_pids()
    assert not server.group_pids()  # stopped, engine core and worker included
    if case.ready == "health":
        assert len(pids) >= 3, pids  # API server, engine core, worker

    assert logged == case.planned_tokens(engine_avx512_bf16), server.tail()
    ssm_dtype = cpu_mamba_ssm_cache_dtype(avx512_bf16=engine_avx512_bf16)
    pool = kv_pool(case.model.facts(), device="cpu", block_size=case.block_size, kv_cache_dtype=case.kv_cache_dtype,
                   mamba_ssm_cache_dtype=ssm_dtype)
    assert concurrency == pytest.approx(pool.max_concurrency(case.kv_space_gib * GIB, case.max_model_len), abs=0.005)
    if pool.state_groups:
        assert f"Setting attention block size to {pool.block_size} tokens" in server.log()
        assert ("Reset SSM cache type to float32" in server.log()) == engine_avx512_bf16
