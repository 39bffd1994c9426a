"""kopf glue: watches feed a work queue; workers run the controller. No logic lives here.

Triggers (all of them only enqueue the resource's key):
- every watch event of a QwenInference: the initial listing after a (re)start, creation, any change;
- every watch event of a child (Deployment, Service, HPA, PDB, ConfigMap, PVC, ServiceMonitor,
  PrometheusRule) or of a fleet pod: a deleted or hand-edited child is restored at once;
- a resync timer over all resources (level-based safety net; also picks up newly installed optional CRDs).
Only low-level kopf handlers are used (event handlers and indexes), so kopf itself writes nothing to the
resources: no finalizers, no progress annotations. Deletion is left to ownerReference garbage collection.
"""

from __future__ import annotations

import asyncio
import logging
from typing import Any

import kopf

from qwen_fleet.api import GROUP, KIND, PLURAL, VERSION
from qwen_fleet.config import MANAGED_BY, OperatorConfig
from qwen_fleet.reconcile import kopf_patches, metrics
from qwen_fleet.reconcile.controller import Controller, RetryLater
from qwen_fleet.reconcile.events import EventSender
from qwen_fleet.reconcile.kopf_storage import NoDiffBase
from qwen_fleet.reconcile.kube import KubeClient
from qwen_fleet.reconcile.queue import Key, WorkQueue
from qwen_fleet.reconcile.store import Store, compact_child, instance_key, owner_key, pod_summary
from qwen_fleet.render.common import INSTANCE_LABEL, MANAGED_BY_LABEL

kopf_patches.apply()  # before kopf starts: start-up over many objects in linear, not quadratic, time
log = logging.getLogger("qwen_fleet.operator")

CHILD_RESOURCES = (
    ("apps", "v1", "deployments"),
    ("", "v1", "services"),
    ("autoscaling", "v2", "horizontalpodautoscalers"),
    ("policy", "v1", "poddisruptionbudgets"),
    ("", "v1", "configmaps"),
    ("", "v1", "persistentvolumeclaims"),
    ("monitoring.coreos.com", "v1", "servicemonitors"),
    ("monitoring.coreos.com", "v1", "prometheusrules"),
)
MANAGED = {MANAGED_BY_LABEL: MANAGED_BY}
COALESCE_SECONDS = 0.5


class Runtime:
    """State of one operator process, created at startup."""

    def __init__(self) -> None:
        self.config = OperatorConfig.from_env()
        self.store = Store()
        self.queue = WorkQueue()
        self.kube: KubeClient | None = None
        self.controller: Controller | None = None
        self.tasks: list[asyncio.Task[None]] = []
        self.events: EventSender | None = None


RUNTIME = Runtime()


def _resource_key(body: Any) -> Key:
    return (str(body["metadata"].get("namespace") or ""), str(body["metadata"]["name"]))


# --- startup and shutdown -----------------------------------------------------------------------------------

@kopf.on.startup()
async def configure(settings: kopf.OperatorSettings, **kwargs: Any) -> None:
    """Every kopf setting in one place."""
    cfg = RUNTIME.config
    # Only our explicit Events reach the cluster; kopf's per-object log lines stay in the log.
    settings.posting.level = logging.WARNING
    settings.posting.loggers = False
    # kopf logs every handled event at INFO: at fleet scale that is noise (and CPU). Failures still show.
    logging.getLogger("kopf.objects").setLevel(logging.WARNING)
    # Own prefixes, in case a cause handler is ever added: never clash with other kopf operators.
    settings.persistence.finalizer = f"{GROUP}/finalizer"
    settings.persistence.progress_storage = kopf.AnnotationsProgressStorage(prefix=GROUP)
    settings.persistence.diffbase_storage = NoDiffBase()  # no cause handlers: no diff base (kopf_storage.py)
    settings.networking.request_timeout = 60
    settings.networking.connect_timeout = 10
    # After an apiserver outage, reconnect within ~5 s of its return instead of kopf's Fibonacci backoff
    # (up to 21 s); the total retry budget (~47 s before kopf restarts the cycle) stays about the same.
    settings.networking.error_backoffs = (1, 1, 2, 3, 5, 5, 5, 5, 5, 5, 5, 5)
    settings.watching.connect_timeout = 10
    settings.watching.server_timeout = 600  # periodic relists bound any missed event
    settings.execution.max_workers = cfg.workers
    settings.queueing.worker_limit = None  # per-object workers are cheap coroutines
    # kopf hands every index to handlers as a keyword argument named after the index.
    RUNTIME.store.children_indexes = [kwargs[f"children_{plural}"] for _, _, plural in CHILD_RESOURCES]
    RUNTIME.store.pods_index = kwargs["pods_index"]
    # Twice the workers: a reconcile sends the requests of a batch together, and Events go out beside them.
    RUNTIME.kube = KubeClient.from_environment(workers=2 * cfg.workers)
    RUNTIME.events = EventSender(RUNTIME.kube.post_event)
    RUNTIME.events.start()
    RUNTIME.controller = Controller(RUNTIME.kube, cfg, RUNTIME.store, emit=_emit)
    await RUNTIME.controller.refresh_capabilities()
    metrics.start(cfg.metrics_port, RUNTIME)
    for i in range(cfg.workers):
        RUNTIME.tasks.append(asyncio.create_task(_worker(i), name=f"qwen-fleet-worker-{i}"))
    RUNTIME.tasks.append(asyncio.create_task(_resync(), name="qwen-fleet-resync"))
    log.info("qwen-fleet operator started: %d workers, resync every %ds, capabilities %s", cfg.workers,
             cfg.resync_seconds, RUNTIME.controller.capabilities)


