"""Issue 18's side-by-side figure: one queue surge, read by the HPA path and by the KEDA path at once.

Two fleets in one local control plane, identical but for ``autoscaling.engine``: ``surge-hpa`` (the operator's HPA
on the Pods metric ``vllm_num_requests_waiting`` that prometheus-adapter serves with the chart's rules) and
``surge-keda`` (a ScaledObject; the real KEDA v2.21.0 queries Prometheus and its HPA ``keda-hpa-surge-keda`` reads
the External metric from KEDA's metrics apiserver). One real Prometheus scrapes both.

What Prometheus scrapes: for each fleet, a small /metrics endpoint served by this process that speaks for the
fleet's first pod (kwok pods run no containers), with vLLM's series names and labels; the surge is the value of
``vllm:num_requests_waiting`` there, set at the same instant for both fleets. Every link after it is the real
program. The HPA controller's sync period is 5 s, Prometheus scrapes every second, prometheus-adapter relists every
5 s, KEDA polls its trigger every 30 s (only for Active; the External metric is read live on each HPA sync).

``python -m bench.keda_vs_hpa`` writes bench/results/keda-vs-hpa.{json,md}; tests/integration/test_keda_controller.py
runs the same scenario and checks both paths decide the same counts.
"""

from __future__ import annotations

import contextlib
import json
import math
import tempfile
import time
from collections.abc import Iterator
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

from prometheus_client import CollectorRegistry, Gauge, start_http_server

from qwen_fleet import versions
from qwen_fleet_dev import binaries, keda, keda_http
from qwen_fleet_dev.cluster import LocalCluster, free_port
from qwen_fleet_dev.hostsfile import HostsFile
from qwen_fleet_dev.metrics_stack import MetricsStack, PodTarget, chart_adapter_rules, quantity

ROOT = Path(__file__).resolve().parents[1]
MODEL = "Qwen/Qwen3-4B-Instruct-2507"
TARGET_PER_REPLICA = 4
MAX_REPLICAS = 4
HPA_SYNC_PERIOD = "5s"
FLEETS = {"hpa": "surge-hpa", "keda": "surge-keda"}
# The surge: waiting requests on the first pod, in steps. ceil(10 / 4) = 3, then ceil(18 / 4) = 5, capped at 4.
STEPS = (10, 18)
# Scale-up without a rate limit that would hide the decision behind the policy (the default allows 2 pods a
# minute); the same for both fleets.
BEHAVIOR = {"scaleUp": {"stabilizationWindowSeconds": 0, "pods": 4, "periodSeconds": 15},
            "scaleDown": {"stabilizationWindowSeconds": 600, "pods": 1, "periodSeconds": 180}}


class StandInEngine:
    """The /metrics of one vLLM pod: the series the triggers and the adapter rules read, set by the caller."""

    def __init__(self) -> None:
        self.registry = CollectorRegistry()
        labels = ("model_name", "engine")
        self.waiting = Gauge("vllm:num_requests_waiting", "Number of requests waiting to be processed.", labels,
                             registry=self.registry).labels(MODEL, "0")
        self.kv = Gauge("vllm:kv_cache_usage_perc", "KV-cache usage. 1 means 100 percent usage.", labels,
                        registry=self.registry).labels(MODEL, "0")
        self.kv.set(0.1)  # far below the 80% target: the queue decides
        self.port = free_port()
        self._server, _ = start_http_server(self.port, addr="127.0.0.1", registry=self.registry)

    @property
    def address(self) -> str:
        return f"127.0.0.1:{self.port}"

    def stop(self) -> None:
        self._server.shutdown()
        self._server.server_close()


def fleet_manifest(name: str, engine: str, prometheus: str, behavior: dict[str, Any] | None = None
                   ) -> dict[str, Any]:
    autoscaling: dict[str, Any] = {"enabled": True, "engine": engine, "minReplicas": 1,
                                   "maxReplicas": MAX_REPLICAS,
                                   "queueDepth": {"targetPerReplica": TARGET_PER_REPLICA}}
    if behavior is not None:
        autoscaling["behavior"] = behavior
    if engine == "keda":
        autoscaling["keda"] = {"prometheusAddress": prometheus}
    return {"apiVersion": "qwenfleet.io/v1alpha1", "kind": "QwenInference", "metadata": {"name": name},
            "spec": {"model": {"name": MODEL}, "engine": {"maxModelLen": 4096}, "gpu": {"product": "NVIDIA-A10G"},
                     "autoscaling": autoscaling}}


