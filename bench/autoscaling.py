"""Autoscaling end to end: a queue-depth burst on a real vLLM server scales a fleet up, then back down.

The scenario (shared by ``tests/e2e/test_autoscaling.py``, which asserts on it, and ``make bench``, which
records it): a QwenInference with autoscaling on a real control plane with kwok GPU nodes; one real vLLM CPU
server (tiny random-weight Qwen2, ``--max-num-seqs 4``) speaks for the fleet's oldest pod: Prometheus
scrapes it with that pod's labels, prometheus-adapter (the chart's rules) serves it to the real HPA
controller. Phases: idle at minReplicas; a burst of concurrent requests far above maxNumSeqs; the burst
ends and the fleet returns to minReplicas after the (shortened) scale-down window; finally GPU utilisation
is switched on and a busy GPU alone (queue empty) scales the fleet up.

Run alone: ``.venv/bin/python -m bench.autoscaling`` (writes bench/results/autoscaling.json and .png).
"""

from __future__ import annotations

import contextlib
import json
import tempfile
import threading
import time
from collections.abc import Callable, Iterator
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

from tests.support.vllm_server import VllmServer

from bench.burst import Burst
from qwen_fleet.render.deployment import ENGINE_ENV_DEFAULTS
from qwen_fleet.render.metric_names import GPU_UTIL_METRIC, KV_CACHE_METRIC, QUEUE_METRIC
from qwen_fleet_dev.cluster import LocalCluster
from qwen_fleet_dev.metrics_stack import (
    FakeDcgmExporter,
    GpuAssignment,
    MetricsStack,
    PodTarget,
    chart_adapter_rules,
    quantity,
)
from qwen_fleet_dev.processes import wait_for
from qwen_fleet_dev.rest import Rest, RestError

ROOT = Path(__file__).resolve().parent.parent
FLEET = "qwen-autoscaled"
MAX_NUM_SEQS = 4
# FACTS.md's serving recipe for the tiny model, with a small batch so a modest burst queues. Eager mode
# skips the torch.compile warm-up (about half of the engine's start-up on CPU); scheduling, the queue and
# the metrics are the same.
SERVER_ARGS = ["--max-model-len", "1024", "--max-num-seqs", str(MAX_NUM_SEQS), "--dtype", "bfloat16",
               "--enforce-eager"]
BURST_CLIENTS = 32  # 8x maxNumSeqs: ~28 waiting -> ceil(28 / 5) = 6 wanted, well above maxReplicas
# Long enough that the API server takes few requests a second: with 128-token requests (8 a second to keep 28
# waiting) a loaded 2-core machine's API server fell behind, the engine's queue emptied for seconds at a time
# (its own log: waiting 28, 3, 1, 0, 17, 0) and the HPA read 0 and said TooFewReplicas mid-burst.
BURST_TOKENS = 512
# The burst's clients send until end_burst() stops them; this limit is only a guard against a child left behind.
# It must outlast every wait made with the load on (queue, scale-up, maxReplicas, the CR's ScalingLimited, the
# test's own checks after burst(): up to ~25 min of ceilings). Burst's default, 300 s, ended the load mid-test on
# a loaded 2-core machine: the queue read 0, the HPA said TooFewReplicas, and the wait for the at-max reason could
# only time out (issue 30: samples with queue 0 from 258 s on).
BURST_LIMIT_S = 3600
# ScalingLimited reasons of a fleet held at maxReplicas by the HPA (not the TooFewReplicas of a queue read as 0).
AT_MAX_REASONS = ("TooManyReplicas", "ScaleUpLimit")
MIN_REPLICAS, MAX_REPLICAS = 1, 3
# Production default is 600 s; shortened so the test sees the way down, but longer than the gaps a loaded 2-core
# machine puts between the HPA's reads (a 30 s window let a stall of the queue signal scale down mid-burst).
SCALE_DOWN_WINDOW_S = 60
HPA_SYNC_PERIOD = "5s"
# The engine's environment as the operator renders it for a fleet's pods, plus the CPU backend's KV-cache size.
ENGINE_ENV = {"VLLM_CPU_KVCACHE_SPACE": "1", **dict(ENGINE_ENV_DEFAULTS)}


