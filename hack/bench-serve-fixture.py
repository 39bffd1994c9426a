"""Write tests/unit/fixtures/vllm-bench-serve-0.32.json: a result saved by a real ``vllm bench serve`` (vLLM 0.32,
the CPU engine venv) run through qwen_fleet.servebench.client, against a stand-in OpenAI completions server.

The stand-in streams one character per requested token and answers HTTP 500 to two requests, so the saved
JSON has the real client's field names and a non-zero ``failed`` count, without starting an engine. The
figures are the stand-in's, not an engine's; only the parsing tests use them.
Run: ``.venv/bin/python hack/bench-serve-fixture.py`` (about a minute: the client imports vLLM).
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import tempfile
import threading
import time
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
from tests.support.tiny_qwen import make_tiny_qwen2, vllm_python  # noqa: E402

from qwen_fleet.servebench.client import LAUNCHER, Workload, client_args  # noqa: E402

OUT = ROOT / "tests" / "unit" / "fixtures" / "vllm-bench-serve-0.32.json"
FAIL = {3, 7}  # completion requests (1 = the client's initial test request) answered with HTTP 500


class Completions(BaseHTTPRequestHandler):
    count = 0
    lock = threading.Lock()

    def log_message(self, *args: object) -> None:
        pass

    def do_POST(self) -> None:
        if self.path != "/v1/completions":  # e.g. vLLM's /tokenize, which the client then skips
            self.send_response(404)
            self.end_headers()
            return
        body = json.loads(self.rfile.read(int(self.headers["Content-Length"])))
        with Completions.lock:
            Completions.count += 1
            number = Completions.count
        if number in FAIL:
            self.send_response(500)
            self.end_headers()
            self.wfile.write(b'{"error": "stand-in failure"}')
            return
        self.send_response(200)
        self.send_header("Content-Type", "text/event-stream")
        self.end_headers()
        for _ in range(int(body["max_tokens"])):
            time.sleep(0.002)
            self.wfile.write(b'data: {"choices": [{"text": "a"}]}\n\n')
            self.wfile.flush()
        usage = {"usage": {"prompt_tokens": 16, "completion_tokens": int(body["max_tokens"])}}
        self.wfile.write(f"data: {json.dumps(usage)}\n\ndata: [DONE]\n\n".encode())


def main() -> int:
    server = ThreadingHTTPServer(("127.0.0.1", 0), Completions)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    python = vllm_python()
    with tempfile.TemporaryDirectory() as tmp:
        model = make_tiny_qwen2(Path(tmp) / "tiny", python)
        workload = Workload(input_len=16, output_len=8, num_prompts=12, max_concurrency=4)
        args = client_args(workload, f"http://127.0.0.1:{server.server_address[1]}", "qwen-tiny", str(model),
                           tmp, "result.json")
        env = {k: v for k, v in os.environ.items() if k not in ("PYTHONPATH", "VIRTUAL_ENV")}
        env |= {"HF_HUB_OFFLINE": "1", "TRANSFORMERS_OFFLINE": "1"}
        subprocess.run([python, "-c", LAUNCHER, *args], check=True, env=env, cwd=tmp, timeout=600)
        result = json.loads((Path(tmp) / "result.json").read_text())
    server.shutdown()
    OUT.parent.mkdir(parents=True, exist_ok=True)
    OUT.write_text(json.dumps(result, indent=1, sort_keys=True) + "\n")
    print(f"wrote {OUT}: completed {result['completed']}, failed {result['failed']}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
