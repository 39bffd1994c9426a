"""spec.routing: the InferencePool, the endpoint picker and the HTTPRoute, against values written by hand from the
spec and from upstream's own manifests (gateway-api-inference-extension v1.5.0: config/charts/inferencepool,
config/charts/epplib, pkg/epp/server/options.go, pkg/epp/config/loader/defaults.go), not from the renderer."""

from __future__ import annotations

import copy
from typing import Any

import pytest
import yaml

from qwen_fleet.api import QwenInference
from qwen_fleet.api.routing import vllm_priority
from qwen_fleet.config import OperatorConfig
from qwen_fleet.plan import make_plan
from qwen_fleet.render import ALL_CAPABILITIES, render_children
from qwen_fleet.render.engine_args import engine_args

BASE: dict[str, Any] = {"model": {"name": "Qwen/Qwen3-4B-Instruct-2507"}, "gpu": {"product": "NVIDIA-A10G"}}
ROUTING: dict[str, Any] = {"gateway": {"name": "inference-gateway", "namespace": "gateways", "sectionName": "http"},
                           "priorityClasses": [{"name": "interactive", "priority": 10},
                                               {"name": "batch", "priority": -10}]}
OWNER = {"apiVersion": "qwenfleet.io/v1alpha1", "kind": "QwenInference", "name": "big", "uid": "u-1",
         "controller": True, "blockOwnerDeletion": True}


def _cr(extra: dict[str, Any]) -> QwenInference:
    return QwenInference.model_validate({"metadata": {"name": "big", "namespace": "llm", "uid": "u-1"},
                                         "spec": {**copy.deepcopy(BASE), **copy.deepcopy(extra)}})


def children(extra: dict[str, Any]) -> dict[tuple[str, str], dict[str, Any]]:
    cr = _cr(extra)
    return {(c["kind"], c["metadata"]["name"]): c
            for c in render_children(cr, make_plan(cr, OperatorConfig()), ALL_CAPABILITIES)}


def test_without_routing_nothing_changes() -> None:
    assert sorted(children({})) == [("Deployment", "big"), ("Service", "big"), ("ServiceMonitor", "big")]
    args = engine_args(_cr({}), make_plan(_cr({}), OperatorConfig()))
    assert "--scheduling-policy" not in args


def test_routing_renders_the_pool_the_picker_and_the_route_in_apply_order() -> None:
    out = list(children({"routing": ROUTING}))
    assert out == [("Deployment", "big"), ("Service", "big"), ("ServiceMonitor", "big"),
                   ("ConfigMap", "big-epp"), ("ServiceAccount", "big-epp"), ("Role", "big-epp"),
                   ("RoleBinding", "big-epp"), ("Deployment", "big-epp"), ("Service", "big-epp"),
                   ("InferencePool", "big"), ("InferenceObjective", "big-interactive"),
                   ("InferenceObjective", "big-batch"), ("HTTPRoute", "big")]
    for child in children({"routing": ROUTING}).values():
        assert child["metadata"]["namespace"] == "llm"
        assert child["metadata"]["ownerReferences"] == [OWNER]
        assert child["metadata"]["labels"]["app.kubernetes.io/managed-by"] == "qwen-fleet"  # watched


def test_the_inference_pool_selects_the_serving_pods_on_the_vllm_port() -> None:
    pool = children({"routing": {}, "service": {"port": 8080}})[("InferencePool", "big")]
    assert pool["apiVersion"] == "inference.networking.k8s.io/v1"
    assert pool["spec"] == {
        "selector": {"matchLabels": {"qwenfleet.io/inference": "big"}},
        "targetPorts": [{"number": 8080}],
        "appProtocol": "http",
        "endpointPickerRef": {"group": "", "kind": "Service", "name": "big-epp", "port": {"number": 9002},
                              "failureMode": "FailOpen"},
    }


def test_multi_node_pool_selects_only_the_leaders() -> None:
    pool = children({"routing": {}, "parallelism": {"pipeline": 2, "nodes": 2}})[("InferencePool", "big")]
    # The leaders hold the API server; the workers answer nothing on the vLLM port.
    assert pool["spec"]["selector"]["matchLabels"] == {"qwenfleet.io/inference": "big", "qwenfleet.io/role": "leader"}


