"""The rendered-object hash every child carries: how the operator knows what it applied last.

Server-side apply removes a field from a child only when the field manager's next apply leaves it out. So a
field the spec no longer asks for (an `engine.env` entry, a `nodeSelector` key, the preflight init container,
a Service annotation) must be applied for; "does the child still contain what we would apply" cannot see it,
because the child still contains everything we ask for and more. Each child therefore carries a hash of the
whole object we rendered for it. A different hash means the rendered object changed since our last apply,
removals included, and the child is applied; the same hash plus containment (no one changed or removed our
fields since) means nothing to do. The hash rides in the same apply as the fields it describes, so the two
never disagree, and after a restart the first reconcile compares it without any write.
"""

from __future__ import annotations

import copy
import hashlib
import json
from collections.abc import Mapping
from typing import Any

from qwen_fleet.group import GROUP

RENDERED_HASH_ANNOTATION = f"{GROUP}/rendered-hash"


def rendered_hash(obj: Mapping[str, Any]) -> str:
    """A digest of an object as rendered (its own hash annotation left out): key order does not matter,
    list order does (as it does to the apiserver)."""
    meta = dict(obj.get("metadata") or {})
    annotations = {k: v for k, v in (meta.get("annotations") or {}).items() if k != RENDERED_HASH_ANNOTATION}
    if annotations:
        meta["annotations"] = annotations
    else:
        meta.pop("annotations", None)
    text = json.dumps({**obj, "metadata": meta}, sort_keys=True, separators=(",", ":"), ensure_ascii=False)
    return hashlib.sha256(text.encode()).hexdigest()[:32]


def stamped(obj: Mapping[str, Any]) -> dict[str, Any]:
    """A copy of a rendered child carrying its own hash as an annotation."""
    out = copy.deepcopy(dict(obj))
    meta = out.setdefault("metadata", {})
    meta["annotations"] = {**(meta.get("annotations") or {}), RENDERED_HASH_ANNOTATION: rendered_hash(obj)}
    return out


def stamp_of(obj: Mapping[str, Any] | None) -> str | None:
    """The hash a child (rendered or observed) carries; None when it has none."""
    annotations = ((obj or {}).get("metadata") or {}).get("annotations") or {}
    value = annotations.get(RENDERED_HASH_ANNOTATION)
    return str(value) if value is not None else None
