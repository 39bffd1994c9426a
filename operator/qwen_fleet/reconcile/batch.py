"""What a QwenBatch needs and what its status says, from the batch, its fleet and its Job as observed. Pure.

Status is shared by two writers, each with its own fields: the runner in the Job applies the counts (total,
completed, failed, tokens, tokensPerSecond, etaSeconds, progressTime; batchrun/kube.py) with server-side apply
under its own field manager; the operator merge-patches the fields in ``OPERATOR_FIELDS`` and never the
others, so neither overwrites the other.

Conditions: kstatus's Ready / Reconciling / Stalled, plus ``Complete`` and ``Failed`` as a Job has them
(``kubectl wait --for=condition=Complete qwb/x``). The Job's own terminal conditions decide (batch/v1:
``Complete`` or ``Failed`` with status True), as for the prefetch Job (reconcile/prefetch.py).
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from typing import Any

from qwen_fleet.api.conditions import ConditionType as Type
from qwen_fleet.api.conditions import condition, conditions_of, find_condition
from qwen_fleet.batchrun.redact import redact_urls
from qwen_fleet.reconcile.ownership import FOREIGN_REASON, Foreign, controlled_by, foreign, held_message
from qwen_fleet.reconcile.prefetch import job_condition
from qwen_fleet.reconcile.status import WAITING_TROUBLE

OPERATOR_FIELDS = ("observedGeneration", "conditions", "job", "state", "startTime", "completionTime")
CONDITION_TYPES = (Type.READY, Type.RECONCILING, Type.STALLED, Type.COMPLETE, Type.FAILED)
POD_PROBLEMS = WAITING_TROUBLE | {"Unschedulable"}


@dataclass(frozen=True)
class Verdict:
    """Where the batch stands: state (the STATUS column), reason and message for the conditions."""

    state: str  # Pending | Running | Complete | Failed | Stalled
    reason: str
    message: str

    @property
    def finished(self) -> bool:
        return self.state in ("Complete", "Failed")


def fleet_problem(fleet: Mapping[str, Any] | None, fleet_name: str) -> Verdict | None:
    if fleet is None:
        return Verdict("Stalled", "FleetNotFound", f"QwenInference {fleet_name} does not exist in this namespace; "
                       "the Job is created once it does")
    return None


def foreign_children(batch_name: str, api_version: str, found: Iterable[Mapping[str, Any] | None],
                     batch_label: str) -> tuple[Foreign, ...]:
    """Of the objects found under the names of the batch's children, those not the batch's (ownership.py):
    neither controlled by it nor, like its output ConfigMap (no owner: the results outlive the batch), labelled
    with its name and owned by no one."""
    out = []
    for obj in found:
        if obj is None or controlled_by(obj, api_version, "QwenBatch", batch_name):
            continue
        meta = obj.get("metadata") or {}
        if not meta.get("ownerReferences") and (meta.get("labels") or {}).get(batch_label) == batch_name:
            continue
        out.append(foreign(obj))
    return tuple(out)


def held_verdict(held: tuple[Foreign, ...]) -> Verdict:
    return Verdict("Stalled", FOREIGN_REASON, held_message(held, "QwenBatch"))


def fleet_port(fleet: Mapping[str, Any]) -> int:
    return int(((fleet.get("spec") or {}).get("service") or {}).get("port") or 8000)


def priority_note(fleet: Mapping[str, Any] | None) -> str:
    """vLLM ignores a request's priority unless it schedules by priority: say so where it matters."""
    policy = (((fleet or {}).get("spec") or {}).get("engine") or {}).get("schedulingPolicy")
    if fleet is None or policy == "priority":
        return ""
    return (" Note: the fleet schedules first come, first served, so batch requests do not yield to interactive "
            "ones; set engine.schedulingPolicy: priority on the QwenInference.")


def job_verdict(job: Mapping[str, Any] | None, job_name: str, counts: Mapping[str, Any],
                pod_message: str = "") -> Verdict:
    """The Job as observed (None: not created yet); ``counts`` is the status the runner reported."""
    done = _counts(counts)
    if job is None:
        return Verdict("Pending", "Creating", f"creating Job {job_name}")
    if job_condition(job, Type.COMPLETE) is not None:
        return Verdict("Complete", "Complete", f"Job {job_name} finished: {done}")
    failed = job_condition(job, Type.FAILED)
    if failed is not None:
        why = str(failed.get("message") or failed.get("reason") or "")
        said = redact_urls(pod_message.strip())  # an input URL's credentials stay out of status and Events
        last = f"; its last pod said: {said[-1500:]}" if said else ""
        return Verdict("Failed", str(failed.get("reason") or "JobFailed"), f"Job {job_name} failed ({why}){last}; "
                       f"{done}. Lines already written are kept: fix the cause, delete and recreate the "
                       "QwenBatch to resume")
    spec, st = job.get("spec") or {}, job.get("status") or {}
    if spec.get("suspend"):
        return Verdict("Pending", "Queued", f"Job {job_name} is suspended, waiting for Kueue to admit it")
    failures = int(st.get("failed") or 0)
    retry = f" (attempt {failures + 1}, resuming)" if failures else ""
    if int(st.get("active") or 0):
        return Verdict("Running", "Running", f"Job {job_name} is running{retry}: {done}")
    return Verdict("Pending", "Pending", f"Job {job_name} is waiting for its pod{retry}")


