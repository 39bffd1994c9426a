"""What one reconcile changes, decided without I/O: desired and observed children in, a ChangeSet out.

The executor (controller.py) only carries a ChangeSet out. The rules, each with its reason:
- A child is applied when it is missing or when the observed one differs from the rendered one (drift.py:
  a changed field, a field someone else changed, or a different rendered-hash stamp, which is how a field the
  spec no longer asks for reaches the child). Otherwise it costs nothing.
- A running fleet is never left half-changed: when more than one child changes, every change is first
  checked together with a server-side dry run (admission and validation, nothing stored), and none is made
  if one is refused.
- A new fleet: the Deployment (with spec.pools: every pool's Deployment) first, then the rest together. The
  Deployment carries nearly everything a user can get wrong that the CRD cannot check (and what admission
  policies look at); refused, it leaves nothing behind. Should one of the rest be refused, what this
  reconcile created is deleted again (``undo_on_refusal``), so a new fleet is never half-made either, and the
  happy path costs no extra round trip.
- Children of a prunable kind that the spec no longer asks for are deleted, after every apply succeeded
  (never the fleet's Deployment or any Service; the endpoint picker's Deployment, ``<fleet>-epp``, is, and so
  are a removed length-aware pool's Deployment and picker, by their labels: reconcile/kinds.py).
- The fleet's workload is the Deployment or LeaderWorkerSet named as the fleet; the endpoint picker's Deployment
  (spec.routing) is a child like the others in every rule below.
- The workload changes kind (Deployment <-> LeaderWorkerSet, when a replica comes to span nodes or stops to):
  the new workload is made first, while the old one keeps serving behind the unchanged Service (and HPA and
  PDB, which name or select the old shape). Once the new one is Ready (reconcile/workload.py), the rest
  follows and the old workload is deleted in the same reconcile, after the applies. No moment without a
  serving workload behind the Service, and never a Service that selects the other shape's pods.
- Autoscaling turned on for a running fleet: from now on the Deployment is applied without `replicas` (the
  autoscaler owns it). Server-side apply resets a field its only manager stops sending to the default, which would
  drop the fleet to 1 replica until the HPA's next sync; so the current count is first handed over to a
  field manager of its own (the Kubernetes documentation's "transferring ownership"), which keeps it until
  the HPA sets its own.
- The autoscaler changes engine (autoscaling.engine hpa <-> keda): never two autoscalers on one workload (KEDA's
  admission webhook refuses a ScaledObject whose target an HPA already scales, and two HPAs on one target
  make the HPA controller refuse to act, AmbiguousSelector). So the old one is deleted first, with the
  reconcile's other changes, and the new one is held back until the watch has seen the old one gone; the next
  reconcile (that deletion is its trigger) makes it. Meanwhile the Deployment is applied without `replicas`
  as before: the count stays where the old autoscaler left it (the ScaledObject leaves
  restoreToOriginalReplicaCount at KEDA's default, false, so KEDA does not put it back either).
- A model prefetch Job (model.cache.prefetch) that has not succeeded holds the fleet: only the cache claim and
  the Job are applied, nothing is pruned, and the rest (a new fleet's Deployment and Service, a running fleet's
  change to a new model) waits until the Job has succeeded (reconcile/prefetch.py says why).
- A child rendered with an ownerReference without a uid is owned by another child, named by kind and name (the
  scale-to-zero proxy Service by the fleet's InterceptorRoute: render/scale_to_zero.py). It is applied only once
  the watch has seen that owner (not being deleted), with the owner's uid; until then it waits, and the owner's
  watch event brings the next reconcile. When the owner is pruned, the garbage collector deletes the child.
- Nothing is applied or deleted for a spec the operator refuses (Stalled) or the apiserver refused for this
  generation (until the spec changes or the next resync): a running fleet keeps running.
- A wanted child whose name an object of someone else's holds (``looked_up``: what the executor found for the
  names of ``unseen``; reconcile/ownership.py) holds the whole reconcile: nothing applied, nothing
  pruned, the object untouched, the fleet Stalled naming it (``held``). A looked-up object that is the
  fleet's own (its label stripped, so the watch lost it) is an observed child like the others.
- The model-cache claim is pruned only when it was rendered with the Delete policy (model.cache.retentionPolicy,
  stamped on the claim: the spec that said so is gone by then) and no pod of the fleet mounts it
  (``mounted``); otherwise it stays, owned by the fleet, so adding model.cache back finds the weights, and the
  QwenInference's deletion still takes it (garbage collection).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from qwen_fleet.reconcile.drift import drift
from qwen_fleet.reconcile.kinds import CHILD_KIND, may_prune
from qwen_fleet.reconcile.ownership import Foreign, foreign
from qwen_fleet.reconcile.prefetch import PREFETCH_NEEDS, prefetch_of
from qwen_fleet.reconcile.store import owner_key
from qwen_fleet.reconcile.workload import WORKLOAD_KINDS, workload_ready
from qwen_fleet.render.extras import CACHE_RETENTION_ANNOTATION
from qwen_fleet.render.routing import EPP_LABEL, POOL_LABEL
from qwen_fleet.render.stamp import RENDERED_HASH_ANNOTATION

ChildKey = tuple[str, str]  # (kind, name)


def child_key(obj: Mapping[str, Any]) -> ChildKey:
    return (str(obj["kind"]), str(obj["metadata"]["name"]))


@dataclass(frozen=True)
class Apply:
    obj: dict[str, Any]
    existing: bool  # False: this apply creates the child
    drifted: tuple[str, ...] = ()  # the paths that differ (for the Applied Event and the log)

    @property
    def key(self) -> ChildKey:
        return child_key(self.obj)

    def describe(self) -> str:
        """For the Applied Event and the log: what changed, with the stamp said in words."""
        if not self.existing:
            return f"{self.key[0]}/{self.key[1]} created"
        stamp = f".metadata.annotations.{RENDERED_HASH_ANNOTATION}"
        paths = [p for p in self.drifted if p != stamp][:3]
        if stamp in self.drifted:
            paths.insert(0, "the rendered object changed")
        return f"{self.key[0]}/{self.key[1]} updated: " + ", ".join(paths)


@dataclass(frozen=True)
class Prune:
    kind: str
    api_version: str
    name: str
    uid: str | None


HANDOVER_MANAGER = "qwen-fleet-replicas-handover"


@dataclass(frozen=True)
class ChangeSet:
    handover: tuple[dict[str, Any], ...] = ()  # applied first, as HANDOVER_MANAGER (see above)
    dry_run: tuple[Apply, ...] = ()  # checked together before any batch; none is made if one is refused
    batches: tuple[tuple[Apply, ...], ...] = ()  # in order; the applies of a batch go out together
    prune: tuple[Prune, ...] = ()  # after every batch succeeded
    undo_on_refusal: bool = False  # a new fleet: a refused apply deletes what this reconcile created
    held: tuple[Foreign, ...] = ()  # names taken by objects not the fleet's: nothing at all is done (Stalled)
    # Wanted children the watches have not seen: their names are looked up before anything is done, all of them,
    # not only this reconcile's creates, so a fleet that waits (a prefetch, an autoscaler switch) is never made
    # in part and then held.
    unseen: tuple[ChildKey, ...] = ()

    def __bool__(self) -> bool:
        return bool(self.batches or self.prune)

    @property
    def applies(self) -> tuple[Apply, ...]:
        return tuple(a for batch in self.batches for a in batch)


NOTHING = ChangeSet()


def plan_changes(desired: Sequence[Mapping[str, Any]] | None, observed: Mapping[ChildKey, Mapping[str, Any]],
                 refused: bool = False, looked_up: Mapping[ChildKey, Mapping[str, Any] | None] | None = None,
                 mounted: frozenset[str] = frozenset()) -> ChangeSet:
    """The changes that take ``observed`` to ``desired``.

    ``desired`` is None when the operator cannot render the spec (invalid or infeasible: Stalled);
    ``refused`` is True when the apiserver refused this very generation before. Both change nothing.
    ``looked_up``: what the apiserver holds under the names of a first plan's ``unseen`` (None: nothing).
    ``mounted``: the claims the fleet's pods mount.
    """
    if desired is None or refused:
        return NOTHING
    fleet = fleet_name(desired)
    held, observed = _taken(looked_up or {}, observed, fleet)
    if held:
        return ChangeSet(held=held)
    migrating = _migration(desired, observed, fleet)
    # While the new workload is being made: only it (and what its pods mount) is applied, nothing is pruned.
    to_apply = [o for o in desired if o["kind"] not in _FRONT] if migrating == "making" else desired
    if _switching_autoscaler(desired, observed):
        to_apply = [o for o in to_apply if o["kind"] not in AUTOSCALER_KINDS]
    to_apply = _with_child_owners(to_apply, observed)
    prefetch = prefetch_of(desired, observed)
    prefetching = prefetch is not None and not prefetch.done
    if prefetching:
        to_apply = [o for o in to_apply if o["kind"] in PREFETCH_NEEDS]
    applies = []
    for obj in to_apply:
        current = observed.get(child_key(obj))
        if current is None:
            applies.append(Apply(dict(obj), existing=False))
            continue
        diffs = drift(dict(obj), dict(current))
        if diffs:
            applies.append(Apply(dict(obj), existing=True, drifted=tuple(diffs)))
    new_fleet = not observed
    dry_run: tuple[Apply, ...] = ()
    batches: tuple[tuple[Apply, ...], ...]
    if new_fleet and len(applies) > 1:
        first = tuple(a for a in applies if _is_workload(a.key, fleet) or _is_pool_workload(a.obj))
        rest = tuple(a for a in applies if a not in first)
        batches = (first, rest) if first else (rest,)
    else:
        if len(applies) > 1:
            dry_run = tuple(applies)
        batches = (tuple(applies),) if applies else ()
    prune = () if migrating == "making" or prefetching else _prunes(desired, observed, fleet,
                                                                      old_workload=migrating == "done",
                                                                      mounted=mounted)
    return ChangeSet(handover=_replicas_handover(desired, observed, applies, fleet), dry_run=dry_run,
                     batches=batches, prune=prune, undo_on_refusal=new_fleet,
                     unseen=tuple(child_key(o) for o in desired if child_key(o) not in observed))


# The kinds of autoscaler (one per engine); a fleet has at most one of them.
AUTOSCALER_KINDS = ("HorizontalPodAutoscaler", "ScaledObject")
# Children that name or select one workload shape: held as they are while the other shape is being made (the
# InferencePool selects the serving pods as the Service does).
_FRONT = ("Service", *AUTOSCALER_KINDS, "PodDisruptionBudget", "InferencePool")


def fleet_name(desired: Sequence[Mapping[str, Any]]) -> str:
    """Every child is named ``<fleet>`` or ``<fleet>-<suffix>``, and the workload (named as the fleet) is always
    rendered: the shortest name is the fleet's."""
    return min((str(o["metadata"]["name"]) for o in desired), key=len, default="")


