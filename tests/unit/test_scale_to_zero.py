"""autoscaling.scaleToZero: the KEDA HTTP add-on's InterceptorRoute, the ScaledObject's wake trigger, the proxy
Service, the Stalled reason without the add-on, and the status (scaled to zero, the last cold start).

Expected values are written out from the add-on's v0.15.0 source (field names of
operator/apis/http/v1beta1/interceptorroute_types.go, the trigger metadata keys of pkg/k8s/scaledobject.go) and
from KEDA's (cooldownPeriod, initialCooldownPeriod), not read from the code under test.
"""

from __future__ import annotations

import copy
from typing import Any

import pytest

from qwen_fleet.api import QwenInference
from qwen_fleet.config import OperatorConfig
from qwen_fleet.plan import make_plan
from qwen_fleet.reconcile.cold_start import cold_start_of, scale_to_zero_status
from qwen_fleet.reconcile.status import Observed, Outcome, compute_status
from qwen_fleet.reconcile.store import pod_summary
from qwen_fleet.reconcile.workload import missing_capability
from qwen_fleet.render import ALL_CAPABILITIES, Capabilities, render_children

PROM = "http://prometheus-operated.monitoring.svc:9090"
SPEC: dict[str, Any] = {
    "model": {"name": "Qwen/Qwen3-4B-Instruct-2507"}, "gpu": {"product": "NVIDIA-A10G"},
    "service": {"port": 8000},
    "autoscaling": {"enabled": True, "engine": "keda", "minReplicas": 0, "maxReplicas": 4,
                    "keda": {"prometheusAddress": PROM},
                    "scaleToZero": {"idleSeconds": 900, "holdTimeoutSeconds": 300, "hosts": ["qwen.example.com"]}}}


def _cr(spec: dict[str, Any], name: str = "big") -> QwenInference:
    return QwenInference.model_validate({"metadata": {"name": name, "namespace": "llm", "uid": "u-1"},
                                         "spec": copy.deepcopy(spec)})


def _children(spec: dict[str, Any], caps: Capabilities = ALL_CAPABILITIES) -> dict[tuple[str, str], dict[str, Any]]:
    cr = _cr(spec)
    return {(c["kind"], c["metadata"]["name"]): c for c in render_children(cr, make_plan(cr, OperatorConfig()), caps)}


# --- render ---------------------------------------------------------------------------------------------------


def test_the_interceptor_route_sends_the_proxy_names_to_the_fleet_service_and_holds_for_the_hold_timeout() -> None:
    route = _children(SPEC)[("InterceptorRoute", "big")]
    assert route["apiVersion"] == "http.keda.sh/v1beta1"
    assert route["metadata"]["namespace"] == "llm"
    assert route["metadata"]["ownerReferences"][0]["kind"] == "QwenInference"
    assert route["spec"] == {
        "target": {"service": "big", "port": 8000},
        "rules": [{"hosts": ["big-proxy", "big-proxy.llm", "big-proxy.llm.svc", "big-proxy.llm.svc.cluster.local",
                             "qwen.example.com"]}],
        "scalingMetric": {"concurrency": {"targetValue": 1_000_000}},
        "timeouts": {"readiness": "300s", "request": "0s", "responseHeader": "0s"},
    }


def test_the_scaled_object_goes_to_zero_after_the_idle_period_and_wakes_on_the_add_on_s_push() -> None:
    spec = _children(SPEC)[("ScaledObject", "big")]["spec"]
    assert (spec["minReplicaCount"], spec["maxReplicaCount"]) == (0, 4)
    assert (spec["cooldownPeriod"], spec["initialCooldownPeriod"]) == (900, 900)
    assert [t["name"] for t in spec["triggers"]] == ["queue-depth", "kv-cache-usage", "held-requests"]
    assert spec["triggers"][-1] == {
        "type": "external-push", "name": "held-requests", "metricType": "AverageValue",
        "metadata": {"scalerAddress": "keda-add-ons-http-external-scaler.keda:9090", "interceptorRoute": "big"}}


