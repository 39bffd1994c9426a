"""Load from a process of its own: ``clients`` concurrent completions against a vLLM server, back to back.

Why a process: on a 2-core machine whose other cores are busy (the full suite's cluster, Prometheus, the
operator), client threads inside the test process share its GIL and its CPU share with the test's own
samplers, and were measured starving: the engine's queue emptied for seconds in the middle of a burst because
nobody was sending (docs/vllm-contract.md, "Metrics under load"). A child process is scheduled on its own and
keeps the queue full whatever the parent is doing.

The parent sees counts (``done``, ``failed``, ``in_flight``) streamed back once a second as JSON lines; closing
the child's stdin (or the parent dying) stops new requests, the child lets the ones in flight finish, prints
its final counts and exits.

Run alone: ``python bench/burst.py '{"url": "http://127.0.0.1:8000", "clients": 8, "max_tokens": 64}'``.
"""

from __future__ import annotations

import contextlib
import json
import subprocess
import sys
import threading
import time
import urllib.request
from typing import Any

DEFAULT_PROMPT = "The fleet " * 16


class Burst:
    """``clients`` requests kept in flight from a child process until :meth:`stop` (bounded by ``limit_s``)."""

    def __init__(self, base_url: str, clients: int, max_tokens: int = 128, limit_s: float = 300,
                 model: str = "qwen-tiny", prompt: str = DEFAULT_PROMPT, stream: bool = False) -> None:
        self.config = {"url": base_url, "clients": clients, "max_tokens": max_tokens, "limit_s": limit_s,
                       "model": model, "prompt": prompt, "stream": stream}
        self.clients = clients
        self.done = 0
        self.failed = 0
        self.in_flight = 0
        self.errors: list[str] = []
        self._proc: subprocess.Popen[str] | None = None
        self._reader: threading.Thread | None = None

    def start(self) -> Burst:
        self._proc = subprocess.Popen([sys.executable, __file__, json.dumps(self.config)], stdin=subprocess.PIPE,
                                      stdout=subprocess.PIPE, text=True, bufsize=1)
        self._reader = threading.Thread(target=self._read, daemon=True)
        self._reader.start()
        return self

    def alive(self) -> bool:
        """Whether the child still runs: it stops by itself at ``limit_s``, sending nothing from then on."""
        return self._proc is not None and self._proc.poll() is None

    def _read(self) -> None:
        assert self._proc is not None and self._proc.stdout is not None
        for line in self._proc.stdout:
            try:
                counts = json.loads(line)
            except ValueError:
                continue
            self.done, self.failed, self.in_flight = counts["done"], counts["failed"], counts["in_flight"]
            self.errors = counts.get("errors", self.errors)

    def stop(self, timeout: float = 150) -> None:
        """Stop sending; wait for the requests in flight (the child's final counts), then for the child."""
        proc = self._proc
        if proc is None:
            return
        if proc.stdin is not None and not proc.stdin.closed:
            with contextlib.suppress(OSError):
                proc.stdin.close()
        try:
            proc.wait(timeout=timeout)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()
        if self._reader is not None:
            self._reader.join(timeout=10)
        self._proc = None

    def __enter__(self) -> Burst:
        return self.start()

    def __exit__(self, *_: object) -> None:
        self.stop()


# --- the child --------------------------------------------------------------------------------------------------

class _Counts:
    def __init__(self) -> None:
        self.lock = threading.Lock()
        self.done = self.failed = self.in_flight = 0
        self.errors: list[str] = []

    def line(self) -> str:
        with self.lock:
            return json.dumps({"done": self.done, "failed": self.failed, "in_flight": self.in_flight,
                               "errors": self.errors[-5:]})


def _client(config: dict[str, Any], counts: _Counts, stop: threading.Event, deadline: float) -> None:
    body: dict[str, Any] = {"model": config["model"], "prompt": config["prompt"],
                            "max_tokens": config["max_tokens"], "ignore_eos": True, "temperature": 0}
    if config["stream"]:
        body["stream"] = True
    data = json.dumps(body).encode()
    while not stop.is_set() and time.monotonic() < deadline:
        req = urllib.request.Request(config["url"] + "/v1/completions", data=data,
                                     headers={"Content-Type": "application/json"})
        with counts.lock:
            counts.in_flight += 1
        error = None
        try:
            with urllib.request.urlopen(req, timeout=300) as resp:
                resp.read()
        except OSError as err:
            error = f"{type(err).__name__}: {err}"[:200]
        with counts.lock:
            counts.in_flight -= 1
            if error is None:
                counts.done += 1
            else:
                counts.failed += 1
                counts.errors.append(error)


def main(argv: list[str]) -> int:
    config = json.loads(argv[1])
    counts, stop = _Counts(), threading.Event()
    deadline = time.monotonic() + float(config["limit_s"])
    threads = [threading.Thread(target=_client, args=(config, counts, stop, deadline), daemon=True)
               for _ in range(int(config["clients"]))]
    for t in threads:
        t.start()

    def until_stdin_closes() -> None:
        sys.stdin.read()  # EOF: the parent asked us to stop, or is gone
        stop.set()

    threading.Thread(target=until_stdin_closes, daemon=True).start()
    while not stop.is_set() and time.monotonic() < deadline:
        print(counts.line(), flush=True)
        stop.wait(1.0)
    for t in threads:  # the requests in flight finish
        t.join(timeout=300)
    print(counts.line(), flush=True)
    return 0


if __name__ == "__main__":
    try:
        sys.exit(main(sys.argv))
    except BrokenPipeError:  # the parent went away
        sys.exit(0)