def fleet_manifest(namespace: str, gpu_utilization: bool = False) -> dict[str, Any]:
    """The QwenInference under test: default targets (queue 5 per replica, KV cache 80%), short windows."""
    return {
        "apiVersion": "qwenfleet.io/v1alpha1", "kind": "QwenInference",
        "metadata": {"name": FLEET, "namespace": namespace},
        "spec": {
            "model": {"name": "Qwen/Qwen3-4B-Instruct-2507"},
            "engine": {"maxModelLen": 1024, "maxNumSeqs": MAX_NUM_SEQS},
            "gpu": {"product": "NVIDIA-A10G"},
            "autoscaling": {
                "enabled": True, "minReplicas": MIN_REPLICAS, "maxReplicas": MAX_REPLICAS,
                "gpuUtilization": {"enabled": gpu_utilization, "targetPercent": 80},
                "behavior": {
                    "scaleUp": {"stabilizationWindowSeconds": 0, "pods": 2, "periodSeconds": 15},
                    "scaleDown": {"stabilizationWindowSeconds": SCALE_DOWN_WINDOW_S, "pods": 1,
                                  "periodSeconds": 15},
                },
            },
        },
    }


class EarlyVllmServer(VllmServer):
    """Starts the engine now and waits for it later, so the cluster and metrics come up meanwhile.

    The process must be spawned from a thread that outlives it: PR_SET_PDEATHSIG fires when the spawning
    *thread* exits, so starting the server from a helper thread would kill it when that thread returns.
    """

    _deferred = True

    def _wait_ready(self) -> None:
        if not self._deferred:
            super()._wait_ready()

    def begin(self) -> EarlyVllmServer:
        self._began = time.monotonic()
        self.start()  # spawns; readiness is waited for in wait_ready()
        return self

    def wait_ready(self) -> EarlyVllmServer:
        self._deferred = False
        try:
            self._wait_ready()
        except BaseException:
            self.stop()
            raise
        self.startup_seconds = time.monotonic() - self._began
        self._note_shared_memory()
        return self


@dataclass
class Sample:
    t: float  # seconds since the scenario started
    replicas: int  # Deployment spec.replicas: the HPA's decision
    ready: int
    hpa_desired: int | None
    waiting: float  # vllm:num_requests_waiting on the real server (its own /metrics, the latest reading)
    running: float
    prom_waiting: float | None  # the same series as Prometheus holds it (None: no series)
    prom_up: float | None  # Prometheus' `up` for the engine's target
    prom_scrape_s: float | None  # and how long its last scrape took
    hpa_metrics: dict[str, float]  # the HPA's view: current average value per metric
    phase: str
    load_in_flight: int | None = None  # the load's requests in flight (None: no load, or its clients stopped)


@dataclass
class Recorder:
    """What happened, with times relative to ``t0``."""

    t0: float = field(default_factory=time.monotonic)
    samples: list[Sample] = field(default_factory=list)
    marks: dict[str, float] = field(default_factory=dict)
    notes: list[str] = field(default_factory=list)

    def now(self) -> float:
        return round(time.monotonic() - self.t0, 2)

    def mark(self, name: str) -> float:
        self.marks[name] = self.now()
        return self.marks[name]


def _hpa_metrics(hpa: dict[str, Any] | None) -> dict[str, float]:
    out = {}
    for m in ((hpa or {}).get("status") or {}).get("currentMetrics") or []:
        pods = m.get("pods") or {}
        if "metric" in pods and "averageValue" in pods.get("current", {}):
            out[pods["metric"]["name"]] = quantity(pods["current"]["averageValue"])
    return out