def _is_workload(key: ChildKey, fleet: str) -> bool:
    return key[0] in WORKLOAD_KINDS and key[1] == fleet


def _is_pool_workload(obj: Mapping[str, Any]) -> bool:
    """A length-aware pool's Deployment (spec.pools): the fleet's workload, one per pool."""
    return obj["kind"] == "Deployment" and POOL_LABEL in ((obj.get("metadata") or {}).get("labels") or {}) \
        and EPP_LABEL not in obj["metadata"]["labels"]


def _switching_autoscaler(desired: Sequence[Mapping[str, Any]], observed: Mapping[ChildKey, Any]) -> bool:
    """An autoscaler of another kind than the wanted one still exists: the wanted one waits until it is gone."""
    wanted = {child_key(o) for o in desired if o["kind"] in AUTOSCALER_KINDS}
    return bool(wanted) and any(k[0] in AUTOSCALER_KINDS and k not in wanted for k in observed)


def _migration(desired: Sequence[Mapping[str, Any]], observed: Mapping[ChildKey, Mapping[str, Any]],
               fleet: str) -> str | None:
    """None: no workload of another kind exists. "making": the new workload is not Ready yet. "done": it is,
    and the old one can go."""
    wanted = next((child_key(o) for o in desired if _is_workload(child_key(o), fleet)), None)
    if wanted is None or not any(_is_workload(k, fleet) and k != wanted for k in observed):
        return None
    return "done" if workload_ready(observed.get(wanted)) else "making"


