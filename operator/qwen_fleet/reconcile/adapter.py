"""kopf, behind one module: the only one of the operator that imports kopf.

The rest of the operator registers its watches, indexes and lifecycle steps through the functions here and never
sees a kopf name (a grep of operator/ for kopf imports finds this file alone; hence its name, which such a grep
would match too if it began with kopf). Here too: every kopf setting (``configure``), kopf's diff-base storage
switched off (``NoDiffBase``), the re-scan of APIs installed after start-up (``ensure_watched``), and the fixes to
kopf's private modules, each with its reason. kopf 1.45.2 is pinned (requirements.lock);
tests/unit/test_kopf_adapter.py fails when kopf changes under a fix.

Fixes to kopf, applied when the operator starts (``apply_patches``):

1. Start-up over many objects in linear, not quadratic, time.

kopf holds every handler until all indexes are populated from the initial listings. It does so with a set of
toggles, one per listed object, that shares one asyncio.Condition with every object's handler task; adding or
dropping a toggle wakes every waiting task (notify_all), and each then re-checks the whole set. At start-up
every listed object adds and drops a toggle while the tasks of the objects before it wait, so the work grows
with the square of the objects listed: a restart over 1000 resources (about 7000 objects with their
children and pods) spent about three minutes in it before the first reconcile.

Only the set's overall state (all on / not all on) is waited for, and adding or dropping a toggle cannot change
any single toggle's state, so waking the waiters is needed only when the overall state changes. The patched
methods do exactly the same to the set and notify only then.

2. A CRD deleted under the running operator no longer stops it.

When a CRD is deleted, the apiserver ends the watches on its kind, and kopf's watcher opens a new one at once. If
that request comes before kopf's observer has seen the CRD go (its rescan runs on the CRD's own watch events),
the apiserver answers 404, the watcher task fails, and kopf's orchestrator re-raises the failure: the whole
operator shuts down ("Multidimensional multitasker has failed: 404 page not found"). Seen in the suite when a
test deleted the Inference Extension's CRDs; in a cluster, uninstalling any optional API the operator watches
(InferencePool, LeaderWorkerSet, KEDA's kinds) would crash-loop the operator for a while. The patched watch
stream treats a 404 as "not served right now": it logs once and opens the stream again after a back-off (0.5 s
doubling to 10 s), for as long as kopf keeps the watcher; the observer cancels it once it sees the CRD gone,
and a CRD created again is watched by the same stream. Everything else (other errors) fails as before.

With that, a watcher whose kind goes away before its first listing is over waits instead of failing, and kopf
stops it when the observer sees the CRD gone; but kopf leaves that watcher's "not indexed yet" toggle in the
operator-wide set (the watcher drops it only when its listing ends), and every handler of every kind waits for
the set. The patched watcher drops its own toggle when it ends, however it ends.

3. A deletion missed while a watch was down is seen as a deletion.

When a watch cannot resume (410 Gone: its resourceVersion was compacted away, or the apiserver restarted with a
fresh watch cache), kopf lists the kind again and goes on from there; an object deleted in between is simply not
in the new listing, and kopf says nothing about it: no DELETED event, no index entry dropped (kopf 1.45). The
operator would then keep reconciling a QwenInference that is gone (its children re-made with an ownerReference to
a uid that no longer exists, then garbage-collected, again and again), and keep counting a child that is gone as
present (never restoring it). client-go's informers report such an object as deleted on relist
(DeletedFinalStateUnknown); so does the patched stream: ``RelistTracker`` remembers the identity of every object
the stream has shown, and at the end of each listing after the first, yields a DELETED event for each remembered
object the listing did not hold, before kopf's own end-of-listing marker.

Diff base: kopf builds a deep copy of every watched object's "essence" on every watch event, to diff it for cause
handlers (on.create/update/delete). This operator registers none: its triggers are event handlers and indexes,
and the reconcile reads the latest state itself. Profiling a burst of 100 resources showed that copy (pods,
Deployments, ... all watched) taking about a fifth of the event loop's time; ``NoDiffBase`` makes it free.

Re-scan: kopf serves a resource whose CRD is installed after the operator started by re-scanning the API group on
each event of that CRD (``observation.process_discovered_resource_event``). The apiserver's discovery can lag behind
those events: if the group is not yet listed when the CRD's last event (Established) comes, kopf's scan finds
nothing and no later event asks again, so the operator would never watch, say, LeaderWorkerSets installed after it
(seen in the suite: a multi-node fleet's LeaderWorkerSet was created but its status never read). The resync asks
discovery itself (``Controller.refresh_capabilities``); for every group it finds served but kopf does not watch,
``ensure_watched`` repeats kopf's own re-scan, under kopf's lock, with kopf's own functions
(tests/integration/test_leaderworkerset.py covers it).
"""

