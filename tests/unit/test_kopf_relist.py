"""kopf's watch stream, patched so that an object missing from a relist is reported as deleted (kopf_patches.py,
fix 3). The end-to-end case is tests/chaos/test_relist.py (a QwenInference and a child deleted while the operator's
watches are down, on the real control plane); these check the tracker and the stream on their own."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator
from typing import Any

import pytest
from kopf._cogs.clients import watching

from qwen_fleet.reconcile import adapter as kopf_patches
from qwen_fleet.reconcile.adapter import RelistTracker

LISTED = watching.Bookmark.LISTED


def obj(uid: str, rv: str = "1", **labels: str) -> dict[str, Any]:
    return {"apiVersion": "v1", "kind": "Service",
            "metadata": {"name": f"n-{uid}", "namespace": "ns", "uid": uid, "resourceVersion": rv,
                         "labels": labels, "annotations": {"big": "x" * 100}},
            "spec": {"ports": [{"port": 80}]}}


def listed(uid: str, rv: str = "1") -> dict[str, Any]:
    return {"type": None, "object": obj(uid, rv)}


def watched(kind: str, uid: str, rv: str = "2") -> dict[str, Any]:
    return {"type": kind, "object": obj(uid, rv)}


def deleted_uids(out: list[dict[str, Any]]) -> list[str]:
    assert all(e["type"] == "DELETED" for e in out), out
    return sorted(e["object"]["metadata"]["uid"] for e in out)


def feed_all(tracker: RelistTracker, events: list[Any]) -> list[str]:
    """The uids reported deleted over the whole script."""
    out: list[dict[str, Any]] = []
    for event in events:
        out += tracker.feed(event)
    return deleted_uids(out)


CASES: dict[str, tuple[list[Any], list[str]]] = {
    "the first listing reports nothing": ([listed("a"), listed("b"), LISTED], []),
    "a relist without an object reports it deleted": (
        [listed("a"), listed("b"), LISTED, listed("b"), LISTED], ["a"]),
    "an object added by the watch and gone at the relist is reported": (
        [listed("a"), LISTED, watched("ADDED", "c"), listed("a"), LISTED], ["c"]),
    "an object the watch saw deleted is not reported again": (
        [listed("a"), listed("b"), LISTED, watched("DELETED", "b"), listed("a"), LISTED], []),
    "an empty relist reports every known object": ([listed("a"), listed("b"), LISTED, LISTED], ["a", "b"]),
    "a reported object is reported once, not at every later relist": (
        [listed("a"), LISTED, LISTED, LISTED], ["a"]),
    "an object back under the same uid in a later listing counts again": (
        [listed("a"), LISTED, listed("a"), LISTED, LISTED], ["a"]),
    "BOOKMARK events and bodies without a uid change nothing": (
        [listed("a"), LISTED, {"type": "BOOKMARK", "object": {"metadata": {"resourceVersion": "9"}}},
         {"type": None, "object": {"metadata": {"name": "no-uid"}}}, listed("a"), LISTED], []),
}


@pytest.mark.parametrize("case", CASES)
def test_relist_table(case: str) -> None:
    events, expected = CASES[case]
    assert feed_all(RelistTracker(), events) == expected


def test_the_synthetic_deletion_carries_the_identity_handlers_read_and_not_the_body() -> None:
    tracker = RelistTracker()
    tracker.feed(listed("a"))
    tracker.feed(LISTED)
    tracker.feed({"type": "MODIFIED", "object": {**obj("a", "7", app="x"),
                                                 "metadata": {**obj("a", "7", app="x")["metadata"],
                                                              "ownerReferences": [{"uid": "owner"}]}}})
    [gone] = tracker.feed(LISTED)
    assert gone == {"type": "DELETED", "object": {
        "apiVersion": "v1", "kind": "Service",
        "metadata": {"name": "n-a", "namespace": "ns", "uid": "a", "labels": {"app": "x"},
                     "ownerReferences": [{"uid": "owner"}], "resourceVersion": "7"}}}


def test_the_patched_stream_yields_the_deletions_before_the_end_of_the_relist(monkeypatch: pytest.MonkeyPatch) -> None:
    script = [listed("a"), listed("b"), LISTED, watched("MODIFIED", "a", "3"), listed("a", "5"), LISTED,
              watched("ADDED", "c", "6")]

    async def original(**_: Any) -> AsyncIterator[Any]:
        for event in script:
            yield event

    async def main() -> list[Any]:
        out = []
        async for event in kopf_patches._infinite_watch(resource="services.v1", namespace=None):
            out.append(event)
            if len(out) == len(script) + 1:
                break
        return out

    monkeypatch.setattr(kopf_patches, "ORIGINAL_INFINITE_WATCH", original)
    out = asyncio.run(asyncio.wait_for(main(), 10))
    # Everything kopf yielded, in its order, and one DELETED for b just before the second end of a listing.
    assert out[:5] == script[:5]
    assert out[5]["type"] == "DELETED" and out[5]["object"]["metadata"]["uid"] == "b"
    assert out[6:] == script[5:]
