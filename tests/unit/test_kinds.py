"""The child-kind registry (reconcile/kinds.py) and the capabilities that gate its optional kinds.

The registry is the one list of child kinds; ``render.Capabilities`` is the typed record of which optional APIs a
cluster serves. These tests fail when a kind or a capability is added in one place only, and when an optional
kind could be applied on a cluster that does not serve it. Expected groups and pairings are written by hand.
"""

from __future__ import annotations

import copy
import dataclasses
from pathlib import Path
from typing import Any

import pytest
import yaml

from qwen_fleet.api import QwenInference
from qwen_fleet.config import OperatorConfig
from qwen_fleet.plan import make_plan
from qwen_fleet.reconcile.kinds import (
    CHILD_KIND,
    CHILD_KINDS,
    OPTIONAL_KINDS,
    capabilities_of,
    served_groups,
    serves,
)
from qwen_fleet.reconcile.workload import missing_capability
from qwen_fleet.render import ALL_CAPABILITIES, Capabilities, render_children

ROOT = Path(__file__).resolve().parents[2]
CAPABILITY_FIELDS = {f.name for f in dataclasses.fields(Capabilities)}

BASE: dict[str, Any] = {"model": {"name": "Qwen/Qwen3-4B-Instruct-2507", "servedModelName": "qwen"},
                        "gpu": {"product": "NVIDIA-A10G"}}
# Specs that between them ask for every optional kind (the examples do not use Envoy Gateway or API keys).
EXTRA_SPECS: list[dict[str, Any]] = [
    {**BASE, "routing": {"gateway": {"name": "front", "implementation": "EnvoyGateway"},
                         "auth": {"apiKeys": {"secretRefs": [{"name": "keys"}]}},
                         "priorityClasses": [{"name": "chat", "priority": 10}]}},
    {**BASE, "monitoring": {"serviceMonitor": True, "prometheusRule": True}},
]


def _specs() -> list[tuple[str, dict[str, Any]]]:
    out = [(p.stem, yaml.safe_load(p.read_text())["spec"]) for p in sorted((ROOT / "examples").glob("*.yaml"))]
    return out + [(f"extra-{i}", spec) for i, spec in enumerate(EXTRA_SPECS)]


def _cr(spec: dict[str, Any]) -> QwenInference:
    return QwenInference.model_validate({"metadata": {"name": "f", "namespace": "llm", "uid": "u-f"},
                                         "spec": copy.deepcopy(spec)})


def test_every_capability_gates_a_kind_and_every_optional_kind_names_a_capability() -> None:
    named = {k.capability for k in CHILD_KINDS if k.capability is not None}
    assert named == CAPABILITY_FIELDS
    assert {k.kind for k in OPTIONAL_KINDS} == {k.kind for k in CHILD_KINDS if k.optional}
    assert all(not k.optional for k in CHILD_KINDS if k.kind in ("Deployment", "Service", "ConfigMap", "Job"))


def test_child_kinds_are_unique_by_kind_and_by_resource() -> None:
    assert len(CHILD_KIND) == len(CHILD_KINDS)
    assert len({(k.group, k.plural) for k in CHILD_KINDS}) == len(CHILD_KINDS)


def test_capabilities_of_what_the_cluster_serves() -> None:
    assert capabilities_of([]) == Capabilities()
    assert capabilities_of([k.kind for k in OPTIONAL_KINDS]) == ALL_CAPABILITIES
    assert Capabilities(**dict.fromkeys(CAPABILITY_FIELDS, True)) == ALL_CAPABILITIES
    assert capabilities_of(["ServiceMonitor"]) == Capabilities(service_monitor=True)
    assert capabilities_of(["LeaderWorkerSet", "ScaledObject"]) == Capabilities(leader_worker_set=True, keda=True)
    assert capabilities_of(["InterceptorRoute"]) == Capabilities(keda_http=True)
    # Envoy Gateway's two policy kinds go together: one of them alone is not enough.
    assert capabilities_of(["EnvoyExtensionPolicy"]) == Capabilities()
    assert capabilities_of(["EnvoyExtensionPolicy", "BackendTrafficPolicy"]) == Capabilities(envoy_gateway=True)
    assert capabilities_of(["SecurityPolicy"]) == Capabilities(security_policy=True)
    assert capabilities_of(["Deployment", "Service"]) == Capabilities()  # core kinds gate nothing


def test_served_groups_are_the_groups_kopf_is_told_to_watch() -> None:
    assert served_groups(Capabilities()) == set()
    assert served_groups(Capabilities(service_monitor=True)) == {"monitoring.coreos.com"}
    assert served_groups(Capabilities(envoy_gateway=True)) == {"gateway.envoyproxy.io"}
    assert served_groups(Capabilities(security_policy=True)) == {"gateway.envoyproxy.io"}
    assert served_groups(ALL_CAPABILITIES) == {
        "monitoring.coreos.com", "leaderworkerset.x-k8s.io", "keda.sh", "http.keda.sh",
        "inference.networking.k8s.io", "inference.networking.x-k8s.io", "gateway.networking.k8s.io",
        "gateway.envoyproxy.io"}


def test_serves_core_kinds_always_and_optional_kinds_by_capability() -> None:
    assert serves(Capabilities(), CHILD_KIND["Deployment"])
    assert not serves(Capabilities(), CHILD_KIND["HTTPRoute"])
    assert serves(Capabilities(http_route=True), CHILD_KIND["HTTPRoute"])
    assert not serves(Capabilities(http_route=True), CHILD_KIND["InferencePool"])


def test_the_specs_here_ask_for_every_optional_kind() -> None:
    rendered = set()
    for _, spec in _specs():
        cr = _cr(spec)
        rendered |= {c["kind"] for c in render_children(cr, make_plan(cr, OperatorConfig()), ALL_CAPABILITIES)}
    assert {k.kind for k in OPTIONAL_KINDS} <= rendered


@pytest.mark.parametrize(("name", "spec"), _specs(), ids=[n for n, _ in _specs()])
def test_a_kind_the_cluster_does_not_serve_is_never_applied(name: str, spec: dict[str, Any]) -> None:
    """Every rendered kind is in the registry, at the registry's apiVersion; and without the capability of an
    optional kind the spec renders, either the spec is Stalled (nothing applied) or that kind is left out."""
    cr = _cr(spec)
    plan = make_plan(cr, OperatorConfig())
    rendered = render_children(cr, plan, ALL_CAPABILITIES)
    kinds = {c["kind"] for c in rendered}
    assert kinds <= set(CHILD_KIND), name
    # The renderers write each kind's apiVersion themselves: it must be the one the registry watches.
    assert {(c["kind"], c["apiVersion"]) for c in rendered} == {(k, CHILD_KIND[k].api_version) for k in kinds}, name
    for kind in sorted(kinds):
        child = CHILD_KIND[kind]
        if child.capability is None:
            continue
        without = dataclasses.replace(ALL_CAPABILITIES, **{child.capability: False})
        stalled = missing_capability(plan, without)
        left_out = kind not in {c["kind"] for c in render_children(cr, plan, without)}
        assert (stalled is not None and stalled.kind == "stalled") or left_out, (name, kind)