from __future__ import annotations

import asyncio
import logging
import threading
from collections.abc import AsyncIterator, Callable, Iterable, Mapping
from dataclasses import dataclass
from typing import Any

import kopf
from kopf._cogs.aiokits import aiotoggles
from kopf._cogs.clients import errors, scanning, watching
from kopf._cogs.structs import references
from kopf._core.reactor import observation, queueing

log = logging.getLogger(__name__)

# --- the surface the operator uses ------------------------------------------------------------------------------

Registry = kopf.OperatorRegistry
Settings = kopf.OperatorSettings
RawEvent = kopf.RawEvent
PRESENT = kopf.PRESENT  # a label filter: the label is there, whatever its value
Handler = Callable[..., Any]


def new_registry() -> Registry:
    return kopf.OperatorRegistry()


def login(registry: Registry) -> None:
    """kopf's default registry brings its login handlers; an own registry needs the one it uses named: the official
    client's (in-cluster credentials or the kubeconfig, like KubeClient)."""
    kopf.on.login(registry=registry)(kopf.login_via_client)


def startup(registry: Registry, backoff: float) -> Callable[[Handler], Handler]:
    """A start-up step; a step that fails is retried by kopf after ``backoff`` seconds."""
    return kopf.on.startup(registry=registry, backoff=backoff)


def cleanup(registry: Registry) -> Callable[[Handler], Handler]:
    return kopf.on.cleanup(registry=registry)


def probe(registry: Registry, id: str) -> Callable[[Handler], Handler]:
    return kopf.on.probe(id=id, registry=registry)


def on_event(registry: Registry, group: str, version: str, plural: str, *, id: str | None = None,
             labels: Mapping[str, Any] | None = None) -> Callable[[Handler], Handler]:
    """Every watch event of a kind (the initial listing's too), the raw event as ``event``; nothing is written."""
    return kopf.on.event(group, version, plural, id=id, labels=labels, registry=registry)


def index(registry: Registry, group: str, version: str, plural: str, *, id: str,
          labels: Mapping[str, Any] | None = None) -> Callable[[Handler], Handler]:
    """An in-memory index of a kind, filled before any handler runs; handlers get it as a keyword named ``id``."""
    return kopf.index(group, version, plural, id=id, labels=labels, registry=registry)


