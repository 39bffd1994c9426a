"""routing.gateway.routeByModel: which fleet a model name on a Gateway belongs to. Pure.

Behind one Gateway a request goes to the fleet whose route matches its model (render/routing.py MODEL_HEADER). Two
fleets claiming one name would split that name's requests between them by the gateway's own tie-breaking, so the
fleet that claimed it first keeps it and any later one is Stalled naming the first; the first is never touched.
"First" is the older QwenInference (creationTimestamp, then namespace/name): the order every replica of the
operator reads the same from the objects alone, without keeping state of its own.

A fleet that names a later one as its routing.canary does not hold its names against it (render/canary.py).

Every listener of a Gateway counts as one: a route without sectionName attaches to all of them, and a client that
reaches two listeners with one model name would not know which fleet answers.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from typing import Any

from pydantic import ValidationError

from qwen_fleet.api import QwenInference
from qwen_fleet.render.routing import model_names

REASON = "ModelNameClaimed"


def gateway_of(namespace: str, routing: Mapping[str, Any] | None) -> tuple[str, str] | None:
    """(namespace, name) of the Gateway a fleet routes by model on, from its raw spec.routing; None if it does not."""
    gateway = (routing or {}).get("gateway") or {}
    if not gateway.get("routeByModel") or not gateway.get("name"):
        return None
    return str(gateway.get("namespace") or namespace), str(gateway["name"])


def _order(meta: Mapping[str, Any]) -> tuple[str, str, str]:
    return str(meta.get("creationTimestamp") or "9999"), str(meta.get("namespace") or ""), str(meta.get("name"))


def _declares_canary(first: QwenInference, later: QwenInference) -> bool:
    """Whether ``first`` sends a canary share of its route to ``later`` (routing.canary): the pair serves one name
    on purpose. Requests for it match the first's route (Gateway API gives the older of two equal matches
    precedence, the order used here), which splits them by weight; the later's own route takes them only when the
    first's is gone (the canary promoted)."""
    canary = first.spec.routing.canary if first.spec.routing is not None else None
    return canary is not None and canary.fleet == later.name and first.namespace == later.namespace


def claim_conflict(cr: QwenInference, others: Iterable[Mapping[str, Any]]) -> str | None:
    """The Stalled message when a name ``cr`` routes by on its Gateway is already claimed there, else None.
    ``others`` are the raw QwenInferences the operator sees (``cr`` among them is skipped); one whose spec does
    not validate claims nothing (it is Stalled InvalidSpec itself)."""
    routing = cr.spec.routing
    if routing is None or routing.gateway is None or not routing.gateway.route_by_model:
        return None
    where = (routing.gateway.namespace or cr.namespace, routing.gateway.name)
    mine = set(model_names(cr))
    me = _order({**cr.metadata, "namespace": cr.namespace, "name": cr.name})
    first: tuple[tuple[str, str, str], QwenInference, list[str]] | None = None
    for raw in others:
        other_meta = raw.get("metadata") or {}
        if other_meta.get("deletionTimestamp"):
            continue
        order = _order(other_meta)
        spec = raw.get("spec") or {}
        if order[1:] == me[1:] or order >= me or gateway_of(order[1], spec.get("routing")) != where:
            continue
        try:
            other = QwenInference.model_validate({"metadata": other_meta, "spec": spec})
        except ValidationError:
            continue
        if _declares_canary(other, cr):
            continue
        shared = [n for n in model_names(other) if n in mine]
        if shared and (first is None or order < first[0]):
            first = (order, other, shared)
    if first is None:
        return None
    _, other, shared = first
    names = ", ".join(shared)
    return (f"routing.gateway.routeByModel: the model name{'s' if len(shared) > 1 else ''} {names} on Gateway "
            f"{where[0]}/{where[1]} {'are' if len(shared) > 1 else 'is'} already served there by QwenInference "
            f"{other.namespace}/{other.name}, which claimed {'them' if len(shared) > 1 else 'it'} first; nothing of "
            "this fleet was applied and that one is unchanged. Give this fleet another model.servedModelName (or "
            "adapter name), route it to another Gateway, or remove the name from the other fleet.")
