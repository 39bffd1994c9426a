"""autoscaling.engine keda with the REAL KEDA (github.com/kedacore/keda/v2 v2.21.0: its operator and its metrics
apiserver, built by ``hack/build-binaries.sh keda`` when missing) in a local control plane of its own, with a real
Prometheus (v3.16.0) and the real HPA controller.

What Prometheus scrapes: a small /metrics endpoint served from this test that speaks for the fleet's first pod
(kwok pods run no containers; bench/keda_vs_hpa.py's StandInEngine), exporting vLLM's own series names and
labels (``vllm:num_requests_waiting`` and ``vllm:kv_cache_usage_perc``, labels ``model_name`` and ``engine``),
mapped to the pod by the relabelling the Prometheus Operator renders for the operator's ServiceMonitor
(metrics_stack.py). The test sets the queue; every link after it is the real program: Prometheus, KEDA's
Prometheus scaler, its gRPC Metrics Service, its metrics apiserver behind the aggregation layer, the HPA
controller, the Deployment controller.

The oracle is the number the test puts in the queue and the HPA's arithmetic written out here
(``ceil(total waiting / target)``), never the operator's render code.
"""

from __future__ import annotations

import json
import math
import time
from collections.abc import Iterator
from typing import Any

import pytest
from bench.keda_vs_hpa import (
    MAX_REPLICAS,
    STEPS,
    TARGET_PER_REPLICA,
    Env,
    StandInEngine,
    environment,
    fleet_manifest,
    scenario,
)

from qwen_fleet_dev import keda
from qwen_fleet_dev.cluster import LocalCluster, free_port
from qwen_fleet_dev.metrics_stack import PodTarget
from tests.support.kube import apply, condition, get, wait_until
from tests.support.operator_process import audit_writes

# In `make test` (alone: `make test-keda`). When the cache lacks KEDA, the session builds it in the background while
# the earlier tests run (tests/support/keda_prebuild.py) and this module waits for it.
pytestmark = [pytest.mark.cluster, pytest.mark.keda_controller]
NS = "keda-live"


@pytest.fixture(scope="module")
def env(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Env]:
    """Control plane, Prometheus + prometheus-adapter, the real KEDA (built here when missing), the operator."""
    with environment(tmp_path_factory.mktemp("keda-env")) as started:
        started.cluster.kubectl("create", "namespace", NS)
        yield started


def _running_pods(cluster: LocalCluster, fleet: str) -> list[dict[str, Any]]:
    out = cluster.kubectl("get", "pods", "-n", NS, "-l", f"qwenfleet.io/inference={fleet}", "-o", "json")
    pods = [p for p in json.loads(out.stdout)["items"]
            if p.get("status", {}).get("phase") == "Running" and not p["metadata"].get("deletionTimestamp")]
    return sorted(pods, key=lambda p: (p["metadata"]["creationTimestamp"], p["metadata"]["name"]))


def _diagnose(env: Env, fleet: str) -> str:
    qwi = get(env.cluster, "qwi", fleet, NS) or {}
    so = get(env.cluster, "scaledobject", fleet, NS) or {}
    hpa = get(env.cluster, "hpa", f"keda-hpa-{fleet}", NS) or {}
    return (f"qwi status: {json.dumps(qwi.get('status'), indent=1)}\nscaledobject status: "
            f"{json.dumps(so.get('status'), indent=1)}\nhpa status: {json.dumps(hpa.get('status'), indent=1)}\n"
            f"{env.keda.tail(20)}\n--- operator ---\n{env.operator.tail(20)}")


