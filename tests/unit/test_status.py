"""Status from decisions and observations: kstatus conditions, stable timestamps, no needless writes."""

from __future__ import annotations

import copy

from qwen_fleet.api import QwenInference
from qwen_fleet.config import OperatorConfig
from qwen_fleet.plan import make_plan
from qwen_fleet.reconcile.status import Observed, Outcome, compute_status, status_patch
from qwen_fleet.reconcile.store import error_lines, pod_summary

CR = QwenInference.model_validate({"metadata": {"name": "q", "namespace": "ns"},
                                   "spec": {"model": {"name": "Qwen/Qwen3-4B-Instruct-2507"}, "replicas": 2}})
PLAN = make_plan(CR, OperatorConfig())
T0, T1 = "2026-11-30T00:00:00Z", "2026-11-30T00:05:00Z"


def _dep(gen: int = 1, seen: int = 1, ready: int = 2, updated: int = 2, available: int = 2, replicas: int = 2,
         conditions: list | None = None) -> dict:
    return {"metadata": {"generation": gen}, "spec": {"replicas": 2},
            "status": {"observedGeneration": seen, "readyReplicas": ready, "updatedReplicas": updated,
                       "availableReplicas": available, "replicas": replicas, "conditions": conditions or []}}


def _conds(status: dict) -> dict:
    return {c["type"]: (c["status"], c["reason"]) for c in status["conditions"]}


def test_ready_when_all_replicas_updated_and_available() -> None:
    st = compute_status(None, 3, Outcome.applied(), PLAN, Observed(deployment=_dep()), T0)
    assert _conds(st) == {"Ready": ("True", "Ready"), "Reconciling": ("False", "Ready"),
                          "Stalled": ("False", "Ready")}
    assert st["observedGeneration"] == 3
    assert st["readyReplicas"] == 2


def test_rolling_out_is_reconciling_not_ready() -> None:
    st = compute_status(None, 3, Outcome.applied(), PLAN, Observed(deployment=_dep(updated=1, ready=1)), T0)
    assert _conds(st)["Ready"] == ("False", "RollingOut")
    assert _conds(st)["Reconciling"] == ("True", "RollingOut")


def test_unschedulable_pod_reason_reaches_the_status() -> None:
    pods = ({"name": "q-1", "unschedulable": "0/5 nodes are available: 5 Insufficient nvidia.com/gpu."},)
    st = compute_status(None, 1, Outcome.applied(), PLAN, Observed(deployment=_dep(ready=1), pods=pods), T0)
    ready = next(c for c in st["conditions"] if c["type"] == "Ready")
    assert ready["reason"] == "PodsPending"
    assert "Insufficient nvidia.com/gpu" in ready["message"]


def test_stalled_spec_is_kstatus_failed() -> None:
    st = compute_status(None, 4, Outcome.stalled("WeightsDoNotFit", "too big"), None, Observed(), T0)
    assert _conds(st) == {"Ready": ("False", "WeightsDoNotFit"), "Reconciling": ("False", "WeightsDoNotFit"),
                          "Stalled": ("True", "WeightsDoNotFit")}
    assert st["observedGeneration"] == 4


def test_progress_deadline_is_stalled() -> None:
    dep = _dep(ready=0, available=0, conditions=[{"type": "Progressing", "status": "False",
                                                  "reason": "ProgressDeadlineExceeded", "message": "slow"}])
    st = compute_status(None, 1, Outcome.applied(), PLAN, Observed(deployment=dep), T0)
    assert _conds(st)["Stalled"] == ("True", "ProgressDeadlineExceeded")


def test_retrying_keeps_the_old_observed_generation() -> None:
    old = compute_status(None, 1, Outcome.applied(), PLAN, Observed(deployment=_dep()), T0)
    st = compute_status(old, 2, Outcome.retrying("503 ServiceUnavailable"), PLAN, Observed(deployment=_dep()), T1)
    assert st["observedGeneration"] == 1
    assert _conds(st)["Reconciling"] == ("True", "Retrying")


