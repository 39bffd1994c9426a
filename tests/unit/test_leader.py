"""Leader election on a Lease (reconcile/leader.py) against an in-memory Lease API with the apiserver's
optimistic concurrency (a write with a stale resourceVersion gets 409) and a clock the test moves."""

from __future__ import annotations

import asyncio
import copy
from typing import Any

import pytest

from qwen_fleet.reconcile.kube import KubeError
from qwen_fleet.reconcile.leader import LeaderElector, LeaseTimings, claimed, holder

PATH = "/apis/coordination.k8s.io/v1/namespaces/ops/leases"
TIMINGS = LeaseTimings(duration=15, renew_deadline=10, retry_period=2)


class FakeLeases:
    def __init__(self) -> None:
        self.lease: dict[str, Any] | None = None
        self.version = 0
        self.writes: list[tuple[str, str]] = []  # (method, holder written)
        self.down = False

    async def request(self, method: str, path: str, query: Any = None, body: Any = None,
                      content_type: str | None = None) -> Any:
        await asyncio.sleep(0)  # a round trip: concurrent candidates interleave here
        if self.down:
            raise KubeError(0, "ConnectionError", "refused")
        if method == "GET":
            if self.lease is None:
                raise KubeError(404, "NotFound", "leases not found")
            return copy.deepcopy(self.lease)
        if method == "POST" and self.lease is not None:
            raise KubeError(409, "AlreadyExists", "exists")
        if method == "PUT" and (self.lease is None or
                                body["metadata"].get("resourceVersion") != self.lease["metadata"]["resourceVersion"]):
            raise KubeError(409, "Conflict", "the object has been modified")
        self.version += 1
        self.lease = copy.deepcopy(body)
        self.lease["metadata"]["resourceVersion"] = str(self.version)
        self.writes.append((method, holder(self.lease)))
        return copy.deepcopy(self.lease)


class Clock:
    def __init__(self) -> None:
        self.now = 1000.0

    def __call__(self) -> float:
        return self.now


def elector(api: FakeLeases, who: str, clock: Clock, timings: LeaseTimings = TIMINGS) -> LeaderElector:
    return LeaderElector(api, "qwen-fleet-operator", "ops", who, timings, clock=clock)


def run(coro: Any) -> Any:
    return asyncio.run(coro)


def test_the_first_candidate_creates_the_lease_and_the_second_waits() -> None:
    api, clock = FakeLeases(), Clock()
    a, b = elector(api, "a", clock), elector(api, "b", clock)
    assert run(a.try_acquire_or_renew())
    assert not run(b.try_acquire_or_renew())
    for _ in range(20):  # a renews every 2 s: b never sees the record stand still for 15 s
        clock.now += 2
        assert run(a.try_acquire_or_renew())
        assert not run(b.try_acquire_or_renew())
    assert holder(api.lease) == "a"
    assert api.lease is not None and api.lease["spec"]["leaseTransitions"] == 0


def test_a_standby_takes_over_one_lease_duration_after_the_last_renewal_it_saw() -> None:
    api, clock = FakeLeases(), Clock()
    a, b = elector(api, "a", clock), elector(api, "b", clock)
    assert run(a.try_acquire_or_renew())
    assert not run(b.try_acquire_or_renew())  # b sees a's record now; a then dies (no more renewals)
    clock.now += 14.9
    assert not run(b.try_acquire_or_renew())
    clock.now += 0.2
    assert run(b.try_acquire_or_renew())
    assert api.lease is not None
    assert (holder(api.lease), api.lease["spec"]["leaseTransitions"]) == ("b", 1)


def test_expiry_is_judged_by_the_candidates_own_clock_not_the_renew_time_written() -> None:
    """A holder whose clock is far behind writes old renewTimes; that alone must not make its Lease look
    expired to a candidate that keeps seeing the record change."""
    api, clock = FakeLeases(), Clock()
    a, b = elector(api, "a", clock), elector(api, "b", clock)
    run(a.try_acquire_or_renew())
    assert api.lease is not None
    api.lease["spec"]["renewTime"] = "2001-01-01T00:00:00.000000Z"
    assert not run(b.try_acquire_or_renew())


def test_two_candidates_racing_for_an_expired_lease_cannot_both_win() -> None:
    api, clock = FakeLeases(), Clock()
    a, b, c = elector(api, "a", clock), elector(api, "b", clock), elector(api, "c", clock)
    run(a.try_acquire_or_renew())
    run(b.try_acquire_or_renew())
    run(c.try_acquire_or_renew())
    clock.now += 16

    async def race() -> list[bool]:
        return list(await asyncio.gather(b.try_acquire_or_renew(), c.try_acquire_or_renew()))

    # Both read the same version before either writes: the second PUT is stale and refused (409).
    writes = len(api.writes)
    assert sorted(run(race())) == [False, True]
    assert holder(api.lease) in ("b", "c")
    assert len(api.writes) == writes + 1


def test_a_released_lease_is_taken_at_once() -> None:
    api, clock = FakeLeases(), Clock()
    a, b = elector(api, "a", clock), elector(api, "b", clock)
    run(a.try_acquire_or_renew())
    a.leading = True
    run(b.try_acquire_or_renew())
    run(a.release())
    assert holder(api.lease) == ""
    assert run(b.try_acquire_or_renew())


def test_claimed_keeps_acquire_time_on_renewal_and_counts_transitions() -> None:
    first = claimed(None, "a", "l", "ops", 15, "t1")
    first["metadata"]["resourceVersion"] = "1"
    renewed = claimed(first, "a", "l", "ops", 15, "t2")
    assert renewed["spec"]["acquireTime"] == "t1" and renewed["spec"]["renewTime"] == "t2"
    assert renewed["metadata"]["resourceVersion"] == "1"
    taken = claimed(renewed, "b", "l", "ops", 15, "t3")
    assert (taken["spec"]["acquireTime"], taken["spec"]["leaseTransitions"]) == ("t3", 1)


@pytest.mark.parametrize("why", ["cannot renew", "taken by another"])
def test_a_leader_that_loses_the_lease_stops(why: str) -> None:
    api = FakeLeases()
    fast = LeaseTimings(duration=0.3, renew_deadline=0.2, retry_period=0.02)
    a = LeaderElector(api, "l", "ops", "a", fast)
    events: list[str] = []

    async def scenario() -> None:
        async def started() -> None:
            events.append("started")

        async def stopped() -> None:
            events.append("stopped")

        task = asyncio.create_task(a.run(started, stopped))
        await asyncio.sleep(0.1)
        assert events == ["started"]
        if why == "cannot renew":
            api.down = True
        else:
            assert api.lease is not None
            api.lease["spec"]["holderIdentity"] = "b"
            api.version += 1
            api.lease["metadata"]["resourceVersion"] = str(api.version)
        await asyncio.wait_for(task, 2)

    run(scenario())
    assert events == ["started", "stopped"]
    assert not a.leading
