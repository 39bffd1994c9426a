"""Leader election on a coordination.k8s.io Lease, as client-go's leaderelection does it.

Every replica runs its watches (so a standby's view of the cluster is warm), but only the holder of the
Lease runs reconciles, that is, writes. The rules:
- A candidate takes the Lease when no one holds it, or when the holder has not renewed it for a whole lease
  duration *as seen by the candidate's own clock* (it times how long the record has stayed unchanged, so
  clocks of different machines never need to agree).
- Every write of the Lease is an update with the resourceVersion read before it: two candidates racing for
  it cannot both win (the second gets 409 Conflict).
- The leader renews every retry period. When it has not managed to renew for the renew deadline (shorter
  than the lease duration), it stops working at once, before anyone else can take the Lease.
- On a clean stop the leader gives the Lease up (holder cleared), so a standby takes over within a retry
  period instead of a lease duration.
"""

from __future__ import annotations

import asyncio
import logging
import random
import time
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Any, Protocol

from qwen_fleet.reconcile.kube import KubeError

log = logging.getLogger("qwen_fleet.leader")

LEASE_PATH = "/apis/coordination.k8s.io/v1/namespaces/{namespace}/leases"


@dataclass(frozen=True)
class LeaseTimings:
    duration: float = 15.0  # how long a Lease is good for without a renewal (client-go's default)
    renew_deadline: float = 10.0  # a leader that could not renew for this long stops working
    retry_period: float = 2.0  # how often candidates try and the leader renews


class LeaseApi(Protocol):
    async def request(self, method: str, path: str, query: Any = None, body: Any = None,
                      content_type: str | None = None) -> Any: ...


def micro_time(now: datetime | None = None) -> str:
    """A MicroTime, as Lease fields want it."""
    return (now or datetime.now(UTC)).strftime("%Y-%m-%dT%H:%M:%S.%fZ")


def claimed(lease: dict[str, Any] | None, identity: str, name: str, namespace: str, duration: float,
            now: str) -> dict[str, Any]:
    """The Lease after ``identity`` takes or renews it (pure): acquireTime and the transition count change
    only when the holder changes."""
    spec = dict((lease or {}).get("spec") or {})
    if spec.get("holderIdentity") != identity:
        spec["acquireTime"] = now
        spec["leaseTransitions"] = int(spec.get("leaseTransitions") or 0) + (1 if lease else 0)
    spec.update({"holderIdentity": identity, "leaseDurationSeconds": max(1, round(duration)), "renewTime": now})
    meta: dict[str, Any] = {"name": name, "namespace": namespace}
    if lease:
        meta["resourceVersion"] = lease["metadata"]["resourceVersion"]
    return {"apiVersion": "coordination.k8s.io/v1", "kind": "Lease", "metadata": meta, "spec": spec}


def holder(lease: dict[str, Any] | None) -> str:
    return str(((lease or {}).get("spec") or {}).get("holderIdentity") or "")


class Observation:
    """When this candidate last saw the Lease's record change: the clock a holder's expiry is judged by."""

    def __init__(self) -> None:
        self.record: Any = None
        self.since = 0.0

    def see(self, lease: dict[str, Any] | None, now: float) -> None:
        record = (lease or {}).get("spec")
        if record != self.record:
            self.record, self.since = record, now

    def expired(self, duration: float, now: float) -> bool:
        return now - self.since > duration


class LeaderElector:
    def __init__(self, api: LeaseApi, name: str, namespace: str, identity: str,
                 timings: LeaseTimings = LeaseTimings(), clock: Callable[[], float] = time.monotonic) -> None:
        self.api, self.name, self.namespace, self.identity = api, name, namespace, identity
        self.timings = timings
        self.clock = clock
        self.observation = Observation()
        self.leading = False
        self.last_renewal = 0.0

    @property
    def _path(self) -> str:
        return LEASE_PATH.format(namespace=self.namespace)

    async def try_acquire_or_renew(self) -> bool:
        """One attempt; True when this candidate holds the Lease afterwards."""
        try:
            lease = await self.api.request("GET", f"{self._path}/{self.name}")
        except KubeError as err:
            if err.status != 404:
                log.warning("cannot read Lease %s/%s: %s", self.namespace, self.name, err)
                return False
            lease = None
        now = self.clock()
        self.observation.see(lease, now)
        current = holder(lease)
        if current and current != self.identity and not self.observation.expired(self.timings.duration, now):
            return False
        body = claimed(lease, self.identity, self.name, self.namespace, self.timings.duration, micro_time())
        try:
            if lease is None:
                await self.api.request("POST", self._path, body=body)
            else:
                await self.api.request("PUT", f"{self._path}/{self.name}", body=body)
        except KubeError as err:
            if err.status not in (409, 404):  # 409/404: another candidate was faster
                log.warning("cannot write Lease %s/%s: %s", self.namespace, self.name, err)
            return False
        if current != self.identity:
            log.info("became the leader (Lease %s/%s, previous holder %r)", self.namespace, self.name, current)
        return True

    async def run(self, started_leading: Callable[[], Awaitable[None]],
                  stopped_leading: Callable[[], Awaitable[None]]) -> None:
        """Wait for the Lease, lead while it is renewed, and return once it is lost (after stopped_leading)."""
        t = self.timings
        while not await self.try_acquire_or_renew():
            await asyncio.sleep(t.retry_period * (1 + 0.2 * random.random()))  # jitter: candidates spread
        self.leading = True
        self.last_renewal = self.clock()
        await started_leading()
        while True:
            await asyncio.sleep(t.retry_period)
            try:
                renewed = await asyncio.wait_for(self.try_acquire_or_renew(), t.renew_deadline)
            except TimeoutError:
                renewed = False
            if renewed:
                self.last_renewal = self.clock()
            elif self.taken_by_another() or self.clock() - self.last_renewal > t.renew_deadline:
                break
        self.leading = False
        log.error("lost the Lease %s/%s (%s); stopping", self.namespace, self.name,
                  "taken by another" if self.taken_by_another() else f"not renewed for {t.renew_deadline:.0f}s")
        await stopped_leading()

    def taken_by_another(self) -> bool:
        record = self.observation.record or {}
        return str(record.get("holderIdentity") or "") not in ("", self.identity)

    async def release(self) -> None:
        """Give the Lease up if this candidate holds it, so a standby need not wait for it to expire."""
        if not self.leading:
            return
        try:
            lease = await self.api.request("GET", f"{self._path}/{self.name}")
            if holder(lease) != self.identity:
                return
            spec = {**lease["spec"], "holderIdentity": "", "leaseDurationSeconds": 1, "renewTime": micro_time()}
            await self.api.request("PUT", f"{self._path}/{self.name}", body={**lease, "spec": spec})
            self.leading = False
            log.info("released the Lease %s/%s", self.namespace, self.name)
        except KubeError as err:
            log.warning("could not release the Lease %s/%s: %s", self.namespace, self.name, err)