def test_unchanged_observation_gives_identical_status_and_no_patch() -> None:
    first = compute_status(None, 1, Outcome.applied(), PLAN, Observed(deployment=_dep()), T0)
    second = compute_status(first, 1, Outcome.applied(), PLAN, Observed(deployment=_dep()), T1)
    assert second == first  # lastTransitionTime kept: nothing flipped
    assert status_patch(first, second) is None


def test_transition_moves_the_timestamp_and_patch_removes_stale_keys() -> None:
    first = compute_status(None, 1, Outcome.applied(), PLAN, Observed(deployment=_dep()), T0)
    first["nccl"] = {"passed": True}
    second = compute_status(first, 2, Outcome.applied(), PLAN, Observed(deployment=_dep(gen=2)), T1)
    ready = next(c for c in second["conditions"] if c["type"] == "Ready")
    assert ready["status"] == "False" and ready["lastTransitionTime"] == T1
    patch = status_patch(first, second)
    assert patch is not None and patch["nccl"] is None


def test_hpa_conditions_are_mirrored_in_words() -> None:
    hpa = {"status": {"currentReplicas": 4, "desiredReplicas": 4, "conditions": [
        {"type": "ScalingActive", "status": "True", "reason": "ValidMetricFound", "message": "ok"},
        {"type": "ScalingLimited", "status": "True", "reason": "TooManyReplicas",
         "message": "the desired replica count is more than the maximum replica count"}]}}
    st = compute_status(None, 1, Outcome.applied(), PLAN, Observed(deployment=_dep(), autoscaler=hpa), T0)
    assert _conds(st)["ScalingLimited"] == ("True", "TooManyReplicas")
    assert st["autoscaling"]["desiredReplicas"] == 4
    assert "more than the maximum" in st["autoscaling"]["message"]


# The tail of vLLM's log as the kubelet puts it in the termination message (FallbackToLogsOnError), shaped as
# vLLM 0.32 prints a max_model_len beyond the model's (a pydantic error; its last lines as seen on this machine)
# and an unknown flag (argparse).
PYDANTIC_TAIL = "\n".join([
    "(APIServer pid=1) INFO 11-30 21:00:01 [utils.py:253] non-default args: {'max_model_len': 65536}",
    "Traceback (most recent call last):",
    '  File "/opt/vllm/lib/python3.11/site-packages/vllm/engine/arg_utils.py", line 1402, in create_model_config',
    "    return ModelConfig(",
    "pydantic_core._pydantic_core.ValidationError: 1 validation error for ModelConfig",
    "  Value error, User-specified max_model_len (65536) is greater than the derived max_model_len "
    "(max_position_embeddings=4096.0 or model_max_length=None in model's config.json). To allow overriding this "
    "maximum, set the env var VLLM_ALLOW_LONG_MAX_MODEL_LEN=1. [type=value_error, input_value=ArgsKwargs((), "
    "{'model': ...nderer_num_workers': 1}), input_type=ArgsKwargs]",
    "    For further information visit https://errors.pydantic.dev/2.14/v/value_error",
])
ARGPARSE_TAIL = """usage: api_server.py [-h] [--model MODEL] ...
api_server.py: error: unrecognized arguments: --no-such-flag
"""


def _crashed_pod(message: str, ready: bool = False) -> dict:
    return {"metadata": {"name": "q-abc"}, "status": {"phase": "Running", "containerStatuses": [{
        "name": "vllm", "ready": ready, "restartCount": 2,
        "state": {"waiting": {"reason": "CrashLoopBackOff", "message": "back-off 20s restarting failed container"}},
        "lastState": {"terminated": {"exitCode": 1, "reason": "Error", "message": message}}}]}}