@dataclass
class Env:
    cluster: LocalCluster
    stack: MetricsStack
    keda: keda.Keda
    operator: Any  # tests.support.operator_process.OperatorProcess
    add_on: keda_http.KedaHttpAddOn | None = None  # the KEDA HTTP add-on, with environment(..., http_add_on=True)


def ensure_components(http_add_on: bool = False) -> None:
    """Prometheus, prometheus-adapter, KEDA (and the KEDA HTTP add-on): built when missing."""
    import subprocess

    from qwen_fleet_dev import metrics_stack as ms

    root = binaries.repo_root()
    if not all(p.exists() for p in (ms.prometheus_binary(), ms.adapter_binary())):
        assert root is not None, "the metrics binaries are built from the source checkout"
        subprocess.run([str(root / "hack" / "build-binaries.sh"), "prometheus", "adapter"], check=True)
    keda.ensure_built()
    if http_add_on:
        keda_http.ensure_built()


@contextlib.contextmanager
def environment(workdir: Path, *, http_add_on: bool = False, held_pod_label: str | None = None) -> Iterator[Env]:
    """A control plane with Prometheus, prometheus-adapter, the real KEDA and the operator; built when missing.
    With ``http_add_on``, the KEDA HTTP add-on too (bench/scale_to_zero.py); ``held_pod_label``: LocalCluster's."""
    binaries.ensure()
    ensure_components(http_add_on)
    with contextlib.ExitStack() as stack:
        cluster = LocalCluster(workdir=workdir / "cluster", hpa_sync_period=HPA_SYNC_PERIOD,
                               held_pod_label=held_pod_label)
        cluster.start()
        stack.callback(cluster.stop)
        yield stack.enter_context(services(cluster, workdir, http_add_on=http_add_on))


@contextlib.contextmanager
def services(cluster: LocalCluster, workdir: Path, *, http_add_on: bool = False) -> Iterator[Env]:
    """For a started cluster (kwok's, or one with the real node: bench/scale_to_zero_node.py): Prometheus and
    prometheus-adapter, the real KEDA, with ``http_add_on`` the KEDA HTTP add-on (started before the operator so
    that its first look at the cluster finds the InterceptorRoute API), the CRDs and the operator."""
    from tests.support.operator_process import OperatorProcess

    ensure_components(http_add_on)
    with contextlib.ExitStack() as stack:
        metrics = MetricsStack(cluster, chart_adapter_rules(cluster.bins.helm), workdir / "metrics").start()
        stack.callback(metrics.stop)
        # KEDA dials the add-on's scaler by its Service name: the add-on's hosts file is its cluster DNS.
        hosts = HostsFile(workdir / "hosts") if http_add_on else None
        kd = keda.Keda(cluster, workdir / "keda", hosts=hosts).start()
        stack.callback(kd.stop)
        add_on = None
        if hosts is not None:
            add_on = keda_http.KedaHttpAddOn(cluster, hosts, workdir / "keda-http").start()
            stack.callback(add_on.stop)
        cluster.install_crd(ROOT / "crds" / "qwenfleet.io_qweninferences.yaml")
        cluster.install_crd(ROOT / "crds" / "qwenfleet.io_qwenbatches.yaml", name="qwenbatches.qwenfleet.io")
        operator = OperatorProcess(cluster, workdir / "operator.log", env={"QWEN_FLEET_RESYNC_SECONDS": "10"})
        operator.start()
        stack.callback(operator.stop)
        yield Env(cluster, metrics, kd, operator, add_on)


# --- the scenario -------------------------------------------------------------------------------------------


def _get(cluster: LocalCluster, path: str) -> dict[str, Any]:
    with contextlib.suppress(Exception):
        return dict(cluster.rest().get(path))
    return {}


def _hpa_view(hpa: dict[str, Any]) -> tuple[int | None, float | None, bool]:
    """(desiredReplicas, the queue metric's current value, ScalingActive) of an HPA; the value as the HPA holds it:
    per reporting pod for the Pods metric, the External metric's averageValue (total / current replicas)."""
    st = hpa.get("status") or {}
    value = None
    for m in st.get("currentMetrics") or []:
        src = m.get("pods") or m.get("external") or {}
        name = (src.get("metric") or {}).get("name", "")
        if name in ("vllm_num_requests_waiting", "s0-prometheus") and "averageValue" in src.get("current", {}):
            value = quantity(src["current"]["averageValue"])
    active = any(c.get("type") == "ScalingActive" and c.get("status") == "True" for c in st.get("conditions") or [])
    return st.get("desiredReplicas"), value, active


