"""The PodDisruptionBudget: node drains take at most one replica at a time.

For multi-node replicas it covers every pod of every group (leaders and workers carry the fleet's label): one
eviction recreates that whole group (RecreateGroupOnPodRestart), and its pods count as unavailable until it is
back, so no second group can be broken meanwhile; groups stay whole and at most one is down."""

from __future__ import annotations

from typing import Any

from qwen_fleet.api import QwenInference
from qwen_fleet.render.common import metadata, selector_labels


def render_pdb(cr: QwenInference) -> dict[str, Any]:
    return {
        "apiVersion": "policy/v1",
        "kind": "PodDisruptionBudget",
        "metadata": metadata(cr),
        "spec": {"maxUnavailable": 1, "selector": {"matchLabels": selector_labels(cr)},
                 # A replica still loading its model is not serving: let drains evict it.
                 "unhealthyPodEvictionPolicy": "AlwaysAllow"},
    }
