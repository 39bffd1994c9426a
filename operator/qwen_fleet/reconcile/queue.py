"""A work queue of resource keys, as in client-go: each key is queued once however many events arrive,
never processed by two workers at once, and retried with per-key exponential backoff after a failure.

Every trigger (the resource changed, a child changed, the resync timer) only enqueues the key; a worker then
reconciles from the latest state. A burst of 50 events for one object costs one or two reconciles.
"""

from __future__ import annotations

import asyncio
from collections.abc import Hashable

Key = tuple[str, str]  # (namespace, name)


class WorkQueue:
    def __init__(self, base_delay: float = 1.0, max_delay: float = 300.0) -> None:
        self._queue: asyncio.Queue[Key] = asyncio.Queue()
        self._queued: set[Key] = set()
        self._active: set[Key] = set()
        self._again: set[Key] = set()  # changed while being processed: run once more afterwards
        self._failures: dict[Key, int] = {}
        self._timers: dict[Hashable, asyncio.TimerHandle] = {}
        self.base_delay = base_delay
        self.max_delay = max_delay

    def __len__(self) -> int:
        return len(self._queued)

    def add(self, key: Key) -> None:
        if key in self._active:
            self._again.add(key)
        elif key not in self._queued:
            self._queued.add(key)
            self._queue.put_nowait(key)

    def add_after(self, key: Key, delay: float) -> None:
        """Queue ``key`` after ``delay``; an earlier pending timer wins (a stream of events cannot starve it)."""
        pending = self._timers.get(key)
        loop = asyncio.get_running_loop()
        if pending is not None:
            if pending.when() <= loop.time() + delay:
                return
            pending.cancel()
        self._timers[key] = loop.call_later(delay, self._fire, key)

    def _fire(self, key: Key) -> None:
        self._timers.pop(key, None)
        self.add(key)

    async def get(self) -> Key:
        key = await self._queue.get()
        self._queued.discard(key)
        self._active.add(key)
        return key

    def done(self, key: Key) -> None:
        self._active.discard(key)
        if key in self._again:
            self._again.discard(key)
            self.add(key)

    def retry(self, key: Key) -> float:
        """Schedule ``key`` again after a failure; returns the delay (1 s, 2 s, 4 s ... at most 5 min)."""
        failures = self._failures.get(key, 0)
        self._failures[key] = failures + 1
        delay = min(self.base_delay * float(2**failures), self.max_delay)
        self.add_after(key, delay)
        return delay

    def forget(self, key: Key) -> None:
        """A success resets the key's backoff."""
        self._failures.pop(key, None)
