"""Is a child exactly what the operator renders for it? An oracle that shares no code with the operator's
drift check (reconcile/drift.py): it reads the child as the apiserver stores it, field by field, and the
apiserver's own record of who owns which field (managedFields).

Two directions:
- every field of the rendered object is in the child with the same value; lists have exactly the rendered
  items in the rendered order (items another manager added, named in ``foreign``, are set aside first), and
  maps (labels, annotations, selectors, data) have exactly the rendered keys (plus the ``foreign`` ones and the
  few the apiserver itself writes);
- every field the operator's field manager owns is one the rendered object has: nothing it stopped rendering
  is still held by it.
"""

from __future__ import annotations

import json
from collections.abc import Collection, Iterator, Mapping
from typing import Any

# Map-typed fields: string keys chosen by people, where the apiserver adds no defaults.
MAP_FIELDS = {"labels", "annotations", "nodeSelector", "matchLabels", "data", "selector"}
# Keys the apiserver or its controllers write into such maps themselves.
SERVER_KEYS = {"deployment.kubernetes.io/revision"}
MANAGER = "qwen-fleet"


def _named(items: list[Any], foreign: Collection[str]) -> list[Any]:
    return [i for i in items if not (isinstance(i, dict) and i.get("name") in foreign)]


def mismatches(rendered: Any, stored: Any, foreign: Collection[str] = (), path: str = "") -> Iterator[str]:
    """Where ``stored`` is not the rendered value (see the module docstring)."""
    field = path.rsplit(".", 1)[-1]
    if isinstance(rendered, dict):
        if not isinstance(stored, dict):
            yield f"{path}: {stored!r} is not a map"
            return
        if field in MAP_FIELDS and not (field == "selector" and "matchLabels" in rendered):
            extra = set(stored) - set(rendered) - SERVER_KEYS - set(foreign)
            if extra:
                yield f"{path}: keys not rendered: {sorted(extra)}"
        for key, value in rendered.items():
            if key not in stored:
                yield f"{path}.{key}: missing"
            else:
                yield from mismatches(value, stored[key], foreign, f"{path}.{key}")
        return
    if isinstance(rendered, list):
        if not isinstance(stored, list):
            yield f"{path}: {stored!r} is not a list"
            return
        kept = _named(stored, foreign)
        if len(kept) != len(rendered):
            yield f"{path}: {len(kept)} items, rendered {len(rendered)}: {json.dumps(kept)[:300]}"
            return
        for i, (want, have) in enumerate(zip(rendered, kept, strict=True)):
            yield from mismatches(want, have, foreign, f"{path}[{i}]")
        return
    if rendered != stored or type(rendered) is not type(stored):
        yield f"{path}: {stored!r} != rendered {rendered!r}"


def owned_fields(stored: Mapping[str, Any], manager: str = MANAGER) -> dict[str, Any]:
    """The fieldsV1 set of ``manager``'s Apply entry ({} when it owns nothing)."""
    for entry in (stored.get("metadata") or {}).get("managedFields") or []:
        if entry.get("manager") == manager and entry.get("operation") == "Apply":
            return dict(entry.get("fieldsV1") or {})
    return {}


def _item_for(key: str, items: list[Any]) -> Any:
    """The list item a fieldsV1 element names: k:{...} by its key fields, v:... by value, i:N by index."""
    kind, _, raw = key.partition(":")
    if kind == "i":
        index = int(raw)
        return items[index] if index < len(items) else None
    wanted = json.loads(raw)
    for item in items:
        if kind == "v" and item == wanted:
            return item
        # A key field the apiserver defaulted (a port's protocol) may be absent from what we rendered.
        if kind == "k" and isinstance(item, dict) and all(item.get(k, v) == v for k, v in wanted.items()):
            return item
    return None


def owned_but_not_rendered(fields: Mapping[str, Any], rendered: Any, path: str = "") -> Iterator[str]:
    """Paths the manager owns (fieldsV1) that the rendered object does not have."""
    for key, sub in fields.items():
        if key == ".":
            continue
        if key.startswith("f:"):
            name = key[2:]
            if not isinstance(rendered, dict) or name not in rendered:
                yield f"{path}.{name}"
                continue
            yield from owned_but_not_rendered(sub, rendered[name], f"{path}.{name}")
        else:
            item = _item_for(key, rendered if isinstance(rendered, list) else [])
            if item is None:
                yield f"{path}[{key}]"
                continue
            yield from owned_but_not_rendered(sub, item, f"{path}[{key}]")


def child_problems(rendered: Mapping[str, Any], stored: Mapping[str, Any] | None,
                   foreign: Collection[str] = ()) -> list[str]:
    """[] when ``stored`` is exactly the rendered child (both directions), else what differs."""
    if stored is None:
        return ["missing"]
    want = {k: v for k, v in rendered.items() if k not in ("apiVersion", "kind")}
    out = list(mismatches(want, dict(stored), foreign))
    out += [f"owned by {MANAGER} but not rendered: {p}"
            for p in owned_but_not_rendered(owned_fields(stored), dict(rendered))]
    return out