def pod_problem(pods: Iterable[Mapping[str, Any]]) -> tuple[str, str] | None:
    """Why the Job's live pod is not running, as (reason, message), or None: the scheduler found no node for it
    (its PodScheduled condition), or a container waits for something that will not come by itself
    (``WAITING_TROUBLE``, as for a fleet's pods). None as soon as one live pod is Ready: the batch is running."""
    live = [p for p in pods if not (p.get("metadata") or {}).get("deletionTimestamp")
            and (p.get("status") or {}).get("phase") in (None, "Pending", "Running")]
    if any(_pod_condition(p, "Ready").get("status") == "True" for p in live):
        return None
    for pod in sorted(live, key=lambda p: str((p.get("metadata") or {}).get("creationTimestamp") or ""),
                      reverse=True):  # the newest pod is the one the Job waits for
        name = str((pod.get("metadata") or {}).get("name") or "")
        scheduled = _pod_condition(pod, "PodScheduled")
        if scheduled.get("status") == "False" and scheduled.get("reason") == "Unschedulable":
            return "Unschedulable", f"pod {name} cannot be scheduled: {_short(scheduled.get('message'))}"
        st = pod.get("status") or {}
        for cs in [*(st.get("initContainerStatuses") or []), *(st.get("containerStatuses") or [])]:
            waiting = (cs.get("state") or {}).get("waiting") or {}
            reason = str(waiting.get("reason") or "")
            if reason in WAITING_TROUBLE:
                said = f": {_short(waiting.get('message'))}" if waiting.get("message") else ""
                return reason, f"pod {name}, container {cs.get('name')}: {reason}{said}"
    return None


def _pod_condition(pod: Mapping[str, Any], type_: str) -> Mapping[str, Any]:
    return dict(find_condition(conditions_of(pod), type_) or {})


def _short(text: Any, limit: int = 600) -> str:
    words = " ".join(str(text or "").split())
    return words if len(words) <= limit else words[:limit - 3] + "..."


def _counts(status: Mapping[str, Any]) -> str:
    if status.get("total") is None:
        return "no progress reported yet"
    return f"{status.get('completed') or 0} completed, {status.get('failed') or 0} failed of {status['total']}"


def batch_status(old: Mapping[str, Any] | None, verdict: Verdict, generation: int, job_name: str | None,
                 job: Mapping[str, Any] | None, now: str) -> dict[str, Any]:
    """The operator's fields of status.
    Ready: finished successfully. Reconciling: on its way. Stalled: it will not finish without a change."""
    old = old or {}
    previous = list(old.get("conditions") or [])
    state = verdict.state
    values = {
        Type.READY: ("True" if state == "Complete" else "False"),
        Type.RECONCILING: ("True" if state in ("Pending", "Running") else "False"),
        Type.STALLED: ("True" if state in ("Stalled", "Failed") else "False"),
        Type.COMPLETE: ("True" if state == "Complete" else "False"),
        Type.FAILED: ("True" if state == "Failed" else "False"),
    }
    out: dict[str, Any] = {
        "observedGeneration": generation,
        "conditions": [condition(previous, t, values[t], verdict.reason, verdict.message, generation, now)
                       for t in CONDITION_TYPES],
        "state": state,
    }
    if job_name:
        out["job"] = job_name
    st = (job or {}).get("status") or {}
    for key in ("startTime", "completionTime"):
        value = st.get(key) or old.get(key)
        if value:
            out[key] = value
    return out


def operator_patch(old: Mapping[str, Any] | None, new: Mapping[str, Any]) -> dict[str, Any] | None:
    """A merge patch of the operator's fields only, or None when they already read so (no write)."""
    old = old or {}
    patch = {k: new.get(k) for k in OPERATOR_FIELDS if old.get(k) != new.get(k)}
    return patch or None


def transition_event(old: Mapping[str, Any] | None, verdict: Verdict) -> tuple[str, str] | None:
    """(type, reason) of the Event a new verdict deserves; None when the state did not change."""
    if (old or {}).get("state") == verdict.state and _reason(old) == verdict.reason:
        return None
    if verdict.state == "Complete":
        return "Normal", "Complete"
    if verdict.state in ("Failed", "Stalled") or (verdict.state == "Pending" and verdict.reason in POD_PROBLEMS):
        return "Warning", verdict.reason
    return None


def _reason(status: Mapping[str, Any] | None) -> str:
    ready = find_condition((status or {}).get("conditions"), Type.READY)
    return str((ready or {}).get("reason") or "")
