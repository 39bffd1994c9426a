"""The QwenBatch reconcile with a recording stand-in for the API: what it writes, and that a second reconcile
of an unchanged batch writes nothing (the watches' view is fed back as the apiserver would)."""

from __future__ import annotations

import asyncio
import copy
from typing import Any

import pytest

from qwen_fleet.config import OperatorConfig
from qwen_fleet.reconcile.batch_controller import BatchController
from qwen_fleet.reconcile.kube import KubeError
from tests.invalid_batch_specs import BATCH_BASE

KEY = ("team", "sums")
FLEET = {"metadata": {"name": "qwen", "namespace": "team"}, "spec": {"engine": {"schedulingPolicy": "priority"}}}


class RecordingKube:
    def __init__(self) -> None:
        self.applied: list[dict[str, Any]] = []
        self.patched: list[dict[str, Any]] = []

    async def apply(self, obj: dict[str, Any]) -> dict[str, Any]:
        self.applied.append(obj)
        return copy.deepcopy(obj)

    async def patch_status(self, api_version: str, kind: str, ns: str, name: str,
                           status: dict[str, Any]) -> dict[str, Any]:
        self.patched.append(status)
        return {}

    async def get(self, path: str) -> Any:
        return {"items": []}

    async def find(self, api_version: str, kind: str, ns: str, name: str) -> dict[str, Any] | None:
        return None  # no object holds a child's name (tests/unit/test_ownership.py has those that do)


def _controller(fleets: dict[tuple[str, str], dict[str, Any]]) -> tuple[BatchController, RecordingKube,
                                                                         list[tuple[str, str]]]:
    kube, events = RecordingKube(), []
    controller = BatchController(kube, OperatorConfig(), fleets.get,  # type: ignore[arg-type]
                                 emit=lambda _obj, type_, reason, _msg: events.append((type_, reason)))
    controller.batches[KEY] = {"apiVersion": "qwenfleet.io/v1alpha1", "kind": "QwenBatch",
                               "metadata": {"name": "sums", "namespace": "team", "uid": "u1", "generation": 1},
                               "spec": copy.deepcopy(BATCH_BASE)}
    return controller, kube, events


def _store_status(controller: BatchController) -> None:
    """What the watch would bring back: the stored status with the operator's patch merged in."""
    raw = controller.batches[KEY]
    for patch in controller.kube.patched:  # type: ignore[attr-defined]
        raw["status"] = {**(raw.get("status") or {}), **patch}


def test_missing_fleet_stalls_once_then_the_fleet_brings_the_job() -> None:
    async def scenario() -> None:
        fleets: dict[tuple[str, str], dict[str, Any]] = {}
        controller, kube, events = _controller(fleets)
        await controller.reconcile(KEY)
        assert kube.applied == [] and kube.patched[-1]["state"] == "Stalled"
        assert events == [("Warning", "FleetNotFound")]
        _store_status(controller)
        writes = len(kube.patched)
        await controller.reconcile(KEY)
        assert len(kube.patched) == writes and events == [("Warning", "FleetNotFound")]  # nothing new

        fleets[("team", "qwen")] = FLEET
        controller.fleet_event(("team", "qwen"))
        assert len(controller.queue) == 1
        await controller.reconcile(KEY)
        assert [o["kind"] for o in kube.applied] == ["ServiceAccount", "Role", "RoleBinding", "Job"]
        assert kube.patched[-1]["state"] == "Pending" and kube.patched[-1]["job"] == "sums-batch"
        _store_status(controller)
        applied, writes = len(kube.applied), len(kube.patched)
        await controller.reconcile(KEY)  # the Job is known (just applied): nothing to write
        assert (len(kube.applied), len(kube.patched)) == (applied, writes)

    asyncio.run(scenario())


def test_a_finished_batch_whose_job_is_deleted_is_left_alone() -> None:
    async def scenario() -> None:
        controller, kube, _ = _controller({("team", "qwen"): FLEET})
        controller.jobs[KEY] = {"metadata": {"name": "sums-batch"}, "spec": {},
                                "status": {"conditions": [{"type": "Complete", "status": "True"}],
                                           "completionTime": "2026-12-01T01:00:00Z"}}
        await controller.reconcile(KEY)
        assert kube.patched[-1]["state"] == "Complete"
        assert kube.patched[-1]["completionTime"] == "2026-12-01T01:00:00Z"
        _store_status(controller)
        del controller.jobs[KEY]  # someone deleted the finished Job (or a TTL did)
        writes = len(kube.patched)
        await controller.reconcile(KEY)
        assert kube.applied == [] and len(kube.patched) == writes  # no new Job, the status stays the record

    asyncio.run(scenario())


