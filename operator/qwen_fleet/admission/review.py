"""The webhook's decision, pure: an AdmissionReview request in, an AdmissionReview response out.

It refuses what the platform admin's guardrails do not allow (admission/guardrails.py; QwenInference and
QwenBatch), and exactly what would end ``Stalled`` for a reason the spec alone decides (the planner's problems,
or a spec the API models refuse), with the Stalled condition's message. It never refuses a change that leaves
``spec`` alone (labels, finalizers, an object being deleted): an object stored before the webhook existed,
or while it was down, must stay editable and deletable.
"""

from __future__ import annotations

from typing import Any

from pydantic import ValidationError

from qwen_fleet.admission import guardrails
from qwen_fleet.api import QwenInference
from qwen_fleet.api.messages import validation_message  # the Stalled condition's InvalidSpec text
from qwen_fleet.config import OperatorConfig
from qwen_fleet.plan import make_plan


def decide(request: dict[str, Any], config: OperatorConfig) -> tuple[str, str] | None:
    """``(reason, message)`` of the Stalled condition this request's object would get, or None to admit it."""
    if request.get("operation") not in ("CREATE", "UPDATE"):
        return None
    obj = request.get("object") or {}
    metadata = obj.get("metadata") or {}
    if metadata.get("deletionTimestamp"):
        return None
    if request.get("operation") == "UPDATE" and (request.get("oldObject") or {}).get("spec") == obj.get("spec"):
        return None
    kind = (request.get("kind") or {}).get("kind") or obj.get("kind") or "QwenInference"
    refused = guardrails.refusal(kind, obj.get("spec") or {}, config.guardrails)
    if refused is not None or kind != "QwenInference":  # a QwenBatch: the guardrails only
        return refused
    try:
        cr = QwenInference.model_validate({"metadata": metadata, "spec": obj.get("spec") or {}})
    except ValidationError as err:
        return "InvalidSpec", validation_message(err)
    plan = make_plan(cr, config)
    if not plan.problems:
        return None
    return plan.problems[0].reason, " ".join(p.message for p in plan.problems)


def review(body: dict[str, Any], config: OperatorConfig) -> dict[str, Any]:
    """Answer an ``admission.k8s.io/v1`` AdmissionReview."""
    request = body.get("request") or {}
    refusal = decide(request, config)
    response: dict[str, Any] = {"uid": request.get("uid", ""), "allowed": refusal is None}
    if refusal is not None:
        reason, message = refusal
        # kubectl prints the message after "admission webhook ... denied the request:"
        response["status"] = {"code": 422, "reason": "Invalid", "message": f"{reason}: {message}"}
    return {"apiVersion": "admission.k8s.io/v1", "kind": "AdmissionReview", "response": response}
