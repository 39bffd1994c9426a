"""The model prefetch Job: downloads the model into the cache claim once, before any replica starts.

It runs the download client the engine image already has (``hf download`` from huggingface_hub, or
``modelscope download``) with the engine's own hub environment (HF_HOME on the claim, the mirror, the token by
secretKeyRef), so the files land exactly where the engine, started with HF_HUB_OFFLINE=1, looks for them.

A Job's pod template cannot be changed after creation. So the Job's name carries a digest of its spec: the same
model (and image, token reference, limits) is the same Job, which is never re-run once complete; a different
one is a new Job, and the old one is pruned once the new one has succeeded (reconcile/changes.py).
"""

from __future__ import annotations

import hashlib
import json
from typing import Any

from qwen_fleet.api import QwenInference
from qwen_fleet.config import MANAGED_BY
from qwen_fleet.plan import HF_HOME, Plan
from qwen_fleet.render.common import MANAGED_BY_LABEL, metadata
from qwen_fleet.render.deployment import hub_env, model_cache_claim_name
from qwen_fleet.render.security import (
    container_security_context,
    pod_security_context,
    user_env,
    writable_mounts,
    writable_volumes,
)

PREFETCH_CONTAINER = "prefetch"
PREFETCH_COMPONENT = "model-prefetch"
_DIGEST_CHARS = 8
# A Job's name is a label value of its pods (batch.kubernetes.io/job-name): at most 63 characters.
_NAME_PREFIX_CHARS = 63 - len("-prefetch-") - _DIGEST_CHARS


def prefetch_labels(cr: QwenInference) -> dict[str, str]:
    # Not the fleet's selector label (qwenfleet.io/inference): the Service and the fleet's pod watch must not
    # take the download pod for a server.
    return {"app.kubernetes.io/name": "vllm", "app.kubernetes.io/instance": cr.name,
            "app.kubernetes.io/component": PREFETCH_COMPONENT, "app.kubernetes.io/part-of": "qwen-fleet",
            MANAGED_BY_LABEL: MANAGED_BY}


def download_command(cr: QwenInference) -> list[str]:
    """The download, as the engine image runs it; revision as the engine's --revision."""
    model = cr.spec.model
    revision = ["--revision", model.revision] if model.revision else []
    if model.source.model_scope is not None:
        download = ["modelscope", "download", "--model", model.name, *revision]
        if model.source.model_scope.token_secret_ref is None:
            return download
        # modelscope download takes no token; a login stores it for the library (~/.modelscope/credentials).
        return ["sh", "-c", 'modelscope login --token "$MODELSCOPE_API_TOKEN" && exec "$@"', "prefetch", *download]
    return ["hf", "download", model.name, *revision]


def _placement(cr: QwenInference) -> dict[str, Any]:
    """The fleet's own node constraints (a ReadWriteOnce claim is reachable only there), but no GPU."""
    sched = cr.spec.scheduling
    out: dict[str, Any] = {}
    if sched.node_selector:
        out["nodeSelector"] = dict(sched.node_selector)
    if sched.tolerations:
        out["tolerations"] = [t.model_dump(by_alias=True, exclude_none=True) for t in sched.tolerations]
    if sched.affinity is not None:
        affinity = sched.affinity.model_dump(by_alias=True, exclude_none=True)
        if affinity:
            out["affinity"] = affinity
    if sched.priority_class_name:
        out["priorityClassName"] = sched.priority_class_name
    return out


def prefetch_job_name(cr: QwenInference, job_spec: dict[str, Any]) -> str:
    text = json.dumps(job_spec, sort_keys=True, separators=(",", ":"))
    digest = hashlib.sha256(text.encode()).hexdigest()[:_DIGEST_CHARS]
    return f"{cr.name[:_NAME_PREFIX_CHARS]}-prefetch-{digest}"


def render_prefetch_job(cr: QwenInference, plan: Plan) -> dict[str, Any]:
    cache = cr.spec.model.cache
    assert cache is not None and cache.prefetch.enabled
    prefetch = cache.prefetch
    labels = prefetch_labels(cr)
    container: dict[str, Any] = {
        "name": PREFETCH_CONTAINER,
        "image": plan.image,
        "imagePullPolicy": "IfNotPresent",
        "command": download_command(cr),
        "env": [*user_env(), {"name": "HF_HOME", "value": HF_HOME},
                {"name": "HF_HUB_DISABLE_TELEMETRY", "value": "1"}, *hub_env(cr)],
        # HOME: `modelscope login` keeps the token under ~/.modelscope; the download itself writes to HF_HOME.
        "volumeMounts": [{"name": "hf-cache", "mountPath": HF_HOME}, *writable_mounts()],
        "securityContext": container_security_context(cr, engine=False),
        # A failed download's last log lines (the hub's error) become the pod's termination message.
        "terminationMessagePolicy": "FallbackToLogsOnError",
    }
    spec: dict[str, Any] = {
        "backoffLimit": prefetch.backoff_limit,
        "template": {
            "metadata": {"labels": dict(labels)},
            "spec": {
                "restartPolicy": "Never",  # each attempt its own pod: a failed one keeps its log
                "containers": [container],
                "volumes": [{"name": "hf-cache",
                             "persistentVolumeClaim": {"claimName": model_cache_claim_name(cr)}},
                            *writable_volumes()],
                "enableServiceLinks": False,
                "automountServiceAccountToken": False,
                "securityContext": pod_security_context(cr),
                **_placement(cr),
            },
        },
    }
    if prefetch.active_deadline_seconds is not None:
        spec["activeDeadlineSeconds"] = prefetch.active_deadline_seconds
    # No ttlSecondsAfterFinished: the finished Job is the record that the claim is filled.
    return {"apiVersion": "batch/v1", "kind": "Job",
            "metadata": metadata(cr, name=prefetch_job_name(cr, spec), labels=labels), "spec": spec}
