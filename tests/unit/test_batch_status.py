"""A QwenBatch's status from its Job as observed (reconcile/batch.py): the verdict, the conditions
`kubectl wait` reads, the operator's fields only, Events on transitions."""

from __future__ import annotations

from typing import Any

import pytest

from qwen_fleet.reconcile.batch import (
    OPERATOR_FIELDS,
    Verdict,
    batch_status,
    fleet_problem,
    job_verdict,
    operator_patch,
    pod_problem,
    priority_note,
    transition_event,
)

COUNTS = {"total": 10, "completed": 7, "failed": 1}


def _job(conditions: list[dict[str, Any]] | None = None, **status: Any) -> dict[str, Any]:
    return {"metadata": {"name": "b-batch"}, "spec": {}, "status": {"conditions": conditions or [], **status}}


@pytest.mark.parametrize(("job", "state", "reason", "words"), [
    (None, "Pending", "Creating", "creating Job b-batch"),
    ({"metadata": {}, "spec": {"suspend": True}, "status": {}}, "Pending", "Queued", "waiting for Kueue"),
    (_job(active=1), "Running", "Running", "7 completed, 1 failed of 10"),
    (_job(active=1, failed=2), "Running", "Running", "attempt 3, resuming"),
    (_job(), "Pending", "Pending", "waiting for its pod"),
    (_job([{"type": "Complete", "status": "True"}]), "Complete", "Complete", "finished: 7 completed"),
    (_job([{"type": "Failed", "status": "True", "reason": "BackoffLimitExceeded",
            "message": "Job has reached the specified backoff limit"}]), "Failed", "BackoffLimitExceeded",
     "Lines already written are kept"),
    # FailureTarget comes before Failed while the pods finish: not yet terminal.
    (_job([{"type": "FailureTarget", "status": "True"}], active=1), "Running", "Running", "running"),
])
def test_job_verdict(job: dict[str, Any] | None, state: str, reason: str, words: str) -> None:
    verdict = job_verdict(job, "b-batch", COUNTS)
    assert (verdict.state, verdict.reason) == (state, reason)
    assert words in verdict.message


def test_a_failed_jobs_last_pod_message_is_in_the_verdict() -> None:
    job = _job([{"type": "Failed", "status": "True", "reason": "BackoffLimitExceeded"}])
    verdict = job_verdict(job, "b-batch", {}, "qwen-fleet batch-run: cannot read the input https://x: 404")
    assert "cannot read the input https://x: 404" in verdict.message


def test_a_url_in_the_last_pod_message_loses_its_credentials_before_status_and_events() -> None:
    job = _job([{"type": "Failed", "status": "True", "reason": "BackoffLimitExceeded"}])
    said = ("qwen-fleet batch-run: cannot read the input "
            "https://u:hunter2@bucket.example/in.jsonl?X-Amz-Signature=deadbeef: HTTP Error 403: Forbidden")
    verdict = job_verdict(job, "b-batch", {}, said)
    assert "the input https://***@bucket.example/in.jsonl?...: HTTP Error 403" in verdict.message
    assert "hunter2" not in verdict.message and "deadbeef" not in verdict.message


def test_missing_fleet_is_stalled_with_its_reason() -> None:
    verdict = fleet_problem(None, "qwen")
    assert verdict is not None and (verdict.state, verdict.reason) == ("Stalled", "FleetNotFound")
    assert fleet_problem({"spec": {}}, "qwen") is None


def test_priority_note_only_for_a_fleet_that_ignores_priority() -> None:
    assert "schedulingPolicy: priority" in priority_note({"spec": {"engine": {}}})
    assert priority_note({"spec": {"engine": {"schedulingPolicy": "priority"}}}) == ""


def _conditions(status: dict[str, Any]) -> dict[str, str]:
    return {c["type"]: c["status"] for c in status["conditions"]}


def test_conditions_for_kubectl_wait() -> None:
    complete = batch_status(None, Verdict("Complete", "Complete", "done"), 1, "b-batch", None, "T1")
    assert _conditions(complete) == {"Ready": "True", "Reconciling": "False", "Stalled": "False",
                                     "Complete": "True", "Failed": "False"}
    failed = batch_status(None, Verdict("Failed", "BackoffLimitExceeded", "x"), 1, "b-batch", None, "T1")
    assert _conditions(failed)["Failed"] == "True" and _conditions(failed)["Stalled"] == "True"
    running = batch_status(None, Verdict("Running", "Running", "x"), 1, "b-batch", None, "T1")
    assert _conditions(running)["Reconciling"] == "True" and _conditions(running)["Complete"] == "False"


