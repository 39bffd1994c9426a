"""routing.auth.apiKeys and routing.canary (render/gateway_keys.py, render/canary.py, render/model_claims.py): the
SecurityPolicy names the key Secrets and nothing else, the route splits by the canary's weight, a canary that cannot
take its share is refused naming both fleets, and a declared canary pair is not a model-name claim. Expected values
are written by hand from Envoy Gateway v1.7.0's API (api/v1alpha1/api_key_auth_types.go) and Gateway API's
HTTPRoute backendRefs."""

from __future__ import annotations

import copy
import json
import os
from pathlib import Path
from typing import Any

import pytest
import yaml

from qwen_fleet.api import QwenInference
from qwen_fleet.cli import dump_yaml
from qwen_fleet.config import OperatorConfig
from qwen_fleet.plan import make_plan
from qwen_fleet.reconcile.status import Outcome, compute_status
from qwen_fleet.reconcile.workload import missing_capability
from qwen_fleet.render import ALL_CAPABILITIES, Capabilities, render_children
from qwen_fleet.render.canary import canary_problem, traffic_status
from qwen_fleet.render.model_claims import claim_conflict

BASE: dict[str, Any] = {"model": {"name": "Qwen/Qwen3-4B-Instruct-2507", "servedModelName": "qwen"},
                        "gpu": {"product": "NVIDIA-A10G"}}
ENVOY = {"name": "front", "implementation": "EnvoyGateway", "routeByModel": True}
KEYS = {"apiKeys": {"secretRefs": [{"name": "team-a-keys"}, {"name": "team-b-keys"}]}}


def _raw(name: str, created: str = "2026-01-01T00:00:00Z", **spec: Any) -> dict[str, Any]:
    body = copy.deepcopy(BASE)
    for key, value in spec.items():
        body[key] = {**body.get(key, {}), **copy.deepcopy(value)} if isinstance(value, dict) else value
    return {"metadata": {"name": name, "namespace": "llm", "uid": f"u-{name}", "creationTimestamp": created},
            "spec": body}


def _cr(raw: dict[str, Any]) -> QwenInference:
    return QwenInference.model_validate(raw)


def _children(raw: dict[str, Any]) -> dict[tuple[str, str], dict[str, Any]]:
    cr = _cr(raw)
    return {(c["kind"], c["metadata"]["name"]): c for c in render_children(cr, make_plan(cr, OperatorConfig()),
                                                                            ALL_CAPABILITIES)}


# --- keys ---------------------------------------------------------------------------------------------------------

def test_the_security_policy_names_the_secrets_on_the_fleets_route() -> None:
    policy = _children(_raw("chat", routing={"gateway": ENVOY, "auth": KEYS}))[("SecurityPolicy", "chat")]
    assert policy["apiVersion"] == "gateway.envoyproxy.io/v1alpha1"
    assert policy["spec"] == {
        "targetRefs": [{"group": "gateway.networking.k8s.io", "kind": "HTTPRoute", "name": "chat"}],
        "apiKeyAuth": {"credentialRefs": [{"group": "", "kind": "Secret", "name": "team-a-keys"},
                                          {"group": "", "kind": "Secret", "name": "team-b-keys"}],
                       "extractFrom": [{"headers": ["Authorization"]}],
                       "sanitize": True}}
    assert policy["metadata"]["ownerReferences"][0]["name"] == "chat"


def test_the_key_stays_on_the_request_when_vllm_checks_one_too() -> None:
    raw = _raw("chat", routing={"gateway": ENVOY, "auth": KEYS},
               serving={"apiKeySecretRef": {"name": "vllm-key", "key": "key"}})
    assert _children(raw)[("SecurityPolicy", "chat")]["spec"]["apiKeyAuth"]["sanitize"] is False


