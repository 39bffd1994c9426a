"""Scale to zero end to end on the real node (issue 18's acceptance): the real KEDA v2.21.0 and the real KEDA HTTP
add-on v0.15.0 (interceptor, external scaler, operator) beside a control plane with the real node, and a fleet whose
pod is a real vLLM CPU container (the locally built engine image, the tiny Qwen2 on a PersistentVolume), run by the
node's kubelet and Ready on its own readiness probe. bench/scale_to_zero_node.py says what runs where.

The oracle is what a client sees (HTTP statuses and bodies through the interceptor, the interceptor's own count of
held requests) and what the scheduler and the kubelet wrote on the pod, never the operator's code. Durations are
recorded (printed, and bench/results/scale-to-zero-real-node.md), not asserted.

In `make test` (marker keda_http; alone: `make test-scale-to-zero`); KEDA and the add-on, when missing, are built in the
background while the earlier tests run (tests/support/keda_prebuild.py).
"""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path

import pytest
from bench.keda_vs_hpa import Env, services
from bench.scale_to_zero_node import FLEET, REQUESTS, scenario

from qwen_fleet_dev.cluster import LocalCluster
from qwen_fleet_dev.engine_image import EngineImage
from qwen_fleet_dev.realnode import NODE_NAME
from tests.support.kube import condition, events_for, get

pytestmark = [pytest.mark.cluster, pytest.mark.vllm, pytest.mark.slow, pytest.mark.keda_http]
NS = "zero-node"


@pytest.fixture(scope="module")
def zero_env(real_cluster: LocalCluster, tmp_path_factory: pytest.TempPathFactory) -> Iterator[Env]:
    with services(real_cluster, tmp_path_factory.mktemp("zero-node-env"), http_add_on=True) as env:
        yield env


def _diagnose(env: Env) -> str:
    assert env.add_on is not None
    qwi = get(env.cluster, "qwi", FLEET, NS) or {}
    so = get(env.cluster, "scaledobject", FLEET, NS) or {}
    pods = env.cluster.kubectl("get", "pods", "-n", NS, "-o", "wide", check=False).stdout
    return (f"qwi status: {json.dumps(qwi.get('status'), indent=1)}\nscaledobject status: "
            f"{json.dumps(so.get('status'), indent=1)}\n{pods}\n{env.add_on.tail(20)}\n{env.keda.tail(15)}\n"
            f"--- operator ---\n{env.operator.tail(30)}")


@pytest.mark.timeout(1800)  # the idle period twice, a real engine start on a loaded machine
def test_a_real_vllm_pod_goes_to_zero_and_held_requests_wake_it_with_none_lost(
        zero_env: Env, engine_image: EngineImage, tiny_qwen_dir: Path) -> None:
    env = zero_env
    try:
        out = scenario(env, NS, tiny_qwen_dir, engine_image.tag, cycles=1)
    except (TimeoutError, AssertionError) as err:
        raise AssertionError(f"{err}\n{_diagnose(env)}") from None
    print("scale-to-zero-real-node:", json.dumps(out))

    # The operator made the route and the proxy Service (owned by the route); the model is on a claim.
    route = get(env.cluster, "interceptorroute", FLEET, NS)
    assert route is not None and (condition(route, "Ready") or {}).get("status") == "True", route
    proxy = get(env.cluster, "service", f"{FLEET}-proxy", NS)
    assert proxy is not None and proxy["metadata"]["ownerReferences"][0]["uid"] == route["metadata"]["uid"], proxy
    qwi = get(env.cluster, "qwi", FLEET, NS) or {}
    assert (condition(qwi, "ModelCached") or {}).get("reason") == "ModelOnClaim", qwi.get("status")

    assert out["first_zero"]["scaledToZero"] is True, out["first_zero"]
    cycle = out["cycles"][0]
    # Held: the interceptor counted every request while none had been answered ...
    assert cycle["answered_when_held_seen"] == 0, cycle
    # ... and every one was answered 200 with a completion, none lost, marked as having waited for a cold start.
    answers = cycle["answers"]
    assert [a["status"] for a in answers] == [200] * REQUESTS, answers
    assert all(a["choices"] == 1 and a["completion_tokens"] >= 1 for a in answers), answers
    assert [a["cold_start_header"] for a in answers] == ["true"] * REQUESTS, answers

    # The pod that served: a real container on the real node, started by the kubelet, never restarted; made after
    # the requests were sent (it did not exist at zero), and every answer came after it was Ready (its Ready time is
    # the API's whole second, rounded down, so it can only read earlier than the real moment).
    pod = cycle["pod"]
    assert pod["node"] == NODE_NAME and pod["restarts"] == 0, pod
    assert pod["created"] >= -1, pod
    assert all(a["done"] >= pod["ready"] for a in answers), (pod, answers)

    # The status reports that cold start with the pod's own split (scheduler's and kubelet's timestamps).
    cold = cycle["status"]["lastColdStart"]
    split = cycle["pod_split_s"]
    assert cold["pod"] == pod["pod"], (cold, pod)
    assert (cold["seconds"], cold["schedulingSeconds"], cold["containerStartSeconds"], cold["engineStartSeconds"]) \
        == (split["created_to_ready"], split["scheduling"], split["container_start"], split["engine_start"]), \
        (cold, split)
    # Back to zero once idle, the cold start kept; the printer column and the Event say it too.
    assert cycle["status_at_zero"]["scaledToZero"] is True and cycle["status_at_zero"]["lastColdStart"] == cold
    table = env.cluster.kubectl("get", "qwi", FLEET, "-n", NS).stdout.splitlines()
    row = dict(zip(table[0].split(), table[1].split(), strict=False))
    assert (row["SCALEDTOZERO"], row["COLDSTART"]) == ("true", str(cold["seconds"])), table
    reasons = {e.get("reason"): str(e.get("message")) for e in events_for(env.cluster, NS, FLEET)}
    assert reasons.get("ColdStart", "").startswith(f"started from zero in {cold['seconds']} s"), reasons