def test_the_proxy_service_names_the_interceptor_and_is_the_endpoint() -> None:
    svc = _children(SPEC)[("Service", "big-proxy")]
    assert svc["spec"] == {"type": "ExternalName",
                           "externalName": "keda-add-ons-http-interceptor-proxy.keda.svc.cluster.local",
                           "ports": [{"name": "http", "port": 8080, "protocol": "TCP", "appProtocol": "http"}]}
    from qwen_fleet.render.scale_to_zero import client_endpoint

    assert client_endpoint(_cr(SPEC)) == "http://big-proxy.llm.svc:8080/v1"
    plain = copy.deepcopy(SPEC)
    plain["autoscaling"]["minReplicas"] = 1
    del plain["autoscaling"]["scaleToZero"]
    assert client_endpoint(_cr(plain)) == "http://big.llm.svc:8000/v1"


def test_the_add_on_s_place_is_configurable() -> None:
    spec = copy.deepcopy(SPEC)
    spec["autoscaling"]["scaleToZero"]["httpAddOn"] = {
        "namespace": "keda-http", "interceptorService": "ingress", "interceptorPort": 80,
        "scalerService": "scaler", "scalerPort": 9091, "clusterDomain": "corp.internal"}
    out = _children(spec)
    assert out[("Service", "big-proxy")]["spec"]["externalName"] == "ingress.keda-http.svc.corp.internal"
    assert out[("InterceptorRoute", "big")]["spec"]["rules"][0]["hosts"][3] == "big-proxy.llm.svc.corp.internal"
    assert out[("ScaledObject", "big")]["spec"]["triggers"][-1]["metadata"]["scalerAddress"] == \
        "scaler.keda-http:9091"


def test_a_fleet_that_does_not_scale_to_zero_has_none_of_it() -> None:
    spec = copy.deepcopy(SPEC)
    spec["autoscaling"]["minReplicas"] = 1
    del spec["autoscaling"]["scaleToZero"]
    out = _children(spec)
    assert ("InterceptorRoute", "big") not in out and ("Service", "big-proxy") not in out
    so = out[("ScaledObject", "big")]["spec"]
    assert "cooldownPeriod" not in so and all(t["type"] == "prometheus" for t in so["triggers"])


# --- API and the capability check ------------------------------------------------------------------------------


def test_scale_to_zero_takes_its_defaults_from_an_empty_object() -> None:
    spec = copy.deepcopy(SPEC)
    spec["autoscaling"]["scaleToZero"] = {}
    stz = _cr(spec).spec.autoscaling.scale_to_zero
    assert stz is not None
    assert (stz.idle_seconds, stz.hold_timeout_seconds, stz.hosts) == (600, 600, [])
    assert (stz.http_add_on.namespace, stz.http_add_on.interceptor_port) == ("keda", 8080)


def test_without_the_add_on_s_crd_the_fleet_is_stalled_and_says_what_to_install() -> None:
    cr = _cr(SPEC)
    plan = make_plan(cr, OperatorConfig())
    assert plan.scale_to_zero
    outcome = missing_capability(plan, Capabilities(keda=True))
    assert outcome is not None and outcome.reason == "KedaHttpAddOnMissing"
    assert "http.keda.sh/v1beta1 interceptorroutes" in outcome.message and "install the add-on" in outcome.message
    assert missing_capability(plan, Capabilities(keda=True, keda_http=True)) is None
    # KEDA itself is asked for first: without it the add-on is no use.
    assert missing_capability(plan, Capabilities(keda_http=True)).reason == "KedaMissing"  # type: ignore[union-attr]


# --- pods, the cold start, the status --------------------------------------------------------------------------

ZERO_AT = "2026-12-01T21:00:00Z"


def _pod(name: str, created: str, scheduled: str | None = None, started: str | None = None,
         ready: str | None = None) -> dict[str, Any]:
    conds = []
    if scheduled:
        conds.append({"type": "PodScheduled", "status": "True", "lastTransitionTime": scheduled})
    conds.append({"type": "Ready", "status": "True" if ready else "False",
                  "lastTransitionTime": ready or scheduled or created})
    cs = {"name": "vllm", "ready": bool(ready),
          "state": {"running": {"startedAt": started}} if started else {"waiting": {"reason": "ContainerCreating"}}}
    return {"metadata": {"name": name, "creationTimestamp": created},
            "status": {"phase": "Running" if started else "Pending", "conditions": conds, "containerStatuses": [cs]}}


