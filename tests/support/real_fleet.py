"""Steady load for the real-node fleet tests and bench/real_fleet.py (the fleet itself: devcluster/local_fleet.py);
the autoscaling test's view of a real fleet (Prometheus targets on its pods, samples of the HPA and each pod)."""

from __future__ import annotations

import contextlib
import threading
import time
import urllib.parse
import urllib.request
from dataclasses import dataclass, field
from typing import Any

from prometheus_client.parser import text_string_to_metric_families

from qwen_fleet.render.metric_names import QUEUE_METRIC
from qwen_fleet_dev.cluster import LocalCluster
from qwen_fleet_dev.local_fleet import chat
from qwen_fleet_dev.metrics_stack import MetricsStack, PodTarget, quantity
from qwen_fleet_dev.rest import RestError


class SteadyLoad:
    """``workers`` threads sending chat completions back to back through one URL; every outcome is counted.
    A failure is anything but an answer: a refused or reset connection, a timeout, an HTTP error."""

    def __init__(self, url: str, model: str, workers: int = 2) -> None:
        self.url, self.model = url, model
        self.ok = 0
        self.failures: list[str] = []
        self._stop = threading.Event()
        self._lock = threading.Lock()
        self._threads = [threading.Thread(target=self._run, daemon=True) for _ in range(workers)]

    def _run(self) -> None:
        while not self._stop.is_set():
            try:
                chat(self.url, self.model, max_tokens=2, timeout=60)
            except (OSError, ValueError) as exc:
                with self._lock:
                    self.failures.append(f"{time.strftime('%H:%M:%S')} {type(exc).__name__}: {exc}")
                time.sleep(0.2)
            else:
                with self._lock:
                    self.ok += 1

    def __enter__(self) -> SteadyLoad:
        for thread in self._threads:
            thread.start()
        return self

    def __exit__(self, *_: object) -> None:
        self._stop.set()
        for thread in self._threads:
            thread.join(timeout=90)


# --- the autoscaling test on the real node: Prometheus scrapes the fleet's real pods -----------------------------

_DIRECT = urllib.request.build_opener(urllib.request.ProxyHandler({}))


def pod_metrics(address: str, timeout: float = 10) -> dict[str, float]:
    """A pod's vLLM ``/metrics`` (``ip:port``) as {sample name: value summed over its label sets}."""
    with _DIRECT.open(f"http://{address}/metrics", timeout=timeout) as resp:
        text = resp.read().decode()
    samples: dict[str, float] = {}
    for family in text_string_to_metric_families(text):
        for sample in family.samples:
            samples[sample.name] = samples.get(sample.name, 0.0) + float(sample.value)
    return samples


def _http_port(pod: dict[str, Any]) -> int:
    ports = pod["spec"]["containers"][0].get("ports") or []
    return int(next(p["containerPort"] for p in ports if p.get("name") == "http"))


def hpa_queue_value(hpa: dict[str, Any] | None) -> float | None:
    """The queue metric's per-pod average as the HPA last read it (status.currentMetrics), if it read one."""
    for metric in ((hpa or {}).get("status") or {}).get("currentMetrics") or []:
        pods = metric.get("pods") or {}
        if pods.get("metric", {}).get("name") == QUEUE_METRIC and "averageValue" in pods.get("current", {}):
            return quantity(pods["current"]["averageValue"])
    return None


@dataclass
class FleetSample:
    t: float  # seconds since the watch started
    hpa_desired: int | None
    hpa_current: int | None
    hpa_queue: float | None  # what the HPA read through the adapter: the queue per pod
    replicas: int  # the Deployment's spec.replicas (the HPA writes it)
    waiting: dict[str, float]  # each running pod's vllm:num_requests_waiting, read from its own /metrics
    succeeded: dict[str, float]  # each running pod's vllm:request_success_total