class Scenario:
    """Drives the fleet through the phases; a background sampler keeps the picture (and the mapping)."""

    def __init__(self, cluster: LocalCluster, namespace: str, *, vllm: VllmServer, stack: MetricsStack,
                 dcgm: FakeDcgmExporter, interval: float = 0.5) -> None:
        self.cluster, self.ns, self.vllm, self.stack, self.dcgm = cluster, namespace, vllm, stack, dcgm
        self.rest: Rest = cluster.rest()
        self.interval = interval
        self.rec = Recorder()
        self.phase = "deploy"
        self.mapped_pod: str | None = None
        self.gpu_util = 0.0  # percent shown for the GPU of the pod the real server speaks for
        self._dcgm_series: dict[str, GpuAssignment] = {}
        self.load: Burst | None = None
        self._stop = threading.Event()
        self._sampler: threading.Thread | None = None
        self._engine: threading.Thread | None = None
        self.engine_metrics: dict[str, float] = {}  # the latest answer of the engine's /metrics

    # --- kube reads -----------------------------------------------------------------------------------

    def _get(self, path: str) -> dict[str, Any] | None:
        try:
            return dict(self.rest.get(path))
        except RestError as err:
            if err.status == 404:
                return None
            raise

    def deployment(self) -> dict[str, Any] | None:
        return self._get(f"/apis/apps/v1/namespaces/{self.ns}/deployments/{FLEET}")

    def hpa(self) -> dict[str, Any] | None:
        return self._get(f"/apis/autoscaling/v2/namespaces/{self.ns}/horizontalpodautoscalers/{FLEET}")

    def qwi(self) -> dict[str, Any] | None:
        return self._get(f"/apis/qwenfleet.io/v1alpha1/namespaces/{self.ns}/qweninferences/{FLEET}")

    def pods(self) -> list[dict[str, Any]]:
        items = self.rest.get(f"/api/v1/namespaces/{self.ns}/pods?labelSelector=qwenfleet.io%2Finference%3D{FLEET}")
        live = [p for p in items["items"] if not p["metadata"].get("deletionTimestamp")
                and p.get("status", {}).get("phase") == "Running" and p["spec"].get("nodeName")]
        return sorted(live, key=lambda p: (p["metadata"]["creationTimestamp"], p["metadata"]["name"]))

    # --- the mapping: the real server speaks for the oldest running pod of the fleet -------------------

    def _sync_targets(self, pods: list[dict[str, Any]]) -> None:
        names = [p["metadata"]["name"] for p in pods]
        if pods and self.mapped_pod not in names:
            pod = pods[0]
            self.stack.set_pod_targets([PodTarget(
                f"127.0.0.1:{self.vllm.port}", self.ns, pod["metadata"]["name"],
                pod_labels=pod["metadata"].get("labels") or {}, service=FLEET)])
            if self.mapped_pod is not None:
                self.rec.notes.append(f"{self.rec.now()}s: {self.mapped_pod} gone, vLLM now speaks for "
                                      f"{pod['metadata']['name']}")
            self.mapped_pod = pod["metadata"]["name"]
        # dcgm-exporter reports every GPU a fleet pod holds: ours is busy as told, the others are loading (0).
        wanted = {p["metadata"]["name"]: GpuAssignment(self.ns, p["metadata"]["name"], p["spec"]["nodeName"])
                  for p in pods}
        for name in set(self._dcgm_series) - set(wanted):
            self.dcgm.remove(self._dcgm_series.pop(name))
        for name, gpu in wanted.items():
            self.dcgm.set(gpu, self.gpu_util if name == self.mapped_pod else 0.0)
            self._dcgm_series[name] = gpu

    def _sample(self) -> None:
        pods = self.pods()
        self._sync_targets(pods)
        now, dep, hpa = self.rec.now(), self.deployment() or {}, self.hpa()
        # The engine's own reading comes from a thread of its own: a loaded engine may take seconds to answer
        # /metrics, and the cluster's record must not wait for it.
        metrics = self.engine_metrics
        prom = self._prometheus_view()
        self.rec.samples.append(Sample(
            t=now, replicas=int(dep.get("spec", {}).get("replicas") or 0),
            ready=int(dep.get("status", {}).get("readyReplicas") or 0),
            hpa_desired=((hpa or {}).get("status") or {}).get("desiredReplicas"),
            waiting=metrics.get("vllm:num_requests_waiting", 0.0),
            running=metrics.get("vllm:num_requests_running", 0.0),
            prom_waiting=prom.get("waiting"), prom_up=prom.get("up"), prom_scrape_s=prom.get("scrape_s"),
            hpa_metrics=_hpa_metrics(hpa), phase=self.phase,
            load_in_flight=self.load.in_flight if self.load is not None and self.load.alive() else None))

    def _prometheus_view(self) -> dict[str, float]:
        """Prometheus' side of the queue signal, so a failure says which link read 0."""
        out: dict[str, float] = {}
        target = f'job="serviceMonitor/qwen-fleet/vllm/0",namespace="{self.ns}"'
        for key, expr in (("waiting", f'sum(vllm:num_requests_waiting{{namespace="{self.ns}"}})'),
                          ("up", f"up{{{target}}}"), ("scrape_s", f"scrape_duration_seconds{{{target}}}")):
            with contextlib.suppress(Exception):
                result = self.stack.query(expr)
                if result:
                    out[key] = float(result[0]["value"][1])
        return out

    def _engine_loop(self) -> None:
        while not self._stop.is_set():
            with contextlib.suppress(Exception):  # a slow or failed read keeps the last one
                self.engine_metrics = self.vllm.metrics()
            self._stop.wait(0.25)

    def _loop(self) -> None:
        while not self._stop.is_set():
            try:
                self._sample()
            except Exception as err:  # a missed sample is noted, the run goes on
                self.rec.notes.append(f"{self.rec.now()}s: sample failed: {err!r}"[:300])
            self._stop.wait(self.interval)

    def wait(self, what: str, check: Callable[[], Any], timeout: float) -> Any:
        """Poll until ``check`` is truthy; a ceiling against hangs, never an assertion on speed."""
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            with contextlib.suppress(RestError, OSError, KeyError):
                value = check()
                if value:
                    return value
            time.sleep(0.25)
        raise TimeoutError(f"timed out after {timeout:.0f}s waiting for {what}; last samples: "
                           f"{[asdict(s) for s in self.rec.samples[-3:]]}; {self._state()}")

    def _state(self) -> str:
        """What a timeout message needs to be read without a rerun: the sampler's notes (a sample that failed
        says why) and the conditions the HPA and the CR show now."""
        out = [f"notes: {self.rec.notes[-5:]}"]
        if self.load is not None:
            load = self.load
            out.append(f"load: {'sending' if load.alive() else 'stopped'}, {load.done} done, {load.failed} failed, "
                       f"{load.in_flight} in flight, errors {load.errors[-2:]}")
        with contextlib.suppress(Exception):  # a pod's Ready says whether kwok's fake node still vouches for it
            ready = [(p["metadata"]["name"], _condition(p, "Ready").get("status")) for p in self.pods()]
            out.append(f"fleet pods' Ready: {ready}")
        for name, get in (("HPA", self.hpa), ("CR", self.qwi)):
            try:
                obj = get() or {}
            except Exception as err:  # the message is for a failure already on its way
                out.append(f"{name}: unreadable ({err!r})"[:300])
                continue
            conds = [(c.get("type"), c.get("status"), c.get("reason"))
                     for c in (obj.get("status") or {}).get("conditions") or []]
            out.append(f"{name} conditions now: {conds}")
        return "; ".join(out)

    def replicas(self) -> int:
        return int((self.deployment() or {}).get("spec", {}).get("replicas") or 0)

    def wait_sampled(self, what: str, check: Callable[[Sample], bool], timeout: float = 90) -> None:
        """Until the sampler has recorded a sample that passes ``check`` (so the phase's record shows it)."""
        self.wait(what, lambda: self.rec.samples and check(self.rec.samples[-1]), timeout)

    # --- phases ---------------------------------------------------------------------------------------

    def deploy(self, manifest: dict[str, Any] | None = None) -> None:
        """Apply the fleet (``fleet_manifest`` unless another is given), map the server to its first pod and
        start the sampler."""
        manifest = fleet_manifest(self.ns) if manifest is None else manifest
        self.cluster.kubectl("apply", "-n", self.ns, "-f", "-", input=json.dumps(manifest))
        self.wait("a running pod of the fleet", self.pods, 120)
        self._sync_targets(self.pods())
        self._engine = threading.Thread(target=self._engine_loop, daemon=True)
        self._engine.start()
        self._sampler = threading.Thread(target=self._loop, daemon=True)
        self._sampler.start()
        self.rec.mark("deployed")

    def wait_for_metrics(self, names: tuple[str, ...] = (QUEUE_METRIC, KV_CACHE_METRIC),
                         timeout: float = 120) -> dict[str, Any]:
        """Until the HPA reads every named metric (ScalingActive=True) and the CR mirrors it."""
        def ready() -> dict[str, Any] | None:
            hpa, qwi = self.hpa(), self.qwi()
            active = _condition(hpa, "ScalingActive")
            if active.get("status") != "True" or not set(names) <= set(_hpa_metrics(hpa)):
                return None
            return hpa if _condition(qwi, "ScalingActive").get("status") == "True" else None
        return dict(self.wait(f"the HPA to read {', '.join(names)}", ready, timeout))

    def idle(self, seconds: float = 15) -> list[Sample]:
        self.phase = "idle"
        start = self.rec.mark("idle_start")
        time.sleep(seconds)
        return [s for s in self.rec.samples if s.t >= start]

    def burst(self, clients: int = BURST_CLIENTS, hold_s: float = 10, timeout: float = 420) -> dict[str, Any]:
        """Start the burst; return (load still on) once the fleet is at maxReplicas and the CR says why it
        stops there: the CR as it was at that moment."""
        self.phase = "burst"
        self.load = Burst(self.vllm.base_url, clients, max_tokens=BURST_TOKENS, limit_s=BURST_LIMIT_S).start()
        self.rec.mark("burst_start")
        self.wait("a queue on the vLLM server", lambda: self.vllm.metrics().get(
            "vllm:num_requests_waiting", 0) > 0, 60)
        self.rec.mark("queue_seen")
        self.wait("the HPA to scale up", lambda: self.replicas() > MIN_REPLICAS, timeout)
        self.rec.mark("scaled_up")
        self.wait("maxReplicas", lambda: self.replicas() >= MAX_REPLICAS, timeout)
        self.rec.mark("at_max")
        self.wait_sampled("maxReplicas recorded", lambda s: s.replicas >= MAX_REPLICAS)
        # The CR mirrors the HPA's conditions at the operator's next look: wait for the at-max reason, not an
        # earlier ScalingLimited (e.g. TooFewReplicas while the queue read 0) still shown.
        qwi = self.wait("ScalingLimited at maxReplicas mirrored in the CR status", lambda: (q := self.qwi()) and (
            c := _condition(q, "ScalingLimited")).get("status") == "True" and c.get("reason") in AT_MAX_REASONS
            and q, timeout)
        self.rec.mark("limited_reported")
        time.sleep(hold_s)
        return dict(qwi)

    def end_burst(self, timeout: float = 300) -> None:
        self.phase = "cool-down"
        self.rec.mark("burst_end")  # the clients stop sending now; requests already queued still finish
        if self.load is not None:
            self.load.stop()
        self.wait("back to minReplicas", lambda: self.replicas() == MIN_REPLICAS, timeout)
        self.rec.mark("back_to_min")
        self.wait_sampled("minReplicas recorded", lambda s: s.replicas == MIN_REPLICAS)

    def gpu_only(self, percent: float = 100, timeout: float = 180) -> dict[str, Any]:
        """Turn GPU utilisation on; a busy GPU with an empty queue alone must scale the fleet up."""
        self.phase = "gpu-util"
        self.gpu_util = percent
        patch = {"spec": {"autoscaling": {"gpuUtilization": {"enabled": True}}}}
        self.cluster.kubectl("patch", "qwi", FLEET, "-n", self.ns, "--type=merge", "-p", json.dumps(patch))
        self.rec.mark("gpu_enabled")
        hpa = self.wait_for_metrics((QUEUE_METRIC, KV_CACHE_METRIC, GPU_UTIL_METRIC), timeout)
        self.wait("a GPU-driven scale-up", lambda: self.replicas() > MIN_REPLICAS, timeout)
        self.rec.mark("gpu_scaled_up")
        self.wait_sampled("the GPU-driven scale-up recorded", lambda s: s.replicas > MIN_REPLICAS)
        return hpa

    def stop(self) -> None:
        if self.load is not None:
            self.load.stop()
        self._stop.set()
        for thread in (self._sampler, self._engine):
            if thread is not None:
                thread.join(timeout=10)

    # --- results --------------------------------------------------------------------------------------

    def results(self) -> dict[str, Any]:
        m = self.rec.marks
        burst = [s for s in self.rec.samples if s.phase == "burst"]

        def since(a: str, b: str) -> float | None:
            return round(m[b] - m[a], 2) if a in m and b in m else None

        return {
            "scale_up_reaction_seconds": since("burst_start", "scaled_up"),
            "queue_seen_seconds": since("burst_start", "queue_seen"),
            "to_max_replicas_seconds": since("burst_start", "at_max"),
            "back_to_min_seconds": since("burst_end", "back_to_min"),
            "gpu_scale_up_seconds": since("gpu_enabled", "gpu_scaled_up"),
            "queue_depth_peak": max((s.waiting for s in self.rec.samples), default=0.0),
            "replicas_peak": max((s.replicas for s in self.rec.samples), default=0),
            "burst_queue_depth_mean": round(sum(s.waiting for s in burst) / len(burst), 2) if burst else None,
            "marks": m, "notes": self.rec.notes,
            "samples": [asdict(s) for s in self.rec.samples],
        }