def test_real_keda_readies_the_scaled_object_makes_its_hpa_and_scales_on_the_prometheus_queue(env: Env) -> None:
    cluster, fleet = env.cluster, "big"
    engine = StandInEngine()
    try:
        began = time.time()
        apply(cluster, NS, fleet_manifest(fleet, "keda", env.stack.prometheus_url))
        pod = wait_until("the fleet's first pod Running", lambda: _running_pods(cluster, fleet), 60)[0]
        env.stack.set_pod_targets([PodTarget(f"127.0.0.1:{engine.port}", NS, pod["metadata"]["name"],
                                             pod_labels=pod["metadata"]["labels"], service=fleet)])

        # KEDA itself marks the ScaledObject Ready (its Prometheus query works) and makes its HPA.
        def ready() -> dict[str, Any] | None:
            so = get(cluster, "scaledobject", fleet, NS)
            cond = condition(so, "Ready") or {}
            return so if cond.get("status") == "True" else None

        try:
            so = wait_until("KEDA's Ready=True on the ScaledObject", ready, 90)
        except AssertionError as err:
            raise AssertionError(f"{err}\n{_diagnose(env, fleet)}") from None
        assert (condition(so, "Ready") or {})["reason"] == "ScaledObjectReady"
        hpa_name = so["status"]["hpaName"]
        assert hpa_name == f"keda-hpa-{fleet}"
        assert "finalizer.keda.sh" in so["metadata"].get("finalizers", [])
        hpa = wait_until("KEDA's HPA", lambda: get(cluster, "hpa", hpa_name, NS), 30)
        assert [(r["kind"], r["name"]) for r in hpa["metadata"]["ownerReferences"]] == [("ScaledObject", fleet)]
        assert hpa["spec"]["scaleTargetRef"]["name"] == fleet and hpa["spec"]["scaleTargetRef"]["kind"] == "Deployment"
        assert (hpa["spec"]["minReplicas"], hpa["spec"]["maxReplicas"]) == (1, 4)
        metrics = [m["external"] for m in hpa["spec"]["metrics"]]
        assert [m["target"] for m in metrics] == [{"type": "AverageValue", "averageValue": str(TARGET_PER_REPLICA)},
                                                  {"type": "AverageValue", "averageValue": "800m"}]
        queue_metric = metrics[0]["metric"]["name"]
        assert metrics[0]["metric"]["selector"]["matchLabels"] == {keda.SCALED_OBJECT_LABEL: fleet}
        # The operator's own HPA is not made beside KEDA's.
        assert get(cluster, "hpa", fleet, NS) is None

        # A queue surge of 10 on the one pod: the External metric through the aggregation layer reads the total
        # Prometheus holds, and KEDA's HPA scales to ceil(10 / 4) = 3 (the default scale-up allows +2 at once).
        waiting = 10
        engine.waiting.set(waiting)

        def served() -> float | None:
            items = env.keda.external_metric(NS, queue_metric, fleet)
            return float(items[0]["value"]) if items and float(items[0]["value"]) == waiting else None

        try:
            wait_until(f"{queue_metric} = {waiting} through external.metrics.k8s.io", served, 60)
        except AssertionError as err:
            raise AssertionError(f"{err}\n{_diagnose(env, fleet)}") from None
        want = math.ceil(waiting / TARGET_PER_REPLICA)
        try:
            wait_until(f"the Deployment at {want} replicas", lambda: (get(cluster, "deployment", fleet, NS) or {})
                       .get("spec", {}).get("replicas") == want, 60)
        except AssertionError as err:
            raise AssertionError(f"{err}\n{_diagnose(env, fleet)}") from None
        assert (get(cluster, "hpa", hpa_name, NS) or {})["status"]["desiredReplicas"] == want

        # The operator mirrors KEDA's conditions: Ready as a condition of the resource, Active in the message.
        # KEDA turns Active=True at its next poll of the trigger (pollingInterval, 30 s by default).
        def mirrored() -> dict[str, Any] | None:
            qwi = get(cluster, "qwi", fleet, NS)
            cond = condition(qwi, "ScaledObjectReady") or {}
            msg = ((qwi or {}).get("status", {}).get("autoscaling") or {}).get("message", "")
            return qwi if cond.get("status") == "True" and "Active=True" in msg else None

        try:
            qwi = wait_until("KEDA's Ready and Active mirrored on the QwenInference", mirrored, 60)
        except AssertionError as err:
            raise AssertionError(f"{err}\n{_diagnose(env, fleet)}") from None
        assert (condition(qwi, "ScaledObjectReady") or {})["reason"] == "ScaledObjectReady"
        auto = qwi["status"]["autoscaling"]
        assert auto["engine"] == "keda" and auto["hpaName"] == hpa_name
        assert "Ready=True (ScaledObjectReady)" in auto["message"], auto

        # KEDA has added its finalizer and its scaledobject.keda.sh/name label and writes the status; the operator
        # leaves all of that alone: through a resync (10 s here) it writes none of the fleet's children.
        since = time.time()
        time.sleep(14)
        writes = [(w["verb"], w["objectRef"]["resource"], w["objectRef"].get("name"))
                  for w in audit_writes(cluster, since) if (w.get("objectRef") or {}).get("namespace") == NS
                  and w["objectRef"]["resource"] not in ("qweninferences", "events")]
        assert writes == [], writes
        # Nor before: KEDA's own updates of the ScaledObject (finalizer, label) never made the operator apply it
        # again; its one write is the one that made it.
        made = [w["verb"] for w in audit_writes(cluster, began) if (w.get("objectRef") or {}).get("resource")
                == "scaledobjects" and w["objectRef"].get("namespace") == NS and w["objectRef"].get("name") == fleet]
        assert len(made) == 1, made
        labels = (get(cluster, "scaledobject", fleet, NS) or {})["metadata"].get("labels") or {}
        assert labels.get(keda.SCALED_OBJECT_LABEL) == fleet, labels
    finally:
        engine.stop()


