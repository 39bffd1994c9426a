"""Scale to zero in the status: whether the fleet is at zero, since when, and how long its last start from zero
took. Pure: the old status, the workload and pod summaries (reconcile/store.py pod_summary) and the time in.

- ``scaledToZero``: the workload's desired replica count (KEDA sets it) is 0.
- ``lastScaledToZeroTime``: when the operator first saw that count at 0 (a watch event of the Deployment, so
  within about a second of KEDA's change; later only if the operator was down then).
- ``lastColdStart``: the first pod created at or after that time, from its creation to Ready, with the pod's own
  condition and container timestamps splitting it into scheduling, container start (image pull, init
  containers) and engine start (model load and warm-up, up to the readiness probe's first success). Recorded once
  per start from zero and kept until the next one. Timestamps are the API's, whole seconds.

For a multi-node fleet (a LeaderWorkerSet group per replica) the leaders count: they serve, the workers do not.

And one condition, ``ModelCached``, on a fleet that scales to zero: whether a cold start reads the weights from a
volume or downloads them. False (reason ``ModelNotCached``, a Warning Event) for a hub source without
``model.cache``: it works, but every start from zero downloads the model again into the new pod's emptyDir, and the
held request waits for that download. A warning, not a refusal: a small model on a fast mirror may be fine.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from datetime import datetime
from typing import Any

from qwen_fleet.api.conditions import ConditionType


def _time(value: Any) -> datetime | None:
    if not value:
        return None
    try:
        return datetime.fromisoformat(str(value).replace("Z", "+00:00"))
    except ValueError:
        return None


def _seconds(start: Any, end: Any) -> int | None:
    a, b = _time(start), _time(end)
    if a is None or b is None or b < a:
        return None
    return int((b - a).total_seconds())


def cold_start_of(pod: Mapping[str, Any]) -> dict[str, Any] | None:
    """The cold start a Ready pod shows: creation to Ready, split where its timestamps allow."""
    total = _seconds(pod.get("createdAt"), pod.get("readyAt"))
    if total is None:
        return None
    out: dict[str, Any] = {"pod": pod["name"], "createdAt": pod["createdAt"], "readyAt": pod["readyAt"],
                           "seconds": total}
    parts = {"schedulingSeconds": ("createdAt", "scheduledAt"),
             "containerStartSeconds": ("scheduledAt", "startedAt"),
             "engineStartSeconds": ("startedAt", "readyAt")}
    for key, (start, end) in parts.items():
        value = _seconds(pod.get(start), pod.get(end))
        if value is not None:
            out[key] = value
    return out


def _first_ready_since(pods: Iterable[Mapping[str, Any]], since: str) -> Mapping[str, Any] | None:
    """Of the serving pods made at or after ``since``, the first to turn Ready."""
    after = _time(since)
    if after is None:
        return None
    ready = []
    for pod in pods:
        created, became_ready = _time(pod.get("createdAt")), _time(pod.get("readyAt"))
        if created is not None and became_ready is not None and created >= after and not pod.get("workerIndex"):
            ready.append((became_ready, str(pod.get("name")), pod))
    return min(ready, key=lambda r: r[:2])[2] if ready else None


def scale_to_zero_status(old: Mapping[str, Any] | None, workload: Mapping[str, Any] | None,
                         pods: Iterable[Mapping[str, Any]], now: str) -> dict[str, Any]:
    """``status.autoscaling``'s scale-to-zero fields, from the previous ones and what is observed now."""
    old = old or {}
    out: dict[str, Any] = {}
    since = old.get("lastScaledToZeroTime")
    cold = old.get("lastColdStart")
    if workload is None:  # not made yet, or not seen: nothing new to say
        return {k: v for k, v in (("scaledToZero", old.get("scaledToZero")), ("lastScaledToZeroTime", since),
                                  ("lastColdStart", cold)) if v is not None}
    zero = int((workload.get("spec") or {}).get("replicas", 1)) == 0
    if zero and not old.get("scaledToZero"):
        since = now
    out["scaledToZero"] = zero
    if since:
        out["lastScaledToZeroTime"] = since
    if since and not zero and cold_start_pending(cold, since):
        first = _first_ready_since(pods, since)
        measured = cold_start_of(first) if first is not None else None
        if measured is not None:
            cold = measured
    if cold:
        out["lastColdStart"] = cold
    return out


def cold_start_pending(cold: Mapping[str, Any] | None, since: str | None) -> bool:
    """The fleet has been at zero since ``since`` and no cold start after that has been recorded."""
    if not since:
        return False
    after, made = _time(since), _time((cold or {}).get("createdAt"))
    return made is None or after is None or made < after


def scaling_from_zero(auto: Mapping[str, Any] | None) -> bool:
    """The fleet left zero and its first replica is not Ready yet (status.autoscaling as computed above)."""
    auto = auto or {}
    return auto.get("scaledToZero") is False and cold_start_pending(auto.get("lastColdStart"),
                                                                    auto.get("lastScaledToZeroTime"))


def describe(cold: Mapping[str, Any]) -> str:
    """A cold start in words, for the Event."""
    parts = [f"{label} {cold[key]} s" for key, label in (("schedulingSeconds", "scheduling"),
                                                         ("containerStartSeconds", "container start"),
                                                         ("engineStartSeconds", "engine start")) if key in cold]
    detail = f" ({', '.join(parts)})" if parts else ""
    return f"started from zero in {cold['seconds']} s: pod {cold['pod']} Ready {cold['seconds']} s after it was " \
           f"created{detail}"


MODEL_CACHED = ConditionType.MODEL_CACHED  # the condition, and its reason when True
NOT_CACHED = "ModelNotCached"


def model_cached_condition(weights: str, model: str) -> tuple[str, str, str]:
    """(status, reason, message) of ``ModelCached`` for a fleet that scales to zero (plan.cold_start_weights)."""
    if weights == "claim":
        return "True", "ModelOnClaim", "a cold start reads the weights from model.source.pvc"
    if weights == "prefetched":
        return "True", "ModelPrefetched", ("a cold start reads the weights from model.cache, filled once by the "
                                           "prefetch Job; the engine starts offline")
    if weights == "cached":
        return "True", MODEL_CACHED, ("a cold start reads the weights from model.cache once a first pod has "
                                      "downloaded them (model.cache.prefetch downloads them before any replica)")
    return "False", NOT_CACHED, (
        f"autoscaling.scaleToZero starts a new pod for the first request after every idle period, and without "
        f"model.cache each new pod downloads {model} again (into an emptyDir that goes with the pod): the held "
        "request waits for the download on every cold start. Set model.cache (a claim the pods share) and "
        "model.cache.prefetch (the download then happens once, before any replica) so that a cold start loads the "
        "weights from disk.")
