"""The Service: the OpenAI-compatible API and /metrics on one named port."""

from __future__ import annotations

from typing import Any

from qwen_fleet.api import QwenInference
from qwen_fleet.render.common import HTTP_PORT_NAME, common_labels, metadata
from qwen_fleet.render.leaderworkerset import leader_selector


def render_service(cr: QwenInference) -> dict[str, Any]:
    svc = cr.spec.service
    return {
        "apiVersion": "v1",
        "kind": "Service",
        "metadata": metadata(cr, labels=common_labels(cr), annotations=svc.annotations or None),
        "spec": {
            "type": svc.type,
            "selector": leader_selector(cr),  # multi-node: leaders hold the API server
            "ports": [{"name": HTTP_PORT_NAME, "port": svc.port, "targetPort": HTTP_PORT_NAME,
                       "protocol": "TCP", "appProtocol": "http"}],
        },
    }
