"""`qwen-fleet batch-run` against the real vLLM CPU engine (the suite's shared tiny-Qwen2 server, which schedules
by priority as the operator renders it): 1,000 requests, the runner killed with SIGKILL midway and run again.
Every line ends with exactly one answer: no custom_id twice, nothing written before the kill lost.

The runner runs as its own process, as in its Job: `python -m qwen_fleet.cli batch-run ...`.
"""

from __future__ import annotations

import json
import signal
import subprocess
import sys
from collections import Counter
from pathlib import Path

import pytest

from tests.support.kube import wait_until
from tests.support.serving import NAME, RenderedServer

pytestmark = pytest.mark.vllm
REQUESTS = 1000
MAX_TOKENS = 8  # short answers: the point is the bookkeeping, not the engine's speed


def _input(path: Path) -> Path:
    lines = [json.dumps({"custom_id": f"req-{i:04d}", "method": "POST", "url": "/v1/chat/completions",
                         "body": {"model": NAME, "max_tokens": MAX_TOKENS, "temperature": 0,
                                  "messages": [{"role": "user", "content": f"Count to {i % 17}."}]}})
             for i in range(REQUESTS)]
    path.write_text("\n".join(lines) + "\n")
    return path


def _runner(src: Path, out: Path, endpoint: str, log: Path) -> subprocess.Popen[bytes]:
    return subprocess.Popen([sys.executable, "-m", "qwen_fleet.cli", "batch-run", "--input", str(src),
                             "--output-dir", str(out), "--endpoint", endpoint, "--concurrency", "8",
                             "--priority", "10", "--max-retries", "3"],
                            stdout=log.open("ab"), stderr=subprocess.STDOUT)


def _lines(path: Path) -> list[str]:
    return path.read_text().splitlines() if path.exists() else []


def test_a_killed_runner_resumes_without_duplicates_or_losses(tiny_vllm: RenderedServer, tmp_path: Path) -> None:
    src, out, log = _input(tmp_path / "input.jsonl"), tmp_path / "out", tmp_path / "runner.log"
    first = _runner(src, out, tiny_vllm.base_url, log)
    try:
        wait_until("a third of the answers", lambda: len(_lines(out / "output.jsonl")) >= REQUESTS // 3, 1800,
                   interval=1.0)
    finally:
        first.send_signal(signal.SIGKILL)
        first.wait(30)
    before = (out / "output.jsonl").read_bytes()
    whole_before = before[: before.rfind(b"\n") + 1]  # a line torn by the kill is no answer
    assert len(whole_before.splitlines()) < REQUESTS, "the runner finished before it was killed"

    second = _runner(src, out, tiny_vllm.base_url, log)
    assert second.wait(3600) == 0, log.read_text()[-4000:]

    records = [json.loads(line) for line in _lines(out / "output.jsonl")]
    ids = Counter(r["custom_id"] for r in records)
    duplicates = {cid: n for cid, n in ids.items() if n > 1}
    print(f"answers before the kill: {len(whole_before.splitlines())}; after the rerun: {len(records)}; "
          f"duplicates: {len(duplicates)}")
    assert duplicates == {}
    assert len(records) == REQUESTS and set(ids) == {f"req-{i:04d}" for i in range(REQUESTS)}
    assert _lines(out / "errors.jsonl") == []
    assert (out / "output.jsonl").read_bytes().startswith(whole_before)  # nothing written before the kill lost
    for record in records:
        assert record["error"] is None and record["response"]["status_code"] == 200
        assert record["response"]["body"]["usage"]["completion_tokens"] <= MAX_TOKENS
