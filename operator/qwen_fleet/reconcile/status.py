"""Status from what was decided and what is observed. Pure.

Conditions follow kstatus, so ``kubectl wait --for=condition=Ready``, Flux and Argo CD understand them:
- ``Ready``: the fleet serves the current spec (all desired replicas updated and available).
- ``Reconciling``: work is under way (creating, rolling out, pods pending, retrying an API error).
- ``Stalled``: it will not get there without a change (invalid spec, model does not fit, rollout deadline).
``lastTransitionTime`` moves only when a condition's status flips, so a steady fleet produces an identical
status and the operator writes nothing.
"""

from __future__ import annotations

from dataclasses import dataclass
from decimal import Decimal, InvalidOperation
from typing import Any

from qwen_fleet.api.conditions import ConditionType as Type
from qwen_fleet.api.conditions import Reason, condition
from qwen_fleet.plan import Plan
from qwen_fleet.plan.quantities import parse
from qwen_fleet.reconcile.cold_start import (
    model_cached_condition,
    scale_to_zero_status,
    scaling_from_zero,
)
from qwen_fleet.reconcile.prefetch import Prefetch, failed_message
from qwen_fleet.render.keda import keda_hpa_name
from qwen_fleet.render.metric_names import signal_of

# A container waiting for one of these will not start without a change (an image, a Secret, a command); those
# on their way (ContainerCreating, PodInitializing) are not trouble. For a fleet's pods and a batch's alike.
WAITING_TROUBLE = frozenset({"CrashLoopBackOff", "ImagePullBackOff", "ErrImagePull", "InvalidImageName",
                             "CreateContainerConfigError"})


@dataclass(frozen=True)
class Outcome:
    """What the reconcile did with the spec: applied it, refused it (stalled), or failed transiently."""

    kind: str  # "applied" | "stalled" | "retrying"
    reason: str = ""
    message: str = ""

    @classmethod
    def applied(cls) -> Outcome:
        return cls("applied")

    @classmethod
    def stalled(cls, reason: str, message: str) -> Outcome:
        return cls("stalled", reason, message)

    @classmethod
    def retrying(cls, message: str) -> Outcome:
        return cls("retrying", Reason.RETRYING, message)


@dataclass(frozen=True)
class Observed:
    """Children as the watches last saw them (dicts as the API returns them)."""

    deployment: dict[str, Any] | None = None
    autoscaler: dict[str, Any] | None = None  # the fleet's HorizontalPodAutoscaler or KEDA ScaledObject
    pods: tuple[dict[str, Any], ...] = ()  # summaries, see reconcile.store.pod_summary
    nccl: dict[str, Any] | None = None  # status.nccl from the newest preflight report
    prefetch: Prefetch | None = None  # the model prefetch Job the spec asks for (reconcile/prefetch.py)


def kstatus(old: list[dict[str, Any]], state: str, reason: str, message: str, generation: int,
            now: str) -> list[dict[str, Any]]:
    """Ready, Reconciling and Stalled of a fleet whose state is ready, progressing or stalled."""
    if state == "stalled":
        return [condition(old, Type.READY, "False", reason, message, generation, now),
                condition(old, Type.RECONCILING, "False", reason, "Waiting for a spec change", generation, now),
                condition(old, Type.STALLED, "True", reason, message, generation, now)]
    ready = state == "ready"
    return [condition(old, Type.READY, "True" if ready else "False", reason, message, generation, now),
            condition(old, Type.RECONCILING, "False" if ready else "True", reason,
                      message if not ready else "Up to date", generation, now),
            condition(old, Type.STALLED, "False", Reason.PROGRESSING if not ready else reason, "", generation, now)]


def _int(obj: dict[str, Any] | None, *path: str) -> int:
    cur: Any = obj
    for key in path:
        cur = (cur or {}).get(key)
    return int(cur or 0)


