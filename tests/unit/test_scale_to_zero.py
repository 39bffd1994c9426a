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
    controller = Controller(None, OperatorConfig(), Store(),  # type: ignore[arg-type]
                            emit=lambda _r, type_, reason, msg: sent.append((type_, reason, msg)))
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


# --- a cold start that downloads the model: a warning, not a refusal ---------------------------------------------

HUB_MODEL = "Qwen/Qwen3-4B-Instruct-2507"


@pytest.mark.parametrize(("model", "want"), [
    pytest.param({"name": HUB_MODEL}, ("False", "ModelNotCached"), id="huggingFace, no cache"),
    pytest.param({"name": HUB_MODEL, "source": {"modelScope": {}}}, ("False", "ModelNotCached"),
                 id="modelScope, no cache"),
    pytest.param({"name": HUB_MODEL, "cache": {"size": "20Gi"}}, ("True", "ModelCached"), id="cache"),
    pytest.param({"name": HUB_MODEL, "cache": {"size": "20Gi", "prefetch": {"enabled": True}}},
                 ("True", "ModelPrefetched"), id="cache and prefetch"),
    pytest.param({"name": HUB_MODEL, "source": {"pvc": {"claimName": "weights"}}}, ("True", "ModelOnClaim"),
                 id="pvc source"),
])
def test_a_fleet_that_scales_to_zero_says_whether_a_cold_start_downloads_the_model(
        model: dict[str, Any], want: tuple[str, str]) -> None:
    spec = {**copy.deepcopy(SPEC), "model": model, "engine": {"maxModelLen": 8192}}
    plan = make_plan(_cr(spec), OperatorConfig())
    assert plan.feasible  # a warning: the fleet is made all the same
    status = compute_status(None, 1, Outcome.applied(), plan, Observed(deployment=_dep(1)), ZERO_AT)
    (cond,) = [c for c in status["conditions"] if c["type"] == "ModelCached"]
    assert (cond["status"], cond["reason"]) == want
    assert next(c for c in status["conditions"] if c["type"] == "Ready")["status"] == "True"
    if want[0] == "False":
        assert "model.cache" in cond["message"] and "prefetch" in cond["message"] and HUB_MODEL in cond["message"]


def test_the_download_warning_is_a_warning_event_once_and_only_with_scale_to_zero() -> None:
    from qwen_fleet.reconcile.controller import Controller, Result
    from qwen_fleet.reconcile.store import Store

    sent: list[tuple[str, str]] = []
    controller = Controller(None, OperatorConfig(), Store(),  # type: ignore[arg-type]
                            emit=lambda _r, type_, reason, _m: sent.append((type_, reason)))
    plan = make_plan(_cr(SPEC), OperatorConfig())
    first = compute_status(None, 1, Outcome.applied(), plan, Observed(deployment=_dep(1)), ZERO_AT)
    controller._events({}, {}, first, Result(Outcome.applied()))
    assert ("Warning", "ModelNotCached") in sent
    sent.clear()
    again = compute_status(first, 1, Outcome.applied(), plan, Observed(deployment=_dep(1)), ZERO_AT)
    controller._events({}, first, again, Result(Outcome.applied()))
    assert sent == []
    plain = copy.deepcopy(SPEC)
    plain["autoscaling"]["minReplicas"] = 1
    del plain["autoscaling"]["scaleToZero"]
    plain_plan = make_plan(_cr(plain), OperatorConfig())
    status = compute_status(None, 1, Outcome.applied(), plain_plan, Observed(deployment=_dep(1)), ZERO_AT)
    assert plain_plan.cold_start_weights is None
    assert all(c["type"] != "ModelCached" for c in status["conditions"])


# --- the route and the proxy Service go when scale to zero goes --------------------------------------------------


def _rendered(spec: dict[str, Any]) -> list[dict[str, Any]]:
    cr = _cr(spec)
    return render_children(cr, make_plan(cr, OperatorConfig()), ALL_CAPABILITIES)