def test_no_security_policy_without_keys_and_no_child_carries_more_than_the_secret_names() -> None:
    assert not [k for k in _children(_raw("chat", routing={"gateway": ENVOY})) if k[0] == "SecurityPolicy"]
    # The only mention of the Secrets in what is applied is their names, in the SecurityPolicy.
    for key, child in _children(_raw("chat", routing={"gateway": ENVOY, "auth": KEYS})).items():
        if key[0] != "SecurityPolicy":
            assert "team-a-keys" not in json.dumps(child), key


def test_keys_without_envoy_gateways_crds_are_stalled_naming_what_to_install() -> None:
    cr = _cr(_raw("chat", routing={"gateway": ENVOY, "auth": KEYS}))
    plan = make_plan(cr, OperatorConfig())
    outcome = missing_capability(plan, Capabilities(inference_pool=True, http_route=True))
    assert outcome is not None and outcome.reason == "EnvoyExtensionPolicyMissing"
    # Envoy Gateway's other policies served, its SecurityPolicy not (a partial install): Stalled naming it.
    outcome = missing_capability(plan, Capabilities(inference_pool=True, http_route=True, envoy_gateway=True))
    assert outcome is not None and outcome.reason == "SecurityPolicyMissing"
    assert "routing.auth.apiKeys makes a SecurityPolicy, but this cluster does not serve gateway.envoyproxy.io/" \
           "v1alpha1 securitypolicies: install Envoy Gateway" in outcome.message, outcome.message
    assert missing_capability(plan, ALL_CAPABILITIES) is None


# --- canary: the route ----------------------------------------------------------------------------------------------

def test_the_route_splits_between_the_two_services_by_weight() -> None:
    raw = _raw("chat", routing={"gateway": ENVOY, "canary": {"fleet": "chat-next", "weight": 30}})
    (rule,) = _children(raw)[("HTTPRoute", "chat")]["spec"]["rules"]
    assert rule["backendRefs"] == [{"group": "", "kind": "Service", "name": "chat", "port": 8000, "weight": 70},
                                   {"group": "", "kind": "Service", "name": "chat-next", "port": 8000, "weight": 30}]


def test_behind_an_inference_pool_gateway_the_split_is_between_the_pools() -> None:
    raw = _raw("chat", routing={"gateway": {"name": "front"}, "canary": {"fleet": "chat-next", "weight": 0}})
    (rule,) = _children(raw)[("HTTPRoute", "chat")]["spec"]["rules"]
    pool = {"group": "inference.networking.k8s.io", "kind": "InferencePool"}
    assert rule["backendRefs"] == [{**pool, "name": "chat", "weight": 100}, {**pool, "name": "chat-next", "weight": 0}]


def test_without_a_canary_the_one_backend_has_no_weight() -> None:
    (rule,) = _children(_raw("chat", routing={"gateway": ENVOY}))[("HTTPRoute", "chat")]["spec"]["rules"]
    assert rule["backendRefs"] == [{"group": "", "kind": "Service", "name": "chat", "port": 8000}]


def test_status_traffic_says_both_shares_once_applied_and_keeps_the_old_while_stalled() -> None:
    cr = _cr(_raw("chat", routing={"gateway": ENVOY, "canary": {"fleet": "chat-next", "weight": 25}}))
    shares = [{"fleet": "chat", "percent": 75, "role": "stable"},
              {"fleet": "chat-next", "percent": 25, "role": "canary"}]
    assert traffic_status(cr) == shares
    assert traffic_status(_cr(_raw("chat", routing={"gateway": ENVOY}))) is None
    from qwen_fleet.reconcile.controller import Result, _traffic

    assert _traffic(cr, Result(Outcome.applied()), {}) == shares
    old = {"traffic": [{"fleet": "chat", "percent": 100, "role": "stable"},
                       {"fleet": "chat-next", "percent": 0, "role": "canary"}]}
    assert _traffic(cr, Result(Outcome.stalled("CanaryNotFound", "m")), old) == old["traffic"]
    assert _traffic(cr, Result(Outcome.stalled("CanaryNotFound", "m")), {}) is None