def _rollout(plan: Plan, dep: dict[str, Any] | None, pods: tuple[dict[str, Any], ...]) -> tuple[str, str, str]:
    """(state, reason, message) of the Deployment: state is ready, progressing or stalled."""
    if dep is None:
        return "progressing", Reason.CREATING, "Creating the Deployment"
    desired = plan.replicas if plan.replicas is not None else _int(dep, "spec", "replicas")
    st = dep.get("status") or {}
    for cond in st.get("conditions") or []:
        if cond.get("type") == "Progressing" and cond.get("reason") == Reason.PROGRESS_DEADLINE_EXCEEDED:
            return "stalled", Reason.PROGRESS_DEADLINE_EXCEEDED, str(cond.get("message", ""))
        if cond.get("type") == "ReplicaFailure" and cond.get("status") == "True":
            # Pods could not even be created (admission, quota): say so instead of "rolling out" forever.
            return "progressing", str(cond.get("reason") or Reason.FAILED_CREATE), str(cond.get("message", ""))
    current_gen = _int(dep, "metadata", "generation")
    seen_gen = int(st.get("observedGeneration") or 0)
    updated, ready = int(st.get("updatedReplicas") or 0), int(st.get("readyReplicas") or 0)
    available, total = int(st.get("availableReplicas") or 0), int(st.get("replicas") or 0)
    if seen_gen >= current_gen and updated >= desired and available >= desired and total == desired \
            and ready >= desired:
        what = "scaled to zero" if desired == 0 else f"{ready}/{desired} replicas ready"
        return "ready", Reason.READY if desired else Reason.SCALED_TO_ZERO, what
    for pod in pods:
        if pod.get("preflightFailed"):
            return "progressing", Reason.NCCL_PREFLIGHT_FAILED, f"pod {pod['name']}: {pod.get('preflightMessage', '')}"
    for pod in pods:
        if pod.get("unschedulable"):
            return "progressing", Reason.PODS_PENDING, f"pod {pod['name']} cannot be scheduled: {pod['unschedulable']}"
    for pod in pods:
        if pod.get("engineExit"):
            exit_ = pod["engineExit"]
            return "progressing", Reason.ENGINE_FAILED, (f"pod {pod['name']}: vLLM exited with code "
                                                         f"{exit_['exitCode']}: {exit_['lines']}")
    for pod in pods:
        if pod.get("waitingReason") in WAITING_TROUBLE:
            return "progressing", str(pod["waitingReason"]), f"pod {pod['name']}: {pod.get('waitingMessage', '')}"
    return "progressing", Reason.ROLLING_OUT, (f"{updated}/{desired} replicas updated, {ready}/{desired} ready, "
                                               f"{available}/{desired} available")


def _pods_metric_values(metrics: list[dict[str, Any]] | None, side: str, key: str) -> dict[str, Decimal]:
    out = {}
    for metric in metrics or []:
        pods = metric.get("pods") or {}
        name, value = (pods.get("metric") or {}).get("name"), (pods.get(side) or {}).get(key)
        if metric.get("type") == "Pods" and name and value is not None:
            try:
                out[str(name)] = parse(value)
            except (InvalidOperation, ValueError, TypeError):
                continue
    return out


def leading_signal(hpa: dict[str, Any]) -> str | None:
    """The signal whose recommendation the HPA takes, from its last reading: each Pods metric's recommendation is
    ceil(current average / target x pods) and the HPA takes the largest, so the leader is the metric with the
    highest current/target ratio. Before its behavior's windows and rate limits and the min/max bounds; None
    while the HPA has read nothing, or when no metric leads (all equal, an idle fleet's zeros)."""
    targets = _pods_metric_values((hpa.get("spec") or {}).get("metrics"), "target", "averageValue")
    current = _pods_metric_values((hpa.get("status") or {}).get("currentMetrics"), "current", "averageValue")
    ratios = sorted(((current[m] / t, m) for m, t in targets.items() if m in current and t > 0), reverse=True)
    if not ratios or (len(ratios) > 1 and ratios[0][0] == ratios[1][0]):
        return None
    return signal_of(ratios[0][1])