def test_a_pod_summary_keeps_the_timestamps_of_its_start() -> None:
    pod = pod_summary(_pod("big-1", "2026-12-01T21:05:00Z", "2026-12-01T21:05:01Z", "2026-12-01T21:05:09Z",
                           "2026-12-01T21:06:14Z"))
    assert {k: pod[k] for k in ("createdAt", "scheduledAt", "startedAt", "readyAt")} == {
        "createdAt": "2026-12-01T21:05:00Z", "scheduledAt": "2026-12-01T21:05:01Z",
        "startedAt": "2026-12-01T21:05:09Z", "readyAt": "2026-12-01T21:06:14Z"}
    assert "readyAt" not in pod_summary(_pod("big-2", "2026-12-01T21:05:00Z", "2026-12-01T21:05:01Z"))


def test_a_cold_start_is_split_into_scheduling_container_start_and_engine_start() -> None:
    pod = pod_summary(_pod("big-1", "2026-12-01T21:05:00Z", "2026-12-01T21:05:01Z", "2026-12-01T21:05:09Z",
                           "2026-12-01T21:06:14Z"))
    assert cold_start_of(pod) == {"pod": "big-1", "createdAt": "2026-12-01T21:05:00Z",
                                  "readyAt": "2026-12-01T21:06:14Z", "seconds": 74, "schedulingSeconds": 1,
                                  "containerStartSeconds": 8, "engineStartSeconds": 65}


def _dep(replicas: int) -> dict[str, Any]:
    return {"kind": "Deployment", "metadata": {"generation": 3}, "spec": {"replicas": replicas},
            "status": {"observedGeneration": 3, "replicas": replicas, "readyReplicas": replicas,
                       "updatedReplicas": replicas, "availableReplicas": replicas}}


@pytest.mark.parametrize(("old", "replicas", "pods", "want"), [
    pytest.param({}, 1, [], {"scaledToZero": False}, id="serving, never at zero"),
    pytest.param({"scaledToZero": False}, 0, [], {"scaledToZero": True, "lastScaledToZeroTime": "NOW"},
                 id="just went to zero"),
    pytest.param({"scaledToZero": True, "lastScaledToZeroTime": ZERO_AT}, 0, [],
                 {"scaledToZero": True, "lastScaledToZeroTime": ZERO_AT}, id="still at zero: the time stays"),
    pytest.param({"scaledToZero": True, "lastScaledToZeroTime": ZERO_AT}, 1,
                 [("old", "2026-12-01T20:00:00Z", "2026-12-01T20:01:00Z"), ("new", "2026-12-01T21:05:00Z", None)],
                 {"scaledToZero": False, "lastScaledToZeroTime": ZERO_AT}, id="waking: the new pod is not Ready yet"),
    pytest.param({"scaledToZero": False, "lastScaledToZeroTime": ZERO_AT}, 1,
                 [("new", "2026-12-01T21:05:00Z", "2026-12-01T21:06:10Z")],
                 {"scaledToZero": False, "lastScaledToZeroTime": ZERO_AT,
                  "lastColdStart": {"pod": "new", "createdAt": "2026-12-01T21:05:00Z",
                                    "readyAt": "2026-12-01T21:06:10Z", "seconds": 70}}, id="woken: measured"),
    pytest.param({"scaledToZero": False, "lastScaledToZeroTime": ZERO_AT,
                  "lastColdStart": {"pod": "new", "createdAt": "2026-12-01T21:05:00Z",
                                    "readyAt": "2026-12-01T21:06:10Z", "seconds": 70}}, 2,
                 [("new", "2026-12-01T21:05:00Z", "2026-12-01T21:06:10Z"),
                  ("second", "2026-12-01T21:07:00Z", "2026-12-01T21:07:30Z")],
                 {"scaledToZero": False, "lastScaledToZeroTime": ZERO_AT,
                  "lastColdStart": {"pod": "new", "createdAt": "2026-12-01T21:05:00Z",
                                    "readyAt": "2026-12-01T21:06:10Z", "seconds": 70}},
                 id="a later scale-up is not a cold start"),
])
def test_scale_to_zero_status(old: dict[str, Any], replicas: int, pods: list[tuple[str, str, str | None]],
                              want: dict[str, Any]) -> None:
    summaries = [{"name": n, "createdAt": c, **({"readyAt": r} if r else {})} for n, c, r in pods]
    now = "2026-12-01T21:10:00Z"
    got = scale_to_zero_status(old, _dep(replicas), summaries, now)
    assert got == {k: (now if v == "NOW" else v) for k, v in want.items()}


