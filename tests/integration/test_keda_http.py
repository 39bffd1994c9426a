"""autoscaling.scaleToZero with the REAL KEDA HTTP add-on v0.15.0 (interceptor, external scaler, operator: built by
``hack/build-binaries.sh keda-http`` when missing) and the real KEDA v2.21.0, in a control plane of their own, with
an engine started for the fleet's pod when KEDA makes it (bench/scale_to_zero.py says what stands in: kwok pods
run no containers, so the test plays the pod's kubelet and reports it Ready when the engine's /health answers).

The engine is the llm-d inference simulator (tests/support/sim.py): under test are the add-on holding requests,
KEDA's wake from its queue and the operator's status, not the engine. A real vLLM pod going to zero and woken by
held requests, with its real cold start, is tests/node/test_scale_to_zero_node.py (issue 30: the simulator where
the engine's behaviour, not its internals, is what the system reacts to; this module's vLLM start and tiny model
were ~2 of its ~5 minutes).

The oracle is what a client sees (HTTP statuses and bodies of requests sent through the interceptor, the
interceptor's own count of held requests) and the test's own clock for when the engine served, never the
operator's code. Durations are recorded, not asserted, except lower bounds the mechanism guarantees.
"""

from __future__ import annotations

import json
import threading
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from bench.keda_vs_hpa import Env
from bench.scale_to_zero import (
    FLEET,
    REQUESTS,
    Answer,
    fleet_manifest,
    scale_to_zero_environment,
    scenario,
    send,
)

from qwen_fleet_dev.cluster import free_port
from tests.support.kube import condition, events_for, get, wait_until

# In `make test` (alone: `make test-keda-http`); KEDA and the add-on, when missing, are built in the background while
# the earlier tests run (tests/support/keda_prebuild.py).
pytestmark = [pytest.mark.cluster, pytest.mark.slow, pytest.mark.keda_http]
NS = "zero-live"


@pytest.fixture(scope="module")
def zero_env(tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[Env, str, str, Path]]:
    workdir = tmp_path_factory.mktemp("keda-http-env")
    with scale_to_zero_environment(workdir, simulate=True) as (env, model, python):
        yield env, model, python, workdir


def _diagnose(env: Env, fleet: str, ns: str) -> str:
    assert env.add_on is not None
    qwi = get(env.cluster, "qwi", fleet, ns) or {}
    so = get(env.cluster, "scaledobject", fleet, ns) or {}
    return (f"qwi status: {json.dumps(qwi.get('status'), indent=1)}\nscaledobject status: "
            f"{json.dumps(so.get('status'), indent=1)}\n{env.add_on.tail(20)}\n{env.keda.tail(15)}\n"
            f"--- operator ---\n{env.operator.tail(20)}")


@pytest.mark.timeout(1800)  # the environment and the idle period twice, on a loaded machine
def test_an_idle_fleet_goes_to_zero_and_held_requests_wake_it_with_none_lost(
        zero_env: tuple[Env, str, str, Path]) -> None:
    env, model, python, workdir = zero_env
    try:
        out = scenario(env, NS, model, python, workdir, cycles=1, simulate=True)
    except (TimeoutError, AssertionError) as err:
        raise AssertionError(f"{err}\n{_diagnose(env, FLEET, NS)}") from None
    print(json.dumps(out, indent=1))

    # The operator made the add-on's route and the ScaledObject's wake trigger; the add-on's operator took the route.
    route = get(env.cluster, "interceptorroute", FLEET, NS)
    assert route is not None and (condition(route, "Ready") or {}).get("status") == "True", route
    triggers = (get(env.cluster, "scaledobject", FLEET, NS) or {})["spec"]["triggers"]
    assert [t["type"] for t in triggers][-1] == "external-push"

    # Idle: zero pods, and the status says so.
    first = out["first_zero"]
    assert first["scaledToZero"] is True and first["lastScaledToZeroTime"], first

    cycle = out["cycles"][0]
    # Held: the interceptor counted every request in flight while none had been answered ...
    assert cycle["answered_when_held_seen"] == 0, cycle
    # ... and answered every one, none lost, each only after the pod was Ready (an engine served).
    answers = cycle["answers"]
    assert [a["status"] for a in answers] == [200] * REQUESTS, answers
    assert all(a["choices"] == 1 and a["completion_tokens"] >= 1 for a in answers), answers
    assert all(a["done"] >= cycle["pod_ready_s"] for a in answers), (cycle["pod_ready_s"], answers)
    # The interceptor says each waited for a cold start (X-KEDA-HTTP-Cold-Start, interceptor/middleware/
    # endpoint_resolver.go: true when the request waited for a ready endpoint).
    assert [a["cold_start_header"] for a in answers] == ["true"] * REQUESTS, answers

    # The status reports the cold start: the pod made after zero, from its creation to Ready. The pod was made
    # between the requests and KEDA's scale seen here, and turned Ready when the test reported it (whole seconds).
    cold = cycle["status"]["lastColdStart"]
    assert cold["pod"].startswith(f"{FLEET}-"), cold
    low, high = cycle["pod_ready_s"] - cycle["keda_scaled_s"] - 2, cycle["pod_ready_s"] + 2
    assert low <= cold["seconds"] <= high, (cold, cycle)
    engine = cycle["pod_ready_s"] - cycle["engine_started_s"]
    assert abs(cold["engineStartSeconds"] - engine) <= 2, (cold, cycle)
    # Back to zero once idle again, and the cold start is kept.
    assert cycle["status_at_zero"]["scaledToZero"] is True
    assert cycle["status_at_zero"]["lastColdStart"] == cold

    # The printer columns and the Events.
    table = env.cluster.kubectl("get", "qwi", FLEET, "-n", NS).stdout.splitlines()
    header, row = table[0].split(), dict(zip(table[0].split(), table[1].split(), strict=False))
    assert "SCALEDTOZERO" in header and "COLDSTART" in header, table
    assert (row["SCALEDTOZERO"], row["COLDSTART"]) == ("true", str(cold["seconds"])), table
    reasons = {e.get("reason"): e.get("message") or e.get("note") for e in events_for(env.cluster, NS, FLEET)}
    assert "ScalingFromZero" in reasons and reasons.get("ColdStart", "").startswith(
        f"started from zero in {cold['seconds']} s"), reasons


