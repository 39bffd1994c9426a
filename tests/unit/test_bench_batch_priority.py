"""bench/batch_priority.py's wiring, against a loopback server written here (the real engine is the bench's own
run, `make bench-batch`): the batch goes out through the rendered Job's runner with the spec's priority and
concurrency, the interactive client streams without a priority beside it, and the figures count what was sent."""

from __future__ import annotations

import json
import threading
import time
from collections.abc import Iterator
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any

import pytest
from bench.batch_priority import batch_phase, ttft_summary, write_input

from qwen_fleet_dev.cluster import free_port

# Batch answers wait until this many interactive requests arrived after the batch's first one: so some were
# surely sent while the batch ran, however slowly the processes start.
STREAMS_DURING_BATCH = 2


@dataclass
class FakeServer:
    """Chat completions like vLLM's: streamed (a role chunk, a token, [DONE]) or whole, with usage."""

    batch: list[dict[str, Any]] = field(default_factory=list)
    streamed: list[dict[str, Any]] = field(default_factory=list)
    cond: threading.Condition = field(default_factory=threading.Condition)
    streams_before_batch: int | None = None
    base_url: str = ""

    def handler(self) -> type[BaseHTTPRequestHandler]:
        server = self

        class Handler(BaseHTTPRequestHandler):
            def log_message(self, *_: Any) -> None:
                pass

            def do_POST(self) -> None:
                body = json.loads(self.rfile.read(int(self.headers["Content-Length"])))
                if body.get("stream"):
                    with server.cond:
                        server.streamed.append(body)
                        server.cond.notify_all()
                    self.send_response(200)
                    self.send_header("Content-Type", "text/event-stream")
                    self.send_header("Connection", "close")
                    self.end_headers()
                    for delta in ({"role": "assistant", "content": ""}, {"content": "hi"}):
                        self.wfile.write(f"data: {json.dumps({'choices': [{'delta': delta}]})}\n\n".encode())
                    self.wfile.write(b"data: [DONE]\n\n")
                    self.close_connection = True
                    return
                with server.cond:
                    server.batch.append(body)
                    if server.streams_before_batch is None:
                        server.streams_before_batch = len(server.streamed)
                    before = server.streams_before_batch
                    server.cond.wait_for(lambda: len(server.streamed) - before >= STREAMS_DURING_BATCH, timeout=30)
                raw = json.dumps({"id": "c", "choices": [],
                                  "usage": {"prompt_tokens": 9, "completion_tokens": body["max_tokens"]}}).encode()
                self.send_response(200)
                self.send_header("Content-Type", "application/json")
                self.send_header("Content-Length", str(len(raw)))
                self.end_headers()
                self.wfile.write(raw)

        return Handler


@pytest.fixture
def server() -> Iterator[FakeServer]:
    fake = FakeServer()
    http = ThreadingHTTPServer(("127.0.0.1", free_port()), fake.handler())
    fake.base_url = f"http://127.0.0.1:{http.server_address[1]}"
    thread = threading.Thread(target=http.serve_forever, daemon=True)
    thread.start()
    yield fake
    http.shutdown()


@pytest.mark.parametrize(("priority", "concurrency", "sent_priority", "sent_concurrency"),
                         [(None, None, 10, "4"), (0, 32, 0, "32")])
def test_a_batch_phase_sends_every_line_at_the_specs_priority_beside_unprioritized_streams(
        server: FakeServer, tmp_path: Path, priority: int | None, concurrency: int | None, sent_priority: int,
        sent_concurrency: str) -> None:
    write_input(tmp_path / "input.jsonl", 12)
    began = time.time()
    phase = batch_phase(server.base_url, tmp_path / "phase", tmp_path / "input.jsonl", priority, concurrency)
    batch = phase["batch"]
    assert (batch["exit_code"], batch["completed"], batch["failed"]) == (0, 12, 0)
    assert (batch["priority"], batch["concurrency"]) == (str(sent_priority), sent_concurrency)
    assert "--batch" not in batch["argv"] and batch["argv"][batch["argv"].index("--endpoint") + 1] == server.base_url
    assert len(server.batch) == 12 and {b["priority"] for b in server.batch} == {sent_priority}
    assert server.streamed and all("priority" not in b for b in server.streamed)
    interactive = phase["interactive"]  # only requests started during the batch count
    assert 1 <= interactive["n"] <= len(server.streamed) and interactive["failed"] == 0
    assert 0 < interactive["p50_s"] <= interactive["p99_s"] < time.time() - began


def test_ttft_summary_percentiles_worked_out_by_hand() -> None:
    requests: list[dict[str, Any]] = [{"start": 0, "ttft": t / 10, "error": None} for t in range(1, 11)]
    requests.append({"start": 0, "ttft": None, "error": "URLError: refused"})
    out = ttft_summary(requests)
    # median of 0.1..1.0 is 0.55; the inclusive 99th percentile sits at rank 0.99 * 9 = 8.91: 0.9 + 0.91 * 0.1
    assert out == {"n": 11, "failed": 1, "p50_s": 0.55, "p99_s": 0.991, "max_s": 1.0, "errors": ["URLError: refused"]}
