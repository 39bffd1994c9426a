"""Drain: the real vLLM CPU engine, started with the exact --shutdown-timeout the operator renders, gets SIGTERM
(as the kubelet sends it after the preStop sleep) while streaming and plain completions are in flight, some
of them still queued. Every in-flight request must complete within the shutdown timeout; the figures (failed
requests, drain time) go to docs/reliability.md.
"""

from __future__ import annotations

import http.client
import json
import os
import signal
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pytest

from qwen_fleet.api import QwenInference
from qwen_fleet.config import OperatorConfig
from qwen_fleet.plan import make_plan
from qwen_fleet.render.deployment import DRAIN_MARGIN_SECONDS, ENGINE_ENV_DEFAULTS, render_deployment
from tests.chaos.helpers import flag, qwi, record, small_spec
from tests.support.tiny_qwen import TinyQwen, make_tiny_model
from tests.support.vllm_server import VllmServer

pytestmark = [pytest.mark.vllm, pytest.mark.slow]

MAX_NUM_SEQS = 8
# Long requests fill all 8 sequence slots (6 streaming, 2 plain); 4 streaming ones sent after them wait in the
# engine's queue at SIGTERM.
BUSY_STREAMS, QUEUED = 6, 4
# Long enough that the streams are still decoding when SIGTERM comes, even on an idle machine (600 tokens took
# under 5 s on an idle CI machine and finished before the queue was observed; 1500 took 4.1 s on an AVX-512 BF16
# machine), short enough to drain in 30 s; prompt + stream stay under --max-model-len 2048.
STREAM_TOKENS, QUEUED_TOKENS = 1900, 300


@dataclass
class Request:
    index: int
    stream: bool
    max_tokens: int
    started: float = 0.0
    first_chunk: float | None = None
    finished: float | None = None
    status: int | None = None
    completion_tokens: int | None = None
    finish_reason: str | None = None
    error: str | None = None
    events: list[str] = field(default_factory=list)

    @property
    def ok(self) -> bool:
        return (self.error is None and self.status == 200 and self.completion_tokens == self.max_tokens
                and self.finish_reason == "length")


def rendered_drain() -> tuple[int, int, int]:
    """(--shutdown-timeout, terminationGracePeriodSeconds, preStop sleep) as the operator renders them."""
    cr = QwenInference.model_validate(qwi("drain", small_spec(MAX_NUM_SEQS)))
    dep = render_deployment(cr, make_plan(cr, OperatorConfig()))
    pod = dep["spec"]["template"]["spec"]
    container = pod["containers"][0]
    timeout = flag(container["args"], "--shutdown-timeout")
    assert timeout is not None
    return int(timeout), int(pod["terminationGracePeriodSeconds"]), int(
        container["lifecycle"]["preStop"]["sleep"]["seconds"])


def run_request(port: int, req: Request) -> None:
    body = {"model": "qwen-tiny", "prompt": f"drain test {req.index}", "max_tokens": req.max_tokens,
            "ignore_eos": True, "stream": req.stream}
    if req.stream:
        body["stream_options"] = {"include_usage": True}
    conn = http.client.HTTPConnection("127.0.0.1", port, timeout=300)
    req.started = time.monotonic()
    try:
        conn.request("POST", "/v1/completions", json.dumps(body), {"Content-Type": "application/json"})
        resp = conn.getresponse()
        req.status = resp.status
        if not req.stream:
            reply = json.loads(resp.read())
            req.first_chunk = time.monotonic()
            req.completion_tokens = reply.get("usage", {}).get("completion_tokens")
            req.finish_reason = (reply.get("choices") or [{}])[0].get("finish_reason")
        else:
            _read_stream(resp, req)
    except Exception as err:  # any failure of a request is what this test counts
        req.error = f"{type(err).__name__}: {err}"
    finally:
        req.finished = time.monotonic()
        conn.close()


def _read_stream(resp: http.client.HTTPResponse, req: Request) -> None:
    done = False
    for raw in resp:
        line = raw.decode(errors="replace").strip()
        if not line.startswith("data: "):
            continue
        data = line[len("data: "):]
        if data == "[DONE]":
            done = True
            break
        chunk: dict[str, Any] = json.loads(data)
        if req.first_chunk is None:
            req.first_chunk = time.monotonic()
        for choice in chunk.get("choices") or []:
            req.finish_reason = choice.get("finish_reason") or req.finish_reason
        if chunk.get("usage"):
            req.completion_tokens = chunk["usage"].get("completion_tokens")
        if "error" in chunk:
            req.error = json.dumps(chunk["error"])[:300]
    if not done and req.error is None:
        req.error = "stream ended without [DONE]"


