"""routing.canary: whether the fleet a route sends its canary share to can take it. Pure.

The stable fleet's HTTPRoute names the canary fleet's backend by the canary's name (render/routing.py _weighted), so
before that route is applied the canary must exist in the same namespace, serve every name a client reaches the
stable fleet by (a request for one the canary lacks would fail there: vLLM answers 404 for a model it does not
serve), and offer the backend the route names: its Service on the same port behind Envoy Gateway, its InferencePool
behind a gateway that implements the Inference Extension. Anything else is Stalled naming both fleets, and nothing
of the stable fleet changes (its route keeps the weights it had).
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from pydantic import ValidationError

from qwen_fleet.api import QwenInference
from qwen_fleet.api.routing import on_envoy_gateway
from qwen_fleet.render.routing import model_names, traffic_split

NOT_FOUND = "CanaryNotFound"
MISMATCH = "CanaryModelMismatch"


def canary_problem(cr: QwenInference, others: Mapping[tuple[str, str], Mapping[str, Any]]) -> tuple[str, str] | None:
    """(reason, message) when ``cr``'s routing.canary cannot be applied, else None. ``others`` are the raw
    QwenInferences the operator sees, by (namespace, name)."""
    routing = cr.spec.routing
    if routing is None or routing.canary is None:
        return None
    name = routing.canary.fleet
    me, it = f"{cr.namespace}/{cr.name}", f"{cr.namespace}/{name}"
    raw = others.get((cr.namespace, name))
    if raw is None or (raw.get("metadata") or {}).get("deletionTimestamp"):
        return NOT_FOUND, (f"routing.canary.fleet names QwenInference {it}, which does not exist: create it (the new "
                           f"revision, serving the same model name) or correct the name. QwenInference {me} was "
                           "left as it was.")
    try:
        canary = QwenInference.model_validate({"metadata": raw.get("metadata") or {}, "spec": raw.get("spec") or {}})
    except ValidationError:
        return MISMATCH, (f"routing.canary: QwenInference {it} has an invalid spec (see its status); {me} was left "
                          "as it was.")
    missing = [n for n in model_names(cr) if n not in model_names(canary)]
    if missing:
        return MISMATCH, (
            f"routing.canary: QwenInference {me} serves {', '.join(model_names(cr))} but its canary {it} serves "
            f"{', '.join(model_names(canary))}: a canary takes requests for the same model, so it must also serve "
            f"{', '.join(missing)} (model.servedModelName, serving.adapters). Give {it} those names or name another "
            f"canary; nothing of {me} was changed.")
    if on_envoy_gateway(routing):
        if canary.spec.service.port != cr.spec.service.port:
            return MISMATCH, (
                f"routing.canary: the route sends the canary share to Service {it} on port {cr.spec.service.port} "
                f"(this fleet's service.port), but {it} serves on port {canary.spec.service.port}: set the same "
                f"service.port on both; nothing of {me} was changed.")
    elif canary.spec.routing is None or canary.spec.pools:
        return MISMATCH, (
            f"routing.canary: behind an InferencePool gateway the canary share goes to InferencePool {it}, which "
            f"only exists with spec.routing on {it} (without spec.pools): add it, or route both through Envoy "
            f"Gateway (implementation EnvoyGateway); nothing of {me} was changed.")
    return None


def traffic_status(cr: QwenInference) -> list[dict[str, Any]] | None:
    """status.traffic: the route's split as the spec asks for it (written when it is applied)."""
    routing = cr.spec.routing
    if routing is None or routing.canary is None:
        return None
    return [{"fleet": fleet, "percent": percent, "role": "canary" if i else "stable"}
            for i, (fleet, percent) in enumerate(traffic_split(cr))]