@dataclass
class Sample:
    t: float
    waiting: float  # set on each fleet's stand-in engine
    hpa_replicas: int
    hpa_desired: int | None
    hpa_metric: float | None
    keda_replicas: int
    keda_desired: int | None
    keda_metric: float | None


@dataclass
class SideBySide:
    env: Env
    namespace: str
    samples: list[Sample] = field(default_factory=list)
    engines: dict[str, StandInEngine] = field(default_factory=dict)
    waiting: float = 0.0
    t0: float = field(default_factory=time.monotonic)

    def hpa_name(self, engine: str) -> str:
        return FLEETS[engine] if engine == "hpa" else f"keda-hpa-{FLEETS[engine]}"

    def deploy(self, timeout: float = 120) -> None:
        """Both fleets at their minimum, each first pod's stand-in scraped, both HPAs reading the metric."""
        cluster, ns = self.env.cluster, self.namespace
        for engine, name in FLEETS.items():
            doc = fleet_manifest(name, engine, self.env.stack.prometheus_url, BEHAVIOR)
            cluster.kubectl("apply", "-n", ns, "-f", "-", input=json.dumps(doc))
        targets = []
        for engine, name in FLEETS.items():
            pod = _wait(f"{name}'s first pod", lambda n=name: _first_pod(cluster, ns, n), timeout)
            self.engines[engine] = StandInEngine()
            targets.append(PodTarget(self.engines[engine].address, ns, pod["metadata"]["name"],
                                     pod_labels=pod["metadata"]["labels"], service=name))
        self.env.stack.set_pod_targets(targets)
        for engine in FLEETS:
            path = f"/apis/autoscaling/v2/namespaces/{ns}/horizontalpodautoscalers/{self.hpa_name(engine)}"
            _wait(f"{self.hpa_name(engine)} reading the queue", lambda p=path: _hpa_view(_get(cluster, p))[2] and
                  _hpa_view(_get(cluster, p))[1] is not None, timeout)

    def sample(self) -> Sample:
        cluster, ns = self.env.cluster, self.namespace
        views, replicas = {}, {}
        for engine, name in FLEETS.items():
            hpas = f"/apis/autoscaling/v2/namespaces/{ns}/horizontalpodautoscalers"
            hpa = _get(cluster, f"{hpas}/{self.hpa_name(engine)}")
            views[engine] = _hpa_view(hpa)
            dep = _get(cluster, f"/apis/apps/v1/namespaces/{ns}/deployments/{name}")
            replicas[engine] = int((dep.get("spec") or {}).get("replicas") or 0)
        s = Sample(round(time.monotonic() - self.t0, 2), self.waiting,
                   replicas["hpa"], views["hpa"][0], views["hpa"][1],
                   replicas["keda"], views["keda"][0], views["keda"][1])
        self.samples.append(s)
        return s

    def surge(self, waiting: float, timeout: float = 90, hold: float = 6) -> dict[str, float | None]:
        """Set the queue on both fleets at once; sample until both Deployments hold the expected count.
        Returns when each path's Deployment first reached it, in seconds after the step."""
        want = min(MAX_REPLICAS, math.ceil(waiting / TARGET_PER_REPLICA))
        start = time.monotonic()
        self.waiting = waiting
        for stand_in in self.engines.values():
            stand_in.waiting.set(waiting)
        reached: dict[str, float | None] = {"hpa": None, "keda": None}
        while time.monotonic() - start < timeout:
            s = self.sample()
            now = round(time.monotonic() - start, 2)
            for engine, count in (("hpa", s.hpa_replicas), ("keda", s.keda_replicas)):
                if count == want and reached[engine] is None:
                    reached[engine] = now
            if all(v is not None and now - v >= hold for v in reached.values()):
                break
            time.sleep(0.5)
        return reached

    def stop(self) -> None:
        for stand_in in self.engines.values():
            stand_in.stop()


