"""Peaks of the engine's scheduler gauges while a load from another process (bench/burst.py) keeps it busy.

The load runs until the wanted peaks have been seen (or a ceiling against hangs): on a loaded 2-core machine a
fixed-size batch of requests can finish between two answers of a busy engine's /metrics, so the test holds the
load on until the engine has been read with it, instead of hoping a poll lands in the right second.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from dataclasses import dataclass, field

from bench.burst import Burst

from tests.support.vllm_server import VllmServer

GAUGES = {"waiting": "vllm:num_requests_waiting", "running": "vllm:num_requests_running",
          "kv": "vllm:kv_cache_usage_perc"}


@dataclass
class Peaks:
    waiting: float = 0.0
    running: float = 0.0
    kv: float = 0.0
    reads: int = 0
    seconds: float = 0.0
    done: int = 0
    failed: int = 0
    errors: list[str] = field(default_factory=list)


def peaks_under_load(server: VllmServer, clients: int, max_tokens: int, want: Callable[[Peaks], bool],
                     model: str = "qwen-tiny", timeout: float = 180) -> Peaks:
    peaks = Peaks()
    start = time.monotonic()
    burst = Burst(server.base_url, clients, max_tokens=max_tokens, model=model, limit_s=timeout + 60).start()
    try:
        while time.monotonic() - start < timeout and not (peaks.reads and want(peaks)):
            metrics = server.metrics()
            peaks.reads += 1
            for key, name in GAUGES.items():
                setattr(peaks, key, max(getattr(peaks, key), metrics.get(name, 0.0)))
            time.sleep(0.05)
    finally:
        burst.stop()
    peaks.seconds = round(time.monotonic() - start, 1)
    peaks.done, peaks.failed, peaks.errors = burst.done, burst.failed, burst.errors
    return peaks
