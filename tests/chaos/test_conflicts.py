"""Conflicts with other field managers on the operator's children. Fields the operator does not own (an
annotation and a label someone else sets on the Deployment; the replica count under autoscaling) are left
alone across resync periods and across an apply of the operator's own; fields it owns (container args, a
label it sets), taken over by another manager with a forced server-side apply, are taken back.
"""

from __future__ import annotations

import json
import time
import urllib.parse
from typing import Any

import pytest

from qwen_fleet.config import FIELD_MANAGER
from qwen_fleet_dev.cluster import LocalCluster
from qwen_fleet_dev.rest import Rest
from tests.chaos.conftest import RESYNC_SECONDS
from tests.chaos.helpers import (
    QWI_PATH,
    admin,
    condition,
    container_args,
    desired_children,
    get_or_none,
    qwi,
    record,
    small_spec,
)
from tests.support.kube import wait_until
from tests.support.operator_process import OperatorProcess, audit_writes

pytestmark = [pytest.mark.cluster, pytest.mark.slow]

FOREIGN_ANNOTATION = ("sre.example.com/owner", "team-a")
FOREIGN_LABEL = ("sre.example.com/tier", "gold")
OWNED_LABEL = "app.kubernetes.io/part-of"


def server_side_apply(rest: Rest, path: str, body: dict[str, Any], manager: str, force: bool = False) -> None:
    query = urllib.parse.urlencode({"fieldManager": manager, "force": str(force).lower()})
    rest.request("PATCH", f"{path}?{query}", body, content_type="application/apply-patch+yaml")


def _deployment_path(ns: str, name: str) -> str:
    return f"/apis/apps/v1/namespaces/{ns}/deployments/{name}"


def _managed(dep: dict[str, Any], manager: str) -> str:
    """The fields ``manager`` owns on the object, as JSON text (for `f:...` membership checks)."""
    return json.dumps([m.get("fieldsV1") for m in dep["metadata"].get("managedFields") or []
                       if m.get("manager") == manager])


def _ready(rest: Rest, ns: str, name: str) -> bool:
    cr = get_or_none(rest, f"{QWI_PATH.format(ns=ns)}/{name}")
    gen = (cr or {}).get("metadata", {}).get("generation")
    ready = condition(cr, "Ready")
    return ready.get("status") == "True" and ready.get("observedGeneration") == gen


def _deployment_writes(cluster: LocalCluster, since: float, ns: str) -> list[str]:
    return [f"{w['verb']} {w['objectRef'].get('name')}" for w in audit_writes(cluster, since)
            if (w.get("objectRef") or {}).get("resource") == "deployments"
            and w["objectRef"].get("namespace") == ns]