def test_sigterm_under_load_completes_in_flight_requests(vllm_python: str, tmp_path: Path) -> None:
    shutdown_timeout, grace, pre_stop = rendered_drain()
    assert shutdown_timeout > 0, "the operator must render a draining shutdown (0 aborts in-flight requests)"
    model = make_tiny_model(tmp_path / "model", TinyQwen(), python=vllm_python)
    server = VllmServer(["--max-model-len", "2048", "--max-num-seqs", str(MAX_NUM_SEQS), "--dtype", "bfloat16",
                         "--shutdown-timeout", str(shutdown_timeout)],
                        # The engine environment the operator renders: with vLLM's default output chunk the
                        # API server can leave /metrics unanswered until the streams end (docs/vllm-contract.md),
                        # and the queue this test waits for is seen only after the requests finished.
                        {"VLLM_CPU_KVCACHE_SPACE": "1", **dict(ENGINE_ENV_DEFAULTS)}, model, python=vllm_python,
                        log_path=tmp_path / "vllm.log")
    with server:
        assert server.proc is not None
        # Every sequence slot busy with long requests: streams (their first tokens show they run) and plain ones.
        busy = [Request(i, i < BUSY_STREAMS, STREAM_TOKENS) for i in range(MAX_NUM_SEQS)]
        # Sent once the slots are full: these wait in the engine's queue at SIGTERM. They stream, so their first
        # token's time proves it (the engine's /metrics is not read for this: a busy API server may answer it
        # only after the streams end, docs/vllm-contract.md).
        queued = [Request(MAX_NUM_SEQS + i, True, QUEUED_TOKENS) for i in range(QUEUED)]
        requests = busy + queued
        threads = {r.index: threading.Thread(target=run_request, args=(server.port, r), daemon=True)
                   for r in requests}
        for r in busy:
            threads[r.index].start()
        _wait_for(lambda: all(r.first_chunk or r.finished for r in busy if r.stream), 120)
        for r in queued:
            threads[r.index].start()
        # A streamed response's headers come once the server took the request for the engine.
        _wait_for(lambda: all(r.status is not None or r.finished for r in queued), 30)
        time.sleep(0.3)
        unfinished_at_term = sum(r.finished is None for r in requests)
        # The kubelet signals the container's main process (the API server), not the process group.
        term = time.monotonic()
        os.kill(server.proc.pid, signal.SIGTERM)
        time.sleep(0.5)
        late_status = _late_request(server.port)
        for t in threads.values():
            t.join(timeout=shutdown_timeout + 60)
        while server.group_pids() and time.monotonic() - term < grace + 30:
            server.proc.poll()
            time.sleep(0.1)
        exited = time.monotonic() - term
        exit_code = server.proc.poll()
    failed = [r for r in requests if not r.ok]
    last_done = max((r.finished or term) - term for r in requests)
    drain_line = [ln for ln in server.log().splitlines() if "draining in-flight requests" in ln]
    record("drain", {
        "shutdown_timeout_s": shutdown_timeout, "termination_grace_s": grace, "pre_stop_s": pre_stop,
        "requests": len(requests), "unfinished_at_sigterm": unfinished_at_term,
        "queued_first_token_after_sigterm_s": [round(r.first_chunk - term, 2) if r.first_chunk else None
                                               for r in queued],
        "failed": len(failed), "last_request_done_after_sigterm_s": round(last_done, 2),
        "process_group_exited_after_sigterm_s": round(exited, 2), "exit_code": exit_code,
        "new_request_after_sigterm": late_status, "engine_log": drain_line[:1],
    })
    assert unfinished_at_term == len(requests), "requests finished before SIGTERM: nothing was in flight"
    # The queued requests got their first token only after SIGTERM: they were waiting when it came, and the
    # drain served them too.
    assert all(r.first_chunk is not None and r.first_chunk > term for r in queued), \
        [(r.index, r.first_chunk and round(r.first_chunk - term, 2)) for r in queued]
    assert not failed, "\n".join(f"{r.index} stream={r.stream}: status {r.status}, tokens {r.completion_tokens}, "
                                 f"finish {r.finish_reason}, error {r.error}" for r in failed)
    # Every request finished inside the drain window vLLM was given, and the process left before the kubelet's
    # SIGKILL (terminationGracePeriodSeconds counts the preStop sleep too).
    assert last_done <= shutdown_timeout, last_done
    assert exited <= grace - pre_stop, f"still running {exited:.0f}s after SIGTERM:\n{server.tail()}"
    assert grace == pre_stop + shutdown_timeout + DRAIN_MARGIN_SECONDS


def _wait_for(check: Callable[[], bool], timeout: float) -> None:
    deadline = time.monotonic() + timeout
    while not check():
        assert time.monotonic() < deadline, "the load did not build up"
        time.sleep(0.05)


def _late_request(port: int) -> str:
    """What a request sent after SIGTERM gets (endpoints stop routing to the pod during preStop, so this is
    only recorded: vLLM may refuse it or still serve it)."""
    conn = http.client.HTTPConnection("127.0.0.1", port, timeout=30)
    try:
        conn.request("POST", "/v1/completions", json.dumps(
            {"model": "qwen-tiny", "prompt": "late", "max_tokens": 4, "ignore_eos": True}),
            {"Content-Type": "application/json"})
        return str(conn.getresponse().status)
    except Exception as err:  # recorded, not asserted
        return type(err).__name__
    finally:
        conn.close()
