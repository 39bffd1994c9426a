"""Every metric the chart's Grafana dashboard and PrometheusRule query exists where it comes from.

- ``vllm:*``: exported by a real vLLM 0.32 server (the session's shared one, ``serving_vllm``: the tiny Qwen2
  model served with the operator's rendered command line), after it served a request;
- ``qwen_fleet_*``: registered by the operator's metrics module;
- ``DCGM_FI_DEV_GPU_UTIL``: the dcgm-exporter series the operator's autoscaler uses too
  (``qwen_fleet.render.metric_names``; no GPU here to run dcgm-exporter);
- ``kube_*``: kube-state-metrics series, and Prometheus' own ``up``: listed below, since neither runs here.
A name outside these sources fails the test, so a typo or a metric vLLM renamed cannot hide.
"""

from __future__ import annotations

import json
import re
from typing import Any

import pytest
import yaml

from qwen_fleet.reconcile import metrics as operator_metrics
from qwen_fleet.render.metric_names import GPU_UTIL_SERIES
from tests.chart.support import ALL_FEATURES, CHART, one, template
from tests.support.vllm_server import VllmServer

# kube-state-metrics v2 series the alerts use (names as documented for kube-state-metrics 2.x), and the series
# Prometheus writes for every scrape target.
KUBE_STATE_METRICS = {
    "kube_horizontalpodautoscaler_status_desired_replicas",
    "kube_horizontalpodautoscaler_spec_max_replicas",
    "kube_pod_container_status_restarts_total",
}
PROMETHEUS_BUILTIN = {"up"}

_STRING = re.compile(r'"(?:\\.|[^"\\])*"|\'(?:\\.|[^\'\\])*\'|`[^`]*`')
_MATCHERS = re.compile(r"\{[^{}]*\}")
_RANGE = re.compile(r"\[[^\]]*\]")
_GROUPING = re.compile(r"\b(?:by|without|on|ignoring|group_left|group_right)\s*\([^)]*\)")
_NUMBER = re.compile(r"(?<![a-zA-Z0-9_:])[0-9][0-9a-zA-Z_.]*")  # 0.99, 1e3, and durations such as 5m
_IDENT = re.compile(r"[a-zA-Z_:][a-zA-Z0-9_:]*")
_KEYWORDS = {"bool", "and", "or", "unless", "offset", "by", "without", "on", "ignoring", "group_left",
             "group_right", "inf", "nan", "Inf", "NaN"}
_LABEL_VALUES = re.compile(r"label_values\(\s*([a-zA-Z_:][a-zA-Z0-9_:]*)")


def metric_names(expr: str) -> set[str]:
    """The metric names a PromQL expression selects: identifiers that are not functions, keywords, labels."""
    text = _STRING.sub('""', expr)
    text = _MATCHERS.sub("", text)
    text = _RANGE.sub("", text)
    text = _GROUPING.sub("", text)
    text = _NUMBER.sub("0", text)
    names = set()
    for match in _IDENT.finditer(text):
        word = match.group()
        if word in _KEYWORDS or text[match.end():].lstrip().startswith("("):
            continue  # a keyword, or a function / aggregation call
        names.add(word)
    return names


def test_metric_names_reads_promql() -> None:
    expr = ('histogram_quantile(0.99, sum by (le, ns) (rate(vllm:e2e_request_latency_seconds_bucket'
            '{ns=~"$namespace", x!=""}[$__rate_interval]))) * on (pod) group_left (fleet) '
            'group by (pod, fleet) (up{job="a:b"} == 1) unless absent(kube_x offset 5m) > bool 0.5')
    assert metric_names(expr) == {"vllm:e2e_request_latency_seconds_bucket", "up", "kube_x"}
    assert metric_names('label_replace(qwen_fleet_inference_ready, "h", "$1", "name", "(.+)")') == {
        "qwen_fleet_inference_ready"}


def dashboard_queries() -> list[str]:
    cm = one(template({"grafanaDashboard": {"enabled": True}}), "ConfigMap", "-dashboard")
    dashboard = json.loads(cm["data"]["qwen-fleet.json"])
    queries = [t["expr"] for panel in dashboard["panels"] for t in panel.get("targets", [])]
    for variable in dashboard["templating"]["list"]:
        query = variable.get("query")
        if isinstance(query, dict):  # label_values(metric{...}, label): Grafana's, not PromQL
            queries += [f"{m}" for m in _LABEL_VALUES.findall(query["query"])]
    return queries


def alert_queries() -> list[str]:
    rule = one(template(ALL_FEATURES), "PrometheusRule")
    return [r["expr"] for group in rule["spec"]["groups"] for r in group["rules"]]


def _operator_series() -> set[str]:
    """Sample names the operator's module-level metrics export (Gauges export their own name)."""
    names = set()
    from qwen_fleet.admission.server import CERT_EXPIRY  # the webhook's certificate (QwenFleetWebhookCertificate...)

    for metric in (operator_metrics.READY, operator_metrics.STALLED, operator_metrics.RECONCILES,
                   operator_metrics.DURATION, CERT_EXPIRY):
        for family in metric.collect():
            names |= {sample.name for sample in family.samples} | {family.name}
    return names


@pytest.fixture(scope="module")
def vllm_series(serving_vllm: VllmServer) -> set[str]:
    # One request first, so that every per-request histogram and counter has samples.
    status, body = serving_vllm.post_json("/v1/completions", {"model": serving_vllm.served_model_name,
                                                               "prompt": "hello", "max_tokens": 4})
    assert status == 200, body
    return set(serving_vllm.metrics())


@pytest.mark.vllm
@pytest.mark.parametrize("source", ["dashboard", "alerts"])
def test_every_queried_metric_exists(vllm_series: set[str], source: str) -> None:
    queries = dashboard_queries() if source == "dashboard" else alert_queries()
    names = set().union(*(metric_names(q) for q in queries))
    vllm = {n for n in names if n.startswith("vllm:")}
    assert vllm, f"the {source} queries no vLLM series at all"
    assert sorted(vllm - vllm_series) == [], f"not exported by vLLM: {sorted(vllm_series)}"
    operator = {n for n in names if n.startswith("qwen_fleet_")}
    assert sorted(operator - _operator_series()) == [], "not exported by the operator"
    others = names - vllm - operator
    assert others <= {GPU_UTIL_SERIES} | KUBE_STATE_METRICS | PROMETHEUS_BUILTIN, sorted(others)


def test_the_dashboard_and_the_alerts_use_the_operators_series_names() -> None:
    """The autoscaler's source series (qwen_fleet.render.metric_names) are the ones the dashboard shows."""
    from qwen_fleet.render import metric_names as names

    queried = set().union(*(metric_names(q) for q in dashboard_queries()))
    assert {names.QUEUE_SERIES, names.KV_CACHE_SERIES, names.RUNNING_SERIES, names.GPU_UTIL_SERIES} <= queried
    alerts = set().union(*(metric_names(q) for q in alert_queries()))
    assert {names.QUEUE_SERIES, names.KV_CACHE_SERIES} <= alerts


def _values() -> dict[str, Any]:
    return dict(yaml.safe_load((CHART / "values.yaml").read_text()))


def test_the_monitoring_objects_are_off_by_default() -> None:
    values = _values()
    assert not values["grafanaDashboard"]["enabled"]
    assert not values["prometheusRule"]["enabled"]
