"""Names, labels and owner references shared by every child object."""

from __future__ import annotations

from typing import Any

from qwen_fleet import versions
from qwen_fleet.api import API_VERSION, KIND, QwenInference
from qwen_fleet.config import MANAGED_BY
from qwen_fleet.group import GROUP

INSTANCE_LABEL = f"{GROUP}/inference"  # selects a fleet's pods; also how children find their owner
MANAGED_BY_LABEL = "app.kubernetes.io/managed-by"
HTTP_PORT_NAME = "http"
CONTAINER_NAME = "vllm"


def selector_labels(cr: QwenInference) -> dict[str, str]:
    """Immutable pod selector: our own label, so an unrelated app named alike can never match."""
    return {INSTANCE_LABEL: cr.name}


def selector_string(cr: QwenInference) -> str:
    return ",".join(f"{k}={v}" for k, v in selector_labels(cr).items())


def common_labels(cr: QwenInference) -> dict[str, str]:
    labels = {
        "app.kubernetes.io/name": "vllm",
        "app.kubernetes.io/instance": cr.name,
        "app.kubernetes.io/component": "inference-server",
        "app.kubernetes.io/part-of": "qwen-fleet",
        MANAGED_BY_LABEL: MANAGED_BY,
    }
    labels.update(selector_labels(cr))
    return labels


def pod_labels(cr: QwenInference, image: str) -> dict[str, str]:
    labels = common_labels(cr)
    tag = image.rsplit(":", 1)[-1] if ":" in image.rsplit("/", 1)[-1] else versions.VLLM
    if len(tag) <= 63 and tag.replace(".", "").replace("-", "").replace("_", "").isalnum():
        labels["app.kubernetes.io/version"] = tag
    return labels


def owner_reference(cr: QwenInference) -> dict[str, Any] | None:
    uid = cr.metadata.get("uid")
    if not uid:  # offline render: no owner exists yet
        return None
    return {"apiVersion": API_VERSION, "kind": KIND, "name": cr.name, "uid": uid, "controller": True,
            "blockOwnerDeletion": True}


def metadata(cr: QwenInference, name: str | None = None, labels: dict[str, str] | None = None,
             annotations: dict[str, str] | None = None) -> dict[str, Any]:
    meta: dict[str, Any] = {"name": name or cr.name, "namespace": cr.namespace,
                            "labels": labels or common_labels(cr)}
    if annotations:
        meta["annotations"] = dict(annotations)
    owner = owner_reference(cr)
    if owner:
        meta["ownerReferences"] = [owner]
    return meta


def endpoint_url(cr: QwenInference) -> str:
    """The fleet's own Service (render/scale_to_zero.py client_endpoint says where clients go)."""
    return f"http://{cr.name}.{cr.namespace}.svc:{cr.spec.service.port}/v1"


def number(value: float) -> str:
    """Flag and quantity text for a number: 0.9 -> '0.9', 8.0 -> '8'."""
    return f"{value:g}" if abs(value) < 1e15 else str(int(value))
