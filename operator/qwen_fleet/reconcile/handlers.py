"""kopf glue: watches feed a work queue; workers run the controller. No logic lives here.

Triggers (all of them only enqueue the resource's key):
- every watch event of a QwenInference: the initial listing after a (re)start, creation, any change;
- every watch event of a child (every kind in reconcile/kinds.py) or of a fleet pod: a deleted or
  hand-edited child is restored at once;
- a resync timer over all resources (level-based safety net; also picks up newly installed optional CRDs).
Only low-level kopf handlers are used (event handlers and indexes), so kopf itself writes nothing to the
resources: no finalizers, no progress annotations. Deletion is left to ownerReference garbage collection.

Nothing happens at import: ``register`` puts the handlers into a registry the caller owns (run.py), around one
``Runtime`` made from the configuration it was given. With leader election on, every replica watches (its
view stays warm) but only the Lease holder's workers run (reconcile/leader.py).
"""

from __future__ import annotations

import asyncio
import logging
import os
import threading
from typing import Any

from qwen_fleet.api import API_VERSION, GROUP, KIND, PLURAL, VERSION
from qwen_fleet.config import MANAGED_BY, OperatorConfig
from qwen_fleet.reconcile import adapter, metrics
from qwen_fleet.reconcile.adapter import KopfHandles, ensure_watched
from qwen_fleet.reconcile.batch_controller import BatchController, batch_resync, batch_worker, register_batch
from qwen_fleet.reconcile.controller import Controller, RetryLater
from qwen_fleet.reconcile.events import EventSender
from qwen_fleet.reconcile.kinds import CHILD_KINDS, served_groups
from qwen_fleet.reconcile.kube import KubeClient
from qwen_fleet.reconcile.leader import LeaderElector, LeaseTimings
from qwen_fleet.reconcile.queue import Key, WorkQueue
from qwen_fleet.reconcile.store import Store, compact_child, instance_key, owner_key, pod_summary
from qwen_fleet.render.common import INSTANCE_LABEL, MANAGED_BY_LABEL

log = logging.getLogger("qwen_fleet.operator")

MANAGED = {MANAGED_BY_LABEL: MANAGED_BY}
COALESCE_SECONDS = 0.5


class Runtime:
    """State of one operator process, created at startup."""

    def __init__(self, config: OperatorConfig) -> None:
        self.config = config
        self.store = Store()
        self.queue = WorkQueue()
        self.kube: KubeClient | None = None
        self.controller: Controller | None = None
        self.tasks: list[asyncio.Task[None]] = []  # workers and resync: only while leading
        self.election: asyncio.Task[None] | None = None
        self.elector: LeaderElector | None = None
        self.events: EventSender | None = None
        self.stop_flag = threading.Event()  # kopf.run stops when it is set (leadership lost)
        self.exit_code = 0
        self.kopf: KopfHandles | None = None  # kopf's registry and insights, for APIs installed after start-up
        self.batches: BatchController | None = None  # QwenBatch (reconcile/batch_controller.py)


def _resource_key(body: Any) -> Key:
    return (str(body["metadata"].get("namespace") or ""), str(body["metadata"]["name"]))


def _configure_kopf(settings: adapter.Settings, cfg: OperatorConfig) -> None:
    """Every kopf setting, in the adapter; the values from the operator's configuration."""
    adapter.configure(settings, group=GROUP, workers=cfg.workers, exiting_timeout=cfg.lease_renew_deadline_seconds)


def _start_work(rt: Runtime) -> None:
    """Workers and the resync timer: what writes. Without leader election at once, else once leading."""
    for i in range(rt.config.workers):
        rt.tasks.append(asyncio.create_task(_worker(rt, i), name=f"qwen-fleet-worker-{i}"))
    rt.tasks.append(asyncio.create_task(_resync(rt), name="qwen-fleet-resync"))
    if rt.batches is not None:
        rt.tasks.append(asyncio.create_task(batch_worker(rt.batches), name="qwen-fleet-batch-worker"))
        rt.tasks.append(asyncio.create_task(batch_resync(rt.batches, rt.config.resync_seconds),
                                            name="qwen-fleet-batch-resync"))
        for key in list(rt.batches.batches):
            rt.batches.queue.add(key)
    for key in list(rt.store.resources):  # a new leader looks at everything once (unchanged: no writes)
        rt.queue.add(key)


async def _stop_work(rt: Runtime) -> None:
    for task in rt.tasks:
        task.cancel()
    await asyncio.gather(*rt.tasks, return_exceptions=True)
    rt.tasks.clear()


