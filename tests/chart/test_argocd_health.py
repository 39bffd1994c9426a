"""docs/argocd-health.lua on hand-made objects: the edge cases real objects rarely show (no status yet, stale
conditions, missing fields). tests/chart/test_chart_e2e.py runs the same script on real objects.
"""

from __future__ import annotations

from typing import Any

import pytest

from tests.chart.support import argocd_health


def qwi(generation: int, observed: int | None, *conditions: tuple[str, str, str, str, int | None]) -> dict[str, Any]:
    status: dict[str, Any] = {"conditions": [
        {"type": t, "status": s, "reason": r, "message": m, "observedGeneration": g} for t, s, r, m, g in conditions]}
    if observed is not None:
        status["observedGeneration"] = observed
    return {"apiVersion": "qwenfleet.io/v1alpha1", "kind": "QwenInference",
            "metadata": {"name": "f", "namespace": "n", "generation": generation}, "status": status}


READY = ("Ready", "True", "Ready", "2/2 replicas ready", 3)
NOT_READY = ("Ready", "False", "PodsPending", "pod f-1 cannot be scheduled", 3)
STALLED = ("Stalled", "True", "WeightsDoNotFit", "470 GiB of weights on 24 GiB", 3)
NOT_STALLED = ("Stalled", "False", "Progressing", "", 3)

CASES = [
    ("no status yet", {"apiVersion": "qwenfleet.io/v1alpha1", "kind": "QwenInference",
                       "metadata": {"name": "f", "generation": 1}},
     "Progressing", "Waiting for the qwen-fleet operator to report status"),
    ("ready", qwi(3, 3, READY, NOT_STALLED), "Healthy", "Ready: 2/2 replicas ready"),
    ("pods pending", qwi(3, 3, NOT_READY, NOT_STALLED), "Progressing", "PodsPending: pod f-1 cannot be scheduled"),
    ("stalled", qwi(3, 3, ("Ready", "False", "WeightsDoNotFit", "x", 3), STALLED), "Degraded",
     "WeightsDoNotFit: 470 GiB of weights on 24 GiB"),
    ("a new generation not yet observed", qwi(4, 3, READY, NOT_STALLED), "Progressing",
     "Waiting for the operator to observe generation 4"),
    ("stalled on an old generation", qwi(4, 4, ("Ready", "False", "RollingOut", "0/1 updated", 4),
                                         ("Stalled", "True", "WeightsDoNotFit", "old", 3)),
     "Progressing", "RollingOut: 0/1 updated"),
    ("conditions without observedGeneration", qwi(2, 2, ("Ready", "True", "Ready", "", None)), "Healthy", "Ready"),
    ("no conditions", qwi(1, 1), "Progressing", "Waiting for the qwen-fleet operator to report status"),
]


@pytest.mark.parametrize(("obj", "status", "message"), [c[1:] for c in CASES], ids=[c[0] for c in CASES])
def test_health(obj: dict[str, Any], status: str, message: str) -> None:
    assert argocd_health(obj) == {"status": status, "message": message}