def _first_pod(cluster: LocalCluster, ns: str, fleet: str) -> dict[str, Any] | None:
    items = _get(cluster, f"/api/v1/namespaces/{ns}/pods?labelSelector=qwenfleet.io%2Finference%3D{fleet}")
    pods = [p for p in items.get("items") or [] if (p.get("status") or {}).get("phase") == "Running"]
    return min(pods, key=lambda p: (p["metadata"]["creationTimestamp"], p["metadata"]["name"])) if pods else None


def _wait(what: str, check: Any, timeout: float) -> Any:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        with contextlib.suppress(Exception):
            got = check()
            if got:
                return got
        time.sleep(0.5)
    raise TimeoutError(f"timed out after {timeout:.0f}s waiting for {what}")


def scenario(env: Env, namespace: str) -> dict[str, Any]:
    """Deploy both fleets, then the surge steps; the record and each path's reaction time per step."""
    env.cluster.kubectl("create", "namespace", namespace)
    run = SideBySide(env, namespace)
    try:
        run.deploy()
        run.t0 = time.monotonic()
        run.sample()
        steps = []
        for waiting in STEPS:
            reached = run.surge(waiting)
            steps.append({"waiting": waiting,
                          "expected_replicas": min(MAX_REPLICAS, math.ceil(waiting / TARGET_PER_REPLICA)),
                          "hpa_reached_s": reached["hpa"], "keda_reached_s": reached["keda"]})
    finally:
        run.stop()
    return {"steps": steps, "samples": [asdict(s) for s in run.samples],
            "setup": {"hpa_sync_period": HPA_SYNC_PERIOD, "scrape_interval": "1s", "adapter_relist": "5s",
                      "keda_polling_interval_s": 30, "queue_target_per_replica": TARGET_PER_REPLICA,
                      "min_replicas": 1, "max_replicas": MAX_REPLICAS, "behavior": BEHAVIOR,
                      "keda": versions.KEDA}}


def markdown(results: dict[str, Any]) -> str:
    lines = ["# The same queue surge: HPA path and KEDA path side by side", "",
             "Generated by `python -m bench.keda_vs_hpa` (module docstring: what is real, what is a stand-in).", "",
             "| waiting | expected replicas | HPA (prometheus-adapter) reached after | KEDA reached after |",
             "| --- | --- | --- | --- |"]
    for s in results["steps"]:
        lines.append(f"| {s['waiting']:g} | {s['expected_replicas']} | {s['hpa_reached_s']} s | "
                     f"{s['keda_reached_s']} s |")
    lines += ["", "Samples (every ~0.5 s; a row when anything changed):", "",
              "| t (s) | waiting | HPA replicas | HPA desired | HPA metric | KEDA replicas | KEDA desired "
              "| KEDA metric |",
              "| --- | --- | --- | --- | --- | --- | --- | --- |"]
    last = None
    for s in results["samples"]:
        key = {k: v for k, v in s.items() if k != "t"}
        if key != last:
            lines.append(f"| {s['t']} | {s['waiting']:g} | {s['hpa_replicas']} | {s['hpa_desired']} | "
                         f"{s['hpa_metric']} | {s['keda_replicas']} | {s['keda_desired']} | {s['keda_metric']} |")
            last = key
    setup = results.get("setup") or {}
    lines += ["", "The HPA metric is per reporting pod (Pods metric); the KEDA metric is the External metric's "
              "averageValue (the fleet's total over the current replicas).", "",
              f"Both HPAs (the operator's and KEDA's `keda-hpa-surge-keda`) are run by the one HPA controller, which "
              f"reads every HPA once per sync period ({setup.get('hpa_sync_period')} here): a reaction time is the "
              "wait for the next sync plus the reads, and two times less than a sync period apart mean both "
              "paths decided in the same sync. Timings are from the machine's 2 cores, shared with other work; "
              "only the counts are checked (tests/integration/test_keda_controller.py).", ""]
    return "\n".join(lines)


def run(results_dir: Path) -> dict[str, Any]:
    results_dir.mkdir(parents=True, exist_ok=True)
    with tempfile.TemporaryDirectory(prefix="qwen-fleet-bench-keda-") as tmp, environment(Path(tmp)) as env:
        out = scenario(env, "surge")
    (results_dir / "keda-vs-hpa.json").write_text(json.dumps(out, indent=1))
    (results_dir / "keda-vs-hpa.md").write_text(markdown(out))
    return out


if __name__ == "__main__":
    figures = run(ROOT / "bench" / "results")
    print(json.dumps(figures["steps"], indent=1))
