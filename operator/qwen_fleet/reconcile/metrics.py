"""Operator metrics (prometheus-client, own port): reconciles by result, their duration, managed objects,
API writes, queue depth, and per-resource Ready/Stalled gauges that the chart's alerts use.
"""

from __future__ import annotations

import asyncio
import contextlib
from typing import TYPE_CHECKING, Any

from prometheus_client import REGISTRY, Counter, Gauge, Histogram, start_http_server
from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily
from prometheus_client.registry import Collector

from qwen_fleet.api.conditions import ConditionType, is_true

if TYPE_CHECKING:
    from collections.abc import Iterator

    from qwen_fleet.reconcile.controller import Result
    from qwen_fleet.reconcile.handlers import Runtime
    from qwen_fleet.reconcile.queue import Key

RECONCILES = Counter("qwen_fleet_reconcile", "Reconciles by result", ["result"])
DURATION = Histogram("qwen_fleet_reconcile_duration_seconds", "Reconcile duration",
                     buckets=(0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30))
READY = Gauge("qwen_fleet_inference_ready", "1 when the QwenInference is Ready", ["namespace", "name"])
STALLED = Gauge("qwen_fleet_inference_stalled", "1 when the QwenInference is Stalled", ["namespace", "name"])


def _result_label(result: Result | None) -> str:
    if result is None:
        return "skipped"
    if result.outcome.kind == "stalled":
        return "stalled"
    return "applied" if (result.applied or result.deleted) else "unchanged"


def observe(key: Key, failure: str | None, started: float, result: Result | None,
            resource: dict[str, Any] | None = None) -> None:
    """Count one reconcile; ``resource`` is the QwenInference as it is after it (for the Ready gauge)."""
    DURATION.observe(asyncio.get_running_loop().time() - started)
    RECONCILES.labels(failure or _result_label(result)).inc()
    if result is not None:
        READY.labels(*key).set(0 if result.outcome.kind != "applied" else _ready(resource))
        STALLED.labels(*key).set(1 if result.outcome.kind == "stalled" else 0)


def _ready(resource: dict[str, Any] | None) -> int:
    return int(is_true(resource, ConditionType.READY))


def forget(key: Key) -> None:
    for gauge in (READY, STALLED):
        with contextlib.suppress(KeyError):
            gauge.remove(*key)


class _RuntimeCollector(Collector):
    def __init__(self, runtime: Runtime) -> None:
        self.runtime = runtime

    def collect(self) -> Iterator[Any]:
        rt = self.runtime
        managed = GaugeMetricFamily("qwen_fleet_managed_objects", "Objects the operator manages", labels=["kind"])
        managed.add_metric(["QwenInference"], len(rt.store.resources))
        children = sum(len(list(v)) for index in rt.store.children_indexes for v in index.values())
        managed.add_metric(["child"], children)
        yield managed
        yield GaugeMetricFamily("qwen_fleet_queue_depth", "Keys waiting for a worker", value=len(rt.queue))
        writes = CounterMetricFamily("qwen_fleet_api_writes", "API write requests", labels=["verb"])
        if rt.kube is not None:
            for verb, count in sorted(rt.kube.writes.items()):
                writes.add_metric([verb], count)
        yield writes


_collector: _RuntimeCollector | None = None


def serve(port: int, runtime: Runtime) -> str | None:
    """Serve /metrics on ``port`` (0: off) for this process's runtime; None when done, else the one line why not.

    Called once, before kopf starts (run.py), so a port that is taken ends the process with the reason instead of
    failing kopf's start-up activity, which kopf retries 60 s later for ever. The port is bound first and the
    runtime's collector registered only then: a failed bind leaves nothing registered, and a second call replaces
    the collector instead of failing with "Duplicated timeseries in CollectorRegistry"."""
    global _collector
    if port <= 0:
        return None
    try:
        start_http_server(port)
    except OSError as err:
        return f"cannot serve metrics on port {port} (QWEN_FLEET_METRICS_PORT): {err.strerror or err}"
    if _collector is not None:
        REGISTRY.unregister(_collector)
    _collector = _RuntimeCollector(runtime)
    REGISTRY.register(_collector)
    return None