@kopf.on.cleanup()
async def shutdown(**_: Any) -> None:
    for task in RUNTIME.tasks:
        task.cancel()
    await asyncio.gather(*RUNTIME.tasks, return_exceptions=True)
    if RUNTIME.events is not None:
        await RUNTIME.events.stop()
    if RUNTIME.kube is not None:
        RUNTIME.kube.close()


@kopf.on.probe(id="queue")
async def queue_depth(**_: Any) -> int:
    return len(RUNTIME.queue)


def _emit(resource: dict[str, Any], type_: str, reason: str, message: str) -> None:
    """Queue an Event; it is posted behind the reconciles (events.py)."""
    if RUNTIME.events is None:
        return
    ref = {"apiVersion": resource.get("apiVersion", f"{GROUP}/{VERSION}"), "kind": resource.get("kind", KIND),
           "metadata": resource.get("metadata", {})}
    RUNTIME.events.emit(ref, type_, reason, message)


# --- watches -----------------------------------------------------------------------------------------------

@kopf.on.event(GROUP, VERSION, PLURAL)
async def resource_event(event: kopf.RawEvent, **_: Any) -> None:
    body = event.get("object") or {}
    if not body.get("metadata"):
        return
    key = _resource_key(body)
    if event.get("type") == "DELETED":
        RUNTIME.store.resources.pop(key, None)
        metrics.forget(key)
        return
    RUNTIME.store.put_resource(key, dict(body))
    RUNTIME.queue.add(key)


async def _index_child(body: Any, **_: Any) -> dict[Key, str] | None:
    owner = owner_key(body)
    return {owner: compact_child(body)} if owner else None


async def _child_event(event: kopf.RawEvent, **_: Any) -> None:
    body = event.get("object") or {}
    owner = owner_key(body)
    if owner is None:
        return
    deleted = event.get("type") == "DELETED"
    RUNTIME.store.child_event(owner, body, deleted=deleted)
    if owner in RUNTIME.store.resources:
        # A deleted child is restored at once; status changes of children come in bursts during a rollout
        # (replicas, updated, ready, available ...): gathering them costs a fraction of a second and saves a
        # status write per change.
        if deleted:
            RUNTIME.queue.add(owner)
        else:
            RUNTIME.queue.add_after(owner, COALESCE_SECONDS)


for _group, _version, _plural in CHILD_RESOURCES:
    kopf.on.event(_group, _version, _plural, labels=MANAGED, id=f"watch_{_plural}")(_child_event)
    kopf.index(_group, _version, _plural, labels=MANAGED, id=f"children_{_plural}")(_index_child)


@kopf.index("", "v1", "pods", labels={INSTANCE_LABEL: kopf.PRESENT}, id="pods_index")
async def _pods(body: Any, **_: Any) -> dict[Key, dict[str, Any]] | None:
    key = instance_key(body)
    return {key: pod_summary(body)} if key else None


@kopf.on.event("", "v1", "pods", labels={INSTANCE_LABEL: kopf.PRESENT})
async def pod_event(event: kopf.RawEvent, **_: Any) -> None:
    key = instance_key(event.get("object") or {})
    if key is not None and key in RUNTIME.store.resources:
        RUNTIME.queue.add_after(key, COALESCE_SECONDS)


# --- workers ----------------------------------------------------------------------------------------------

async def _worker(index: int) -> None:
    assert RUNTIME.controller is not None
    controller, queue = RUNTIME.controller, RUNTIME.queue
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
            queue.forget(key)
            metrics.observe(key, None, started, result)
            if result is not None and (result.applied or result.deleted):
                log.info("%s/%s: %s", key[0], key[1], "; ".join(result.applied + result.deleted))
        finally:
            queue.done(key)


async def _resync() -> None:
    assert RUNTIME.controller is not None
    while True:
        await asyncio.sleep(RUNTIME.config.resync_seconds)
        try:
            await RUNTIME.controller.refresh_capabilities()
        except Exception as err:
            log.warning("capability check failed: %s", err)
        RUNTIME.controller.refused.clear()  # a refused spec gets one more attempt per resync
        for key in list(RUNTIME.store.resources):
            RUNTIME.queue.add(key)