def test_the_operator_patches_its_own_fields_only_and_nothing_when_unchanged() -> None:
    job = _job(active=1, startTime="2026-12-01T00:00:00Z")
    verdict = job_verdict(job, "b-batch", COUNTS)
    first = batch_status(None, verdict, 3, "b-batch", job, "T1")
    patch = operator_patch(None, first)
    assert patch is not None and set(patch) <= set(OPERATOR_FIELDS)
    assert patch["startTime"] == "2026-12-01T00:00:00Z" and patch["state"] == "Running"
    # As stored: the runner's counts beside the operator's fields. The same verdict later writes nothing, and
    # a transition time does not move.
    stored = {**first, **COUNTS, "tokensPerSecond": 3.5}
    again = batch_status(stored, verdict, 3, "b-batch", job, "T2")
    assert operator_patch(stored, again) is None
    done = batch_status(stored, Verdict("Complete", "Complete", "ok"), 3, "b-batch", job, "T3")
    patch = operator_patch(stored, done)
    assert patch is not None and not {"completed", "total", "failed", "tokensPerSecond"} & set(patch)


def test_events_on_transitions_only() -> None:
    stalled = Verdict("Stalled", "FleetNotFound", "no fleet")
    assert transition_event(None, stalled) == ("Warning", "FleetNotFound")
    old = batch_status(None, stalled, 1, None, None, "T")
    assert transition_event(old, stalled) is None
    assert transition_event(old, Verdict("Complete", "Complete", "ok")) == ("Normal", "Complete")
    assert transition_event(old, Verdict("Running", "Running", "x")) is None


def _pod(name: str, created: str = "2026-12-02T10:00:00Z", phase: str = "Pending",
         conditions: list[dict[str, Any]] | None = None, waiting: dict[str, Any] | None = None,
         terminating: bool = False) -> dict[str, Any]:
    meta: dict[str, Any] = {"name": name, "creationTimestamp": created}
    if terminating:
        meta["deletionTimestamp"] = "2026-12-02T10:05:00Z"
    state = {"waiting": waiting} if waiting else {"running": {"startedAt": created}}
    return {"metadata": meta, "status": {"phase": phase, "conditions": conditions or [],
                                         "containerStatuses": [{"name": "runner", "state": state}]}}


UNSCHEDULABLE = {"type": "PodScheduled", "status": "False", "reason": "Unschedulable",
                 "message": "0/3 nodes are available: 3 node(s) didn't match Pod's node affinity/selector."}
READY = {"type": "Ready", "status": "True"}


@pytest.mark.parametrize(("pods", "expected"), [
    ([], None),
    ([_pod("a", conditions=[UNSCHEDULABLE])],
     ("Unschedulable", "pod a cannot be scheduled: 0/3 nodes are available: 3 node(s) didn't match Pod's node "
                       "affinity/selector.")),
    ([_pod("a", waiting={"reason": "ImagePullBackOff", "message": 'Back-off pulling image "r/x:1"'})],
     ("ImagePullBackOff", 'pod a, container runner: ImagePullBackOff: Back-off pulling image "r/x:1"')),
    ([_pod("a", waiting={"reason": "CreateContainerConfigError"})],
     ("CreateContainerConfigError", "pod a, container runner: CreateContainerConfigError")),
    # on its way: not a problem
    ([_pod("a", waiting={"reason": "ContainerCreating"})], None),
    ([_pod("a", conditions=[{"type": "PodScheduled", "status": "False", "reason": "SchedulerError"}])], None),
    # one Ready pod: the batch runs, whatever a second pod says
    ([_pod("a", phase="Running", conditions=[READY]), _pod("b", conditions=[UNSCHEDULABLE])], None),
    # gone or going pods do not count; the newest live one speaks
    ([_pod("a", terminating=True, conditions=[UNSCHEDULABLE]), _pod("b", phase="Failed", conditions=[UNSCHEDULABLE])],
     None),
    ([_pod("old", conditions=[UNSCHEDULABLE]),
      _pod("new", created="2026-12-02T10:01:00Z", waiting={"reason": "ErrImagePull", "message": "not found"})],
     ("ErrImagePull", "pod new, container runner: ErrImagePull: not found")),
], ids=["none", "unschedulable", "image", "config", "creating", "scheduler-error", "one-ready", "gone", "newest"])
def test_pod_problem(pods: list[dict[str, Any]], expected: tuple[str, str] | None) -> None:
    assert pod_problem(pods) == expected


def test_a_long_pod_message_is_cut_to_one_line() -> None:
    long = {**UNSCHEDULABLE, "message": "0/900 nodes are available:\n" + "x " * 600}
    reason, message = pod_problem([_pod("a", conditions=[long])]) or ("", "")
    assert reason == "Unschedulable" and "\n" not in message
    assert message.endswith("...") and len(message) < 700


def test_a_pod_problem_is_a_warning_once() -> None:
    waiting = Verdict("Pending", "Unschedulable", "Job b-batch is waiting for its pod: ...")
    old = batch_status(None, Verdict("Running", "Running", "x"), 1, "b-batch", None, "T")
    assert transition_event(old, waiting) == ("Warning", "Unschedulable")
    assert transition_event(batch_status(old, waiting, 1, "b-batch", None, "T"), waiting) is None
    assert transition_event(old, Verdict("Pending", "Pending", "waiting for its pod")) is None
