"""The llm-d inference simulator (tests/support/sim.py) against the real vLLM engine, where our code relies on it.

The oracle is the session's real vLLM 0.32 CPU server (``serving_vllm``: the tiny Qwen2 model served with the
operator's rendered command line); the simulator serves the same model name. Each side answers the same requests,
then:

- **Metrics.** Every vLLM series that the autoscaler (the chart's prometheus-adapter rules, the KEDA triggers the
  operator renders) and the endpoint picker (GAIE v1.5.0's default metric names, docs/routing.md) read is on the
  simulator's ``/metrics`` with the real engine's metric type and the engine labels we read (``READ_LABELS``).
  Those are what the tests that run the simulator rely on. The dashboard's and the alerts' vLLM series are
  compared too: where the simulator differs is listed exactly (``DASHBOARD_GAPS``), which is why
  tests/e2e/test_dashboard_live.py keeps the real engine; a gap that closes or opens fails the test, so the list
  cannot go stale.
- **Responses.** Each field our clients parse (listed with its reader in ``READ_FIELDS``) is in the real engine's
  answer (so the list is true) and in the simulator's with the same JSON type; token counts and finish reasons
  agree where the request fixes them (``ignore_eos``, ``max_tokens``); an unknown model is a 404 on both.
"""

from __future__ import annotations

import json
import urllib.request
from collections.abc import Iterator
from typing import Any

import pytest
import yaml
from prometheus_client.parser import text_string_to_metric_families

from qwen_fleet.api import QwenInference
from qwen_fleet.render import metric_names as names
from qwen_fleet.render.keda import render_scaled_object
from qwen_fleet_dev import metrics_stack as ms
from qwen_fleet_dev.binaries import ensure
from tests.contract.test_chart_metric_names import alert_queries, dashboard_queries, metric_names
from tests.support.sim import SimServer
from tests.support.vllm_server import VllmServer

pytestmark = [pytest.mark.vllm]

# The endpoint picker's metric names: GAIE v1.5.0's defaults, which are vLLM's (the rendered picker sets none).
# vllm:lora_requests_info too, but vLLM exports it only when LoRA is on, and the session's server serves none.
PICKER_SERIES = {names.QUEUE_SERIES, names.RUNNING_SERIES, names.KV_CACHE_SERIES, "vllm:cache_config_info"}
# The engine's own labels that our readers use (namespace, pod and qwenfleet_io_inference are Prometheus'
# relabelling, not the engine's): the dashboard's per-reason panel groups by finished_reason, the picker reads
# block_size of vllm:cache_config_info (autoTune).
READ_LABELS = {"finished_reason", "block_size"}
# Where the simulator v0.10.2 differs from vLLM 0.32 in a series the chart's dashboard or alerts query. The queue
# time histogram is observed only for a request that waited for a free sequence (dequeue() in its simulator.go),
# vLLM's for every request: after requests sent one at a time the simulator has no sample of it.
DASHBOARD_GAPS = {
    "vllm:num_preemptions_total": "absent",
    "vllm:request_queue_time_seconds_bucket": "absent",
    "vllm:request_success_total": "lacks finished_reason",
}

# (endpoint, stream, path) -> where we read it. A path is dotted keys; ``[]`` is any element of a list.
READ_FIELDS: dict[tuple[str, bool, str], str] = {
    ("completions", False, "id"): "the batch runner's output lines (operator/qwen_fleet/batchrun)",
    ("completions", False, "model"): "bench/ttft_probe.py",
    ("completions", False, "choices.[].text"): "bench/burst.py, the batch runner",
    ("completions", False, "choices.[].finish_reason"): "the batch runner",
    ("completions", False, "usage.prompt_tokens"): "batchrun/lines.py, batchrun/runner.py",
    ("completions", False, "usage.completion_tokens"): "batchrun/lines.py, bench/scale_to_zero.py",
    ("chat", False, "id"): "the batch runner",
    ("chat", False, "model"): "devtools/qwen_fleet_dev/demo_serving.py",
    ("chat", False, "choices.[].message.content"): "devtools/qwen_fleet_dev/demo.py",
    ("chat", False, "choices.[].finish_reason"): "the batch runner",
    ("chat", False, "usage.prompt_tokens"): "batchrun/lines.py",
    ("chat", False, "usage.completion_tokens"): "tests/integration/test_epp_picks.py, tests/support/extproc.py",
    ("chat", True, "choices.[].delta.content"): "bench/ttft_probe.py (the first content chunk is the first token)",
    ("chat", True, "usage.completion_tokens"): "stream_options.include_usage, the last chunk",
    ("completions", True, "choices.[].text"): "bench/burst.py stream=True",
    ("models", False, "data.[].id"): "tests/support/epp.py, devtools/qwen_fleet_dev/demo_serving.py",
}
MAX_TOKENS = 6