def configure(settings: Settings, *, group: str, workers: int, exiting_timeout: float) -> None:
    """Every kopf setting in one place."""
    # Only our explicit Events reach the cluster; kopf's per-object log lines stay in the log.
    settings.posting.level = logging.WARNING
    settings.posting.loggers = False
    # kopf logs every handled event at INFO: at fleet scale that is noise (and CPU). Failures still show.
    logging.getLogger("kopf.objects").setLevel(logging.WARNING)
    # Own prefixes, in case a cause handler is ever added: never clash with other kopf operators.
    settings.persistence.finalizer = f"{group}/finalizer"
    settings.persistence.progress_storage = kopf.AnnotationsProgressStorage(prefix=group)
    settings.persistence.diffbase_storage = NoDiffBase()  # no cause handlers: no diff base (see above)
    settings.networking.request_timeout = 60
    settings.networking.connect_timeout = 10
    # After an apiserver outage, reconnect within ~5 s of its return instead of kopf's Fibonacci backoff
    # (up to 21 s); the total retry budget (~47 s before kopf restarts the cycle) stays about the same.
    settings.networking.error_backoffs = (1, 1, 2, 3, 5, 5, 5, 5, 5, 5, 5, 5)
    settings.watching.connect_timeout = 10
    settings.watching.server_timeout = 600  # periodic relists bound any missed event
    settings.execution.max_workers = workers
    # The last resort after SIGTERM (kopf SIGKILLs itself when its graceful exit takes longer): the renew deadline,
    # after which a standby may lead. The graceful path is bounded well within it (handlers.py shutdown, run.py).
    settings.process.ultimate_exiting_timeout = exiting_timeout
    settings.queueing.worker_limit = None  # per-object workers are cheap coroutines


class NoDiffBase(kopf.DiffBaseStorage):
    """kopf's diff-base storage, switched off (see above)."""

    def build(self, *, body: Any, extra_fields: Iterable[Any] | None = None) -> Any:
        return {}

    def fetch(self, *, body: Any) -> Any:
        return None

    def store(self, *, body: Any, patch: Any, essence: Any) -> None:
        return None


@dataclass
class KopfHandles:
    """What kopf's observer works with, kept by the operator: created before ``run`` and passed to it."""

    registry: Registry
    insights: references.Insights
    settings: Settings | None = None  # set by the start-up handler


def new_handles(registry: Registry) -> KopfHandles:
    return KopfHandles(registry=registry, insights=references.Insights())


def run(handles: KopfHandles, stop_flag: threading.Event, namespaces: list[str], liveness_endpoint: str | None) -> None:
    """kopf's own loop, until ``stop_flag`` is set or a signal stops it. No namespaces: cluster-wide."""
    kopf.run(registry=handles.registry, insights=handles.insights, stop_flag=stop_flag, standalone=True,
             clusterwide=not namespaces, namespaces=namespaces, liveness_endpoint=liveness_endpoint)


# --- the re-scan of APIs installed after start-up (see above) ---------------------------------------------------

def watched_groups(insights: references.Insights) -> set[str]:
    return {r.group for r in insights.watched_resources | insights.indexed_resources}


async def ensure_watched(handles: KopfHandles, groups: set[str]) -> set[str]:
    """Re-scan each of ``groups`` that kopf does not watch yet; returns the groups it watches afterwards."""
    if handles.settings is None:
        return set()
    added = set()
    for group in sorted(groups - watched_groups(handles.insights)):
        resources = await scanning.scan_resources(groups={group}, settings=handles.settings, logger=log)
        if not resources:
            continue
        async with handles.insights.revised:
            observation.revise_resources(resources=resources, insights=handles.insights,
                                         registry=handles.registry, group=group)
            await handles.insights.backbone.fill(resources=resources)
            handles.insights.revised.notify_all()
        if group in watched_groups(handles.insights):
            added.add(group)
            log.info("now watching the %s API (installed after the operator started)", group)
    return added


# --- fixes 1-3 (see above) ----------------------------------------------------------------------------------------
NOT_SERVED_BACKOFF = (0.5, 10.0)  # first and longest wait before watching a kind that answered 404 again


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
ORIGINAL_INFINITE_WATCH = watching.infinite_watch
ORIGINAL_WATCHER = queueing.watcher


# What a synthetic DELETED event keeps of an object: what the operator's handlers and kopf's indexes read of a
# deleted object (its identity, labels and owners), not the whole body (memory at fleet scale).
_IDENTITY = ("name", "namespace", "uid", "labels", "ownerReferences", "resourceVersion")


