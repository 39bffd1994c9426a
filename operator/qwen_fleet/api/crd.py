"""Generate the CustomResourceDefinition from the pydantic models (the single source of truth).

Pydantic emits JSON Schema 2020-12 with ``$ref``s; Kubernetes wants a structural OpenAPI v3 schema: every
``$ref`` inlined, ``Optional`` unions collapsed, ``exclusiveMinimum`` as a boolean, free-form objects marked
``x-kubernetes-preserve-unknown-fields``, and the cross-field rules as CEL ``x-kubernetes-validations``.
"""

from __future__ import annotations

from typing import Any

import yaml

from qwen_fleet.api import batch as b
from qwen_fleet.api import resource as r
from qwen_fleet.api.base import ApiModel
from qwen_fleet.api.conditions import ConditionType
from qwen_fleet.api.pools import POOLS_SWITCH_CEL, POOLS_SWITCH_MESSAGE
from qwen_fleet.group import GROUP, VERSION

_DROP_KEYS = {"title", "additionalProperties", "$defs"}
# kind -> (the resource, its spec, its status)
_MODELS: dict[str, tuple[type[ApiModel], type[ApiModel], type[ApiModel]]] = {
    r.KIND: (r.QwenInference, r.QwenInferenceSpec, r.QwenInferenceStatus),
    b.BATCH_KIND: (b.QwenBatch, b.QwenBatchSpec, b.QwenBatchStatus),
}


def _rules_by_class(root: type[ApiModel] = r.QwenInference) -> dict[str, list[dict[str, str]]]:
    """Map every API model's schema name to its CEL rules."""
    found: dict[str, list[dict[str, str]]] = {}
    stack: list[type[ApiModel]] = [root]
    seen: set[type[ApiModel]] = set()
    while stack:
        cls = stack.pop()
        if cls in seen:
            continue
        seen.add(cls)
        if cls.__rules__:
            found[cls.__name__] = [_cel(rule) for rule in cls.__rules__]
        for field in cls.model_fields.values():
            for sub in _model_types(field.annotation):
                stack.append(sub)
    return found


def _cel(rule: Any) -> dict[str, str]:
    out = {"rule": rule.cel, "message": rule.message}
    if rule.message_expression:
        out["messageExpression"] = rule.message_expression
    if rule.field_path:
        out["fieldPath"] = rule.field_path
    return out


def _model_types(annotation: Any) -> list[type[ApiModel]]:
    import typing

    if isinstance(annotation, type) and issubclass(annotation, ApiModel):
        return [annotation]
    out: list[type[ApiModel]] = []
    for arg in typing.get_args(annotation):
        out.extend(_model_types(arg))
    return out


def _convert(node: Any, defs: dict[str, Any], rules: dict[str, list[dict[str, str]]]) -> Any:
    if isinstance(node, list):
        return [_convert(item, defs, rules) for item in node]
    if not isinstance(node, dict):
        return node
    node = dict(node)
    if "$ref" in node:
        name = node.pop("$ref").rsplit("/", 1)[-1]
        target = dict(defs[name])
        if name in rules:
            target["x-kubernetes-validations"] = rules[name]
        target.update({k: v for k, v in node.items() if k in ("description", "default")})
        return _convert(target, defs, rules)
    if "anyOf" in node and not node.get("x-kubernetes-int-or-string"):
        options = [o for o in node["anyOf"] if o.get("type") != "null"]
        if len(options) != 1:
            raise ValueError(f"cannot express union in a structural schema: {node['anyOf']}")
        merged = {k: v for k, v in node.items() if k != "anyOf"}
        if merged.get("default", 0) is None:
            merged.pop("default")
        inner = _convert(options[0], defs, rules)
        inner.update({k: _convert(v, defs, rules) for k, v in merged.items() if k in ("description", "default")})
        return inner
    out: dict[str, Any] = {}
    for key, value in node.items():
        if key in _DROP_KEYS and not (key == "additionalProperties" and isinstance(value, dict)):
            if key == "additionalProperties" and value is True:
                out["x-kubernetes-preserve-unknown-fields"] = True
            continue
        if key == "exclusiveMinimum":
            out["minimum"], out["exclusiveMinimum"] = value, True
        elif key == "exclusiveMaximum":
            out["maximum"], out["exclusiveMaximum"] = value, True
        elif key == "const":
            out["enum"] = [value]
        elif key == "properties":
            out[key] = {k: _convert(v, defs, rules) for k, v in value.items()}
        else:
            out[key] = _convert(value, defs, rules)
    if out.get("type") == "object" and "properties" not in out and "additionalProperties" not in out:
        out["x-kubernetes-preserve-unknown-fields"] = True
    if out.get("default") is None:
        out.pop("default", None)
    return out