async def _elect(rt: Runtime) -> None:
    assert rt.elector is not None

    async def started() -> None:
        _start_work(rt)

    async def stopped() -> None:
        # Not the leader any more: no write may follow. Stop the workers at once and end the process (its
        # pod restarts it as a standby), as client-go's leaderelection does.
        await _stop_work(rt)
        rt.exit_code = 1
        rt.stop_flag.set()

    await rt.elector.run(started, stopped)


def register(registry: adapter.Registry, rt: Runtime) -> None:
    """Put every handler of the operator into ``registry``, working on ``rt``."""
    _register_lifecycle(registry, rt)
    _register_watches(registry, rt)
    register_batch(registry, lambda: rt.batches)


def _register_lifecycle(registry: adapter.Registry, rt: Runtime) -> None:
    adapter.login(registry)

    # A step that fails (the apiserver answering 503 while it starts) is retried by kopf after ``backoff``
    # seconds (kopf's default: 60), and the retry makes nothing twice.
    @adapter.startup(registry, backoff=5)
    async def configure(settings: adapter.Settings, **kwargs: Any) -> None:
        cfg = rt.config
        _configure_kopf(settings, cfg)
        if rt.kopf is not None:
            rt.kopf.settings = settings
        # kopf hands every index to handlers as a keyword argument named after the index.
        rt.store.children_indexes = [kwargs[f"children_{child.plural}"] for child in CHILD_KINDS]
        rt.store.pods_index = kwargs["pods_index"]
        if rt.kube is None or rt.controller is None:
            # Twice the workers: a reconcile sends the requests of a batch together, and Events go out beside them.
            rt.kube = KubeClient.from_environment(workers=2 * cfg.workers, identity=cfg.identity)
            rt.events = EventSender(rt.kube.post_event)
            rt.events.start()
            rt.controller = Controller(rt.kube, cfg, rt.store, emit=lambda *a: _emit(rt, *a))
            rt.batches = BatchController(rt.kube, cfg, rt.store.resources.get, emit=lambda *a: _emit(rt, *a))
        await rt.controller.refresh_capabilities()
        if cfg.leader_election:
            timings = LeaseTimings(cfg.lease_duration_seconds, cfg.lease_renew_deadline_seconds,
                                   cfg.lease_retry_seconds)
            rt.elector = LeaderElector(rt.kube, cfg.lease_name, cfg.lease_namespace, cfg.identity, timings)
            rt.election = asyncio.create_task(_elect(rt), name="qwen-fleet-leader-election")
        else:
            _start_work(rt)
        log.info("qwen-fleet operator started: %d workers, resync every %ds, capabilities %s, %s", cfg.workers,
                 cfg.resync_seconds, rt.controller.capabilities,
                 f"leader election on Lease {cfg.lease_namespace}/{cfg.lease_name} as {cfg.identity}"
                 if cfg.leader_election else "no leader election")

    @adapter.cleanup(registry)
    async def shutdown(**_: Any) -> None:
        if rt.election is not None:
            rt.election.cancel()
            await asyncio.gather(rt.election, return_exceptions=True)
        await _stop_work(rt)
        # Bounded, so the process ends within the Lease's renew deadline even when the apiserver has gone (each
        # request would otherwise wait out its timeout and retries): a quarter of it for queued Events, half for
        # giving the Lease up (if that fails, the standby takes it when it expires, as after a crash).
        budget = rt.config.lease_renew_deadline_seconds
        if rt.events is not None:
            await rt.events.stop(flush_seconds=min(2.0, budget / 4))
        if rt.elector is not None:
            try:
                await asyncio.wait_for(rt.elector.release(), budget / 2)  # the standby may start at once
            except TimeoutError:
                log.warning("could not give the Lease up within %.0fs; it expires by itself", budget / 2)
        if rt.kube is not None:
            rt.kube.close()
        _exit_soon(rt, EXIT_GRACE_SECONDS)

    @adapter.probe(registry, id="queue")
    async def queue_depth(**_: Any) -> int:
        return len(rt.queue)


# How long kopf may take to return after the cleanup handler before the process ends anyway.
EXIT_GRACE_SECONDS = 2.0


def _exit_soon(rt: Runtime, seconds: float) -> None:
    """End the process ``seconds`` from now unless kopf has returned by then (run.py then ends it at once).

    With the apiserver gone, kopf does not return after the cleanup: its watchers and its API observer wait to
    re-authenticate ("TCP closed; will re-authenticate") with a credentials store it has already stopped, until its
    own last resort (settings.process.ultimate_exiting_timeout) SIGKILLs it. Seen: still running minutes after
    SIGTERM. Everything that needed the API is done by then (workers stopped, Events flushed, the Lease given up or
    left to expire)."""
    def force() -> None:
        log.warning("kopf has not stopped %.0fs after the cleanup (the apiserver is unreachable); exiting", seconds)
        logging.shutdown()
        os._exit(rt.exit_code)

    timer = threading.Timer(seconds, force)
    timer.daemon = True
    timer.start()


