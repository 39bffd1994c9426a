"""Never adopt, change or delete an object the operator did not create (reconcile/ownership.py), and the
model-cache claim's retention: the pure decisions, and the two executors with recording stand-ins for the API
(a name held by a foreign object: Stalled naming it and its owner, an Event, and not one write to it)."""

from __future__ import annotations

import asyncio
import copy
import re
from typing import Any

import pytest
from pydantic import ValidationError

from qwen_fleet.api import QwenInference
from qwen_fleet.config import OperatorConfig
from qwen_fleet.plan import make_plan
from qwen_fleet.reconcile.batch import foreign_children
from qwen_fleet.reconcile.batch_controller import BatchController
from qwen_fleet.reconcile.controller import Controller
from qwen_fleet.reconcile.ownership import Foreign, held_message, owner_words
from qwen_fleet.reconcile.store import Store, pod_summary
from qwen_fleet.render import Capabilities, render_children
from tests.invalid_batch_specs import BATCH_BASE

FLEET_KEY = ("ns", "q")
SPEC: dict[str, Any] = {"model": {"name": "Qwen/Qwen3-4B-Instruct-2507"}, "gpu": {"product": "NVIDIA-H100-80GB-HBM3"}}


def _ref(api_version: str, kind: str, name: str, controller: bool = True) -> dict[str, Any]:
    return {"apiVersion": api_version, "kind": kind, "name": name, "uid": "o-1", "controller": controller}


@pytest.mark.parametrize(("refs", "words"), [
    ([], "no owner"),
    ([_ref("apps/v1", "Deployment", "web")], "Deployment/web"),
    ([_ref("v1", "ConfigMap", "first", controller=False), _ref("apps/v1", "ReplicaSet", "boss")], "ReplicaSet/boss"),
    ([_ref("v1", "ConfigMap", "only", controller=False)], "ConfigMap/only"),
])
def test_owner_words_name_the_controller_else_the_first_owner(refs: list[dict[str, Any]], words: str) -> None:
    assert owner_words({"metadata": {"ownerReferences": refs}}) == words


def test_the_held_message_names_each_object_and_owner_and_the_way_out() -> None:
    one = held_message((Foreign("Service", "q", "no owner"),), "QwenInference")
    assert one.startswith("Service/q (owner: no owner) exists and is not this QwenInference's")
    assert "does not adopt, change or delete" in one and "Delete or rename it" in one
    two = held_message((Foreign("Role", "a", "no owner"), Foreign("ConfigMap", "b", "Deployment/x")), "QwenBatch")
    assert two.startswith("Role/a (owner: no owner), ConfigMap/b (owner: Deployment/x) exist and are not")


BATCH_API = "qwenfleet.io/v1alpha1"
LABEL = "qwenfleet.io/batch"


@pytest.mark.parametrize(("found", "held"), [
    ({"kind": "ConfigMap", "metadata": {"name": "out"}}, ["ConfigMap/out (owner: no owner)"]),
    ({"kind": "ConfigMap", "metadata": {"name": "out", "labels": {LABEL: "sums"}}}, []),  # its own output
    ({"kind": "ConfigMap", "metadata": {"name": "out", "labels": {LABEL: "other"}}},
     ["ConfigMap/out (owner: no owner)"]),
    ({"kind": "ConfigMap", "metadata": {"name": "out", "labels": {LABEL: "sums"},
                                        "ownerReferences": [_ref("apps/v1", "Deployment", "web")]}},
     ["ConfigMap/out (owner: Deployment/web)"]),
    ({"kind": "Role", "metadata": {"name": "r", "ownerReferences": [_ref(BATCH_API, "QwenBatch", "sums")]}}, []),
    ({"kind": "Role", "metadata": {"name": "r", "ownerReferences": [_ref(BATCH_API, "QwenBatch", "other")]}},
     ["Role/r (owner: QwenBatch/other)"]),
    (None, []),
])
def test_a_batch_child_is_the_batchs_by_its_owner_or_its_output_label(found: dict[str, Any] | None,
                                                                       held: list[str]) -> None:
    assert [f.describe() for f in foreign_children("sums", BATCH_API, [found], LABEL)] == held


# --- the model-cache claim ----------------------------------------------------------------------------------

def _fleet(spec: dict[str, Any], name: str = "q") -> QwenInference:
    return QwenInference.model_validate({"metadata": {"name": name, "namespace": "ns", "uid": "u-1"}, "spec": spec})


@pytest.mark.parametrize(("cache", "stamped"), [({"size": "10Gi"}, "Retain"),
                                                ({"size": "10Gi", "retentionPolicy": {"whenRemoved": "Delete"}},
                                                 "Delete")])
def test_the_cache_claim_carries_its_policy(cache: dict[str, Any], stamped: str) -> None:
    cr = _fleet({**SPEC, "model": {**SPEC["model"], "cache": cache}})
    (claim,) = [c for c in render_children(cr, make_plan(cr, OperatorConfig()), Capabilities())
                if c["kind"] == "PersistentVolumeClaim"]
    assert claim["metadata"]["name"] == "q-model-cache"
    assert claim["metadata"]["annotations"]["qwenfleet.io/when-removed"] == stamped