def _with_child_owners(objs: Sequence[Mapping[str, Any]],
                       observed: Mapping[ChildKey, Mapping[str, Any]]) -> list[Mapping[str, Any]]:
    """The objects, those owned by another child given that child's uid; those whose owner is not seen yet (or
    is going) left out for now."""
    out: list[Mapping[str, Any]] = []
    for obj in objs:
        refs = obj["metadata"].get("ownerReferences") or []
        if all(ref.get("uid") for ref in refs):
            out.append(obj)
            continue
        filled = []
        for ref in refs:
            owner = (observed.get((str(ref["kind"]), str(ref["name"]))) or {}).get("metadata") or {}
            uid = ref.get("uid") or owner.get("uid")
            if not uid or (not ref.get("uid") and owner.get("deletionTimestamp")):
                break
            filled.append({**ref, "uid": uid})
        else:
            out.append({**obj, "metadata": {**obj["metadata"], "ownerReferences": filled}})
    return out


def _replicas_handover(desired: Sequence[Mapping[str, Any]], observed: Mapping[ChildKey, Mapping[str, Any]],
                       applies: Sequence[Apply], fleet: str) -> tuple[dict[str, Any], ...]:
    """The replica count of a running Deployment, to be kept by a field manager of its own, when this
    reconcile starts leaving replicas to a new autoscaler (none of either kind exists yet)."""
    wants_autoscaler = any(o["kind"] in AUTOSCALER_KINDS for o in desired)
    has_autoscaler = any(k[0] in AUTOSCALER_KINDS for k in observed)
    deployment = next((a.obj for a in applies if _is_workload(a.key, fleet) and a.existing), None)
    if not wants_autoscaler or has_autoscaler or deployment is None or "replicas" in deployment["spec"]:
        return ()
    current = observed[child_key(deployment)].get("spec", {}).get("replicas")
    if current is None:
        return ()
    meta = deployment["metadata"]
    return ({"apiVersion": deployment["apiVersion"], "kind": deployment["kind"],
             "metadata": {"name": meta["name"], "namespace": meta.get("namespace")},
             "spec": {"replicas": current}},)


