"""One level-based reconcile of one QwenBatch, and the kopf watches that call it. Decisions are in batch.py.

- The children (output ConfigMap, runner RBAC, Job) are applied when the Job is not there: on creation, or
  after someone deleted it before the batch finished (the new Job resumes). A finished batch is left alone.
- A child name taken by an object that is not the batch's (its output ConfigMap naming someone's ConfigMap):
  Stalled (ForeignObject, naming it and its owner, with an Event), nothing applied, looked at again every
  ``FOREIGN_RECHECK_SECONDS`` (reconcile/ownership.py).
- Through a fleet, the Job waits for the QwenInference: until it exists the batch is Stalled (FleetNotFound,
  with an Event) and looked at again every ``FLEET_RECHECK_SECONDS``.
- Status: only the operator's fields, and only when they change; the runner reports the counts itself.
- A child the apiserver refuses (422 from validation or an admission policy, or another error no retry can
  mend: ``KubeError.transient`` says which): what this reconcile created is deleted again, so a refused batch
  leaves nothing behind, and the batch is Stalled (ApplyRejected) with the apiserver's words and an Event.
  Held per generation: the same spec is tried again only at the next resync (one attempt per period), a new
  generation at once. Transient errors (connection, 409, 429, 5xx) and 403 are retried with backoff.
- The Job's pods are watched too: a pod the scheduler cannot place, or whose container waits for an image or a
  Secret that is not there, makes the batch Pending with that reason and the pod's own words (and a Warning
  Event), instead of "running" with nothing reported.
A second reconcile of an unchanged batch writes nothing.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Callable
from datetime import UTC, datetime
from typing import Any

from pydantic import ValidationError

from qwen_fleet.api import API_VERSION, GROUP, VERSION
from qwen_fleet.api.batch import BATCH_KIND, BATCH_PLURAL, QwenBatch
from qwen_fleet.api.conditions import ConditionType as Type
from qwen_fleet.api.conditions import Reason, find_condition
from qwen_fleet.api.messages import validation_message
from qwen_fleet.api.security import fleet_api_key_ref
from qwen_fleet.config import OperatorConfig
from qwen_fleet.reconcile import adapter
from qwen_fleet.reconcile.batch import (
    Verdict,
    batch_status,
    fleet_port,
    fleet_problem,
    foreign_children,
    held_verdict,
    job_verdict,
    operator_patch,
    pod_problem,
    priority_note,
    transition_event,
)
from qwen_fleet.reconcile.kinds import BATCH_WATCHED
from qwen_fleet.reconcile.kube import KubeClient, KubeError
from qwen_fleet.reconcile.ownership import FOREIGN_RECHECK_SECONDS
from qwen_fleet.reconcile.queue import Key, WorkQueue
from qwen_fleet.render.batch import BATCH_LABEL, job_name, render_batch_children

log = logging.getLogger("qwen_fleet.batch")
FLEET_RECHECK_SECONDS = 30.0
Emit = Callable[[dict[str, Any], str, str, str], None]
Fleets = Callable[[Key], dict[str, Any] | None]


def _now() -> str:
    return datetime.now(UTC).strftime("%Y-%m-%dT%H:%M:%SZ")


class BatchController:
    def __init__(self, kube: KubeClient, config: OperatorConfig, fleets: Fleets, emit: Emit) -> None:
        self.kube, self.config, self.fleets, self.emit = kube, config, fleets, emit
        self.batches: dict[Key, dict[str, Any]] = {}
        self.jobs: dict[Key, dict[str, Any]] = {}  # by the batch's key
        self.pods: dict[Key, dict[str, dict[str, Any]]] = {}  # the Job's pods by name, by the batch's key
        self.queue = WorkQueue()
        # Batches whose children the apiserver refused, by key: (uid, generation). Cleared by the resync.
        self.refused: dict[Key, tuple[str, int]] = {}

    def fleet_event(self, fleet: Key) -> None:
        """A QwenInference appeared or changed: the batches waiting for it look again now, not in 30 s."""
        for key, raw in self.batches.items():
            ref = ((raw.get("spec") or {}).get("fleetRef") or {}).get("name")
            if key[0] == fleet[0] and ref == fleet[1] and key not in self.jobs:
                self.queue.add(key)

    async def reconcile(self, key: Key) -> None:
        raw = self.batches.get(key)
        if raw is None or (raw.get("metadata") or {}).get("deletionTimestamp"):
            return
        meta, old = raw["metadata"], raw.get("status") or {}
        generation = int(meta.get("generation") or 0)
        try:
            batch = QwenBatch.model_validate({"metadata": meta, "spec": raw.get("spec") or {}})
        except ValidationError as err:
            await self._write(raw, Verdict("Stalled", Reason.INVALID_SPEC, validation_message(err)), generation, None)
            return
        name, job = job_name(batch), self.jobs.get(key)
        finished = any(find_condition(old.get("conditions"), t, "True") is not None
                       for t in (Type.COMPLETE, Type.FAILED))
        if job is None and finished:
            return  # its Job was deleted after the end: the status stays the record
        fleet = None
        if batch.spec.fleet_ref is not None:
            fleet = self.fleets((key[0], batch.spec.fleet_ref.name))
            problem = fleet_problem(fleet, batch.spec.fleet_ref.name)
            if problem is not None and job is None:
                await self._write(raw, problem, generation, None)
                self.queue.add_after(key, FLEET_RECHECK_SECONDS)
                return
        if job is None:
            uid = str(meta.get("uid") or "")
            if self.refused.get(key) == (uid, generation):
                return  # refused for this generation: the status says so; the resync gives it one more try
            port = fleet_port(fleet) if fleet is not None else 8000
            api_key = fleet_api_key_ref(fleet) if fleet is not None else None  # vLLM's key: the runner sends it
            children = render_batch_children(batch, self.config.runner_image, self.config.default_image, port,
                                             api_key)
            found = await asyncio.gather(*(self.kube.find(c["apiVersion"], c["kind"], key[0], c["metadata"]["name"])
                                           for c in children))
            held = foreign_children(key[1], API_VERSION, found, BATCH_LABEL)
            if held:  # a name taken by someone else's object: nothing applied, the object untouched
                await self._write(raw, held_verdict(held), generation, None)
                self.queue.add_after(key, FOREIGN_RECHECK_SECONDS)
                return
            job, refusal = await self._apply_children(key[0], children, found)
            if refusal is not None:
                self.refused[key] = (uid, generation)
                await self._write(raw, Verdict("Stalled", Reason.APPLY_REJECTED, refusal.message[:2000]), generation,
                                  None)
                return
            self.refused.pop(key, None)
            if job is not None:
                self.jobs[key] = job
        pod_message = ""
        verdict = job_verdict(job, name, old)
        if verdict.state == "Failed" and old.get("state") != "Failed":
            pod_message = await self._last_pod_message(key[0], name)
            verdict = job_verdict(job, name, old, pod_message)
        if verdict.state in ("Pending", "Running"):
            waiting = pod_problem(self.pods.get(key, {}).values())
            if waiting is not None:
                verdict = Verdict("Pending", waiting[0], f"Job {name} is waiting for its pod: {waiting[1]}")
        if verdict.state in ("Pending", "Running") and fleet is not None:
            verdict = Verdict(verdict.state, verdict.reason, verdict.message + priority_note(fleet))
        await self._write(raw, verdict, generation, job)

    async def _apply_children(self, namespace: str, children: list[dict[str, Any]],
                              found: list[dict[str, Any] | None]) -> tuple[dict[str, Any] | None, KubeError | None]:
        """Apply the children in order: (the Job as applied, None); on a refusal, delete the ones this call
        created (``found`` None: the name was free) and return (None, the refusal). Transient errors are raised
        (the queue retries them)."""
        created: list[dict[str, Any]] = []
        job: dict[str, Any] | None = None
        for child, before in zip(children, found, strict=True):
            try:
                applied = await self.kube.apply(child)
            except KubeError as err:
                if err.transient or err.status == 403:
                    raise
                for made in reversed(created):
                    made_meta = made.get("metadata") or {}
                    await self.kube.delete(str(made["apiVersion"]), str(made["kind"]), namespace,
                                           str(made_meta.get("name")), made_meta.get("uid"))
                log.warning("QwenBatch: %s %s/%s refused: %s", child["kind"], namespace, child["metadata"]["name"],
                            err)
                return None, err
            if before is None:
                created.append({"apiVersion": child["apiVersion"], "kind": child["kind"], **applied})
            if child["kind"] == "Job":
                job = applied
        return job, None

    async def _write(self, raw: dict[str, Any], verdict: Verdict, generation: int,
                     job: dict[str, Any] | None) -> None:
        meta, old = raw["metadata"], raw.get("status") or {}
        name = str((job or {}).get("metadata", {}).get("name") or "") or None
        new = batch_status(old, verdict, generation, name, job, _now())
        patch = operator_patch(old, new)
        if patch is None:
            return
        event = transition_event(old, verdict)
        written = await self.kube.patch_status(API_VERSION, BATCH_KIND, meta["namespace"], meta["name"], patch)
        raw["status"] = written.get("status") or {**old, **patch}  # until the watch catches up
        if event is not None:
            self.emit(raw, event[0], event[1], verdict.message)

    async def _last_pod_message(self, namespace: str, job: str) -> str:
        """The newest failed pod's termination message (the runner's last error: an input it cannot read)."""
        try:
            pods = await self.kube.get(f"/api/v1/namespaces/{namespace}/pods?labelSelector="
                                       f"batch.kubernetes.io/job-name%3D{job}")
        except KubeError as err:
            log.warning("cannot read the pods of Job %s/%s: %s", namespace, job, err)
            return ""
        messages = []
        for pod in (pods or {}).get("items") or []:
            for cs in (pod.get("status") or {}).get("containerStatuses") or []:
                term = (cs.get("state") or {}).get("terminated") or {}
                if term.get("exitCode") and term.get("message"):
                    messages.append((str(term.get("finishedAt") or ""), str(term["message"])))
        return max(messages)[1] if messages else ""


def register_batch(registry: adapter.Registry, get: Callable[[], BatchController | None]) -> None:
    """kopf watches that feed the batch queue: every QwenBatch event, every event of a batch's Job or its pods."""
    def key_of(body: Any) -> Key:
        return (str(body["metadata"].get("namespace") or ""), str(body["metadata"]["name"]))

    @adapter.on_event(registry, GROUP, VERSION, BATCH_PLURAL)
    async def batch_event(event: adapter.RawEvent, **_: Any) -> None:
        body, controller = event.get("object") or {}, get()
        if controller is None or not body.get("metadata"):
            return
        key = key_of(body)
        if event.get("type") == "DELETED":
            controller.batches.pop(key, None)
            return
        controller.batches[key] = dict(body)
        controller.queue.add(key)

    @adapter.on_event(registry, BATCH_WATCHED.group, BATCH_WATCHED.version, BATCH_WATCHED.plural,
                   id="watch_batch_jobs", labels={BATCH_LABEL: adapter.PRESENT})
    async def job_event(event: adapter.RawEvent, **_: Any) -> None:
        body, controller = event.get("object") or {}, get()
        if controller is None or not body.get("metadata"):
            return
        key = (str(body["metadata"].get("namespace") or ""), str(body["metadata"]["labels"][BATCH_LABEL]))
        if event.get("type") == "DELETED":
            controller.jobs.pop(key, None)
            controller.queue.add(key)
        else:
            controller.jobs[key] = dict(body)
            controller.queue.add_after(key, 0.5)

    @adapter.on_event(registry, "", "v1", "pods", id="watch_batch_pods", labels={BATCH_LABEL: adapter.PRESENT})
    async def pod_event(event: adapter.RawEvent, **_: Any) -> None:
        body, controller = event.get("object") or {}, get()
        if controller is None or not body.get("metadata"):
            return
        key = (str(body["metadata"].get("namespace") or ""), str(body["metadata"]["labels"][BATCH_LABEL]))
        pods = controller.pods.setdefault(key, {})
        if event.get("type") == "DELETED":
            pods.pop(str(body["metadata"]["name"]), None)
            if not pods:
                del controller.pods[key]
        else:
            pods[str(body["metadata"]["name"])] = dict(body)
        controller.queue.add_after(key, 0.5)


async def batch_worker(controller: BatchController) -> None:
    queue = controller.queue
    while True:
        key = await queue.get()
        try:
            await controller.reconcile(key)
        except KubeError as err:
            delay = queue.retry(key)
            log.warning("QwenBatch %s/%s: %s; retrying in %.0fs", key[0], key[1], err, delay)
        except Exception as err:  # a bug: log it with context, back off, keep going
            delay = queue.retry(key)
            log.exception("QwenBatch %s/%s: reconcile failed (%s); retrying in %.0fs", key[0], key[1], err, delay)
        else:
            queue.forget(key)
        finally:
            queue.done(key)


async def batch_resync(controller: BatchController, seconds: float) -> None:
    while True:
        await asyncio.sleep(seconds)
        controller.refused.clear()  # a refused spec gets one more attempt per resync
        for key in list(controller.batches):
            controller.queue.add(key)
