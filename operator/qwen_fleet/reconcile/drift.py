"""Does an observed child still carry what we would apply? Pure.

The operator writes only on a difference, so an unchanged fleet costs zero API writes (also after a
restart). The comparison is "desired is contained in observed": the apiserver adds defaults and other
managers add their own fields (an annotation, a sidecar, the HPA's replicas), which are not drift.
Containment alone cannot see a field the spec no longer asks for (the child still holds everything we ask
for, and more); that is what the rendered-hash annotation is for (render/stamp.py): every desired object
carries the hash of itself, so an object rendered differently from the last applied one (a removal included)
differs in that annotation, and the apply that follows lets server-side apply drop what we no longer send. Lists of
named items match by name, as server-side apply merges them; other lists (args, command) must be equal.
Quantities compare by value, since the apiserver rewrites e.g. 0.5 as 500m.
"""

from __future__ import annotations

from collections.abc import Iterator
from decimal import Decimal, InvalidOperation
from typing import Any

from qwen_fleet.plan.quantities import parse

_QUANTITY_PARENTS = {"requests", "limits"}
_QUANTITY_KEYS = {"sizeLimit", "storage"}
_MERGE_KEYS = ("name", "uid")


def _empty(value: Any) -> bool:
    return value is None or value in ({}, [])


def _quantity_equal(a: Any, b: Any) -> bool:
    try:
        return parse(a) == parse(b)
    except (InvalidOperation, ValueError, TypeError):
        return False


def _merge_key(items: list[Any]) -> str | None:
    if not items or not all(isinstance(i, dict) for i in items):
        return None
    for key in _MERGE_KEYS:
        if all(key in i for i in items):
            return key
    return None


def differences(desired: Any, observed: Any, path: str = "", parent: str = "") -> Iterator[str]:
    """Paths where ``observed`` does not carry ``desired``."""
    key = path.rsplit(".", 1)[-1].split("[", 1)[0]
    if isinstance(desired, dict):
        if not isinstance(observed, dict):
            if not _empty(desired) or not _empty(observed):
                yield path or "."
            return
        for k, v in desired.items():
            if k not in observed:
                if not _empty(v):
                    yield f"{path}.{k}"
                continue
            yield from differences(v, observed[k], f"{path}.{k}", parent=key)
        return
    if isinstance(desired, list):
        if not isinstance(observed, list):
            if not _empty(desired):
                yield path
            return
        merge = _merge_key(desired)
        if merge and _merge_key(observed) == merge:
            by_key = {item[merge]: item for item in observed}
            for item in desired:
                sub = f"{path}[{item[merge]}]"
                if item[merge] not in by_key:
                    yield sub
                else:
                    yield from differences(item, by_key[item[merge]], sub, parent=key)
            return
        if len(desired) != len(observed):
            yield path
            return
        for i, (d, o) in enumerate(zip(desired, observed, strict=True)):
            yield from differences(d, o, f"{path}[{i}]", parent=key)
        return
    if desired == observed and type(desired) is type(observed):
        return
    if (parent in _QUANTITY_PARENTS or key in _QUANTITY_KEYS) and _quantity_equal(desired, observed):
        return
    if isinstance(desired, (int, float)) and isinstance(observed, (int, float)) and not isinstance(
            desired, bool) and Decimal(str(desired)) == Decimal(str(observed)):
        return
    yield path


def drift(desired: dict[str, Any], observed: dict[str, Any]) -> list[str]:
    """The drifted paths of a child, ignoring status and server-managed metadata."""
    want = {k: v for k, v in desired.items() if k not in ("status",)}
    return list(differences(want, observed))