def test_a_pod_the_scheduler_cannot_place_makes_the_batch_pending_with_its_words() -> None:
    async def scenario() -> None:
        controller, kube, events = _controller({("team", "qwen"): FLEET})
        controller.jobs[KEY] = {"metadata": {"name": "sums-batch"}, "spec": {}, "status": {"active": 1}}
        controller.pods[KEY] = {"sums-batch-x": {
            "metadata": {"name": "sums-batch-x", "creationTimestamp": "2026-12-02T10:00:00Z"},
            "status": {"phase": "Pending", "conditions": [
                {"type": "PodScheduled", "status": "False", "reason": "Unschedulable",
                 "message": "0/2 nodes are available: 2 node(s) didn't match Pod's node affinity/selector."}]}}}
        await controller.reconcile(KEY)
        status = kube.patched[-1]
        assert status["state"] == "Pending"
        reconciling = next(c for c in status["conditions"] if c["type"] == "Reconciling")
        assert (reconciling["status"], reconciling["reason"]) == ("True", "Unschedulable")
        assert "pod sums-batch-x cannot be scheduled: 0/2 nodes are available" in reconciling["message"]
        assert events == [("Warning", "Unschedulable")]
        _store_status(controller)
        writes = len(kube.patched)
        await controller.reconcile(KEY)  # unchanged: no write, no second Event
        assert len(kube.patched) == writes and events == [("Warning", "Unschedulable")]

        pod = controller.pods[KEY]["sums-batch-x"]  # placed, running and Ready: the batch runs
        pod["status"] = {"phase": "Running", "conditions": [{"type": "PodScheduled", "status": "True"},
                                                            {"type": "Ready", "status": "True"}]}
        await controller.reconcile(KEY)
        assert kube.patched[-1]["state"] == "Running" and events == [("Warning", "Unschedulable")]

    asyncio.run(scenario())


class RefusingKube(RecordingKube):
    """The apiserver refuses the Job (an admission policy or validation: 422), or answers ``transient``."""

    def __init__(self, status: int = 422) -> None:
        super().__init__()
        self.status = status
        self.deleted: list[tuple[str, str, str | None]] = []
        self.job_attempts = 0

    async def apply(self, obj: dict[str, Any]) -> dict[str, Any]:
        if obj["kind"] == "Job":
            self.job_attempts += 1
            raise KubeError(self.status, "Invalid" if self.status == 422 else "TooManyRequests",
                            "jobs.batch \"sums-batch\" is forbidden: Jobs are not allowed here")
        done = await super().apply(obj)
        done["metadata"]["uid"] = f"uid-{obj['kind']}"
        return done

    async def delete(self, api_version: str, kind: str, ns: str, name: str, uid: str | None) -> None:
        self.deleted.append((kind, name, uid))


def test_a_refused_job_undoes_the_batch_children_and_stalls_with_the_apiservers_words_once_per_generation() -> None:
    async def scenario() -> None:
        kube, events = RefusingKube(422), []
        controller = BatchController(kube, OperatorConfig(), {("team", "qwen"): FLEET}.get,  # type: ignore[arg-type]
                                     emit=lambda _obj, type_, reason, _msg: events.append((type_, reason)))
        raw: dict[str, Any] = {"apiVersion": "qwenfleet.io/v1alpha1", "kind": "QwenBatch",
                               "metadata": {"name": "sums", "namespace": "team", "uid": "u1", "generation": 1},
                               "spec": copy.deepcopy(BATCH_BASE)}
        controller.batches[KEY] = raw
        await controller.reconcile(KEY)  # no exception: nothing for the queue to retry
        assert kube.job_attempts == 1
        # What it created before the refusal goes again, newest first, each by its uid.
        assert kube.deleted == [("RoleBinding", "sums-batch-runner", "uid-RoleBinding"),
                                ("Role", "sums-batch-runner", "uid-Role"),
                                ("ServiceAccount", "sums-batch-runner", "uid-ServiceAccount")]
        status = kube.patched[-1]
        stalled = next(c for c in status["conditions"] if c["type"] == "Stalled")
        assert (status["state"], stalled["status"], stalled["reason"]) == ("Stalled", "True", "ApplyRejected")
        assert "Jobs are not allowed here" in stalled["message"]
        assert events == [("Warning", "ApplyRejected")]
        _store_status(controller)
        await controller.reconcile(KEY)  # the same generation: held, no second attempt, no write
        assert kube.job_attempts == 1 and len(kube.patched) == 1
        controller.refused.clear()  # the resync: one more attempt, refused again, no new Event
        await controller.reconcile(KEY)
        assert kube.job_attempts == 2 and events == [("Warning", "ApplyRejected")]
        raw["metadata"]["generation"] = 2  # a new spec is tried at once
        await controller.reconcile(KEY)
        assert kube.job_attempts == 3

    asyncio.run(scenario())


def test_a_transient_error_on_the_job_is_raised_for_the_queue_to_retry() -> None:
    async def scenario() -> None:
        kube = RefusingKube(429)
        controller = BatchController(kube, OperatorConfig(), {("team", "qwen"): FLEET}.get,  # type: ignore[arg-type]
                                     emit=lambda *_: None)
        controller.batches[KEY] = {"apiVersion": "qwenfleet.io/v1alpha1", "kind": "QwenBatch",
                                   "metadata": {"name": "sums", "namespace": "team", "uid": "u1", "generation": 1},
                                   "spec": copy.deepcopy(BATCH_BASE)}
        with pytest.raises(KubeError):
            await controller.reconcile(KEY)
        assert kube.deleted == [] and kube.patched == [] and controller.refused == {}

    asyncio.run(scenario())
