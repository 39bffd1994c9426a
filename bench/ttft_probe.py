"""An interactive client in a process of its own: short streamed chat requests at a steady rate, each one's time
to first token (TTFT) recorded.

Why a process: on a 2-core machine, client threads inside the benchmark's own process share its GIL and CPU
share with whatever else it does (here: waiting on the batch runner, reading files), and a starved client
reports its own delays as the server's (docs/vllm-contract.md, "Metrics under load"; bench/burst.py).

Open loop: request i starts at ``i * interval`` seconds whatever the earlier ones are doing (each in a thread
of its own), as users arrive; a closed loop would send less while the server is slow and hide the delay.
Interactive requests carry no ``priority`` field: vLLM gives such requests 0, as a real chat client's are.

TTFT is the time from sending to the first streamed chunk that carries a choice. vLLM 0.32's chat stream
(``vllm/entrypoints/openai/chat_completion/serving.py``, ``chat_completion_stream_generator``) sends that
chunk (the role) on the first output of the engine, i.e. once the first token exists; with a byte-level tiny
tokenizer, waiting for non-empty ``content`` would add the time to complete a UTF-8 character instead.

``count`` > 0: send that many, then exit. ``count`` 0: send until stdin closes (or ``limit_s``). Either way the
requests in flight finish, then one JSON document goes to stdout: ``{"requests": [{"start", "ttft", "seconds",
"error"}, ...]}`` (``start`` is wall-clock time, so the parent can keep the requests sent during its batch).

Run alone: ``python bench/ttft_probe.py '{"url": "http://127.0.0.1:8000", "count": 10}'``.
"""

from __future__ import annotations

import json
import sys
import threading
import time
import urllib.request
from typing import Any

DEFAULTS: dict[str, Any] = {"model": "qwen-tiny", "count": 0, "interval": 0.5, "max_tokens": 16,
                            "prompt": "Say hello to the on-call engineer.", "limit_s": 900, "timeout": 300}


def one_request(config: dict[str, Any], i: int) -> dict[str, Any]:
    body = {"model": config["model"], "stream": True, "max_tokens": config["max_tokens"], "ignore_eos": True,
            "temperature": 0, "messages": [{"role": "user", "content": f"{config['prompt']} ({i})"}]}
    req = urllib.request.Request(config["url"] + "/v1/chat/completions", data=json.dumps(body).encode(),
                                 headers={"Content-Type": "application/json"})
    start_wall, start = time.time(), time.monotonic()
    ttft: float | None = None
    try:
        with urllib.request.urlopen(req, timeout=config["timeout"]) as resp:
            for raw in resp:
                line = raw.decode("utf-8", "replace").strip()
                if ttft is None and line.startswith("data:") and line != "data: [DONE]":
                    chunk = json.loads(line[len("data:"):])
                    if chunk.get("choices"):
                        ttft = time.monotonic() - start
    except (OSError, ValueError) as err:
        return {"start": start_wall, "ttft": ttft, "seconds": time.monotonic() - start,
                "error": f"{type(err).__name__}: {err}"[:200]}
    error = None if ttft is not None else "no chunk with a choice"
    return {"start": start_wall, "ttft": ttft, "seconds": time.monotonic() - start, "error": error}


def run(config: dict[str, Any], stop: threading.Event) -> list[dict[str, Any]]:
    results: list[dict[str, Any]] = []
    lock = threading.Lock()

    def send(i: int) -> None:
        record = one_request(config, i)
        with lock:
            results.append(record)

    threads: list[threading.Thread] = []
    began = time.monotonic()
    deadline = began + float(config["limit_s"])
    i = 0
    while not stop.is_set() and time.monotonic() < deadline and (config["count"] <= 0 or i < config["count"]):
        thread = threading.Thread(target=send, args=(i,), daemon=True)
        thread.start()
        threads.append(thread)
        i += 1
        stop.wait(max(0.0, began + i * float(config["interval"]) - time.monotonic()))  # on schedule, not after
    for thread in threads:
        thread.join(timeout=float(config["timeout"]) + 10)
    return sorted(results, key=lambda r: r["start"])


def main(argv: list[str]) -> int:
    config = {**DEFAULTS, **json.loads(argv[1])}
    stop = threading.Event()
    if config["count"] <= 0:
        def until_stdin_closes() -> None:
            sys.stdin.read()  # EOF: the parent asked us to stop, or is gone
            stop.set()

        threading.Thread(target=until_stdin_closes, daemon=True).start()
    print(json.dumps({"requests": run(config, stop)}), flush=True)
    return 0


if __name__ == "__main__":
    try:
        sys.exit(main(sys.argv))
    except BrokenPipeError:  # the parent went away
        sys.exit(0)
