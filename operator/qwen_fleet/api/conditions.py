"""Condition types and reasons of our resources as typed constants, the one builder and the one lookup. Pure.

LeaderWorkerSet's ``LeaderWorkerSetConditionType`` consts are the model: a module that makes a condition, or
reads one to decide something (the Event policy in reconcile/controller.py, a batch's transition Event, the
printer columns, the serving benchmark's wait), names its type and reason from here, never as a bare string of
its own. Part of the API (``kubectl wait --for=condition=Ready``), and free of imports, so that the benchmark
client can read conditions without loading the controller. The values are plain ``str`` (not an Enum), so a status
is the same JSON and YAML as before and compares equal to what the apiserver returns.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from typing import Any, Final


class ConditionType:
    """``status.conditions[].type`` of a QwenInference or QwenBatch."""

    # kstatus (Flux, Argo CD, ``kubectl wait --for=condition=Ready``): on both kinds.
    READY: Final = "Ready"
    RECONCILING: Final = "Reconciling"
    STALLED: Final = "Stalled"
    # A QwenBatch's end, as a Job has it (``kubectl wait --for=condition=Complete qwb/x``).
    COMPLETE: Final = "Complete"
    FAILED: Final = "Failed"
    # Mirrored from the fleet's autoscaler: the HorizontalPodAutoscaler's own two, and KEDA's ScaledObject's
    # Ready and Fallback under names of ours (reconcile/status.py KEDA_MIRRORED).
    SCALING_ACTIVE: Final = "ScalingActive"
    SCALING_LIMITED: Final = "ScalingLimited"
    SCALED_OBJECT_READY: Final = "ScaledObjectReady"
    SCALED_OBJECT_FALLBACK: Final = "ScaledObjectFallback"
    # Scale to zero: whether a cold start reads the weights from model.cache (reconcile/cold_start.py).
    MODEL_CACHED: Final = "ModelCached"


# The autoscaler's conditions, as mirrored into the fleet's status (their changes are Normal Events).
AUTOSCALER_CONDITIONS: Final = (ConditionType.SCALING_ACTIVE, ConditionType.SCALING_LIMITED,
                                ConditionType.SCALED_OBJECT_READY, ConditionType.SCALED_OBJECT_FALLBACK)


class Reason:
    """Reasons of a fleet's Ready / Reconciling / Stalled that another module reads (status.py makes them)."""

    # Applied and rolling out (reconcile/status.py _rollout).
    CREATING: Final = "Creating"
    ROLLING_OUT: Final = "RollingOut"
    READY: Final = "Ready"
    SCALED_TO_ZERO: Final = "ScaledToZero"
    SCALING_FROM_ZERO: Final = "ScalingFromZero"
    PROGRESSING: Final = "Progressing"  # Stalled False while on the way
    PENDING: Final = "Pending"  # no plan (the spec did not parse)
    # On the way, but in trouble: a Warning Event when it appears (controller.py TROUBLE).
    NCCL_PREFLIGHT_FAILED: Final = "NCCLPreflightFailed"
    ENGINE_FAILED: Final = "EngineFailed"
    PODS_PENDING: Final = "PodsPending"
    FAILED_CREATE: Final = "FailedCreate"  # the Deployment's ReplicaFailure without a reason of its own
    RETRYING: Final = "Retrying"  # a transient API error; the key is retried with backoff
    # The model prefetch Job (reconcile/prefetch.py): on its way, or failed (Stalled).
    MODEL_PREFETCHING: Final = "ModelPrefetching"
    MODEL_PREFETCH_FAILED: Final = "ModelPrefetchFailed"
    # Stalled: the Deployment's own deadline, a spec pydantic refused, a child the apiserver refused.
    PROGRESS_DEADLINE_EXCEEDED: Final = "ProgressDeadlineExceeded"
    INVALID_SPEC: Final = "InvalidSpec"
    APPLY_REJECTED: Final = "ApplyRejected"


def condition(old: Iterable[Mapping[str, Any]], type_: str, status: str, reason: str, message: str,
              generation: int, now: str) -> dict[str, Any]:
    """One condition; ``lastTransitionTime`` moves only when its status flips from the one in ``old``."""
    previous = find_condition(old, type_)
    changed = previous is None or previous.get("status") != status
    return {
        "type": type_,
        "status": status,
        "observedGeneration": generation,
        "lastTransitionTime": now if changed or previous is None else previous.get("lastTransitionTime", now),
        "reason": reason,
        "message": message[:32768],
    }


def conditions_of(obj: Mapping[str, Any] | None) -> list[Mapping[str, Any]]:
    """An object's ``status.conditions`` (none when it has no status yet)."""
    return list(((obj or {}).get("status") or {}).get("conditions") or [])


def find_condition(conditions: Iterable[Mapping[str, Any]] | None, type_: str,
                   status: str | None = None) -> Mapping[str, Any] | None:
    """The first condition of this type (and, when given, this status), or None."""
    for cond in conditions or ():
        if cond.get("type") == type_ and (status is None or cond.get("status") == status):
            return cond
    return None


def is_true(obj: Mapping[str, Any] | None, type_: str) -> bool:
    """Whether an object has a condition of this type with status True."""
    return find_condition(conditions_of(obj), type_, "True") is not None