@dataclass
class FleetWatch:
    """Keeps Prometheus' vLLM targets equal to the fleet's running pods, as Kubernetes service discovery would
    (the pod IP and the ``http`` port, labelled with the pod's namespace, name and labels: the host routes to the
    pod CIDR through the node's veth), and samples the HPA, the Deployment and each pod's own ``/metrics``
    once a second from a thread of its own. :meth:`stop` ends the thread."""

    cluster: LocalCluster
    stack: MetricsStack
    namespace: str
    fleet: str
    interval: float = 1.0
    samples: list[FleetSample] = field(default_factory=list)
    addresses: dict[str, str] = field(default_factory=dict)  # running pod -> ip:port
    notes: list[str] = field(default_factory=list)
    _stop: threading.Event = field(default_factory=threading.Event)
    _thread: threading.Thread | None = None
    _t0: float = field(default_factory=time.monotonic)

    def start(self) -> FleetWatch:
        self.refresh()
        self._thread = threading.Thread(target=self._run, daemon=True)
        self._thread.start()
        return self

    def stop(self) -> None:
        self._stop.set()
        if self._thread is not None:
            self._thread.join(timeout=30)

    def now(self) -> float:
        return round(time.monotonic() - self._t0, 1)

    def _get(self, path: str) -> dict[str, Any] | None:
        try:
            return dict(self.cluster.rest().get(path))
        except RestError as err:
            if err.status == 404:
                return None
            raise

    def hpa(self) -> dict[str, Any] | None:
        return self._get(f"/apis/autoscaling/v2/namespaces/{self.namespace}/horizontalpodautoscalers/{self.fleet}")

    def deployment(self) -> dict[str, Any] | None:
        return self._get(f"/apis/apps/v1/namespaces/{self.namespace}/deployments/{self.fleet}")

    def pods(self) -> list[dict[str, Any]]:
        """The fleet's pods that are not being deleted, oldest first."""
        items = self.cluster.rest().get(f"/api/v1/namespaces/{self.namespace}/pods?labelSelector="
                                        + urllib.parse.quote(f"qwenfleet.io/inference={self.fleet}"))["items"]
        live = [p for p in items if not p["metadata"].get("deletionTimestamp")]
        return sorted(live, key=lambda p: (p["metadata"]["creationTimestamp"], p["metadata"]["name"]))

    def refresh(self) -> None:
        """Point Prometheus at the running pods (file SD: it rereads the file within a second or two)."""
        running = [p for p in self.pods() if p["status"].get("phase") == "Running" and p["status"].get("podIP")]
        addresses = {p["metadata"]["name"]: f"{p['status']['podIP']}:{_http_port(p)}" for p in running}
        if addresses != self.addresses:
            self.stack.set_pod_targets([
                PodTarget(addresses[p["metadata"]["name"]], self.namespace, p["metadata"]["name"],
                          pod_labels=p["metadata"].get("labels") or {}, service=self.fleet) for p in running])
            self.notes.append(f"{self.now()}s: targets {addresses}")
            self.addresses = addresses

    def _sample(self) -> None:
        self.refresh()
        hpa, dep = self.hpa(), self.deployment() or {}
        waiting, succeeded = {}, {}
        for pod, address in dict(self.addresses).items():
            with contextlib.suppress(OSError, ValueError):  # a pod still loading, or a slow answer: no reading
                metrics = pod_metrics(address, timeout=5)
                waiting[pod] = metrics.get("vllm:num_requests_waiting", 0.0)
                succeeded[pod] = metrics.get("vllm:request_success_total", 0.0)
        status = (hpa or {}).get("status") or {}
        self.samples.append(FleetSample(
            t=self.now(), hpa_desired=status.get("desiredReplicas"), hpa_current=status.get("currentReplicas"),
            hpa_queue=hpa_queue_value(hpa), replicas=int(dep.get("spec", {}).get("replicas") or 0),
            waiting=waiting, succeeded=succeeded))

    def _run(self) -> None:
        while not self._stop.is_set():
            try:
                self._sample()
            except Exception as err:  # a missed sample is noted; the test's own waits decide
                self.notes.append(f"{self.now()}s: sample failed: {err!r}"[:300])
            self._stop.wait(self.interval)
