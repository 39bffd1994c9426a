"""Steady load for the real-node fleet tests and bench/real_fleet.py (the fleet itself: devcluster/local_fleet.py)."""

from __future__ import annotations

import threading
import time

from qwen_fleet_dev.local_fleet import chat


class SteadyLoad:
    """``workers`` threads sending chat completions back to back through one URL; every outcome is counted.
    A failure is anything but an answer: a refused or reset connection, a timeout, an HTTP error."""

    def __init__(self, url: str, model: str, workers: int = 2) -> None:
        self.url, self.model = url, model
        self.ok = 0
        self.failures: list[str] = []
        self._stop = threading.Event()
        self._lock = threading.Lock()
        self._threads = [threading.Thread(target=self._run, daemon=True) for _ in range(workers)]

    def _run(self) -> None:
        while not self._stop.is_set():
            try:
                chat(self.url, self.model, max_tokens=2, timeout=60)
            except (OSError, ValueError) as exc:
                with self._lock:
                    self.failures.append(f"{time.strftime('%H:%M:%S')} {type(exc).__name__}: {exc}")
                time.sleep(0.2)
            else:
                with self._lock:
                    self.ok += 1

    def __enter__(self) -> SteadyLoad:
        for thread in self._threads:
            thread.start()
        return self

    def __exit__(self, *_: object) -> None:
        self._stop.set()
        for thread in self._threads:
            thread.join(timeout=90)