def test_compute_status_writes_the_traffic_it_is_given() -> None:
    from qwen_fleet.reconcile.status import Observed

    shares = [{"fleet": "chat", "percent": 90, "role": "stable"}, {"fleet": "n", "percent": 10, "role": "canary"}]
    status = compute_status({}, 1, Outcome.applied(), None, Observed(), "2026-01-01T00:00:00Z", traffic=shares)
    assert status["traffic"] == shares
    assert "traffic" not in compute_status({}, 1, Outcome.applied(), None, Observed(), "2026-01-01T00:00:00Z")


# --- canary: what the reconcile refuses (render/canary.py) -----------------------------------------------------------

STABLE = _raw("chat", routing={"gateway": ENVOY, "canary": {"fleet": "chat-next", "weight": 10}})


def _problem(canary: dict[str, Any] | None, stable: dict[str, Any] = STABLE) -> tuple[str, str] | None:
    others = {("llm", "chat"): stable, **({("llm", "chat-next"): canary} if canary is not None else {})}
    return canary_problem(_cr(stable), others)


def test_a_canary_serving_the_same_names_is_accepted() -> None:
    assert _problem(_raw("chat-next", "2026-02-01T00:00:00Z")) is None
    # It may serve more (an adapter the stable fleet does not have): those requests never come through this route.
    assert _problem(_raw("chat-next", serving={"adapters": [{"name": "sql", "repo": "org/sql"}]})) is None


def test_a_missing_canary_is_stalled_naming_it() -> None:
    reason, message = _problem(None) or ("", "")
    assert reason == "CanaryNotFound"
    assert "routing.canary.fleet names QwenInference llm/chat-next, which does not exist" in message
    deleting = _raw("chat-next")
    deleting["metadata"]["deletionTimestamp"] = "2026-03-01T00:00:00Z"
    assert (_problem(deleting) or ("",))[0] == "CanaryNotFound"


def test_a_canary_of_another_model_is_stalled_naming_both() -> None:
    other = _raw("chat-next", model={"name": "Qwen/Qwen3-8B", "servedModelName": "qwen-8b"})
    reason, message = _problem(other) or ("", "")
    assert reason == "CanaryModelMismatch"
    assert "QwenInference llm/chat serves qwen but its canary llm/chat-next serves qwen-8b" in message
    assert "it must also serve qwen" in message


def test_a_canary_without_the_stable_fleets_adapter_is_stalled() -> None:
    stable = _raw("chat", routing={"gateway": ENVOY, "canary": {"fleet": "chat-next", "weight": 10}},
                  serving={"adapters": [{"name": "sql", "repo": "org/sql"}]})
    reason, message = _problem(_raw("chat-next"), stable) or ("", "")
    assert reason == "CanaryModelMismatch" and "serves qwen, sql but its canary llm/chat-next serves qwen" in message


def test_a_canary_on_another_port_is_stalled_behind_envoy_gateway() -> None:
    reason, message = _problem(_raw("chat-next", service={"port": 9000})) or ("", "")
    assert reason == "CanaryModelMismatch" and "serves on port 9000" in message


def test_behind_an_inference_pool_gateway_the_canary_needs_its_own_pool() -> None:
    stable = _raw("chat", routing={"gateway": {"name": "front"}, "canary": {"fleet": "chat-next", "weight": 10}})
    reason, message = _problem(_raw("chat-next"), stable) or ("", "")
    assert reason == "CanaryModelMismatch" and "InferencePool llm/chat-next" in message
    assert _problem(_raw("chat-next", routing={}), stable) is None


def test_a_canary_in_another_namespace_is_not_found() -> None:
    elsewhere = _raw("chat-next")
    elsewhere["metadata"]["namespace"] = "other"
    assert canary_problem(_cr(STABLE), {("other", "chat-next"): elsewhere})[0] == "CanaryNotFound"  # type: ignore[index]


# --- canary: the model-name claim (render/model_claims.py) ------------------------------------------------------------