def test_a_request_is_held_for_the_hold_timeout_then_answered_504(zero_env: tuple[Env, str, str, Path]) -> None:
    """A fleet whose replica never becomes ready: the interceptor holds a request for holdTimeoutSeconds (the
    route's readiness timeout), then answers 504 Gateway Timeout; never sooner."""
    env, _model, _python, _workdir = zero_env
    assert env.add_on is not None
    fleet, hold = "never", 60
    env.cluster.kubectl("create", "namespace", "zero-hold", check=False)
    env.cluster.kubectl("apply", "-n", "zero-hold", "-f", "-",
                        input=json.dumps(fleet_manifest(env, free_port(), name=fleet, hold_seconds=hold)))

    def routed() -> Any:
        route = get(env.cluster, "interceptorroute", fleet, "zero-hold")
        return route if (condition(route, "Ready") or {}).get("status") == "True" else None

    wait_until("the InterceptorRoute Ready", routed, 60)
    # The interceptor's routing table follows its own watch of the route: its admin /queue lists a route's key once
    # the table has taken it in (pkg/routing/table.go EnsureKey), so a request sent later is held, not refused 404.
    add_on = env.add_on
    wait_until("the route in the interceptor's routing table", lambda: f"zero-hold/{fleet}" in add_on.counts(), 60)
    answers: list[Answer] = []
    thread = threading.Thread(target=send, args=(env, "zero-hold", 0, answers, fleet), daemon=True)
    thread.start()
    thread.join(hold + 60)
    assert answers and answers[0].done is not None, _diagnose(env, fleet, "zero-hold")
    answer = answers[0]
    assert answer.status == 504, (answer, _diagnose(env, fleet, "zero-hold"))
    # http.Error(w, StatusText(504)) (interceptor/handler/static.go).
    assert answer.body.strip() == "Gateway Timeout", answer
    assert answer.done - answer.sent >= hold, answer


def test_turning_scale_to_zero_off_removes_the_route_and_the_garbage_collector_the_proxy_service(
        zero_env: tuple[Env, str, str, Path]) -> None:
    """The proxy Service is owned by the InterceptorRoute; the operator deletes the route when scaleToZero goes and
    the cluster's garbage collector (kube-controller-manager) the Service. A hub model without model.cache is
    flagged: ModelCached False and a Warning Event."""
    env = zero_env[0]
    fleet, ns = "off", "zero-off"
    env.cluster.kubectl("create", "namespace", ns, check=False)
    manifest = fleet_manifest(env, free_port(), name=fleet)
    env.cluster.kubectl("apply", "-n", ns, "-f", "-", input=json.dumps(manifest))
    route = wait_until("the InterceptorRoute", lambda: get(env.cluster, "interceptorroute", fleet, ns), 60)
    proxy = wait_until("the proxy Service", lambda: get(env.cluster, "service", f"{fleet}-proxy", ns), 60)
    assert [(r["kind"], r["name"], r["uid"]) for r in proxy["metadata"]["ownerReferences"]] == [
        ("InterceptorRoute", fleet, route["metadata"]["uid"])], proxy["metadata"]
    cached = wait_until("ModelCached", lambda: condition(get(env.cluster, "qwi", fleet, ns), "ModelCached"), 60)
    assert (cached["status"], cached["reason"]) == ("False", "ModelNotCached"), cached
    warned = wait_until("the ModelNotCached Event", lambda: [e for e in events_for(env.cluster, ns, fleet)
                                                              if e.get("reason") == "ModelNotCached"], 30)
    assert warned[0]["type"] == "Warning" and "model.cache" in warned[0]["message"], warned

    auto = manifest["spec"]["autoscaling"]
    del auto["scaleToZero"]
    auto["minReplicas"] = 1
    env.cluster.kubectl("apply", "-n", ns, "-f", "-", input=json.dumps(manifest))
    wait_until("the route and the proxy Service gone", lambda: get(env.cluster, "interceptorroute", fleet, ns) is None
               and get(env.cluster, "service", f"{fleet}-proxy", ns) is None, 60)
    assert get(env.cluster, "service", fleet, ns) is not None  # the fleet's own Service stays

    def without_scale_to_zero() -> dict[str, Any] | None:
        qwi = get(env.cluster, "qwi", fleet, ns)
        return qwi if qwi and condition(qwi, "ModelCached") is None else None

    qwi = wait_until("the status without scale to zero", without_scale_to_zero, 60)
    assert qwi["status"]["endpoint"] == f"http://{fleet}.{ns}.svc:{manifest['spec']['service']['port']}/v1", qwi
