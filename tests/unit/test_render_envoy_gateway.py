"""routing.gateway.implementation EnvoyGateway: what makes Envoy Gateway v1.7.0 honour the endpoint picker.

Expected values are written by hand from Envoy Gateway's v1alpha1 API (api/v1alpha1/ext_proc_types.go,
envoyextensionypolicy_types.go, loadbalancer_types.go EndpointOverride, retry_types.go) and from the picker's own
header name (gateway-api-inference-extension v1.5.0 pkg/epp/metadata/consts.go), not from the renderer. Whether
the real apiserver with Envoy Gateway's CRDs accepts them: tests/integration/test_envoy_gateway_policies.py.
"""

from __future__ import annotations

import copy
import re
from typing import Any

import pytest
from pydantic import ValidationError

from qwen_fleet.api import QwenInference
from qwen_fleet.config import OperatorConfig
from qwen_fleet.plan import make_plan
from qwen_fleet.reconcile.kinds import CHILD_KIND, may_prune
from qwen_fleet.reconcile.workload import missing_capability
from qwen_fleet.render import ALL_CAPABILITIES, Capabilities, render_children

BASE: dict[str, Any] = {"model": {"name": "Qwen/Qwen3-4B-Instruct-2507"}, "gpu": {"product": "NVIDIA-A10G"}}
EG: dict[str, Any] = {"gateway": {"name": "front", "implementation": "EnvoyGateway"}}
OWNER = {"apiVersion": "qwenfleet.io/v1alpha1", "kind": "QwenInference", "name": "big", "uid": "u-1",
         "controller": True, "blockOwnerDeletion": True}
ROUTE_REF = {"group": "gateway.networking.k8s.io", "kind": "HTTPRoute", "name": "big"}


def _cr(extra: dict[str, Any]) -> QwenInference:
    return QwenInference.model_validate({"metadata": {"name": "big", "namespace": "llm", "uid": "u-1"},
                                         "spec": {**copy.deepcopy(BASE), **copy.deepcopy(extra)}})


def children(extra: dict[str, Any], caps: Capabilities = ALL_CAPABILITIES) -> dict[tuple[str, str], dict[str, Any]]:
    cr = _cr(extra)
    return {(c["kind"], c["metadata"]["name"]): c for c in render_children(cr, make_plan(cr, OperatorConfig()), caps)}


def test_envoy_gateway_gets_the_route_to_the_service_and_both_policies_last() -> None:
    out = children({"routing": EG})
    assert list(out)[-5:] == [("Service", "big-epp"), ("InferencePool", "big"), ("HTTPRoute", "big"),
                              ("EnvoyExtensionPolicy", "big-epp"), ("BackendTrafficPolicy", "big")]
    for key in [("EnvoyExtensionPolicy", "big-epp"), ("BackendTrafficPolicy", "big")]:
        child = out[key]
        assert child["apiVersion"] == "gateway.envoyproxy.io/v1alpha1"
        assert child["metadata"]["namespace"] == "llm"
        assert child["metadata"]["ownerReferences"] == [OWNER]
        assert child["metadata"]["labels"]["app.kubernetes.io/managed-by"] == "qwen-fleet"  # watched, pruned


def test_the_route_backend_is_the_fleets_service_on_its_port() -> None:
    route = children({"routing": EG, "service": {"port": 8080}})[("HTTPRoute", "big")]
    # Envoy Gateway has no InferencePool backend: a backendRef of that kind would be ResolvedRefs False.
    assert route["spec"]["rules"] == [{"matches": [{"path": {"type": "PathPrefix", "value": "/"}}],
                                       "backendRefs": [{"group": "", "kind": "Service", "name": "big", "port": 8080}],
                                       "timeouts": {"request": "600s"}}]


def test_the_extension_policy_sends_every_request_through_the_picker_full_duplex() -> None:
    policy = children({"routing": {"gateway": {**EG["gateway"], "requestTimeout": "15m"}}})[
        ("EnvoyExtensionPolicy", "big-epp")]
    assert policy["spec"] == {
        "targetRefs": [ROUTE_REF],
        "extProc": [{
            "backendRefs": [{"group": "", "kind": "Service", "name": "big-epp", "port": 9002}],
            "processingMode": {"request": {"body": "FullDuplexStreamed"}, "response": {"body": "FullDuplexStreamed"}},
            "messageTimeout": "15m",
            "failOpen": False,
        }],
    }


