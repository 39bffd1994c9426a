"""The platform admin's guardrails (the chart's values ``guardrails``, config.Guardrails), pure.

Creating a QwenInference or QwenBatch is creating pods under the operator's identity, so identity-keyed policy
(RBAC, admission rules on the requesting user) never sees them. These checks read the spec as stored (camelCase
keys, before defaults): what a tenant wrote is what is judged. Defaults chosen by the operator or the chart
(the default engine and picker images, service type ClusterIP) are the admin's own and are not checked.
Every refusal names the field, the value and the chart value that would allow it.
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

from qwen_fleet.config import Guardrails

REASON = "Guardrail"

# Where each kind names an image, a PriorityClass, a RuntimeClass, a Service type (dotted paths in the spec).
IMAGE_FIELDS = {"QwenInference": ("engine.image", "routing.image"), "QwenBatch": ("dedicated.image",)}
PRIORITY_CLASS_FIELDS = {"QwenInference": ("scheduling.priorityClassName",),
                         "QwenBatch": ("scheduling.priorityClassName",)}
RUNTIME_CLASS_FIELDS = {"QwenInference": ("scheduling.runtimeClassName",)}
SERVICE_TYPE_FIELDS = {"QwenInference": ("service.type",)}


def _at(spec: dict[str, Any], path: str) -> Any:
    node: Any = spec
    for key in path.split("."):
        if not isinstance(node, dict):
            return None
        node = node.get(key)
    return node


def _listed(values: tuple[str, ...]) -> str:
    return ", ".join(values) if values else "none"


def secret_refs(node: Any, path: str = "") -> Iterator[tuple[str, str]]:
    """(field path, Secret name) of every Secret reference in the spec: ``secretKeyRef`` (env) and every
    ``...SecretRef`` (a model source's ``tokenSecretRef``), wherever they sit (engine, nccl, pools, dedicated)."""
    if isinstance(node, list):
        for i, item in enumerate(node):
            yield from secret_refs(item, f"{path}[{i}]")
    elif isinstance(node, dict):
        for key, value in node.items():
            where = f"{path}.{key}" if path else key
            if (key == "secretKeyRef" or key.endswith("SecretRef")) and isinstance(value, dict) \
                    and isinstance(value.get("name"), str):
                yield where, value["name"]
            else:
                yield from secret_refs(value, where)


def _secret_allowed(name: str, rails: Guardrails) -> bool:
    return rails.any_secret or name in rails.secret_names or name.startswith(rails.secret_name_prefixes)


def problems(kind: str, spec: dict[str, Any], rails: Guardrails) -> list[str]:
    """One message per field the guardrails refuse, in a fixed order; empty when the spec is allowed."""
    out = []
    for path in IMAGE_FIELDS.get(kind, ()):
        image = _at(spec, path)
        if rails.image_prefixes and isinstance(image, str) and not image.startswith(rails.image_prefixes):
            out.append(f"{path} {image!r} does not start with an allowed image prefix "
                       f"({_listed(rails.image_prefixes)}; chart value guardrails.imagePrefixes)")
    for fields, allowed, setting, what in (
            (PRIORITY_CLASS_FIELDS, rails.priority_class_names, "priorityClassNames", "PriorityClass"),
            (RUNTIME_CLASS_FIELDS, rails.runtime_class_names, "runtimeClassNames", "RuntimeClass"),
            (SERVICE_TYPE_FIELDS, rails.service_types, "serviceTypes", "Service type")):
        for path in fields.get(kind, ()):
            value = _at(spec, path)
            if allowed and isinstance(value, str) and value not in allowed:
                out.append(f"{path} {value!r} is not an allowed {what} ({_listed(allowed)}; chart value "
                           f"guardrails.{setting})")
    for path, name in secret_refs(spec):
        if not _secret_allowed(name, rails):
            out.append(f"{path} names Secret {name!r}, which the guardrails do not allow (names: "
                       f"{_listed(rails.secret_names)}; prefixes: {_listed(rails.secret_name_prefixes)}; chart "
                       "values guardrails.secretNames, guardrails.secretNamePrefixes, guardrails.anySecret)")
    return out


def refusal(kind: str, spec: dict[str, Any], rails: Guardrails) -> tuple[str, str] | None:
    """``(reason, message)`` for the webhook, or None when the guardrails allow the spec."""
    found = problems(kind, spec, rails)
    return (REASON, "; ".join(found)) if found else None