def _stored(children: list[dict[str, Any]]) -> dict[tuple[str, str], dict[str, Any]]:
    out = {}
    for i, child in enumerate(copy.deepcopy(children)):
        child["metadata"].update({"uid": f"c-{i}", "resourceVersion": str(100 + i)})
        out[(child["kind"], child["metadata"]["name"])] = child
    return out


def test_the_proxy_service_waits_for_the_route_and_is_owned_by_it_not_by_the_fleet() -> None:
    from qwen_fleet.reconcile.changes import plan_changes

    desired = _rendered(SPEC)
    new = plan_changes(desired, {})
    assert ("Service", "big-proxy") not in [a.key for a in new.applies]
    assert ("InterceptorRoute", "big") in [a.key for a in new.applies]
    route = {**_stored([c for c in desired if c["kind"] == "InterceptorRoute"])[("InterceptorRoute", "big")]}
    route["metadata"]["uid"] = "route-uid"
    observed = {**_stored([c for c in desired if c["kind"] != "Service" or c["metadata"]["name"] == "big"]),
                ("InterceptorRoute", "big"): route}
    then = plan_changes(desired, observed)
    (proxy,) = [a for a in then.applies if a.key == ("Service", "big-proxy")]
    assert proxy.obj["metadata"]["ownerReferences"] == [
        {"apiVersion": "http.keda.sh/v1beta1", "kind": "InterceptorRoute", "name": "big", "uid": "route-uid",
         "controller": True}]
    # A route being deleted is no owner to take: the Service waits for the new one.
    going = copy.deepcopy(observed)
    going[("InterceptorRoute", "big")]["metadata"]["deletionTimestamp"] = ZERO_AT
    assert ("Service", "big-proxy") not in [a.key for a in plan_changes(desired, going).applies]


def _served_with_proxy(spec: dict[str, Any]) -> dict[tuple[str, str], dict[str, Any]]:
    """A fleet that scales to zero as the apiserver holds it: the proxy Service owned by the route."""
    observed = _stored(_rendered(spec))
    route_uid = observed[("InterceptorRoute", "big")]["metadata"]["uid"]
    refs = observed[("Service", "big-proxy")]["metadata"]["ownerReferences"]
    refs[0]["uid"] = route_uid
    return observed


@pytest.mark.parametrize("change", ["scaleToZero off", "engine hpa", "autoscaling off"])
def test_turning_scale_to_zero_off_deletes_the_route_and_the_garbage_collector_takes_the_proxy(change: str) -> None:
    from qwen_fleet.reconcile.changes import plan_changes
    from qwen_fleet.reconcile.store import owner_key

    observed = _served_with_proxy(SPEC)
    spec = copy.deepcopy(SPEC)
    auto = spec["autoscaling"]
    del auto["scaleToZero"]
    auto["minReplicas"] = 1
    if change == "engine hpa":
        auto["engine"] = "hpa"
        del auto["keda"]
    elif change == "autoscaling off":
        spec["autoscaling"] = {"enabled": False}
    changes = plan_changes(_rendered(spec), observed)
    assert ("InterceptorRoute", "big") in [(p.kind, p.name) for p in changes.prune]
    assert all(p.kind != "Service" for p in changes.prune)  # the operator deletes no Service ...
    proxy = observed[("Service", "big-proxy")]
    (ref,) = proxy["metadata"]["ownerReferences"]  # ... the garbage collector does, once its only owner is gone
    assert (ref["kind"], ref["name"], ref["uid"]) == (
        "InterceptorRoute", "big", observed[("InterceptorRoute", "big")]["metadata"]["uid"])
    assert owner_key(proxy) == ("llm", "big")  # still seen as the fleet's child while it lasts


def test_keda_s_own_hpa_is_never_taken_for_a_child() -> None:
    from qwen_fleet.reconcile.store import owner_key

    # KEDA copies the ScaledObject's labels onto its HPA and makes the ScaledObject its controller.
    hpa = {"metadata": {"name": "keda-hpa-big", "namespace": "llm", "ownerReferences": [
        {"apiVersion": "keda.sh/v1alpha1", "kind": "ScaledObject", "name": "big", "uid": "so", "controller": True}]}}
    assert owner_key(hpa) is None
