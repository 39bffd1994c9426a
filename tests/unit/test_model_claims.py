"""routing.gateway.routeByModel: the route matches the request's model header (written by the Body-Based Router,
gateway-api-inference-extension v1.5.0 pkg/bbr: X-Gateway-Model-Name), and a model name on a Gateway belongs to the
fleet that claimed it first (render/model_claims.py). Expected values written by hand."""

from __future__ import annotations

import copy
from typing import Any

from qwen_fleet.api import QwenInference
from qwen_fleet.render.model_claims import claim_conflict
from qwen_fleet.render.routing import render_http_route

BASE: dict[str, Any] = {"model": {"name": "Qwen/Qwen3-4B-Instruct-2507"}, "gpu": {"product": "NVIDIA-A10G"}}
BY_MODEL = {"gateway": {"name": "front", "routeByModel": True}}
EVERY_PATH = {"type": "PathPrefix", "value": "/"}


def _raw(name: str, created: str, namespace: str = "llm", **spec: Any) -> dict[str, Any]:
    return {"metadata": {"name": name, "namespace": namespace, "uid": f"u-{name}", "creationTimestamp": created},
            "spec": {**copy.deepcopy(BASE), **copy.deepcopy(spec)}}


def _cr(raw: dict[str, Any]) -> QwenInference:
    return QwenInference.model_validate(raw)


def _model(value: str) -> dict[str, Any]:
    return {"type": "Exact", "name": "X-Gateway-Model-Name", "value": value}


def test_the_route_matches_the_served_name_and_each_adapter() -> None:
    raw = _raw("chat", "2026-01-01T00:00:00Z", routing=BY_MODEL,
               model={"name": "Qwen/Qwen3-4B-Instruct-2507", "servedModelName": "qwen3-4b"},
               serving={"adapters": [{"name": "sql", "repo": "org/sql-lora"}, {"name": "poems", "repo": "org/p"}]})
    (rule,) = render_http_route(_cr(raw))["spec"]["rules"]
    assert rule["matches"] == [{"path": EVERY_PATH, "headers": [_model("qwen3-4b")]},
                               {"path": EVERY_PATH, "headers": [_model("sql")]},
                               {"path": EVERY_PATH, "headers": [_model("poems")]}]


def test_without_route_by_model_the_route_takes_every_request() -> None:
    (rule,) = render_http_route(_cr(_raw("chat", "t", routing={"gateway": {"name": "front"}})))["spec"]["rules"]
    assert rule["matches"] == [{"path": EVERY_PATH}]


def test_pools_keep_their_header_beside_the_model() -> None:
    pools = [{"name": "short", "maxRequestTokens": 4096}, {"name": "long", "maxRequestTokens": 32768}]
    raw = _raw("chat", "t", routing=BY_MODEL, pools=pools, model={"name": "Qwen/Qwen3-8B"},
               gpu={"product": "NVIDIA-H100-80GB-HBM3"})
    short, long = render_http_route(_cr(raw))["spec"]["rules"]
    pool = {"type": "Exact", "name": "x-qwen-pool"}
    assert short["matches"] == [{"path": EVERY_PATH, "headers": [{**pool, "value": "short"}, _model("chat")]}]
    # The default (longest) pool also takes requests without the pool header, still only of its model.
    assert long["matches"] == [{"path": EVERY_PATH, "headers": [{**pool, "value": "long"}, _model("chat")]},
                               {"path": EVERY_PATH, "headers": [_model("chat")]}]


def test_the_later_fleet_claiming_a_name_is_refused_naming_the_first() -> None:
    first = _raw("old", "2026-01-01T00:00:00Z", routing=BY_MODEL, model={"name": BASE["model"]["name"],
                                                                            "servedModelName": "qwen"})
    second = _raw("new", "2026-02-01T00:00:00Z", namespace="team-b",
                  routing={"gateway": {"name": "front", "namespace": "llm", "routeByModel": True}},
                  model={"name": BASE["model"]["name"], "servedModelName": "qwen"})
    everyone = [first, second]
    message = claim_conflict(_cr(second), everyone)
    assert message is not None
    assert "the model name qwen on Gateway llm/front is already served there by QwenInference llm/old" in message
    assert claim_conflict(_cr(first), everyone) is None  # the first is never the one refused


def test_an_adapter_name_collides_like_a_served_name() -> None:
    first = _raw("old", "2026-01-01T00:00:00Z", routing=BY_MODEL,
                 serving={"adapters": [{"name": "sql", "repo": "org/sql-lora"}]})
    second = _raw("sql", "2026-02-01T00:00:00Z", routing=BY_MODEL)  # served as "sql": its own name
    message = claim_conflict(_cr(second), [first, second])
    assert message is not None and "the model name sql on Gateway llm/front" in message


def test_no_conflict_on_another_gateway_without_route_by_model_or_with_other_names() -> None:
    mine = _raw("new", "2026-02-01T00:00:00Z", routing=BY_MODEL)
    others = [
        _raw("new", "2026-01-01T00:00:00Z", routing={"gateway": {"name": "back", "routeByModel": True}}),
        _raw("new", "2026-01-01T00:00:00Z", namespace="x", routing={"gateway": {"name": "front"}}),
        _raw("other", "2026-01-01T00:00:00Z", routing=BY_MODEL),
        # Same name in another namespace, its Gateway its own namespace's front: another Gateway.
        _raw("new", "2026-01-01T00:00:00Z", namespace="y", routing=BY_MODEL),
    ]
    assert claim_conflict(_cr(mine), [mine, *others]) is None


def test_a_fleet_being_deleted_or_invalid_claims_nothing() -> None:
    mine = _raw("new", "2026-02-01T00:00:00Z", routing=BY_MODEL)
    going = _raw("new", "2026-01-01T00:00:00Z", namespace="a",
                 routing={"gateway": {"name": "front", "namespace": "llm", "routeByModel": True}})
    going["metadata"]["deletionTimestamp"] = "2026-03-01T00:00:00Z"
    invalid = _raw("new", "2026-01-01T00:00:00Z", namespace="b",
                   routing={"gateway": {"name": "front", "namespace": "llm", "routeByModel": True}},
                   replicas="three")
    assert claim_conflict(_cr(mine), [mine, going, invalid]) is None