def test_error_lines_start_at_the_engine_s_own_error() -> None:
    lines = error_lines(PYDANTIC_TAIL)
    assert lines.startswith("pydantic_core._pydantic_core.ValidationError: 1 validation error for ModelConfig")
    assert "User-specified max_model_len (65536) is greater than the derived max_model_len" in lines
    assert error_lines(ARGPARSE_TAIL) == "api_server.py: error: unrecognized arguments: --no-such-flag"
    assert error_lines("one\ntwo\nthree\nfour\nfive\n") == "two | three | four | five"  # no error line: the tail


def test_an_engine_that_exits_at_start_up_says_why_in_ready() -> None:
    pods = (pod_summary(_crashed_pod(ARGPARSE_TAIL)),)
    st = compute_status(None, 1, Outcome.applied(), PLAN, Observed(deployment=_dep(ready=0, available=0),
                                                                    pods=pods), T0)
    ready = next(c for c in st["conditions"] if c["type"] == "Ready")
    assert (ready["status"], ready["reason"]) == ("False", "EngineFailed")
    assert ready["message"] == ("pod q-abc: vLLM exited with code 1: "
                                "api_server.py: error: unrecognized arguments: --no-such-flag")


def test_a_pod_that_recovered_from_an_earlier_crash_is_not_reported() -> None:
    body = _crashed_pod(ARGPARSE_TAIL, ready=True)
    body["status"]["containerStatuses"][0]["state"] = {"running": {}}
    assert "engineExit" not in pod_summary(body)


# KEDA's ScaledObject status as KEDA v2.21.0 writes it for a working ScaledObject with no load: reasons and
# messages from its source (apis/keda/v1alpha1/condition_types.go, pkg/scaling/executor/scale_scaledobjects.go,
# pkg/fallback/fallback.go); Paused keeps the status alone that GetInitializedConditions gives it.
SCALED_OBJECT = {"kind": "ScaledObject", "metadata": {"name": "q"}, "status": {
    "hpaName": "keda-hpa-q", "conditions": [
        {"type": "Ready", "status": "True", "reason": "ScaledObjectReady",
         "message": "ScaledObject is defined correctly and is ready for scaling"},
        {"type": "Active", "status": "False", "reason": "ScalerNotActive",
         "message": "Scaling is not performed because triggers are not active"},
        {"type": "Fallback", "status": "False", "reason": "NoFallbackFound",
         "message": "No fallbacks are active on this scaled object"},
        {"type": "Paused", "status": "False"}]}}


def test_scaled_object_conditions_are_mirrored_ready_and_fallback_as_conditions_all_in_words() -> None:
    st = compute_status(None, 1, Outcome.applied(), PLAN, Observed(deployment=_dep(), autoscaler=SCALED_OBJECT), T0)
    conds = _conds(st)
    assert conds["ScaledObjectReady"] == ("True", "ScaledObjectReady")
    assert conds["ScaledObjectFallback"] == ("False", "NoFallbackFound")
    assert "ScalingActive" not in conds and "ScaledObjectActive" not in conds and "ScaledObjectPaused" not in conds
    assert st["autoscaling"] == {
        "engine": "keda", "hpaName": "keda-hpa-q",
        "message": "Ready=True (ScaledObjectReady): ScaledObject is defined correctly and is ready for scaling; "
                   "Active=False (ScalerNotActive): Scaling is not performed because triggers are not active; "
                   "Fallback=False (NoFallbackFound): No fallbacks are active on this scaled object; "
                   "Paused=False"}


def test_a_scaled_object_keda_has_not_seen_yet_says_so() -> None:
    fresh = {"kind": "ScaledObject", "metadata": {"name": "q"}}
    st = compute_status(None, 1, Outcome.applied(), PLAN, Observed(deployment=_dep(), autoscaler=fresh), T0)
    assert st["autoscaling"] == {"engine": "keda", "hpaName": "keda-hpa-q",
                                 "message": "KEDA has not reported on the ScaledObject yet"}
    assert set(_conds(st)) == {"Ready", "Reconciling", "Stalled"}


