"""The work queue: one entry per key, never two workers on one key, exponential retry."""

from __future__ import annotations

import asyncio

from qwen_fleet.reconcile.queue import WorkQueue


def test_burst_of_adds_queues_a_key_once() -> None:
    async def main() -> None:
        q = WorkQueue()
        for _ in range(50):
            q.add(("ns", "a"))
        q.add(("ns", "b"))
        assert len(q) == 2
        assert await q.get() == ("ns", "a")
        assert await q.get() == ("ns", "b")

    asyncio.run(main())


def test_add_while_processing_runs_once_more_after_done() -> None:
    async def main() -> None:
        q = WorkQueue()
        q.add(("ns", "a"))
        key = await q.get()
        q.add(key)
        q.add(key)
        assert len(q) == 0  # not handed to a second worker while the first holds it
        q.done(key)
        assert len(q) == 1

    asyncio.run(main())


def test_retry_backs_off_exponentially_and_forget_resets() -> None:
    async def main() -> None:
        q = WorkQueue(base_delay=0.01, max_delay=0.04)
        key = ("ns", "a")
        assert [q.retry(key) for _ in range(4)] == [0.01, 0.02, 0.04, 0.04]
        q.forget(key)
        assert q.retry(key) == 0.01
        await asyncio.sleep(0.1)
        assert len(q) == 1

    asyncio.run(main())


def test_add_after_keeps_the_earliest_timer() -> None:
    async def main() -> None:
        q = WorkQueue()
        key = ("ns", "a")
        q.add_after(key, 0.05)
        for _ in range(20):  # a stream of later requests must not push the first one back
            q.add_after(key, 0.2)
            await asyncio.sleep(0.005)
        await asyncio.sleep(0.06)
        assert len(q) == 1

    asyncio.run(main())