def test_a_pvc_source_naming_the_operators_own_claim_is_refused() -> None:
    pvc = {"model": {**SPEC["model"], "source": {"pvc": {"claimName": "q-model-cache"}}}}
    with pytest.raises(ValidationError, match=re.escape("must not be <metadata.name>-model-cache")):
        _fleet({**SPEC, **pvc})
    _fleet({**SPEC, **pvc}, name="other")  # another fleet's cache claim is just a claim


def test_a_pod_summary_names_the_claims_it_mounts() -> None:
    pod = {"metadata": {"name": "p"}, "spec": {"volumes": [
        {"name": "a", "emptyDir": {}}, {"name": "b", "persistentVolumeClaim": {"claimName": "q-model-cache"}}]}}
    assert pod_summary(pod)["claims"] == ["q-model-cache"]
    assert "claims" not in pod_summary({"metadata": {"name": "p"}, "spec": {"volumes": [{"name": "a"}]}})


# --- the executors ------------------------------------------------------------------------------------------

class HoldingKube:
    """The API, holding some objects under child names: records every request."""

    def __init__(self, held: dict[tuple[str, str], dict[str, Any]]) -> None:
        self.held = held
        self.writes: list[str] = []
        self.patched: list[dict[str, Any]] = []

    async def find(self, api_version: str, kind: str, ns: str, name: str) -> dict[str, Any] | None:
        return copy.deepcopy(self.held.get((kind, name)))

    async def apply(self, obj: dict[str, Any], **_: Any) -> dict[str, Any]:
        self.writes.append(f"apply {obj['kind']}/{obj['metadata']['name']}")
        return {**copy.deepcopy(obj), "metadata": {**obj["metadata"], "resourceVersion": "1", "uid": "new"}}

    async def delete(self, api_version: str, kind: str, ns: str, name: str, uid: str | None) -> None:
        self.writes.append(f"delete {kind}/{name}")

    async def patch_status(self, api_version: str, kind: str, ns: str, name: str,
                           status: dict[str, Any]) -> dict[str, Any]:
        self.patched.append(status)
        return {"metadata": {"name": name, "namespace": ns, "resourceVersion": "2"}, "status": status}

    async def get(self, path: str) -> Any:
        return {"items": []}


def _stalled(status: dict[str, Any]) -> dict[str, Any]:
    return next(c for c in status["conditions"] if c["type"] == "Stalled")


def test_a_fleet_whose_service_name_is_held_writes_nothing_but_its_status() -> None:
    foreign = {"apiVersion": "v1", "kind": "Service", "metadata": {"name": "q", "namespace": "ns"},
               "spec": {"selector": {"app": "someone-else"}}}
    kube, events = HoldingKube({("Service", "q"): foreign}), []
    store = Store()
    fleet = {"apiVersion": BATCH_API, "kind": "QwenInference",
             "metadata": {"name": "q", "namespace": "ns", "uid": "u-1", "generation": 1}, "spec": copy.deepcopy(SPEC)}
    store.resources[FLEET_KEY] = copy.deepcopy(fleet)
    controller = Controller(kube, OperatorConfig(), store,  # type: ignore[arg-type]
                            emit=lambda _r, type_, reason, message: events.append((type_, reason, message)))
    result = asyncio.run(controller.reconcile(FLEET_KEY))
    assert result is not None and result.recheck is not None
    assert kube.writes == []
    stalled = _stalled(kube.patched[-1])
    assert (stalled["status"], stalled["reason"]) == ("True", "ForeignObject")
    assert stalled["message"].startswith("Service/q (owner: no owner) exists and is not this QwenInference's")
    assert ("Warning", "ForeignObject", stalled["message"]) in events
    assert foreign == kube.held[("Service", "q")]  # not even the stand-in's copy was touched

    del kube.held[("Service", "q")]  # the name is free: the fleet goes on
    store.resources[FLEET_KEY] = {**fleet, "status": kube.patched[-1]}  # as the watch brings it back
    result = asyncio.run(controller.reconcile(FLEET_KEY))
    assert result is not None and result.recheck is None
    assert kube.writes == ["apply Deployment/q", "apply Service/q"]


def test_a_batch_whose_output_names_someones_configmap_is_stalled_and_applies_nothing() -> None:
    spec = {**copy.deepcopy(BATCH_BASE), "output": {"configMap": {"name": "results"}}}
    theirs = {"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": "results", "namespace": "team"},
              "data": {"keep": "me"}}
    kube, events = HoldingKube({("ConfigMap", "results"): theirs}), []
    controller = BatchController(kube, OperatorConfig(), {("team", "qwen"): {"metadata": {"name": "qwen"}}}.get,  # type: ignore[arg-type]
                                 emit=lambda _o, type_, reason, _m: events.append((type_, reason)))
    controller.batches[("team", "sums")] = {"apiVersion": BATCH_API, "kind": "QwenBatch", "metadata": {
        "name": "sums", "namespace": "team", "uid": "u1", "generation": 1}, "spec": spec}
    asyncio.run(controller.reconcile(("team", "sums")))
    assert kube.writes == []
    assert kube.patched[-1]["state"] == "Stalled"
    stalled = _stalled(kube.patched[-1])
    assert stalled["reason"] == "ForeignObject" and "ConfigMap/results (owner: no owner)" in stalled["message"]
    assert events == [("Warning", "ForeignObject")]