def test_a_worker_of_a_multi_node_replica_is_not_the_cold_start() -> None:
    pods = [{"name": "big-0-1", "workerIndex": 1, "createdAt": "2026-12-01T21:05:00Z",
             "readyAt": "2026-12-01T21:05:20Z"},
            {"name": "big-0", "workerIndex": 0, "createdAt": "2026-12-01T21:05:00Z", "readyAt": "2026-12-01T21:07:00Z"}]
    got = scale_to_zero_status({"scaledToZero": True, "lastScaledToZeroTime": ZERO_AT}, _dep(1), pods, ZERO_AT)
    assert got["lastColdStart"]["pod"] == "big-0" and got["lastColdStart"]["seconds"] == 120


def test_the_status_at_zero_is_ready_and_waking_is_scaling_from_zero_with_normal_events() -> None:
    from qwen_fleet.reconcile.controller import Controller, Result
    from qwen_fleet.reconcile.store import Store

    cr = _cr(SPEC)
    plan = make_plan(cr, OperatorConfig())
    sent: list[tuple[str, str, str]] = []
    controller = Controller(None, OperatorConfig(), Store(), emit=lambda _r, type_, reason, msg: sent.append(
        (type_, reason, msg)))  # type: ignore[arg-type]
    serving = compute_status(None, 1, Outcome.applied(), plan, Observed(deployment=_dep(1)), "2026-12-01T20:00:00Z")
    assert serving["autoscaling"] == {"engine": "keda", "scaledToZero": False}
    at_zero = compute_status(serving, 1, Outcome.applied(), plan, Observed(deployment=_dep(0)), ZERO_AT)
    ready = next(c for c in at_zero["conditions"] if c["type"] == "Ready")
    assert (ready["status"], ready["reason"]) == ("True", "ScaledToZero")
    assert at_zero["autoscaling"] == {"engine": "keda", "scaledToZero": True, "lastScaledToZeroTime": ZERO_AT}
    waking_dep = _dep(1)
    waking_dep["status"].update(readyReplicas=0, availableReplicas=0)
    waking_pod = pod_summary(_pod("big-1", "2026-12-01T21:05:00Z", "2026-12-01T21:05:00Z"))
    waking = compute_status(at_zero, 1, Outcome.applied(), plan, Observed(deployment=waking_dep, pods=(waking_pod,)),
                            "2026-12-01T21:05:01Z")
    ready = next(c for c in waking["conditions"] if c["type"] == "Ready")
    assert (ready["status"], ready["reason"]) == ("False", "ScalingFromZero")
    assert "holds requests" in ready["message"]
    controller._events({}, at_zero, waking, Result(Outcome.applied()))
    assert [(t, r) for t, r, _ in sent] == [("Normal", "ScalingFromZero")]
    sent.clear()
    woken_pod = pod_summary(_pod("big-1", "2026-12-01T21:05:00Z", "2026-12-01T21:05:00Z", "2026-12-01T21:05:02Z",
                                 "2026-12-01T21:06:12Z"))
    woken = compute_status(waking, 1, Outcome.applied(), plan, Observed(deployment=_dep(1), pods=(woken_pod,)),
                           "2026-12-01T21:06:13Z")
    assert woken["autoscaling"]["lastColdStart"]["seconds"] == 72
    assert next(c for c in woken["conditions"] if c["type"] == "Ready")["status"] == "True"
    controller._events({}, waking, woken, Result(Outcome.applied()))
    assert [(t, r) for t, r, _ in sent] == [("Normal", "ColdStart"), ("Normal", "Ready")]
    assert sent[0][2] == ("started from zero in 72 s: pod big-1 Ready 72 s after it was created (scheduling 0 s, "
                          "container start 2 s, engine start 70 s)")