def test_hands_off_foreign_fields_and_owned_fields_restored(chaos_cluster: LocalCluster,
                                                             chaos_operator: OperatorProcess,
                                                             chaos_namespace: str) -> None:
    rest, ns = admin(chaos_cluster), chaos_namespace
    auto = small_spec(64) | {"autoscaling": {"enabled": True, "minReplicas": 1, "maxReplicas": 4}}
    rest.request("POST", QWI_PATH.format(ns=ns), qwi("held", small_spec(64)))
    rest.request("POST", QWI_PATH.format(ns=ns), qwi("auto", auto))
    for name in ("held", "auto"):
        wait_until(f"{name} Ready", lambda n=name: _ready(rest, ns, n), 120)  # type: ignore[misc]

    # 1. Someone else's fields: an annotation and a label on one Deployment, the replica count of the
    #    autoscaled one (as an HPA or a capacity tool would set it). Over more than a resync period the
    #    operator must make no write to either Deployment.
    since = time.time()
    server_side_apply(rest, _deployment_path(ns, "held"), {
        "apiVersion": "apps/v1", "kind": "Deployment", "metadata": {
            "name": "held", "annotations": dict([FOREIGN_ANNOTATION]), "labels": dict([FOREIGN_LABEL])}},
        manager="sre-tools")
    server_side_apply(rest, _deployment_path(ns, "auto"), {
        "apiVersion": "apps/v1", "kind": "Deployment", "metadata": {"name": "auto"}, "spec": {"replicas": 3}},
        manager="capacity-tool", force=True)
    time.sleep(RESYNC_SECONDS * 1.5)
    quiet_writes = _deployment_writes(chaos_cluster, since, ns)

    # 2. An apply of the operator's own (a spec change on both) must not take those fields either.
    since_change = time.time()
    for name in ("held", "auto"):
        rest.request("PATCH", f"{QWI_PATH.format(ns=ns)}/{name}", {"spec": {"engine": {"maxNumSeqs": 96}}},
                     content_type="application/merge-patch+json")
    for name in ("held", "auto"):
        wait_until(f"{name} rolled to maxNumSeqs 96", lambda n=name: "96" in container_args(  # type: ignore[misc]
            rest.get(_deployment_path(ns, n))) and _ready(rest, ns, n), 120)
    change_writes = _deployment_writes(chaos_cluster, since_change, ns)
    held, autoscaled = rest.get(_deployment_path(ns, "held")), rest.get(_deployment_path(ns, "auto"))

    # 3. Fields the operator owns, taken over by force by another manager: taken back.
    desired = desired_children(rest.get(f"{QWI_PATH.format(ns=ns)}/held"))[("Deployment", "held")]
    since_intrusion = time.time()
    intruded = time.monotonic()
    server_side_apply(rest, _deployment_path(ns, "held"), {
        "apiVersion": "apps/v1", "kind": "Deployment",
        "metadata": {"name": "held", "labels": {OWNED_LABEL: "something-else"}},
        "spec": {"template": {"spec": {"containers": [{"name": "vllm", "args": ["--model", "evil"]}]}}}},
        manager="intruder", force=True)
    restored = wait_until("owned fields restored", lambda: (d := rest.get(_deployment_path(ns, "held")))
                          and container_args(d) == container_args(desired)
                          and d["metadata"]["labels"][OWNED_LABEL] == "qwen-fleet" and d, 60, interval=0.2)
    restore_s = time.monotonic() - intruded
    time.sleep(RESYNC_SECONDS * 1.5)
    after = rest.get(_deployment_path(ns, "held"))
    intrusion_writes = _deployment_writes(chaos_cluster, since_intrusion, ns)

    record("conflicts", {"operator_deployment_writes_foreign_edits": quiet_writes,
                         "operator_deployment_writes_spec_change": change_writes,
                         "owned_fields_restored_seconds": round(restore_s, 2),
                         "operator_deployment_writes_after_intrusion": intrusion_writes})
    assert quiet_writes == [], "the operator wrote to a Deployment that only someone else changed"
    assert sorted(set(change_writes)) == ["patch auto", "patch held"]
    assert len(change_writes) <= 4, change_writes
    assert held["metadata"]["annotations"][FOREIGN_ANNOTATION[0]] == FOREIGN_ANNOTATION[1]
    assert held["metadata"]["labels"][FOREIGN_LABEL[0]] == FOREIGN_LABEL[1]
    assert "sre.example.com/owner" in _managed(held, "sre-tools")
    assert autoscaled["spec"]["replicas"] == 3
    assert "f:replicas" not in _managed(autoscaled, FIELD_MANAGER)
    assert "f:replicas" in _managed(autoscaled, "capacity-tool")
    # Taken back, and taken back once: no tug of war with the intruder, whose other claims stay.
    assert "f:args" in _managed(restored, FIELD_MANAGER)
    assert "f:args" not in _managed(restored, "intruder")
    assert container_args(after) == container_args(desired)
    assert after["metadata"]["annotations"][FOREIGN_ANNOTATION[0]] == FOREIGN_ANNOTATION[1]
    assert intrusion_writes == ["patch held"], intrusion_writes