def _identity(body: Mapping[str, Any]) -> dict[str, Any]:
    meta = body.get("metadata") or {}
    return {"apiVersion": body.get("apiVersion"), "kind": body.get("kind"),
            "metadata": {k: meta[k] for k in _IDENTITY if k in meta}}


def _uid(body: Mapping[str, Any]) -> str | None:
    meta = body.get("metadata") or {}
    uid = meta.get("uid")
    return str(uid) if uid else None


class RelistTracker:
    """Turns "not in the new listing" into a DELETED event (item 3 above), for one kind's stream.

    Fed every item of kopf's stream in order (``feed`` returns what to yield before it): listed objects come as
    events of type None, a listing ends with ``watching.Bookmark.LISTED``, watch events are ADDED, MODIFIED,
    DELETED (and BOOKMARK, no object)."""

    def __init__(self) -> None:
        self.known: dict[str, dict[str, Any]] = {}  # uid -> identity, of every object shown and not deleted
        self.listed: set[str] = set()  # uids listed since the last end of a listing
        self.listings = 0

    def feed(self, event: Any) -> list[dict[str, Any]]:
        if event is watching.Bookmark.LISTED:
            gone = [] if self.listings == 0 else [uid for uid in self.known if uid not in self.listed]
            self.listings += 1
            self.listed = set()
            return [{"type": "DELETED", "object": self.known.pop(uid)} for uid in gone]
        if not isinstance(event, Mapping):
            return []
        body = event.get("object") or {}
        uid = _uid(body)
        if uid is None or event.get("type") == "BOOKMARK":
            return []
        if event.get("type") == "DELETED":
            self.known.pop(uid, None)
            return []
        if event.get("type") is None:
            self.listed.add(uid)
        self.known[uid] = _identity(body)
        return []


async def _infinite_watch(**kwargs: Any) -> AsyncIterator[Any]:
    """kopf's endless watch stream of one kind, which outlives the kind's API being gone for a while and reports
    the objects a relist no longer holds as deleted."""
    first, longest = NOT_SERVED_BACKOFF
    delay, logged = first, False
    tracker = RelistTracker()
    while True:
        try:
            async for event in ORIGINAL_INFINITE_WATCH(**kwargs):
                delay, logged = first, False
                missed = tracker.feed(event)
                if missed:
                    log.info("%s: %d object(s) deleted while the watch was down (not in the new listing)",
                             kwargs.get("resource"), len(missed))
                for gone in missed:
                    yield gone
                yield event
            return  # only in kopf's own tests (a bounded number of iterations)
        except errors.APINotFoundError:
            if not logged:
                log.warning("%s is not served (its CRD was deleted?): watching it again every %.0f s or less until "
                            "it is back or the operator stops watching it", kwargs.get("resource"), longest)
                logged = True
            await asyncio.sleep(delay)
            delay = min(2 * delay, longest)


async def _watcher(**kwargs: Any) -> None:
    """kopf's watcher of one kind, which releases the operator-wide index gate when it ends."""
    try:
        await ORIGINAL_WATCHER(**kwargs)
    finally:
        gate, mine = kwargs.get("operator_indexed"), kwargs.get("resource_indexed")
        if gate is not None and mine is not None:
            await gate.drop_toggle(mine)


def apply_patches() -> None:
    """Put fixes 1-3 into kopf, where kopf looks them up (tests/unit/test_kopf_adapter.py checks that it still
    does, so that a kopf upgrade that stops doing so fails a test instead of making a fix silently inert)."""
    aiotoggles.ToggleSet.make_toggle = _make_toggle  # type: ignore[method-assign]
    aiotoggles.ToggleSet.drop_toggle = _drop_toggle  # type: ignore[method-assign]
    aiotoggles.ToggleSet.drop_toggles = _drop_toggles  # type: ignore[method-assign]
    watching.infinite_watch = _infinite_watch
    queueing.watcher = _watcher