@pytest.mark.parametrize("declares", [True, False])
def test_the_declared_canary_may_claim_the_stable_fleets_name(declares: bool) -> None:
    routing: dict[str, Any] = {"gateway": ENVOY}
    if declares:
        routing["canary"] = {"fleet": "chat-next", "weight": 10}
    stable = _raw("chat", "2026-01-01T00:00:00Z", routing=routing)
    canary = _raw("chat-next", "2026-02-01T00:00:00Z", routing={"gateway": ENVOY})
    message = claim_conflict(_cr(canary), [stable, canary])
    if declares:
        assert message is None
    else:
        assert message is not None and "already served there by QwenInference llm/chat" in message


def test_a_third_fleet_claiming_the_name_is_still_stalled() -> None:
    stable = _raw("chat", "2026-01-01T00:00:00Z", routing={"gateway": ENVOY,
                                                           "canary": {"fleet": "chat-next", "weight": 10}})
    canary = _raw("chat-next", "2026-02-01T00:00:00Z", routing={"gateway": ENVOY})
    third = _raw("chat-copy", "2026-03-01T00:00:00Z", routing={"gateway": ENVOY})
    message = claim_conflict(_cr(third), [stable, canary, third])
    assert message is not None and "QwenInference llm/chat," in message
    assert claim_conflict(_cr(stable), [stable, canary, third]) is None


def test_a_younger_fleet_naming_the_older_as_its_canary_is_still_stalled() -> None:
    """The older fleet's route takes the name's requests (Gateway API: the oldest of equal matches), so weights on
    the younger one's route would never apply: the claim stands."""
    older = _raw("chat-next", "2026-01-01T00:00:00Z", routing={"gateway": ENVOY})
    younger = _raw("chat", "2026-02-01T00:00:00Z", routing={"gateway": ENVOY,
                                                            "canary": {"fleet": "chat-next", "weight": 10}})
    assert claim_conflict(_cr(younger), [older, younger]) is not None


# --- TLS: the listener is the Gateway's; a fleet names it (reconcile/controller.py) ---------------------------------

def test_a_section_name_that_is_no_listener_of_the_gateway_is_stalled_naming_the_listeners() -> None:
    from qwen_fleet.reconcile.controller import _listener_missing

    front = {"spec": {"listeners": [{"name": "http", "protocol": "HTTP", "port": 80},
                                    {"name": "https", "protocol": "HTTPS", "port": 443}]}}
    assert _listener_missing(front, None, "llm/front") is None
    assert _listener_missing(front, "https", "llm/front") is None
    outcome = _listener_missing(front, "tls", "llm/front")
    assert outcome is not None and outcome.kind == "stalled" and outcome.reason == "GatewayListenerNotFound"
    assert "sectionName tls names no listener of Gateway llm/front, whose listeners are http, https" in outcome.message
    assert (_listener_missing({"spec": {}}, "https", "llm/front") or Outcome.applied()).message.count("are none") == 1


# --- golden: every child of a fleet with keys and a canary behind Envoy Gateway ------------------------------------

FIXTURES = Path(__file__).resolve().parent / "fixtures"


def test_a_fleet_with_keys_and_a_canary_renders_its_golden() -> None:
    """tests/unit/fixtures/envoy-gateway-keys-canary.yaml (UPDATE_GOLDEN=1 rewrites the golden, as
    test_render_golden.py's)."""
    doc = yaml.safe_load((FIXTURES / "envoy-gateway-keys-canary.yaml").read_text())
    doc["metadata"].update({"namespace": "llm", "uid": "00000000-0000-0000-0000-000000000001"})
    cr = QwenInference.model_validate(doc)
    text = dump_yaml(render_children(cr, make_plan(cr, OperatorConfig()), ALL_CAPABILITIES))
    golden = FIXTURES / "envoy-gateway-keys-canary.golden.yaml"
    if os.environ.get("UPDATE_GOLDEN"):
        golden.write_text(text)
    assert text == golden.read_text()
