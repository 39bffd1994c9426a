"""Autoscaling end to end with the real HPA controller, Prometheus, prometheus-adapter, and the llm-d inference
simulator as the engine.

Everything in the loop is the real program: kube-apiserver with the aggregation layer, kube-controller-manager
(HPA sync every 5 s), kwok GPU nodes, the operator as its own process, Prometheus (1 s scrapes), and
prometheus-adapter fed exactly the rules ``helm template`` renders from the chart. The one stand-in is the
pod: kwok pods run no containers, so one engine speaks for the fleet's oldest pod: Prometheus scrapes it with
that pod's ``namespace``, ``pod`` and ``qwenfleet_io_inference`` labels, relabelled as the operator's
ServiceMonitor would. Pods the HPA adds have no server behind them: they export nothing, exactly like vLLM pods
still loading a model, and the HPA counts them as missing (0 on the way up, at-target on the way down).

The engine is the llm-d inference simulator v0.10.2 (tests/support/sim.py), not a vLLM CPU server: what is under
test is the autoscaler's reaction to vLLM's queue, and the simulator's queue under a burst is set by its flags
(``--max-num-seqs 4``, a fixed time per token), where a CPU engine's depends on what the rest of a loaded 2-core
machine leaves it (issue 30: the HPA read 0 mid-burst when the engine's API server fell behind). That its series
have vLLM's names, types and labels is checked against the real engine by tests/contract/test_sim_contract.py;
vLLM's own queue and metrics are the real-engine tests' (tests/contract/test_tiny_vllm.py,
tests/contract/test_chart_metric_names.py, tests/e2e/test_dashboard_live.py, and the real node's HPA test in
tests/node/test_real_fleet.py).

GPU utilisation: there is no GPU here. ``DCGM_FI_DEV_GPU_UTIL`` comes from a small test exporter
(prometheus-client, :class:`qwen_fleet_dev.metrics_stack.FakeDcgmExporter`) with dcgm-exporter's
label schema (gpu, UUID, device, modelName, Hostname, DCGM_FI_DRIVER_VERSION, container, namespace, pod),
scraped with honor_labels so the pod labels are the workload's. Its values are set by the test.

Times (burst start to scale decision, burst end to minReplicas) are recorded and printed, never asserted.
"""

from __future__ import annotations

import json
import time
from collections.abc import Iterator
from typing import Any

import pytest
import yaml
from bench.autoscaling import BURST_TOKENS, FLEET, MAX_NUM_SEQS, MAX_REPLICAS, MIN_REPLICAS, Sample, Scenario

from qwen_fleet.api.scaling import HPA_LATENCY_PERCENTILES
from qwen_fleet.render.metric_names import (
    GPU_UTIL_METRIC,
    ITL_SERIES,
    KV_CACHE_METRIC,
    QUEUE_METRIC,
    TTFT_SERIES,
    latency_metric,
)
from qwen_fleet_dev.cluster import LocalCluster
from qwen_fleet_dev.metrics_stack import DCGM_LABELS, FakeDcgmExporter, MetricsStack
from tests.support.kube import condition, get
from tests.support.operator_process import OperatorProcess, audit_writes
from tests.support.sim import SimServer

pytestmark = [pytest.mark.cluster, pytest.mark.slow]

# The simulated engine: the scenario's maxNumSeqs, and a request of the burst's length (BURST_TOKENS) in about a
# second, so that the queue it keeps is the clients' doing (32 in flight, 4 running, 28 waiting) and it drains within
# seconds of the burst's end.
SIM_TTFT_S = 0.05
SIM_ITL_S = 1.0 / BURST_TOKENS


@pytest.fixture(scope="module")
def autoscaling_sim(tmp_path_factory: pytest.TempPathFactory) -> Iterator[SimServer]:
    server = SimServer(max_num_seqs=MAX_NUM_SEQS, max_model_len=1024, time_to_first_token=SIM_TTFT_S,
                       inter_token_latency=SIM_ITL_S, log_path=tmp_path_factory.mktemp("sim-autoscaling") / "sim.log")
    with server:
        yield server


def _changes(samples: list[Sample]) -> list[int]:
    """The Deployment's replica count each time it changed."""
    out: list[int] = []
    for s in samples:
        if not out or s.replicas != out[-1]:
            out.append(s.replicas)
    return out


