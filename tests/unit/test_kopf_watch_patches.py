"""kopf's watch stream and watcher, patched so that a CRD deleted under the running operator does not stop it
(reconcile/adapter.py, fix 2). The end-to-end case is tests/integration/test_routing.py, which deletes the Inference
Extension's CRDs under a running operator that watches them; these check the two pieces on their own."""

from __future__ import annotations

import asyncio
import logging
from collections.abc import AsyncIterator
from typing import Any

import pytest
from kopf._cogs.aiokits import aiotoggles
from kopf._cogs.clients import errors

from qwen_fleet.reconcile import adapter as kopf_patches


def _not_found() -> errors.APINotFoundError:
    return errors.APINotFoundError("404 page not found", status=404, headers={})


def _collect(n: int) -> list[Any]:
    async def main() -> list[Any]:
        out = []
        async for event in kopf_patches._infinite_watch(resource="inferencepools.v1", namespace=None):
            out.append(event)
            if len(out) == n:
                break
        return out
    return asyncio.run(asyncio.wait_for(main(), 10))


def test_a_kind_that_answers_404_is_watched_again_and_its_events_come_through(
        monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture) -> None:
    calls: list[dict[str, Any]] = []
    script = ["404", "404", ["a", "b"], "404", ["c"]]  # gone twice, back, gone again, back

    async def original(**kwargs: Any) -> AsyncIterator[str]:
        calls.append(kwargs)
        step = script.pop(0)
        if step == "404":
            raise _not_found()
        for event in step:
            yield event
        raise _not_found()  # the stream of a kind whose CRD went away ends in a 404 on the next watch

    monkeypatch.setattr(kopf_patches, "ORIGINAL_INFINITE_WATCH", original)
    monkeypatch.setattr(kopf_patches, "NOT_SERVED_BACKOFF", (0.001, 0.004))
    with caplog.at_level(logging.WARNING, logger=kopf_patches.__name__):
        assert _collect(3) == ["a", "b", "c"]
    assert len(calls) == 5 and all(c == {"resource": "inferencepools.v1", "namespace": None} for c in calls)
    warnings = [r.getMessage() for r in caplog.records]
    assert len(warnings) == 2, warnings  # once per time the kind went away, not once per retry
    assert all("inferencepools.v1 is not served" in w for w in warnings)


def test_other_watch_errors_still_fail(monkeypatch: pytest.MonkeyPatch) -> None:
    async def original(**_: Any) -> AsyncIterator[str]:
        raise errors.APIForbiddenError("forbidden", status=403, headers={})
        yield "never"

    monkeypatch.setattr(kopf_patches, "ORIGINAL_INFINITE_WATCH", original)
    with pytest.raises(errors.APIForbiddenError):
        _collect(1)


@pytest.mark.parametrize("ending", ["fails", "is cancelled"])
def test_a_watcher_that_ends_before_its_listing_releases_the_index_gate(
        monkeypatch: pytest.MonkeyPatch, ending: str) -> None:
    async def original(**_: Any) -> None:
        if ending == "fails":
            raise RuntimeError("the watch failed before the listing was over")
        await asyncio.sleep(3600)

    async def main() -> tuple[bool, bool]:
        gate = aiotoggles.ToggleSet(all)
        other = await gate.make_toggle(name="another kind, listed later")
        mine = await gate.make_toggle(name="this kind, never listed")
        task = asyncio.create_task(kopf_patches._watcher(operator_indexed=gate, resource_indexed=mine))
        await asyncio.sleep(0.01)
        if ending == "is cancelled":
            task.cancel()
        await asyncio.gather(task, return_exceptions=True)
        held_by_other = not gate.is_on()
        await gate.drop_toggle(other)
        return held_by_other, gate.is_on()

    monkeypatch.setattr(kopf_patches, "ORIGINAL_WATCHER", original)
    held_by_other, released = asyncio.run(main())
    assert held_by_other  # only its own toggle goes
    assert released


def test_apply_puts_both_in_kopf_where_kopf_looks_them_up() -> None:
    from kopf._cogs.clients import watching
    from kopf._core.reactor import queueing

    kopf_patches.apply_patches()
    assert watching.infinite_watch is kopf_patches._infinite_watch
    assert queueing.watcher is kopf_patches._watcher