@pytest.fixture(scope="module")
def sim(serving_vllm: VllmServer, tmp_path_factory: pytest.TempPathFactory) -> Iterator[SimServer]:
    server = SimServer(served_model_name=serving_vllm.served_model_name,
                       log_path=tmp_path_factory.mktemp("sim-contract") / "sim.log")
    with server:
        yield server


def _request(server: VllmServer, endpoint: str, stream: bool) -> tuple[int, list[Any]]:
    """One request; the JSON bodies of its answer (one, or a stream's ``data:`` chunks without ``[DONE]``)."""
    if endpoint == "models":
        status, text = server.get("/v1/models")
        return status, [json.loads(text)]
    body: dict[str, Any] = {"model": server.served_model_name, "max_tokens": MAX_TOKENS, "ignore_eos": True,
                            "temperature": 0}
    if endpoint == "chat":
        body["messages"] = [{"role": "user", "content": "Say something about fleets."}]
    else:
        body["prompt"] = "The fleet scales on"
    if stream:
        body |= {"stream": True, "stream_options": {"include_usage": True}}
    path = "/v1/chat/completions" if endpoint == "chat" else "/v1/completions"
    req = urllib.request.Request(server.base_url + path, data=json.dumps(body).encode(),
                                 headers={"Content-Type": "application/json"}, method="POST")
    with urllib.request.urlopen(req, timeout=120) as resp:
        text = resp.read().decode()
        status = int(resp.status)
    if not stream:
        return status, [json.loads(text)]
    events = [line.removeprefix("data:").strip() for line in text.splitlines() if line.startswith("data:")]
    assert events and events[-1] == "[DONE]", text[-500:]
    return status, [json.loads(e) for e in events[:-1]]


def _shape(obj: Any, prefix: str = "") -> dict[str, set[str]]:
    """Dotted path -> the JSON types found there (``[]`` for list elements), over the whole object."""
    out: dict[str, set[str]] = {}

    def walk(value: Any, path: str) -> None:
        if path:
            out.setdefault(path, set()).add(type(value).__name__)
        if isinstance(value, dict):
            for key, item in value.items():
                walk(item, f"{path}.{key}" if path else key)
        elif isinstance(value, list):
            for item in value:
                walk(item, f"{path}.[]" if path else "[]")

    walk(obj, prefix)
    return out


def _shapes(bodies: list[Any]) -> dict[str, set[str]]:
    """The union of the bodies' shapes (a stream's chunks differ: content chunks, then the usage chunk)."""
    out: dict[str, set[str]] = {}
    for body in bodies:
        for path, types in _shape(body).items():
            out.setdefault(path, set()).update(types - {"NoneType"})
    return out


@pytest.fixture(scope="module")
def answers(serving_vllm: VllmServer, sim: SimServer) -> dict[tuple[str, bool], dict[str, list[Any]]]:
    out: dict[tuple[str, bool], dict[str, list[Any]]] = {}
    for endpoint, stream in sorted({(e, s) for e, s, _ in READ_FIELDS}):
        out[(endpoint, stream)] = {}
        for side, server in (("vllm", serving_vllm), ("sim", sim)):
            status, bodies = _request(server, endpoint, stream)
            assert status == 200, (side, endpoint, stream, bodies)
            out[(endpoint, stream)][side] = bodies
    return out


def _series(server: VllmServer) -> dict[str, tuple[str, frozenset[str]]]:
    """Sample name -> (its family's type, the label names of its samples, without ``le``)."""
    status, text = server.get("/metrics")
    assert status == 200, text[:300]
    out: dict[str, tuple[str, frozenset[str]]] = {}
    for family in text_string_to_metric_families(text):
        for sample in family.samples:
            labels = frozenset(sample.labels) - {"le"}
            kind, before = out.get(sample.name, (family.type, frozenset()))
            out[sample.name] = (kind, before | labels)
    return out


@pytest.fixture(scope="module")
def series(answers: dict[Any, Any], serving_vllm: VllmServer, sim: SimServer
           ) -> dict[str, dict[str, tuple[str, frozenset[str]]]]:
    # ``answers`` first: both sides have then served requests, so every per-request histogram has samples.
    return {"vllm": _series(serving_vllm), "sim": _series(sim)}


