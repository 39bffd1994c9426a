"""Deletions the operator's watches miss (issue 38 item 4: 410 Gone and a delete missed during a relist).

While the apiserver is down (etcd keeps running), a QwenInference and another fleet's Service are deleted from etcd
directly, and etcd is compacted past them: no watch can resume from before, every one of the operator's watches
gets 410 Gone when the apiserver is back, and kopf lists each kind again. The deleted objects are simply not in
the new listings. kopf 1.45 says nothing about them (no DELETED event, its index keeps them): before the fix,
the deleted fleet's key stayed in the operator's view, and once the garbage collector removed its children, the
operator made them again (with an ownerReference to a uid that no longer exists), which the collector removed
again: a create / garbage-collect loop; and the Service, still in the index, was never restored.

Afterwards: the kept fleet has exactly its desired children (its Service back, a new one) and is Ready; the
deleted fleet has none, and the operator wrote nothing for it after the apiserver came back.
"""

from __future__ import annotations

import base64
import json
import time
import urllib.request
from typing import Any

import pytest

from qwen_fleet_dev.cluster import OPERATOR_USER, LocalCluster
from tests.chaos.conftest import RESYNC_SECONDS
from tests.chaos.helpers import (
    QWI_PATH,
    TRACEBACK,
    LogWindow,
    actual_children,
    admin,
    condition,
    desired_children,
    get_or_none,
    qwi,
    record,
    small_spec,
)
from tests.support.kube import wait_until
from tests.support.operator_process import OperatorProcess, audit_writes

pytestmark = [pytest.mark.cluster, pytest.mark.slow]


def _etcd(cluster: LocalCluster, call: str, body: dict[str, Any]) -> dict[str, Any]:
    """etcd's v3 JSON gateway (keys base64): the apiserver is not in the way."""
    req = urllib.request.Request(f"http://127.0.0.1:{cluster.ports.etcd_client}/v3/{call}",
                                 data=json.dumps(body).encode(), method="POST",
                                 headers={"Content-Type": "application/json"})
    with urllib.request.urlopen(req, timeout=30) as resp:
        return dict(json.loads(resp.read()))


def _delete_key(cluster: LocalCluster, key: str) -> tuple[int, int]:
    """(objects deleted, etcd revision after)."""
    done = _etcd(cluster, "kv/deleterange", {"key": base64.b64encode(key.encode()).decode()})
    return int(done.get("deleted") or 0), int(done["header"]["revision"])


def _ready(cluster: LocalCluster, ns: str, name: str) -> bool:
    cr = get_or_none(admin(cluster), f"{QWI_PATH.format(ns=ns)}/{name}")
    ready = condition(cr, "Ready")
    return cr is not None and ready.get("status") == "True" and \
        (cr.get("status") or {}).get("observedGeneration") == cr["metadata"]["generation"]


def test_deletions_missed_while_the_watches_were_down_are_seen(
        chaos_cluster: LocalCluster, chaos_operator: OperatorProcess, chaos_namespace: str) -> None:
    cluster, rest, ns = chaos_cluster, admin(chaos_cluster), chaos_namespace
    for name in ("kept", "gone"):
        rest.request("POST", QWI_PATH.format(ns=ns), qwi(name, small_spec(64)))
    wait_until("both Ready", lambda: _ready(cluster, ns, "kept") and _ready(cluster, ns, "gone"), 120)
    old_service_uid = rest.get(f"/api/v1/namespaces/{ns}/services/kept")["metadata"]["uid"]
    window = LogWindow(chaos_operator.log)

    with cluster.outage("kube-apiserver"):
        gone_cr, _ = _delete_key(cluster, f"/registry/qwenfleet.io/qweninferences/{ns}/gone")
        gone_svc, revision = _delete_key(cluster, f"/registry/services/specs/{ns}/kept")
        _etcd(cluster, "kv/compaction", {"revision": revision, "physical": True})
    back, since = time.monotonic(), time.time()
    assert (gone_cr, gone_svc) == (1, 1), "the keys were not where the apiserver keeps them"

    # The kept fleet's Service is made again (a new object); the gone fleet's children go (garbage collection).
    def service_restored() -> bool:
        svc = get_or_none(rest, f"/api/v1/namespaces/{ns}/services/kept")
        return svc is not None and svc["metadata"]["uid"] != old_service_uid

    wait_until("the kept fleet's Service restored", service_restored, 120, interval=0.5)
    restored = time.monotonic() - back
    kept = rest.get(f"{QWI_PATH.format(ns=ns)}/kept")
    wait_until("exactly the kept fleet's children", lambda: set(actual_children(rest, ns)) == set(
        desired_children(kept)), 120, interval=1)
    # Long enough for a loop to show: the resync comes twice, and the collector acts within seconds.
    time.sleep(2 * RESYNC_SECONDS + 5)
    children = set(actual_children(rest, ns))
    writes_for_gone = [w for w in audit_writes(cluster, since, OPERATOR_USER)
                       if (w.get("objectRef") or {}).get("namespace") == ns
                       and (w.get("objectRef") or {}).get("name") == "gone"]
    log = window.text()
    record("relist-missed-deletes", {
        "service_restored_seconds_after_apiserver_back": round(restored, 1),
        "children": sorted(f"{k}/{n}" for k, n in children), "operator_writes_for_gone": len(writes_for_gone),
        "relist_deletions_logged": log.count("deleted while the watch was down")})
    assert children == set(desired_children(kept)), children
    assert writes_for_gone == [], [(w["verb"], w["requestURI"]) for w in writes_for_gone]
    wait_until("kept Ready", lambda: _ready(cluster, ns, "kept"), 120)
    assert TRACEBACK not in log, log[-4000:]