def _check_series_labels(stack: MetricsStack, scenario: Scenario, namespace: str) -> None:
    (queue,) = stack.query(f'vllm:num_requests_waiting{{namespace="{namespace}"}}')
    assert queue["metric"]["pod"] == scenario.mapped_pod
    assert queue["metric"]["qwenfleet_io_inference"] == FLEET
    assert get(scenario.cluster, "pod", str(scenario.mapped_pod), namespace) is not None
    gpus = stack.query(f'DCGM_FI_DEV_GPU_UTIL{{namespace="{namespace}"}}')
    assert gpus, "no DCGM series for the fleet"
    for series in gpus:
        # honor_labels: the workload's namespace/pod/container, not the exporter's target labels
        assert set(DCGM_LABELS) <= set(series["metric"])
        assert series["metric"]["container"] == "vllm"
        assert "exported_pod" not in series["metric"]
    assert scenario.mapped_pod in {s["metric"]["pod"] for s in gpus}


def _check_scaling_status(qwi: dict[str, Any], scenario: Scenario) -> None:
    """The CR explains the scaling state in words mirrored from the HPA's conditions.

    ``qwi`` is the CR as it was when the fleet sat at maxReplicas with the burst still on.
    """
    limited, active = condition(qwi, "ScalingLimited"), condition(qwi, "ScalingActive")
    assert limited is not None, json.dumps(qwi.get("status"))
    assert limited["status"] == "True"
    assert limited["reason"] in ("TooManyReplicas", "ScaleUpLimit")
    assert "replica count" in limited["message"]
    assert active is not None
    assert (active["status"], active["reason"]) == ("True", "ValidMetricFound")
    assert "metric" in active["message"]
    summary = qwi["status"]["autoscaling"]
    assert "ScalingLimited=True" in summary["message"]
    # ... and it keeps following the HPA: the same reason on both, once the operator has seen the change. A hang
    # guard, not a speed bar: with the burst on, the apiserver can go unanswered for tens of seconds on this
    # 2-core machine (a run with 60 s here saw TLS handshake timeouts at 90, 101, 130, 145 and 179 s).
    scenario.wait("the CR's ScalingLimited to match the HPA's", lambda: (condition(scenario.qwi(), "ScalingLimited")
                  or {}).get("reason") == (condition(scenario.hpa(), "ScalingLimited") or {}).get("reason"), 240)


def _check_latency_metrics(stack: MetricsStack, scenario: Scenario, namespace: str) -> None:
    """The latency targets' metrics (spec.autoscaling.latency) as the HPA would read them, through the aggregator
    and the real adapter with the chart's rules, from the simulator's own histograms: with the burst on, the
    mapped pod's TTFT p90 over the last 2 minutes is the simulator's 50 ms as its histogram buckets resolve it
    (it records its configured time, not the wait in its queue: 0.057 in the run of 2026-12-03, the (0.04, 0.06]
    bucket interpolated); its ITL p50 is above 0; the pods the HPA added have no server and no value. The
    fleet's HPA reads the queue and the KV cache, and with ~28 waiting against a target of 5 per replica the
    queue is the signal that leads."""
    ttft = stack.custom_metric(namespace, latency_metric(TTFT_SERIES, 90))
    assert set(ttft) == {scenario.mapped_pod}, ttft
    # Every first token takes at least 50 ms, so the p90 cannot lie in a bucket below 0.04 s; 2 s is far above it.
    assert 0.04 <= ttft[scenario.mapped_pod] <= 2, ttft
    itl = stack.custom_metric(namespace, latency_metric(ITL_SERIES, 50))
    assert set(itl) == {scenario.mapped_pod}, itl
    assert itl[scenario.mapped_pod] > 0, itl
    print(f"through the adapter, mid-burst: TTFT p90 {ttft}, ITL p50 {itl}")
    # A hang guard, as above: a reading in which the queue briefly read 0 may lead with the KV cache instead.
    scenario.wait("the CR to name the queue as the leading signal", lambda: ((scenario.qwi() or {}).get(
        "status", {}).get("autoscaling") or {}).get("leadingSignal") == "queue-depth", 120)