def test_a_prometheus_keda_cannot_reach_is_mirrored_as_scaled_object_ready_false(env: Env) -> None:
    """KEDA's own verdict on a broken trigger source (no fallback set: Ready=False, TriggerError, the count kept)
    reaches the QwenInference as ScaledObjectReady=False."""
    cluster, fleet = env.cluster, "unreachable"
    nowhere = f"http://127.0.0.1:{free_port()}"  # nothing listens there
    apply(cluster, NS, fleet_manifest(fleet, "keda", nowhere))

    def mirrored_false() -> dict[str, Any] | None:
        cond = condition(get(cluster, "qwi", fleet, NS), "ScaledObjectReady") or {}
        return cond if cond.get("status") == "False" else None

    try:
        cond = wait_until("ScaledObjectReady=False mirrored from KEDA", mirrored_false, 60)
    except AssertionError as err:
        raise AssertionError(f"{err}\n{_diagnose(env, fleet)}") from None
    so_cond = condition(get(cluster, "scaledobject", fleet, NS), "Ready") or {}
    assert (so_cond.get("status"), so_cond.get("reason")) == ("False", "TriggerError"), so_cond
    assert (cond["reason"], cond["message"]) == ("TriggerError", so_cond["message"])
    assert (get(cluster, "deployment", fleet, NS) or {})["spec"]["replicas"] == 1

def test_the_same_queue_surge_gets_the_same_decisions_from_the_hpa_path_and_the_keda_path(env: Env) -> None:
    """bench/keda_vs_hpa.py's scenario (``python -m bench.keda_vs_hpa`` writes its figure to bench/results/):
    two fleets, one per engine, the same surge steps at the same instant; each path's Deployment reaches
    ceil(waiting / target) (capped at maxReplicas). Only the counts are checked, not how soon."""
    out = scenario(env, "surge")
    assert [s["waiting"] for s in out["steps"]] == list(STEPS)
    for step in out["steps"]:
        want = min(MAX_REPLICAS, math.ceil(step["waiting"] / TARGET_PER_REPLICA))
        assert step["expected_replicas"] == want
        assert step["hpa_reached_s"] is not None and step["keda_reached_s"] is not None, (step, out["samples"][-5:])
    last = out["samples"][-1]
    assert last["hpa_replicas"] == last["keda_replicas"] == min(MAX_REPLICAS, math.ceil(STEPS[-1] / TARGET_PER_REPLICA))