def _taken(looked_up: Mapping[ChildKey, Mapping[str, Any] | None], observed: Mapping[ChildKey, Mapping[str, Any]],
           fleet: str) -> tuple[tuple[Foreign, ...], Mapping[ChildKey, Mapping[str, Any]]]:
    """The looked-up objects that are not the fleet's, and the observed children with those that are."""
    held, ours = [], {}
    for ckey, obj in sorted(looked_up.items(), key=lambda item: item[0]):
        if obj is None or ckey in observed:
            continue
        owner = owner_key(obj)
        if owner is not None and owner[1] == fleet:
            ours[ckey] = obj
        else:
            held.append(foreign(obj))
    return tuple(held), ({**observed, **ours} if ours else observed)


def _keeps_claim(obj: Mapping[str, Any], mounted: frozenset[str]) -> bool:
    """A claim not in the spec any more stays unless it was rendered with Delete and no pod mounts it."""
    meta = obj.get("metadata") or {}
    policy = (meta.get("annotations") or {}).get(CACHE_RETENTION_ANNOTATION)
    return policy != "Delete" or str(meta.get("name")) in mounted


def _prunes(desired: Sequence[Mapping[str, Any]], observed: Mapping[ChildKey, Mapping[str, Any]], fleet: str,
            old_workload: bool, mounted: frozenset[str] = frozenset()) -> tuple[Prune, ...]:
    """Unwanted children of prunable kinds; with ``old_workload``, also the workload of the other kind."""
    wanted = {child_key(obj) for obj in desired}
    out = []
    for (kind, name), obj in observed.items():
        child = CHILD_KIND.get(kind)
        if (kind, name) in wanted or child is None:
            continue
        labels = (obj.get("metadata") or {}).get("labels") or {}
        if not (may_prune(kind, name, fleet, labels) or (old_workload and _is_workload((kind, name), fleet))):
            continue
        if (obj.get("metadata") or {}).get("deletionTimestamp"):
            # Already going, held by a finalizer (KEDA's on a ScaledObject): a second delete is a write for nothing.
            continue
        if kind == "PersistentVolumeClaim" and _keeps_claim(obj, mounted):
            continue
        out.append(Prune(kind, child.api_version, name, (obj.get("metadata") or {}).get("uid")))
    return tuple(out)