def test_the_picker_runs_upstream_flags_and_reads_its_config_file() -> None:
    dep = children({"routing": {"endpointPicker": {"image": "example.com/epp:v1", "cpu": "2", "memory": "3Gi"}}})[
        ("Deployment", "big-epp")]
    assert dep["spec"]["replicas"] == 1 and dep["spec"]["strategy"] == {"type": "Recreate"}
    assert dep["spec"]["selector"] == {"matchLabels": {"qwenfleet.io/endpoint-picker": "big"}}
    pod = dep["spec"]["template"]
    # Never the fleet's pod label: the fleet's Service, PDB and pool must not select the picker.
    assert "qwenfleet.io/inference" not in pod["metadata"]["labels"]
    assert pod["spec"]["serviceAccountName"] == "big-epp"
    (container,) = pod["spec"]["containers"]
    assert container["image"] == "example.com/epp:v1"
    assert container["args"] == [
        "--pool-name", "big", "--pool-namespace", "llm", "--pool-group", "inference.networking.k8s.io",
        "--config-file", "/config/config.yaml", "--grpc-port", "9002", "--grpc-health-port", "9003",
        "--metrics-port", "9090", "--zap-encoder", "json", "--tracing=false", "--metrics-endpoint-auth=false",
        "--enable-pprof=false"]
    assert container["readinessProbe"]["grpc"] == {"port": 9003, "service": "inference-extension"}
    assert container["resources"] == {"requests": {"cpu": "2", "memory": "3Gi"}, "limits": {"memory": "3Gi"}}
    assert container["volumeMounts"] == [{"name": "config", "mountPath": "/config", "readOnly": True}]
    assert pod["spec"]["volumes"] == [{"name": "config", "configMap": {"name": "big-epp"}}]


def test_the_default_picker_image_is_upstreams_pinned_release() -> None:
    dep = children({"routing": {}})[("Deployment", "big-epp")]
    image = dep["spec"]["template"]["spec"]["containers"][0]["image"]
    assert image == "registry.k8s.io/gateway-api-inference-extension/epp:v1.5.0"


def test_the_picker_service_exposes_ext_proc_and_metrics() -> None:
    svc = children({"routing": {}})[("Service", "big-epp")]
    assert svc["spec"] == {"type": "ClusterIP", "selector": {"qwenfleet.io/endpoint-picker": "big"},
                           "ports": [{"name": "grpc-ext-proc", "port": 9002, "targetPort": 9002, "protocol": "TCP"},
                                     {"name": "http-metrics", "port": 9090, "targetPort": 9090, "protocol": "TCP"}]}


def test_the_picker_config_has_the_three_scorers_with_the_default_weights() -> None:
    cm = children({"routing": {}})[("ConfigMap", "big-epp")]
    config = yaml.safe_load(cm["data"]["config.yaml"])
    assert config == {
        "apiVersion": "inference.networking.x-k8s.io/v1alpha1",
        "kind": "EndpointPickerConfig",
        "plugins": [{"type": "queue-scorer"}, {"type": "kv-cache-utilization-scorer"}, {"type": "prefix-cache-scorer"},
                    {"type": "max-score-picker", "parameters": {"maxNumOfEndpoints": 3}},
                    {"type": "metrics-data-source", "parameters": {"scheme": "http", "path": "/metrics"}},
                    {"type": "core-metrics-extractor"}],
        "schedulingProfiles": [{"name": "default", "plugins": [
            {"pluginRef": "queue-scorer", "weight": 2}, {"pluginRef": "kv-cache-utilization-scorer", "weight": 2},
            {"pluginRef": "prefix-cache-scorer", "weight": 3}, {"pluginRef": "max-score-picker"}]}],
        "dataLayer": {"sources": [{"pluginRef": "metrics-data-source",
                                   "extractors": [{"pluginRef": "core-metrics-extractor"}]}]},
    }


def test_a_scorer_of_weight_zero_is_left_out() -> None:
    cm = children({"routing": {"scorers": {"queueDepth": 5, "kvCacheUsage": 0, "prefixCache": 1}}})[
        ("ConfigMap", "big-epp")]
    config = yaml.safe_load(cm["data"]["config.yaml"])
    assert [p["type"] for p in config["plugins"]] == ["queue-scorer", "prefix-cache-scorer", "max-score-picker",
                                                      "metrics-data-source", "core-metrics-extractor"]
    assert config["schedulingProfiles"][0]["plugins"] == [{"pluginRef": "queue-scorer", "weight": 5},
                                                          {"pluginRef": "prefix-cache-scorer", "weight": 1},
                                                          {"pluginRef": "max-score-picker"}]