def _scaling(autoscaler: dict[str, Any] | None, old: list[dict[str, Any]], generation: int,
             now: str) -> tuple[list[dict[str, Any]], dict[str, Any] | None]:
    if autoscaler is None:
        return [], None
    if autoscaler.get("kind") == "ScaledObject":
        return _keda_scaling(autoscaler, old, generation, now)
    st = autoscaler.get("status") or {}
    conds = {c.get("type"): c for c in st.get("conditions") or []}
    mirrored = []
    words = []
    for type_ in (Type.SCALING_ACTIVE, Type.SCALING_LIMITED):
        c = conds.get(type_)
        if c is None:
            continue
        mirrored.append(condition(old, type_, str(c.get("status", "Unknown")), str(c.get("reason") or "Unknown"),
                                  str(c.get("message", "")), generation, now))
        words.append(f"{type_}={c.get('status')} ({c.get('reason')}): {c.get('message', '')}")
    summary = {"engine": "hpa", "hpaName": (autoscaler.get("metadata") or {}).get("name"),
               "currentReplicas": st.get("currentReplicas"), "desiredReplicas": st.get("desiredReplicas"),
               "leadingSignal": leading_signal(autoscaler), "message": "; ".join(words)}
    return mirrored, {k: v for k, v in summary.items() if v is not None}


# KEDA's ScaledObject conditions (keda.sh/v1alpha1, apis/keda/v1alpha1/condition_types.go). Ready and Fallback
# become conditions of the resource (they change when the autoscaler breaks or mends: the Prometheus query fails
# or works again); Active and Paused only go into the message: Active flips with every idle/busy turn.
KEDA_MIRRORED = {"Ready": Type.SCALED_OBJECT_READY, "Fallback": Type.SCALED_OBJECT_FALLBACK}
KEDA_WORDS = ("Ready", "Active", "Fallback", "Paused")


def _words(type_: str, cond: dict[str, Any]) -> str:
    # KEDA initialises a condition with a status alone (Paused False has no reason until a pause is lifted).
    reason, message = cond.get("reason"), cond.get("message")
    return f"{type_}={cond.get('status')}" + (f" ({reason})" if reason else "") + (f": {message}" if message else "")


def _keda_scaling(scaled: dict[str, Any], old: list[dict[str, Any]], generation: int,
                  now: str) -> tuple[list[dict[str, Any]], dict[str, Any]]:
    """The ScaledObject's view. KEDA's own HPA (status.hpaName) holds the replica counts; it is not a child of
    the resource (KEDA owns it) and is not read, so the counts are left out (docs/autoscaling.md)."""
    st = scaled.get("status") or {}
    conds = {c.get("type"): c for c in st.get("conditions") or []}
    mirrored = []
    for type_, ours in KEDA_MIRRORED.items():
        c = conds.get(type_)
        if c is not None:
            mirrored.append(condition(old, ours, str(c.get("status", "Unknown")), str(c.get("reason") or "Unknown"),
                                      str(c.get("message", "")), generation, now))
    words = [_words(t, conds[t]) for t in KEDA_WORDS if t in conds]
    name = str((scaled.get("metadata") or {}).get("name") or "")
    summary = {"engine": "keda", "hpaName": st.get("hpaName") or keda_hpa_name(name),
               "message": "; ".join(words) if words else "KEDA has not reported on the ScaledObject yet"}
    return mirrored, summary


def pools_status(plan: Plan, deployments: dict[str, dict[str, Any] | None], header: str,
                 default: str) -> list[dict[str, Any]]:
    """status.pools (spec.pools): each pool's bounds, what selects it, and its Deployment's counts.
    ``deployments``: pool name -> its observed Deployment (None while being created)."""
    out = []
    for pool_plan in plan.pools:
        pool, name = pool_plan.pool, pool_plan.pool.name
        dep_status = (deployments.get(name) or {}).get("status") or {}
        entry: dict[str, Any] = {
            "name": name, "maxRequestTokens": pool.max_request_tokens, "maxModelLen": pool.max_model_len,
            "header": f"{header}: {name}", "default": name == default,
            "deployment": f"{plan.name}-{name}", "inferencePool": f"{plan.name}-{name}",
            "replicas": int(dep_status.get("replicas") or 0),
            "readyReplicas": int(dep_status.get("readyReplicas") or 0)}
        capacity = pool_plan.plan.capacity
        if capacity is not None and capacity.max_concurrent_sequences is not None:
            entry["maxConcurrentSequences"] = capacity.max_concurrent_sequences
        out.append(entry)
    return out


