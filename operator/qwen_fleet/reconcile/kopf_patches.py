"""One fix to kopf (pinned to 1.45.x), applied when the operator starts.

kopf holds every handler until all indexes are populated from the initial listings. It does so with a set of
toggles, one per listed object, that shares one asyncio.Condition with every object's handler task; adding or
dropping a toggle wakes every waiting task (notify_all), and each then re-checks the whole set. At start-up
every listed object adds and drops a toggle while the tasks of the objects before it wait, so the work grows
with the square of the objects listed: a restart over 1000 resources (about 7000 objects with their
children and pods) spent about three minutes in it before the first reconcile.

Only the set's overall state (all on / not all on) is waited for, and adding or dropping a toggle cannot change
any single toggle's state, so waking the waiters is needed only when the overall state changes. The patched
methods do exactly the same to the set and notify only then.
"""

from __future__ import annotations

from collections.abc import Iterable

from kopf._cogs.aiokits import aiotoggles


async def _make_toggle(self: aiotoggles.ToggleSet, __val: bool = False, *, name: str | None = None
                       ) -> aiotoggles.Toggle:
    toggle = aiotoggles.Toggle(__val, name=name, condition=self._condition)
    async with self._condition:
        before = self.is_on()
        self._toggles.add(toggle)
        if self.is_on() != before:
            self._condition.notify_all()
    return toggle


async def _drop_toggle(self: aiotoggles.ToggleSet, toggle: aiotoggles.Toggle) -> None:
    async with self._condition:
        before = self.is_on()
        self._toggles.discard(toggle)
        if self.is_on() != before:
            self._condition.notify_all()


async def _drop_toggles(self: aiotoggles.ToggleSet, toggles: Iterable[aiotoggles.Toggle]) -> None:
    async with self._condition:
        before = self.is_on()
        self._toggles.difference_update(toggles)
        if self.is_on() != before:
            self._condition.notify_all()


ORIGINAL = {"make_toggle": aiotoggles.ToggleSet.make_toggle, "drop_toggle": aiotoggles.ToggleSet.drop_toggle,
            "drop_toggles": aiotoggles.ToggleSet.drop_toggles}


def apply() -> None:
    aiotoggles.ToggleSet.make_toggle = _make_toggle  # type: ignore[method-assign]
    aiotoggles.ToggleSet.drop_toggle = _drop_toggle  # type: ignore[method-assign]
    aiotoggles.ToggleSet.drop_toggles = _drop_toggles  # type: ignore[method-assign]