def _condition(obj: dict[str, Any] | None, type_: str) -> dict[str, Any]:
    for c in ((obj or {}).get("status") or {}).get("conditions") or []:
        if c.get("type") == type_:
            return dict(c)
    return {}


def plot(results: dict[str, Any], path: Path) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    samples = results["samples"]
    t = [s["t"] for s in samples]
    fig, ax = plt.subplots(figsize=(10, 4.5))
    ax.plot(t, [s["waiting"] for s in samples], color="tab:orange", label="queue depth (vllm:num_requests_waiting)")
    # The HPA's current averageValue averages over the pods that report; pods without series (just added,
    # or still loading) are left out of it and counted as 0 (scale-up) or at target (scale-down).
    ax.plot(t, [s["hpa_metrics"].get(QUEUE_METRIC, float("nan")) for s in samples], color="tab:orange",
            linestyle=":", label="queue per reporting pod, as the HPA read it")
    ax.set_xlabel("seconds")
    ax.set_ylabel("requests waiting")
    ax2 = ax.twinx()
    ax2.step(t, [s["replicas"] for s in samples], where="post", color="tab:blue", label="replicas (HPA decision)")
    ax2.set_ylabel("replicas")
    ax2.set_ylim(0, MAX_REPLICAS + 1)
    shown = ("burst_start", "scaled_up", "burst_end", "back_to_min", "gpu_enabled", "gpu_scaled_up")
    for i, name in enumerate(n for n in shown if n in results["marks"]):
        x = results["marks"][name]
        ax.axvline(x, color="grey", linewidth=0.6, linestyle="--")
        ax.text(x, ax.get_ylim()[1] * (0.6 if i % 2 else 0.97), " " + name.replace("_", " "), rotation=90,
                va="top", fontsize=7)
    lines = ax.get_legend_handles_labels()[0] + ax2.get_legend_handles_labels()[0]
    ax.legend(lines, [str(h.get_label()) for h in lines], loc="center", bbox_to_anchor=(0.68, 0.4), fontsize=8)
    ax.set_title(f"HPA on vLLM queue depth: target 5/replica, maxNumSeqs {MAX_NUM_SEQS}, "
                 f"{BURST_CLIENTS} clients, scale-down window {SCALE_DOWN_WINDOW_S}s")
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)