def compute_status(old_status: dict[str, Any] | None, generation: int, outcome: Outcome, plan: Plan | None,
                   observed: Observed, now: str, endpoint: str | None = None,
                   selector: str | None = None, pools: list[dict[str, Any]] | None = None,
                   traffic: list[dict[str, Any]] | None = None) -> dict[str, Any]:
    old_status = old_status or {}
    old = list(old_status.get("conditions") or [])
    status: dict[str, Any] = {}
    if outcome.kind == "stalled":
        status["observedGeneration"] = generation  # acted on: refused. kstatus then reports Failed.
        conds = kstatus(old, "stalled", outcome.reason, outcome.message, generation, now)
    else:
        if outcome.kind == "applied":
            status["observedGeneration"] = generation
        elif "observedGeneration" in old_status:
            status["observedGeneration"] = old_status["observedGeneration"]
        state, reason, message = _rollout(plan, observed.deployment, observed.pods) if plan else (
            "progressing", Reason.PENDING, "")
        gate = observed.prefetch
        if gate is not None and gate.state == "Failed":
            state, reason = "stalled", Reason.MODEL_PREFETCH_FAILED
            message = failed_message(gate, plan.model_ref if plan else "the model")
        elif gate is not None and not gate.done:
            state, reason, message = "progressing", Reason.MODEL_PREFETCHING, gate.message
        if state != "stalled":
            if state == "ready" and outcome.kind != "applied":
                state = "progressing"
            if outcome.kind == "retrying":
                reason, message = outcome.reason, outcome.message
        conds = kstatus(old, state, reason, message, generation, now)
    scaling, autoscaling = _scaling(observed.autoscaler, old, generation, now)
    if plan is not None and plan.scale_to_zero:
        autoscaling = {**(autoscaling or {"engine": "keda"}), **scale_to_zero_status(
            old_status.get("autoscaling"), observed.deployment, observed.pods, now)}
        if scaling_from_zero(autoscaling) and conds[0]["status"] == "False" \
                and conds[0]["reason"] == Reason.ROLLING_OUT:
            # Not a rollout: KEDA woke the fleet for a held request. Said so, and not as trouble (controller.py).
            msg = (f"starting from zero: {conds[0]['message']}; the KEDA HTTP add-on's interceptor holds requests "
                   "until a replica is ready")
            conds = kstatus(old, "progressing", Reason.SCALING_FROM_ZERO, msg, generation, now)
        if plan.cold_start_weights is not None:
            cached, why, words = model_cached_condition(plan.cold_start_weights, plan.model_ref)
            scaling.append(condition(old, Type.MODEL_CACHED, cached, why, words, generation, now))
    status["conditions"] = conds + scaling
    dep_status = (observed.deployment or {}).get("status") or {}
    for key in ("replicas", "readyReplicas", "updatedReplicas", "availableReplicas"):
        status[key] = int(dep_status.get(key) or 0)
    if selector:
        status["selector"] = selector
    if endpoint:
        status["endpoint"] = endpoint
    if plan is not None:
        status["gpusPerReplica"] = plan.gpus_per_replica
        if plan.capacity is not None:
            status["capacity"] = plan.capacity.model_dump(by_alias=True, exclude_none=True, mode="json")
        if plan.serving is not None:
            status["serving"] = plan.serving.status().model_dump(by_alias=True, exclude_none=True, mode="json")
    if autoscaling:
        status["autoscaling"] = autoscaling
    if observed.nccl:
        status["nccl"] = observed.nccl
    if observed.prefetch is not None:
        status["prefetch"] = observed.prefetch.status()
    if pools:
        status["pools"] = pools
    if traffic:
        status["traffic"] = traffic
    return status


def status_patch(old: dict[str, Any] | None, new: dict[str, Any]) -> dict[str, Any] | None:
    """A merge patch from old to new status, or None when they are equal (no write)."""
    old = old or {}
    if old == new:
        return None
    patch = dict(new)
    for key in old:
        if key not in new:
            patch[key] = None
    return patch
