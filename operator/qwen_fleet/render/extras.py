"""Small children: the NCCL preflight script as a ConfigMap, and the model-cache claim."""

from __future__ import annotations

from typing import Any

from qwen_fleet.api import QwenInference
from qwen_fleet.group import GROUP
from qwen_fleet.preflight.report import script_source
from qwen_fleet.render.common import metadata
from qwen_fleet.render.deployment import PREFLIGHT_SCRIPT, model_cache_claim_name, preflight_config_map_name

# model.cache.retentionPolicy.whenRemoved, on the claim itself: when model.cache leaves the spec, the policy leaves
# with it, so the operator reads it here (reconcile/changes.py). No annotation (claims made before it) is Retain.
CACHE_RETENTION_ANNOTATION = f"{GROUP}/when-removed"


def render_preflight_config_map(cr: QwenInference) -> dict[str, Any]:
    return {
        "apiVersion": "v1",
        "kind": "ConfigMap",
        "metadata": metadata(cr, name=preflight_config_map_name(cr)),
        "data": {PREFLIGHT_SCRIPT: script_source()},
    }


def render_model_cache_claim(cr: QwenInference) -> dict[str, Any]:
    cache = cr.spec.model.cache
    assert cache is not None
    spec: dict[str, Any] = {"accessModes": [cache.access_mode], "resources": {"requests": {"storage": str(cache.size)}}}
    if cache.storage_class_name:
        spec["storageClassName"] = cache.storage_class_name
    annotations: dict[str, str] = {CACHE_RETENTION_ANNOTATION: cache.retention_policy.when_removed}
    return {"apiVersion": "v1", "kind": "PersistentVolumeClaim",
            "metadata": metadata(cr, name=model_cache_claim_name(cr), annotations=annotations), "spec": spec}