@pytest.mark.parametrize("replicas", [1, 2, 8])
def test_the_picker_names_fallback_endpoints_whatever_the_replica_count(replicas: int) -> None:
    """The max-score picker names up to three endpoints, best first (v1.5.0's default is one): the rest are
    the fallbacks a gateway with a connect-failure retry goes down (docs/routing.md). Fixed, not the replica
    count: an autoscaler changes that without a spec change, and the picker gives min(3, candidates)."""
    cm = children({"replicas": replicas, "routing": {}})[("ConfigMap", "big-epp")]
    config = yaml.safe_load(cm["data"]["config.yaml"])
    [picker] = [p for p in config["plugins"] if p["type"] == "max-score-picker"]
    assert picker == {"type": "max-score-picker", "parameters": {"maxNumOfEndpoints": 3}}
    [profile] = config["schedulingProfiles"]
    assert profile["plugins"][-1] == {"pluginRef": "max-score-picker"}  # in the profile, not only registered


def test_the_picker_role_is_upstreams_read_only_rules_in_the_fleets_namespace() -> None:
    out = children({"routing": {}})
    reads = ["get", "watch", "list"]
    assert out[("Role", "big-epp")]["rules"] == [
        {"apiGroups": [""], "resources": ["pods"], "verbs": reads},
        {"apiGroups": ["inference.networking.k8s.io"], "resources": ["inferencepools"], "verbs": reads},
        {"apiGroups": ["inference.networking.x-k8s.io"], "resources": ["inferenceobjectives"], "verbs": reads},
        {"apiGroups": ["inference.networking.x-k8s.io"], "resources": ["inferencemodelrewrites"], "verbs": reads}]
    binding = out[("RoleBinding", "big-epp")]
    assert binding["roleRef"] == {"apiGroup": "rbac.authorization.k8s.io", "kind": "Role", "name": "big-epp"}
    assert binding["subjects"] == [{"kind": "ServiceAccount", "name": "big-epp", "namespace": "llm"}]


def test_the_http_route_sends_every_path_to_the_pool() -> None:
    route = children({"routing": ROUTING})[("HTTPRoute", "big")]
    assert route["apiVersion"] == "gateway.networking.k8s.io/v1"
    assert route["spec"] == {
        "parentRefs": [{"group": "gateway.networking.k8s.io", "kind": "Gateway", "name": "inference-gateway",
                        "namespace": "gateways", "sectionName": "http"}],
        "rules": [{"matches": [{"path": {"type": "PathPrefix", "value": "/"}}],
                   "backendRefs": [{"group": "inference.networking.k8s.io", "kind": "InferencePool", "name": "big"}],
                   "timeouts": {"request": "600s"}}],
    }


def test_without_a_gateway_there_is_no_route_and_the_parent_defaults_to_the_fleets_namespace() -> None:
    assert ("HTTPRoute", "big") not in children({"routing": {}})
    route = children({"routing": {"gateway": {"name": "gw", "requestTimeout": "1h"}}})[("HTTPRoute", "big")]
    assert route["spec"]["parentRefs"] == [{"group": "gateway.networking.k8s.io", "kind": "Gateway", "name": "gw"}]
    assert route["spec"]["rules"][0]["timeouts"] == {"request": "1h"}


# The Inference Extension serves a higher priority first; vLLM runs a lower value first. Written by hand.
@pytest.mark.parametrize(("objective", "vllm"), [(10, -10), (-10, 10), (0, 0), (1, -1), (1_000_000, -1_000_000)])
def test_vllm_priority_runs_the_other_way(objective: int, vllm: int) -> None:
    assert vllm_priority(objective) == vllm


def test_priority_classes_become_objectives_with_their_vllm_priority() -> None:
    out = children({"routing": ROUTING})
    interactive = out[("InferenceObjective", "big-interactive")]
    assert interactive["apiVersion"] == "inference.networking.x-k8s.io/v1alpha2"
    assert interactive["spec"] == {"priority": 10, "poolRef": {"group": "inference.networking.k8s.io",
                                                               "kind": "InferencePool", "name": "big"}}
    assert interactive["metadata"]["annotations"]["qwenfleet.io/vllm-priority"] == "-10"
    batch = out[("InferenceObjective", "big-batch")]
    assert batch["spec"]["priority"] == -10
    assert batch["metadata"]["annotations"]["qwenfleet.io/vllm-priority"] == "10"


def test_priority_classes_turn_on_vllms_priority_scheduling() -> None:
    cr = _cr({"routing": ROUTING})
    args = engine_args(cr, make_plan(cr, OperatorConfig()))
    assert args[args.index("--scheduling-policy") + 1] == "priority"
    no_classes = _cr({"routing": {}})
    assert "--scheduling-policy" not in engine_args(no_classes, make_plan(no_classes, OperatorConfig()))
    explicit = _cr({"routing": ROUTING, "engine": {"schedulingPolicy": "priority"}})
    args = engine_args(explicit, make_plan(explicit, OperatorConfig()))
    assert args.count("--scheduling-policy") == 1