@contextlib.contextmanager
def environment(workdir: Path) -> Iterator[tuple[LocalCluster, str, VllmServer, MetricsStack, FakeDcgmExporter]]:
    """Everything the scenario needs, started by itself (for ``make bench``; the test uses fixtures)."""
    import subprocess

    from tests.support.operator_process import OperatorProcess
    from tests.support.tiny_qwen import TinyQwen, make_tiny_model

    from qwen_fleet_dev import binaries

    binaries.ensure()
    python = subprocess.run([str(ROOT / "hack" / "vllm-venv.sh")], check=True, capture_output=True,
                            text=True).stdout.strip().splitlines()[-1]
    model = make_tiny_model(workdir / "model", TinyQwen(), python=python)
    with contextlib.ExitStack() as stack:
        # The engine takes longest to start: begin it first and let the rest come up meanwhile.
        server = EarlyVllmServer(SERVER_ARGS, ENGINE_ENV, model, python=python,
                                 log_path=workdir / "vllm.log").begin()
        stack.callback(server.stop)
        cluster = LocalCluster(workdir=workdir / "cluster", hpa_sync_period=HPA_SYNC_PERIOD)
        cluster.start()
        stack.callback(cluster.stop)
        cluster.kubectl("apply", "--server-side", "-f", str(ROOT / "crds" / "qwenfleet.io_qweninferences.yaml"))
        # Polled rather than `kubectl wait`, which fails outright if the CRD has no conditions yet.
        crd = "/apis/apiextensions.k8s.io/v1/customresourcedefinitions/qweninferences.qwenfleet.io"
        wait_for("the CRD Established", lambda: _condition(cluster.rest().get(crd), "Established").get(
            "status") == "True", 60)
        operator = OperatorProcess(cluster, workdir / "operator.log", env={"QWEN_FLEET_RESYNC_SECONDS": "10"})
        operator.start()
        stack.callback(operator.stop)
        metrics = MetricsStack(cluster, chart_adapter_rules(cluster.bins.helm), workdir / "metrics").start()
        stack.callback(metrics.stop)
        dcgm = FakeDcgmExporter().start()
        stack.callback(dcgm.stop)
        metrics.set_dcgm_targets([dcgm.address])
        cluster.kubectl("create", "namespace", "autoscaling")
        server.wait_ready()
        yield cluster, "autoscaling", server, metrics, dcgm


