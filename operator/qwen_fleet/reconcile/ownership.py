"""Whose an object is: the operator never adopts, changes or deletes an object it did not create. Pure.

The watches see only the operator's own children (the managed-by label, then the ownerReference), so a
same-named object that someone else made looks "missing" to them, and a server-side apply with force would
take it over: its fields rewritten, the fleet's ownerReference added, and later garbage-collected with the
fleet. So before a child is *created*, the executor looks its name up (one GET each, only for creates: an
unchanged or updated fleet costs nothing more), and the change plan (changes.py) or the batch's decision
(batch.py) holds everything when a name is taken by an object that is not theirs: Stalled, with a reason
that names the object and its owner, and nothing of that object is touched.

What counts as ours: a controller ownerReference to the resource itself (a QwenInference child: by kind and
name, as the watches index them; also the children owned by another child, store.CHILD_OWNERS), or, for a
QwenBatch's output ConfigMap, which has no owner on purpose (its results outlive the batch), the batch's label.

A window remains between the lookup and the apply (a foreign object made in those milliseconds is taken
over); server-side apply has no "create only" precondition to close it (a uid in an apply body makes the
create fail too).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

FOREIGN_REASON = "ForeignObject"  # the Stalled reason of a fleet or batch held by a foreign object
# How long a held fleet waits at most before it looks again: a foreign object carries no label the watches
# select, so its removal brings no event (the resync would take minutes).
FOREIGN_RECHECK_SECONDS = 15.0


@dataclass(frozen=True)
class Foreign:
    """An object that holds the name of a child the operator would create, and is not the operator's."""

    kind: str
    name: str
    owner: str  # "Kind/name" of its controller (or first) ownerReference, or "no owner"

    def describe(self) -> str:
        return f"{self.kind}/{self.name} (owner: {self.owner})"


def owner_words(obj: Mapping[str, Any]) -> str:
    """Its controller ownerReference (else its first) as Kind/name, or "no owner"."""
    refs = [r for r in ((obj.get("metadata") or {}).get("ownerReferences") or []) if isinstance(r, Mapping)]
    ref = next((r for r in refs if r.get("controller")), refs[0] if refs else None)
    return f"{ref.get('kind')}/{ref.get('name')}" if ref else "no owner"


def controlled_by(obj: Mapping[str, Any], api_version: str, kind: str, name: str) -> bool:
    """Whether ``obj`` carries a controller ownerReference to ``kind``/``name``."""
    return any(ref.get("controller") and ref.get("apiVersion") == api_version and ref.get("kind") == kind
               and ref.get("name") == name for ref in (obj.get("metadata") or {}).get("ownerReferences") or [])


def foreign(obj: Mapping[str, Any]) -> Foreign:
    meta = obj.get("metadata") or {}
    return Foreign(str(obj.get("kind")), str(meta.get("name")), owner_words(obj))


def held_message(found: Sequence[Foreign], what: str) -> str:
    """The Stalled message: which objects hold the names, whose they are, and what to do."""
    names = ", ".join(f.describe() for f in found)
    one = len(found) == 1
    return (f"{names} {'exists' if one else 'exist'} and {'is' if one else 'are'} not this {what}'s: qwen-fleet "
            f"does not adopt, change or delete an object it did not create. Delete or rename "
            f"{'it' if one else 'them'}, or give the {what} another name; it goes on once the name is free")