def _autoscaler_series() -> set[str]:
    """The vLLM series of the chart's adapter rules and of the operator's KEDA triggers."""
    rules = yaml.safe_load(ms.chart_adapter_rules(ensure(build=True).helm))["rules"]
    found = set()
    for rule in rules:
        found |= metric_names(rule["metricsQuery"].replace("<<.GroupBy>>", "pod").replace("<<.LabelMatchers>>", ""))
    cr = QwenInference.model_validate({"metadata": {"name": "f", "namespace": "n"}, "spec": {
        "model": {"name": "Qwen/Qwen3-4B-Instruct-2507"},
        "autoscaling": {"enabled": True, "engine": "keda", "maxReplicas": 4, "gpuUtilization": {"enabled": True},
                        "keda": {"prometheusAddress": "http://prometheus:9090"}}}})
    for trigger in render_scaled_object(cr)["spec"]["triggers"]:
        found |= metric_names(trigger["metadata"]["query"])
    return {n for n in found if n.startswith("vllm:")}


def _gaps(series: dict[str, dict[str, tuple[str, frozenset[str]]]], wanted: set[str]) -> dict[str, str]:
    """Each of ``wanted`` where the simulator differs from the real engine: absent, another type, or without a
    label of ``READ_LABELS`` that the real engine's series has."""
    real, sim = series["vllm"], series["sim"]
    assert sorted(wanted - set(real)) == [], "a series we read that the real engine does not export"
    out = {}
    for name in sorted(wanted):
        if name not in sim:
            out[name] = "absent"
        elif sim[name][0] != real[name][0]:
            out[name] = f"a {sim[name][0]}, not a {real[name][0]}"
        elif lacking := sorted((real[name][1] & READ_LABELS) - sim[name][1]):
            out[name] = "lacks " + ", ".join(lacking)
    return out


def test_the_autoscaler_and_picker_series_match_the_real_engines(
        series: dict[str, dict[str, tuple[str, frozenset[str]]]]) -> None:
    autoscaler = _autoscaler_series()
    assert {names.QUEUE_SERIES, names.KV_CACHE_SERIES} <= autoscaler, autoscaler
    assert _gaps(series, autoscaler | PICKER_SERIES) == {}
    # The picker's prefix scorer hashes in blocks of the engine's block_size: both say it as a label.
    assert "block_size" in series["vllm"]["vllm:cache_config_info"][1] & series["sim"]["vllm:cache_config_info"][1]


def test_the_dashboards_series_differ_only_where_known(
        series: dict[str, dict[str, tuple[str, frozenset[str]]]]) -> None:
    """Why tests/e2e/test_dashboard_live.py keeps the real engine; a gap closed or opened fails here."""
    queried = set().union(*(metric_names(q) for q in dashboard_queries() + alert_queries()))
    assert _gaps(series, {n for n in queried if n.startswith("vllm:")}) == DASHBOARD_GAPS


def test_the_fields_our_clients_read_have_the_real_engines_types(
        answers: dict[tuple[str, bool], dict[str, list[Any]]]) -> None:
    wrong = {}
    for (endpoint, stream, path), reader in READ_FIELDS.items():
        real = _shapes(answers[(endpoint, stream)]["vllm"]).get(path)
        sim = _shapes(answers[(endpoint, stream)]["sim"]).get(path)
        assert real, f"the real engine's {endpoint} (stream={stream}) has no {path}: READ_FIELDS is wrong ({reader})"
        if sim != real:
            wrong[(endpoint, stream, path)] = {"vllm": real, "sim": sim}
    assert wrong == {}


def test_token_counts_finish_reasons_and_model_agree(answers: dict[tuple[str, bool], dict[str, list[Any]]],
                                                      serving_vllm: VllmServer) -> None:
    for endpoint in ("completions", "chat"):
        seen = {}
        for side in ("vllm", "sim"):
            [body] = answers[(endpoint, False)][side]
            [choice] = body["choices"]
            seen[side] = (body["model"], choice["finish_reason"], body["usage"]["completion_tokens"],
                          body["object"])
            streamed = answers[(endpoint, True)][side]
            assert streamed[-1]["usage"]["completion_tokens"] == MAX_TOKENS, (side, endpoint, streamed[-1])
        assert seen["sim"] == seen["vllm"], (endpoint, seen)
        assert seen["vllm"][:3] == (serving_vllm.served_model_name, "length", MAX_TOKENS)


def test_an_unknown_model_is_a_404_on_both(serving_vllm: VllmServer, sim: SimServer) -> None:
    seen = {}
    for side, server in (("vllm", serving_vllm), ("sim", sim)):
        status, body = server.post_json("/v1/completions", {"model": "no-such-model", "prompt": "x", "max_tokens": 1})
        seen[side] = status
        error = body if isinstance(body, dict) else json.loads(body)
        assert isinstance(error.get("error"), dict) and error["error"].get("message"), (side, body)
    assert seen == {"vllm": 404, "sim": 404}


def test_health_answers_on_both(serving_vllm: VllmServer, sim: SimServer) -> None:
    assert [serving_vllm.get("/health")[0], sim.get("/health")[0]] == [200, 200]