def _check_operator_left_replicas_alone(cluster: LocalCluster, namespace: str, since: float) -> None:
    full = json.loads(cluster.kubectl("get", "deployment", FLEET, "-n", namespace, "-o", "json",
                                      "--show-managed-fields").stdout)
    owners = [m["manager"] for m in full["metadata"]["managedFields"]
              if "f:replicas" in json.dumps((m.get("fieldsV1") or {}).get("f:spec", {}))]
    assert "qwen-fleet" not in owners, owners
    scale_writes = [e for e in audit_writes(cluster, since)
                    if (e.get("objectRef") or {}).get("resource") == "deployments"
                    and (e.get("objectRef") or {}).get("subresource") == "scale"]
    assert scale_writes == []


def test_hpa_scales_the_fleet_on_vllm_queue_depth_and_gpu_utilisation(
        autoscaling_sim: SimServer, operator: OperatorProcess, metrics_stack: MetricsStack,
        dcgm_exporter: FakeDcgmExporter, namespace: str) -> None:
    cluster = metrics_stack.cluster
    rules = yaml.safe_load(metrics_stack.adapter_rules)["rules"]
    latency = {latency_metric(h, p) for h in (TTFT_SERIES, ITL_SERIES) for p in HPA_LATENCY_PERCENTILES}
    assert {r["name"]["as"] for r in rules} == {QUEUE_METRIC, KV_CACHE_METRIC, GPU_UTIL_METRIC} | latency
    since = time.time()
    scenario = Scenario(cluster, namespace, vllm=autoscaling_sim, stack=metrics_stack, dcgm=dcgm_exporter)
    try:
        scenario.deploy()
        hpa = scenario.wait_for_metrics()
        _check_series_labels(metrics_stack, scenario, namespace)
        assert metrics_stack.custom_metric(namespace, QUEUE_METRIC) == {scenario.mapped_pod: 0.0}
        assert GPU_UTIL_METRIC not in {m["pods"]["metric"]["name"] for m in hpa["spec"]["metrics"]}  # opt-in

        # Idle: the queue is empty and the fleet stays at minReplicas through several HPA syncs.
        idle = scenario.idle(15)
        assert idle
        assert {s.replicas for s in idle} == {MIN_REPLICAS}
        assert {s.hpa_desired for s in idle} == {MIN_REPLICAS}

        # Burst: 32 clients against maxNumSeqs 4 -> ~28 waiting -> 6 replicas wanted, 3 allowed.
        at_max = scenario.burst()
        burst = [s for s in scenario.rec.samples if s.phase == "burst"]
        assert max(s.waiting for s in burst) > 2 * 4, "the burst did not queue well above maxNumSeqs"
        assert max(s.hpa_metrics.get(QUEUE_METRIC, 0) for s in burst) > 0, "the HPA never saw the queue"
        _check_scaling_status(at_max, scenario)
        _check_latency_metrics(metrics_stack, scenario, namespace)
        assert _changes(burst)[-1] == MAX_REPLICAS
        scenario.end_burst()
        cool = [s for s in scenario.rec.samples if s.phase == "cool-down"]
        assert _changes(cool)[-1] == MIN_REPLICAS
        assert _changes(cool) == sorted(_changes(cool), reverse=True), "replicas went back up on the way down"
        assert _changes(burst) == sorted(_changes(burst)), "replicas dropped during the burst"

        # GPU utilisation opted in: a busy GPU with an empty queue is enough to add a replica.
        hpa = scenario.gpu_only(percent=100)
        gpu_samples = [s for s in scenario.rec.samples if s.phase == "gpu-util"]
        assert all(s.waiting == 0 for s in gpu_samples)
        current = {m["pods"]["metric"]["name"]: m["pods"]["current"]["averageValue"]
                   for m in hpa["status"]["currentMetrics"]}
        assert GPU_UTIL_METRIC in current
        assert current[QUEUE_METRIC] == "0"
    finally:
        scenario.stop()
        figures = scenario.results()
        (metrics_stack.workdir / "autoscaling.json").write_text(json.dumps(figures, indent=1))
        print(json.dumps({k: v for k, v in figures.items() if k != "samples"}, indent=1))
    _check_operator_left_replicas_alone(cluster, namespace, since)
    assert operator.proc is not None
    assert operator.proc.poll() is None