def run(results_dir: Path) -> dict[str, Any]:
    results_dir.mkdir(parents=True, exist_ok=True)
    with tempfile.TemporaryDirectory(prefix="qwen-fleet-bench-autoscaling-") as tmp, \
            environment(Path(tmp)) as (cluster, ns, server, metrics, dcgm):
        scenario = Scenario(cluster, ns, vllm=server, stack=metrics, dcgm=dcgm)
        try:
            scenario.deploy()
            scenario.wait_for_metrics()
            scenario.idle()
            scenario.burst()
            scenario.end_burst()
            scenario.gpu_only()
        finally:
            scenario.stop()
        out = scenario.results()
        out["vllm_startup_seconds"] = server.startup_seconds
    out["setup"] = {"hpa_sync_period": HPA_SYNC_PERIOD, "scrape_interval": "1s", "adapter_relist": "5s",
                    "scale_down_window_seconds": SCALE_DOWN_WINDOW_S, "burst_clients": BURST_CLIENTS,
                    "max_num_seqs": MAX_NUM_SEQS, "queue_target_per_replica": 5,
                    "min_replicas": MIN_REPLICAS, "max_replicas": MAX_REPLICAS}
    (results_dir / "autoscaling.json").write_text(json.dumps(out, indent=1))
    plot(out, results_dir / "autoscaling.png")
    return out


if __name__ == "__main__":
    figures = run(ROOT / "bench" / "results")
    print(json.dumps({k: v for k, v in figures.items() if k not in ("samples", "marks")}, indent=1))
