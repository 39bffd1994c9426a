"""Events go out behind the reconciles, never in their way.

A burst of new resources makes two Events each (Applied, Ready). Posted as free-running tasks they took API
client threads and apiserver time from the applies and status writes that make fleets Ready. Here they wait in
one bounded queue and a couple of senders post them in order, like client-go's event broadcaster. An Event
that cannot be posted, or that finds the queue full, is logged and dropped: Events are for people, the status
is the record.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
from collections.abc import Awaitable, Callable, Mapping
from typing import Any

from qwen_fleet.reconcile.kube import KubeError

log = logging.getLogger(__name__)

Post = Callable[[Mapping[str, Any], str, str, str], Awaitable[None]]


class EventSender:
    def __init__(self, post: Post, senders: int = 2, capacity: int = 10_000) -> None:
        self._post = post
        self._queue: asyncio.Queue[tuple[Mapping[str, Any], str, str, str]] = asyncio.Queue(capacity)
        self._senders = senders
        self._tasks: list[asyncio.Task[None]] = []
        self.dropped = 0

    def start(self) -> None:
        self._tasks = [asyncio.create_task(self._run(), name=f"qwen-fleet-events-{i}")
                       for i in range(self._senders)]

    def emit(self, obj: Mapping[str, Any], type_: str, reason: str, message: str) -> None:
        try:
            self._queue.put_nowait((obj, type_, reason, message))
        except asyncio.QueueFull:
            self.dropped += 1
            if self.dropped == 1 or self.dropped % 1000 == 0:
                log.warning("Event queue full: %d Events dropped so far (latest: %s %s)", self.dropped, reason,
                            obj.get("metadata", {}).get("name"))

    def __len__(self) -> int:
        return self._queue.qsize()

    async def _run(self) -> None:
        while True:
            event = await self._queue.get()
            try:
                await self._post(*event)
            except asyncio.CancelledError:
                raise
            except Exception as err:  # a lost Event is logged, never fatal
                # In a namespace being deleted, nothing can be created and no one will read it: not a warning.
                quiet = isinstance(err, KubeError) and err.namespace_terminating
                log.log(logging.DEBUG if quiet else logging.WARNING, "could not post an Event (%s %s): %s",
                        event[2], event[0].get("metadata", {}).get("name"), err)
            finally:
                self._queue.task_done()

    async def stop(self, flush_seconds: float = 2.0) -> None:
        """Post what is queued for up to ``flush_seconds``, then stop."""
        with contextlib.suppress(TimeoutError):
            await asyncio.wait_for(self._queue.join(), flush_seconds)
        for task in self._tasks:
            task.cancel()
        await asyncio.gather(*self._tasks, return_exceptions=True)