def _register_watches(registry: adapter.Registry, rt: Runtime) -> None:
    @adapter.on_event(registry, GROUP, VERSION, PLURAL)
    async def resource_event(event: adapter.RawEvent, **_: Any) -> None:
        body = event.get("object") or {}
        if not body.get("metadata"):
            return
        key = _resource_key(body)
        if event.get("type") == "DELETED":
            rt.store.resources.pop(key, None)
            metrics.forget(key)
            return
        rt.store.put_resource(key, dict(body))
        rt.queue.add(key)
        if rt.batches is not None:
            rt.batches.fleet_event(key)

    async def index_child(body: Any, **_: Any) -> dict[Key, str] | None:
        owner = owner_key(body)
        return {owner: compact_child(body)} if owner else None

    async def child_event(event: adapter.RawEvent, **_: Any) -> None:
        body = event.get("object") or {}
        owner = owner_key(body)
        if owner is None:
            return
        deleted = event.get("type") == "DELETED"
        rt.store.child_event(owner, body, deleted=deleted)
        if owner in rt.store.resources:
            # A deleted child is restored at once; status changes of children come in bursts during a rollout
            # (replicas, updated, ready, available ...): gathering them costs a fraction of a second and saves a
            # status write per change.
            if deleted:
                rt.queue.add(owner)
            else:
                rt.queue.add_after(owner, COALESCE_SECONDS)

    for child in CHILD_KINDS:
        adapter.on_event(registry, child.group, child.version, child.plural, labels=MANAGED,
                      id=f"watch_{child.plural}")(child_event)
        adapter.index(registry, child.group, child.version, child.plural, labels=MANAGED,
                   id=f"children_{child.plural}")(index_child)

    @adapter.index(registry, "", "v1", "pods", labels={INSTANCE_LABEL: adapter.PRESENT}, id="pods_index")
    async def pods(body: Any, **_: Any) -> dict[Key, dict[str, Any]] | None:
        key = instance_key(body)
        return {key: pod_summary(body)} if key else None

    @adapter.on_event(registry, "", "v1", "pods", labels={INSTANCE_LABEL: adapter.PRESENT})
    async def pod_event(event: adapter.RawEvent, **_: Any) -> None:
        key = instance_key(event.get("object") or {})
        if key is not None and key in rt.store.resources:
            rt.queue.add_after(key, COALESCE_SECONDS)


def _emit(rt: Runtime, resource: dict[str, Any], type_: str, reason: str, message: str) -> None:
    """Queue an Event; it is posted behind the reconciles (events.py)."""
    if rt.events is None:
        return
    ref = {"apiVersion": resource.get("apiVersion", API_VERSION), "kind": resource.get("kind", KIND),
           "metadata": resource.get("metadata", {})}
    rt.events.emit(ref, type_, reason, message)


# --- workers ----------------------------------------------------------------------------------------------

async def _worker(rt: Runtime, index: int) -> None:
    assert rt.controller is not None
    controller, queue = rt.controller, rt.queue
    while True:
        key = await queue.get()
        started = asyncio.get_running_loop().time()
        try:
            result = await controller.reconcile(key)
        except RetryLater as err:
            delay = queue.retry(key)
            metrics.observe(key, "retry", started, None)
            log.warning("%s/%s: %s; retrying in %.0fs", key[0], key[1], err, delay)
        except Exception as err:  # a bug: log it once with context, back off, keep the other workers going
            delay = queue.retry(key)
            metrics.observe(key, "error", started, None)
            log.exception("%s/%s: reconcile failed (%s); retrying in %.0fs", key[0], key[1], err, delay)
        else:
            if result is not None and result.recheck is not None:
                queue.retry(key)  # 1, 2, 4 ... s, and never later than the recheck
                queue.add_after(key, result.recheck)
            else:
                queue.forget(key)
            metrics.observe(key, None, started, result, rt.store.resources.get(key))
            if result is not None and (result.applied or result.deleted):
                log.info("%s/%s: %s", key[0], key[1], "; ".join(result.applied + result.deleted))
        finally:
            queue.done(key)


async def _resync(rt: Runtime) -> None:
    assert rt.controller is not None
    while True:
        await asyncio.sleep(rt.config.resync_seconds)
        try:
            await rt.controller.refresh_capabilities()
            if rt.kopf is not None:  # an optional API installed since start-up: watch it even if kopf missed it
                await ensure_watched(rt.kopf, served_groups(rt.controller.capabilities))
        except Exception as err:
            log.warning("capability check failed: %s", err)
        rt.controller.refused.clear()  # a refused spec gets one more attempt per resync
        for key in list(rt.store.resources):
            rt.queue.add(key)
