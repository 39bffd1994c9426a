"""The model prefetch gate: where the Job that fills the cache claim stands, and what waits for it. Pure.

The choice (docs/qwen-layer.md, "Model sources"): while the wanted prefetch Job has not succeeded, the
operator applies only what the Job needs (the cache claim and the Job itself) and holds everything else as
it is: a new fleet has no Deployment, Service or autoscaler yet (so a failed download leaves no half-made
fleet, only the claim and the failed Job to read); a running fleet whose model changed keeps serving the old
model, untouched, until the new one is on the claim. Nothing is pruned meanwhile. An init container waiting in
every replica for the files was the alternative; it makes pods that sit in Init for as long as a download
takes (or forever, when it fails), on GPUs reserved for nothing, and a rollout of them.

Job states are read from the Job controller's terminal conditions (batch/v1): ``Complete`` or ``Failed``
with ``status: "True"`` (``SuccessCriteriaMet`` / ``FailureTarget`` come before them while pods finish).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any, Literal

from qwen_fleet.api.conditions import conditions_of, find_condition

JOB_KIND = "Job"
# What a prefetch Job needs to run: applied while everything else waits.
PREFETCH_NEEDS = (JOB_KIND, "PersistentVolumeClaim")
State = Literal["Pending", "Running", "Succeeded", "Failed"]


@dataclass(frozen=True)
class Prefetch:
    job: str
    state: State
    reason: str = ""
    message: str = ""

    @property
    def done(self) -> bool:
        return self.state == "Succeeded"

    def status(self) -> dict[str, Any]:
        """status.prefetch."""
        out: dict[str, Any] = {"job": self.job, "state": self.state}
        if self.reason:
            out["reason"] = self.reason
        if self.message:
            out["message"] = self.message[:2000]
        return out


def job_condition(job: Mapping[str, Any], type_: str) -> Mapping[str, Any] | None:
    """The Job's condition of this type when it is True (batch/v1: Complete, Failed)."""
    return find_condition(conditions_of(job), type_, "True")


def job_state(name: str, job: Mapping[str, Any] | None) -> Prefetch:
    """The Job as observed (None: not created yet)."""
    if job is None:
        return Prefetch(name, "Pending", "Creating", f"creating Job {name}")
    if job_condition(job, "Complete") is not None:
        return Prefetch(name, "Succeeded", "Complete", f"Job {name} downloaded the model")
    failed = job_condition(job, "Failed")
    if failed is not None:
        return Prefetch(name, "Failed", str(failed.get("reason") or "Failed"), str(failed.get("message") or ""))
    st = job.get("status") or {}
    active, failures = int(st.get("active") or 0), int(st.get("failed") or 0)
    if active:
        retry = f" (attempt {failures + 1})" if failures else ""
        return Prefetch(name, "Running", "Downloading", f"Job {name} is downloading the model{retry}")
    return Prefetch(name, "Pending", "Pending", f"Job {name} is waiting for its pod"
                    + (f" ({failures} failed attempt(s))" if failures else ""))


def prefetch_of(desired: Sequence[Mapping[str, Any]] | None,
                observed: Mapping[tuple[str, str], Mapping[str, Any]]) -> Prefetch | None:
    """The wanted prefetch Job's state; None when the spec asks for no prefetch (or cannot be rendered)."""
    for obj in desired or ():
        if obj["kind"] == JOB_KIND:
            name = str(obj["metadata"]["name"])
            return job_state(name, observed.get((JOB_KIND, name)))
    return None


def failed_message(p: Prefetch, model: str) -> str:
    return (f"the prefetch Job {p.job} for {model} failed ({p.reason}: {p.message}); nothing else is applied. "
            f"Fix the cause (the model name, the token Secret, the network) and delete the Job to retry, or "
            f"change the spec")