def test_the_traffic_policy_honours_the_pickers_header_and_retries_its_fallbacks() -> None:
    policy = children({"routing": EG})[("BackendTrafficPolicy", "big")]
    assert policy["spec"] == {
        "targetRefs": [ROUTE_REF],
        "loadBalancer": {"type": "LeastRequest",
                         "endpointOverride": {"extractFrom": [{"header": "x-gateway-destination-endpoint"}]}},
        # The picker names 3 endpoints (the best, then two fallbacks): two retries walk the fallbacks.
        "retry": {"numRetries": 2, "retryOn": {"triggers": ["connect-failure", "reset"]}},
    }


def test_the_picker_serves_plain_grpc_behind_envoy_gateway_only() -> None:
    def args(extra: dict[str, Any]) -> list[str]:
        dep = children({"routing": extra})[("Deployment", "big-epp")]
        return list(dep["spec"]["template"]["spec"]["containers"][0]["args"])

    assert args(EG)[-1] == "--secure-serving=false"
    assert not any(a.startswith("--secure-serving") for a in args({"gateway": {"name": "front"}}))
    assert not any(a.startswith("--secure-serving") for a in args({}))


def test_fail_close_is_the_default_behind_envoy_gateway_and_fail_open_elsewhere() -> None:
    assert children({"routing": EG})[("InferencePool", "big")]["spec"]["endpointPickerRef"]["failureMode"] == \
        "FailClose"
    explicit = {"gateway": EG["gateway"], "endpointPicker": {"failureMode": "FailClose"}}
    assert children({"routing": explicit})[("EnvoyExtensionPolicy", "big-epp")]["spec"]["extProc"][0][
        "failOpen"] is False
    standard = children({"routing": {"gateway": {"name": "front"}}})
    assert standard[("InferencePool", "big")]["spec"]["endpointPickerRef"]["failureMode"] == "FailOpen"


def test_fail_open_behind_envoy_gateway_is_refused_naming_the_fix() -> None:
    with pytest.raises(ValidationError, match=re.escape("remove failureMode (FailClose is the default there) or "
                                                        "set it to FailClose")):
        _cr({"routing": {"gateway": EG["gateway"], "endpointPicker": {"failureMode": "FailOpen"}}})


def test_any_other_gateway_keeps_the_inference_pool_backend_and_no_policies() -> None:
    out = children({"routing": {"gateway": {"name": "front", "implementation": "InferencePool"}}})
    assert not {k for k, _ in out} & {"EnvoyExtensionPolicy", "BackendTrafficPolicy"}
    assert out[("HTTPRoute", "big")]["spec"]["rules"][0]["backendRefs"] == [
        {"group": "inference.networking.k8s.io", "kind": "InferencePool", "name": "big"}]
    assert out == children({"routing": {"gateway": {"name": "front"}}})  # InferencePool is the default


def test_each_pool_gets_its_own_picker_policy_on_its_named_rule() -> None:
    pools = [{"name": "short", "maxRequestTokens": 4096}, {"name": "long", "maxRequestTokens": 32768}]
    out = children({"routing": EG, "pools": pools, "model": {"name": "Qwen/Qwen3-8B"},
                    "gpu": {"product": "NVIDIA-H100-80GB-HBM3"}})
    rules = out[("HTTPRoute", "big")]["spec"]["rules"]
    assert [r["name"] for r in rules] == ["short", "long"]
    assert all(r["backendRefs"] == [{"group": "", "kind": "Service", "name": "big", "port": 8000}] for r in rules)
    for pool in ("short", "long"):
        policy = out[("EnvoyExtensionPolicy", f"big-{pool}-epp")]
        assert policy["spec"]["targetRefs"] == [{**ROUTE_REF, "sectionName": pool}]
        assert policy["spec"]["extProc"][0]["backendRefs"][0]["name"] == f"big-{pool}-epp"
    # One traffic policy on the whole route: each pool's picker names only its own pool's pods.
    assert out[("BackendTrafficPolicy", "big")]["spec"]["targetRefs"] == [ROUTE_REF]


def test_without_envoy_gateways_crds_the_fleet_is_stalled_naming_them() -> None:
    cr = _cr({"routing": EG})
    caps = Capabilities(inference_pool=True, http_route=True)
    outcome = missing_capability(make_plan(cr, OperatorConfig()), caps)
    assert outcome is not None and outcome.reason == "EnvoyExtensionPolicyMissing"
    assert "install Envoy Gateway (v1.7.0" in outcome.message
    assert "or set routing.gateway.implementation to InferencePool" in outcome.message
    assert missing_capability(make_plan(cr, OperatorConfig()), ALL_CAPABILITIES) is None


def test_the_policies_are_pruned_when_the_spec_stops_asking_for_them() -> None:
    for kind in ("EnvoyExtensionPolicy", "BackendTrafficPolicy"):
        assert CHILD_KIND[kind].group == "gateway.envoyproxy.io" and CHILD_KIND[kind].optional
        assert may_prune(kind, "big-epp", "big")
