"""bench/watch.py's Recorder: what a watch event counts for (the fleet bench's 'all Available')."""

from __future__ import annotations

from typing import Any

from bench.watch import Recorder, deployment_available, exists


def _available(name: str) -> dict[str, Any]:
    return {"metadata": {"namespace": "bench", "name": name, "generation": 1, "resourceVersion": "7"},
            "spec": {"replicas": 1},
            "status": {"observedGeneration": 1, "updatedReplicas": 1, "availableReplicas": 1, "replicas": 1}}


def test_a_bookmark_is_no_object_and_only_moves_the_resource_version() -> None:
    rec = Recorder(None, "/apis/apps/v1/namespaces/bench/deployments",  # type: ignore[arg-type]
                   {"created": exists, "available": deployment_available})
    # What kube-apiserver v1.36 sends with allowWatchBookmarks: an object of the kind with only a resourceVersion
    # (and, at the end of the initial events, an annotation); the fleet smoke saw it counted as a 21st of 20.
    bookmark = {"type": "BOOKMARK", "object": {"kind": "Deployment", "apiVersion": "apps/v1",
                                               "metadata": {"resourceVersion": "350"}, "spec": {}, "status": {}}}
    assert rec._handle(bookmark, 1.0) == "350"
    assert rec._handle({"type": "ADDED", "object": _available("a")}, 2.0) == "7"
    assert rec.count("created") == 1 and rec.count("available") == 1
    assert set(rec.first["available"]) == {("bench", "a")}