def _apply_factory_defaults(cls: type[ApiModel], schema: dict[str, Any]) -> None:
    """Write pydantic's default factories into the schema as ``default`` (pydantic leaves them out).

    The default is the complete object (the apiserver checks CEL rules against a default as written, before
    nested defaulting), so stored objects end up exactly as pydantic fills them in Python.
    """
    props = schema.get("properties", {})
    for name, field in cls.model_fields.items():
        prop = props.get(field.alias or name)
        if prop is None:
            continue
        subs = _model_types(field.annotation)
        if prop.get("type") == "array" and subs:
            _apply_factory_defaults(subs[0], prop["items"])
            continue
        if subs and prop.get("type") == "object":
            _apply_factory_defaults(subs[0], prop)
        if field.default_factory is not None and "default" not in prop:
            value = field.default_factory()  # type: ignore[call-arg]
            if isinstance(value, ApiModel):
                prop["default"] = value.model_dump(by_alias=True, exclude_none=True, mode="json")


def spec_schema(kind: str = r.KIND) -> dict[str, Any]:
    model, spec_model, status_model = _MODELS[kind]
    raw = model.model_json_schema(by_alias=True, mode="validation")
    defs = raw.get("$defs", {})
    rules = _rules_by_class(model)
    root = _convert({k: v for k, v in raw.items() if k != "$defs"}, defs, rules)
    root["x-kubernetes-validations"] = rules.get(kind, [])
    root["properties"]["metadata"] = {"type": "object"}
    for key in ("apiVersion", "kind"):
        root["properties"][key] = {"type": "string", "description": root["properties"][key]["description"]}
    spec = root["properties"]["spec"]
    status = root["properties"]["status"]
    spec.pop("default", None)
    if kind == b.BATCH_KIND:
        # A transition rule, so the apiserver's alone (pydantic sees one object, never the old one).
        spec.setdefault("x-kubernetes-validations", []).append(
            {"rule": "self == oldSelf", "message": b.IMMUTABLE_SPEC_MESSAGE})
    else:  # likewise a transition rule: pools cannot be switched on or off (api/pools.py says why)
        spec.setdefault("x-kubernetes-validations", []).append(
            {"rule": POOLS_SWITCH_CEL, "message": POOLS_SWITCH_MESSAGE})
    _apply_factory_defaults(spec_model, spec)
    _apply_factory_defaults(status_model, status)
    root["required"] = ["spec"]
    return dict(root)


# The Ready condition, for the printer columns (`kubectl get qwi` READY and REASON).
READY_CONDITION = f'.status.conditions[?(@.type=="{ConditionType.READY}")]'