def test_activity_alone_changes_the_message_not_a_condition_s_timestamp() -> None:
    first = compute_status(None, 1, Outcome.applied(), PLAN, Observed(deployment=_dep(), autoscaler=SCALED_OBJECT), T0)
    busy = copy.deepcopy(SCALED_OBJECT)
    busy["status"]["conditions"][1].update(status="True", reason="ScalerActive", message="Scaling is performed "
                                           "because triggers are active")
    second = compute_status(first, 1, Outcome.applied(), PLAN, Observed(deployment=_dep(), autoscaler=busy), T1)
    assert [c for c in second["conditions"] if c["type"].startswith("ScaledObject")] == \
        [c for c in first["conditions"] if c["type"].startswith("ScaledObject")]
    assert "Active=True (ScalerActive)" in second["autoscaling"]["message"]


def test_hpa_summary_names_the_engine_and_the_hpa() -> None:
    hpa = {"kind": "HorizontalPodAutoscaler", "metadata": {"name": "q"},
           "status": {"currentReplicas": 2, "desiredReplicas": 3, "conditions": []}}
    st = compute_status(None, 1, Outcome.applied(), PLAN, Observed(deployment=_dep(), autoscaler=hpa), T0)
    assert st["autoscaling"] == {"engine": "hpa", "hpaName": "q", "currentReplicas": 2, "desiredReplicas": 3,
                                 "message": ""}


def test_status_mirrors_the_autoscaler_the_spec_asks_for_else_the_one_still_there() -> None:
    from qwen_fleet.reconcile.controller import _autoscaler

    keda_cr = QwenInference.model_validate({"metadata": {"name": "q", "namespace": "ns"}, "spec": {
        "model": {"name": "Qwen/Qwen3-4B-Instruct-2507"},
        "autoscaling": {"enabled": True, "engine": "keda", "maxReplicas": 3,
                        "keda": {"prometheusAddress": "http://prometheus:9090"}}}})
    keda_plan = make_plan(keda_cr, OperatorConfig())
    assert keda_plan.autoscaler == "ScaledObject"
    hpa = {"kind": "HorizontalPodAutoscaler", "metadata": {"name": "q"}}
    both = {("HorizontalPodAutoscaler", "q"): hpa, ("ScaledObject", "q"): SCALED_OBJECT}
    assert _autoscaler(both, "q", keda_plan) is SCALED_OBJECT
    assert _autoscaler({("HorizontalPodAutoscaler", "q"): hpa}, "q", keda_plan) is hpa  # mid-switch: the old one
    assert _autoscaler({("ScaledObject", "q"): SCALED_OBJECT}, "q", PLAN) is SCALED_OBJECT  # turned off, not gone
    assert _autoscaler({}, "q", keda_plan) is None


def test_a_fallback_turning_true_is_a_warning_event() -> None:
    from qwen_fleet.reconcile.controller import Controller, Result
    from qwen_fleet.reconcile.store import Store

    sent: list[tuple[str, str]] = []
    controller = Controller(None, OperatorConfig(), Store(), emit=lambda _r, type_, reason, _m: sent.append(
        (type_, reason)))  # type: ignore[arg-type]
    calm = compute_status(None, 1, Outcome.applied(), PLAN, Observed(deployment=_dep(), autoscaler=SCALED_OBJECT), T0)
    failing = copy.deepcopy(SCALED_OBJECT)
    failing["status"]["conditions"][2].update(status="True", reason="FallbackExists",
                                              message="At least one trigger is falling back on this scaled object")
    new = compute_status(calm, 1, Outcome.applied(), PLAN, Observed(deployment=_dep(), autoscaler=failing), T1)
    controller._events({}, calm, new, Result(Outcome.applied()))
    assert sent == [("Warning", "ScaledObjectFallbackTrue")]
