"""The Event sender: ordered, bounded, never fatal, flushed on stop."""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Mapping
from typing import Any

import pytest

from qwen_fleet.reconcile.events import EventSender


def _obj(name: str) -> dict[str, Any]:
    return {"kind": "QwenInference", "metadata": {"name": name, "namespace": "ns"}}


def test_events_are_posted_in_order_and_flushed_on_stop() -> None:
    posted: list[str] = []

    async def post(obj: Mapping[str, Any], type_: str, reason: str, message: str) -> None:
        await asyncio.sleep(0)
        posted.append(f"{obj['metadata']['name']}:{reason}")

    async def main() -> None:
        sender = EventSender(post, senders=1)
        sender.start()
        for i in range(50):
            sender.emit(_obj(f"r{i}"), "Normal", "Applied", "m")
        await sender.stop()

    asyncio.run(main())
    assert posted == [f"r{i}:Applied" for i in range(50)]


def test_a_failed_post_is_logged_and_the_sender_goes_on(caplog: pytest.LogCaptureFixture) -> None:
    posted: list[str] = []

    async def post(obj: Mapping[str, Any], type_: str, reason: str, message: str) -> None:
        if reason == "Bad":
            raise RuntimeError("403 forbidden")
        posted.append(reason)

    async def main() -> None:
        sender = EventSender(post)
        sender.start()
        sender.emit(_obj("a"), "Warning", "Bad", "m")
        sender.emit(_obj("a"), "Normal", "Ready", "m")
        await sender.stop()

    with caplog.at_level(logging.WARNING):
        asyncio.run(main())
    assert posted == ["Ready"]
    assert "could not post an Event (Bad a): 403 forbidden" in caplog.text


def test_a_full_queue_drops_events_instead_of_blocking_a_reconcile(caplog: pytest.LogCaptureFixture) -> None:
    release = asyncio.Event()
    posted: list[str] = []

    async def post(obj: Mapping[str, Any], type_: str, reason: str, message: str) -> None:
        await release.wait()
        posted.append(obj["metadata"]["name"])

    async def main() -> int:
        sender = EventSender(post, senders=1, capacity=3)
        sender.start()
        await asyncio.sleep(0)
        for i in range(10):  # emit never awaits: a reconcile cannot be held up by Events
            sender.emit(_obj(f"r{i}"), "Normal", "Applied", "m")
        await asyncio.sleep(0)
        release.set()
        await sender.stop()
        return sender.dropped

    with caplog.at_level(logging.WARNING):
        dropped = asyncio.run(main())
    assert len(posted) + dropped == 10
    assert dropped >= 6
    assert "Event queue full" in caplog.text