def printer_columns() -> list[dict[str, Any]]:
    return [
        {"name": "Ready", "type": "string", "jsonPath": f"{READY_CONDITION}.status"},
        {"name": "Replicas", "type": "integer", "jsonPath": ".status.readyReplicas",
         "description": "Ready replicas"},
        {"name": "Model", "type": "string", "jsonPath": ".spec.model.name"},
        {"name": "GPUs", "type": "integer", "jsonPath": ".status.gpusPerReplica",
         "description": "GPUs per replica"},
        {"name": "Endpoint", "type": "string", "jsonPath": ".status.endpoint"},
        # Scale to zero (autoscaling.scaleToZero): empty for other fleets.
        {"name": "ScaledToZero", "type": "boolean", "jsonPath": ".status.autoscaling.scaledToZero",
         "description": "The fleet has zero replicas; requests are held until one is ready"},
        {"name": "ColdStart", "type": "integer", "jsonPath": ".status.autoscaling.lastColdStart.seconds",
         "description": "Seconds the last start from zero took (pod creation to Ready)"},
        {"name": "Age", "type": "date", "jsonPath": ".metadata.creationTimestamp"},
        {"name": "Reason", "type": "string", "priority": 1,
         "jsonPath": f"{READY_CONDITION}.reason"},
    ]


def batch_printer_columns() -> list[dict[str, Any]]:
    return [
        {"name": "Status", "type": "string", "jsonPath": ".status.state"},
        {"name": "Completed", "type": "integer", "jsonPath": ".status.completed"},
        {"name": "Total", "type": "integer", "jsonPath": ".status.total"},
        {"name": "Failed", "type": "integer", "jsonPath": ".status.failed"},
        {"name": "Tok/s", "type": "number", "jsonPath": ".status.tokensPerSecond",
         "description": "Completion tokens per second"},
        {"name": "ETA", "type": "integer", "jsonPath": ".status.etaSeconds", "description": "Seconds left"},
        {"name": "Age", "type": "date", "jsonPath": ".metadata.creationTimestamp"},
        {"name": "Fleet", "type": "string", "priority": 1, "jsonPath": ".spec.fleetRef.name"},
        {"name": "Job", "type": "string", "priority": 1, "jsonPath": ".status.job"},
        {"name": "Reason", "type": "string", "priority": 1,
         "jsonPath": f"{READY_CONDITION}.reason"},
    ]


def crd(kind: str = r.KIND) -> dict[str, Any]:
    if kind == b.BATCH_KIND:
        return _crd(kind, b.BATCH_PLURAL, b.BATCH_SINGULAR, b.BATCH_SHORT_NAMES, {"status": {}},
                    batch_printer_columns())
    scale = {"specReplicasPath": ".spec.replicas", "statusReplicasPath": ".status.replicas",
             "labelSelectorPath": ".status.selector"}
    return _crd(kind, r.PLURAL, r.SINGULAR, r.SHORT_NAMES, {"status": {}, "scale": scale}, printer_columns())


def _crd(kind: str, plural: str, singular: str, short_names: tuple[str, ...], subresources: dict[str, Any],
         columns: list[dict[str, Any]]) -> dict[str, Any]:
    return {
        "apiVersion": "apiextensions.k8s.io/v1",
        "kind": "CustomResourceDefinition",
        "metadata": {
            "name": f"{plural}.{GROUP}",
            "labels": {"app.kubernetes.io/name": "qwen-fleet", "app.kubernetes.io/component": "crd"},
        },
        "spec": {
            "group": GROUP,
            "scope": "Namespaced",
            "names": {
                "kind": kind, "listKind": f"{kind}List", "plural": plural, "singular": singular,
                "shortNames": list(short_names), "categories": list(r.CATEGORIES),
            },
            "versions": [{
                "name": VERSION,
                "served": True,
                "storage": True,
                "schema": {"openAPIV3Schema": spec_schema(kind)},
                "subresources": subresources,
                "additionalPrinterColumns": columns,
            }],
        },
    }


def render_yaml(kind: str = r.KIND) -> str:
    option = "" if kind == r.KIND else f" --kind {kind}"
    header = f"# Generated from operator/qwen_fleet/api by `qwen-fleet crd{option}` (make generate). Do not edit.\n"
    return header + yaml.safe_dump(crd(kind), sort_keys=False, width=120)


CRD_FILES = {r.KIND: f"{GROUP}_{r.PLURAL}.yaml", b.BATCH_KIND: f"{GROUP}_{b.BATCH_PLURAL}.yaml"}
