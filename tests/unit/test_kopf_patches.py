"""kopf's index pre-population gate, patched: same behaviour, wake-ups only when the overall state changes.

The figure asserted is a count of checks of the set's state, not a time: without the patch, N objects that
each add and drop a toggle while the earlier ones wait cost about N^2/2 checks; with it, a few per object.
"""

from __future__ import annotations

import asyncio
from collections.abc import Iterable

import pytest
from kopf._cogs.aiokits import aiotoggles

from qwen_fleet.reconcile import adapter as kopf_patches

N = 300


def _startup(n: int) -> tuple[int, int]:
    """Mimic kopf's start-up: every listed object makes a toggle, drops it once indexed, then waits for all
    objects and kinds to be indexed. Returns (checks of the set's state, objects released)."""
    checks = 0

    def counting_all(states: Iterable[bool]) -> bool:
        nonlocal checks
        checks += 1
        return all(states)

    async def main() -> int:
        gate = aiotoggles.ToggleSet(counting_all)
        kind = await gate.make_toggle(name="the resource kind's listing")
        released = 0

        async def obj(i: int) -> None:
            nonlocal released
            toggle = await gate.make_toggle(name=f"object {i}")
            await asyncio.sleep(0)  # indexing
            await gate.drop_toggle(toggle)
            await gate.wait_for(True)
            released += 1

        tasks = []
        for i in range(n):
            tasks.append(asyncio.create_task(obj(i)))
            await asyncio.sleep(0)  # objects arrive one by one from the listing
        await asyncio.sleep(0.01)
        assert released == 0, "released before the listing was over"
        await gate.drop_toggle(kind)  # the listing is over
        await asyncio.wait_for(asyncio.gather(*tasks), 10)
        return released

    released = asyncio.run(main())
    return checks, released


@pytest.fixture
def unpatched() -> Iterable[None]:
    saved = {name: getattr(aiotoggles.ToggleSet, name) for name in ("make_toggle", "drop_toggle", "drop_toggles")}
    for name, fn in kopf_patches.ORIGINAL.items():
        setattr(aiotoggles.ToggleSet, name, fn)
    yield
    for name, fn in saved.items():
        setattr(aiotoggles.ToggleSet, name, fn)


def test_patched_gate_releases_every_object_after_the_listing_with_linear_checks() -> None:
    kopf_patches.apply_patches()
    checks, released = _startup(N)
    assert released == N
    assert checks < 10 * N, checks


def test_kopfs_own_gate_is_quadratic(unpatched: None) -> None:
    """The reason for the patch, measured on kopf's own methods (same scenario, same count)."""
    checks, released = _startup(N)
    assert released == N
    assert checks > N * N / 4, checks
