"""One level-based, idempotent reconcile of one QwenInference: api -> plan -> render -> apply -> status.

It reads only the latest state (the resource and its children as the watches saw them), writes a child only
when it differs from what would be applied, deletes children the spec no longer asks for, and patches status
only when it changed. A second reconcile of an unchanged resource makes no API writes.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Awaitable, Callable, Iterable
from dataclasses import dataclass, field
from datetime import UTC, datetime
from typing import Any

from pydantic import ValidationError

from qwen_fleet.api import API_VERSION, KIND, QwenInference
from qwen_fleet.api.conditions import AUTOSCALER_CONDITIONS, Reason
from qwen_fleet.api.conditions import ConditionType as Type
from qwen_fleet.api.messages import validation_message
from qwen_fleet.config import OperatorConfig
from qwen_fleet.plan import Plan, make_plan
from qwen_fleet.reconcile.changes import AUTOSCALER_KINDS, HANDOVER_MANAGER, ChangeSet, child_key, plan_changes
from qwen_fleet.reconcile.cold_start import describe as describe_cold_start
from qwen_fleet.reconcile.kinds import OPTIONAL_KINDS, capabilities_of
from qwen_fleet.reconcile.kube import KubeClient, KubeError
from qwen_fleet.reconcile.ownership import FOREIGN_REASON, FOREIGN_RECHECK_SECONDS, held_message
from qwen_fleet.reconcile.prefetch import Prefetch, prefetch_of
from qwen_fleet.reconcile.queue import Key
from qwen_fleet.reconcile.status import (
    WAITING_TROUBLE,
    Observed,
    Outcome,
    compute_status,
    pools_status,
    status_patch,
)
from qwen_fleet.reconcile.store import ChildKey, Store, nccl_status
from qwen_fleet.reconcile.workload import missing_capability, pools_rollout_view, rollout_view, workload_kind
from qwen_fleet.render import Capabilities, render_children
from qwen_fleet.render.canary import canary_problem, traffic_status
from qwen_fleet.render.common import selector_string
from qwen_fleet.render.gateway_keys import KEY_SECRET_REASON, key_secret_names
from qwen_fleet.render.model_claims import REASON as CLAIM_REASON
from qwen_fleet.render.model_claims import claim_conflict
from qwen_fleet.render.routing import default_pool, pool_name
from qwen_fleet.render.scale_to_zero import client_endpoint

log = logging.getLogger("qwen_fleet.reconcile")

# Ready reasons that deserve a Warning Event when they appear (see reconcile/status.py).
TROUBLE = {Reason.NCCL_PREFLIGHT_FAILED, Reason.ENGINE_FAILED, Reason.PODS_PENDING, Reason.RETRYING,
           Reason.FAILED_CREATE} | WAITING_TROUBLE

EmitEvent = Callable[[dict[str, Any], str, str, str], None]  # (resource, type, reason, message)


class RetryLater(Exception):
    """The reconcile hit a transient problem (API unavailable, conflict); the key is retried with backoff."""


async def _all(calls: Iterable[Awaitable[dict[str, Any]]]) -> list[dict[str, Any]]:
    """Run API calls together; when one fails, wait for the others, then raise the first error."""
    results = await asyncio.gather(*calls, return_exceptions=True)
    for result in results:
        if isinstance(result, BaseException):
            raise result
    return [r for r in results if not isinstance(r, BaseException)]


def _autoscaler(observed: dict[ChildKey, dict[str, Any]], name: str, plan: Plan | None) -> dict[str, Any] | None:
    """The autoscaler status mirrors: the one the spec asks for, else (being switched or turned off) the one
    still there."""
    wanted = [plan.autoscaler] if plan is not None and plan.autoscaler else []
    for kind in wanted + [k for k in AUTOSCALER_KINDS if k not in wanted]:
        if (kind, name) in observed:
            return observed[(kind, name)]
    return None


def _now() -> str:
    return datetime.now(UTC).strftime("%Y-%m-%dT%H:%M:%SZ")


@dataclass
class Result:
    outcome: Outcome
    applied: list[str] = field(default_factory=list)
    deleted: list[str] = field(default_factory=list)
    status_written: bool = False
    recheck: float | None = None  # look again after at most this long (a name held by a foreign object)


class Controller:
    def __init__(self, kube: KubeClient, config: OperatorConfig, store: Store,
                 emit: EmitEvent | None = None) -> None:
        self.kube = kube
        self.config = config
        self.store = store
        self.emit: EmitEvent = emit or (lambda *_: None)
        self.capabilities = Capabilities()
        # Specs the apiserver refused, by resource: (uid, generation, outcome). Until the spec changes or the
        # next resync clears this, events (e.g. of children this reconcile deleted again) do not send it again:
        # a refused spec costs one attempt per resync period, never a loop.
        self.refused: dict[Key, tuple[str, int, Outcome]] = {}
        # Resources (by uid) whose namespace is being deleted: the apiserver forbids creating anything there and
        # the namespace controller is removing the resource with its children. Reconciling them would only
        # fight the deletion (each child it removes is an event that asks to recreate it), so they are left be.
        self.terminating: dict[Key, str] = {}

    async def refresh_capabilities(self) -> None:
        served = [child.kind for child in OPTIONAL_KINDS if await self.kube.api_exists(child.api_version,
                                                                                        child.plural)]
        self.capabilities = capabilities_of(served)

    async def reconcile(self, key: Key) -> Result | None:
        raw = self.store.resources.get(key)
        if raw is None or (raw.get("metadata") or {}).get("deletionTimestamp"):
            self.refused.pop(key, None)
            self.terminating.pop(key, None)
            return None  # gone or going: garbage collection removes the children
        generation = int(raw["metadata"].get("generation") or 0)
        uid = str(raw["metadata"].get("uid") or "")
        if self.terminating.get(key) == uid:
            return None
        cr: QwenInference | None = None
        plan: Plan | None = None
        try:
            cr = QwenInference.model_validate({"metadata": raw["metadata"], "spec": raw.get("spec") or {}})
        except ValidationError as err:
            outcome = Outcome.stalled(Reason.INVALID_SPEC, validation_message(err))
        else:
            plan = make_plan(cr, self.config)
            if plan.problems:
                outcome = Outcome.stalled(plan.problems[0].reason, " ".join(p.message for p in plan.problems))
            else:
                outcome = (missing_capability(plan, self.capabilities) or self._claimed(cr)
                           or self._canary_blocked(cr) or await self._gateway_missing(cr)
                           or await self._key_secret_missing(cr) or Outcome.applied())
        result = Result(outcome)
        observed = self.store.children(key)
        refused = self.refused.get(key)
        held = outcome.kind == "applied" and refused is not None and refused[:2] == (uid, generation)
        if held and refused is not None:
            result.outcome = refused[2]
        desired = render_children(cr, plan, self.capabilities) if plan is not None and cr is not None \
            and outcome.kind == "applied" else None
        try:
            changes = await self._changes(key, desired, observed, held)
            if changes.held:
                result.outcome = Outcome.stalled(FOREIGN_REASON, held_message(changes.held, "QwenInference"))
                result.recheck = FOREIGN_RECHECK_SECONDS
            await self._execute(key, changes, observed, result)
        except KubeError as err:
            if err.namespace_terminating:
                log.info("%s/%s: namespace %s is being deleted; leaving the fleet to it", key[0], key[1], key[0])
                self.terminating[key] = uid
                return None
            if err.transient or err.status == 403:
                result.outcome = Outcome.retrying(f"{err.status} {err.reason}: {err.message}"[:1000])
            else:  # the apiserver refused what we rendered: a spec the CRD let through but cannot work
                result.outcome = Outcome.stalled(Reason.APPLY_REJECTED, err.message[:2000])
                self.refused[key] = (uid, generation, result.outcome)
        else:
            if desired is not None and not held:
                self.refused.pop(key, None)
        await self._write_status(key, raw, generation, result, plan, observed, cr, prefetch_of(desired, observed))
        if result.outcome.kind == "retrying":
            raise RetryLater(result.outcome.message)
        return result

    def _claimed(self, cr: QwenInference) -> Outcome | None:
        """routing.gateway.routeByModel: Stalled when another fleet claimed one of its model names on its Gateway
        first (render/model_claims.py)."""
        message = claim_conflict(cr, self.store.resources.values())
        return Outcome.stalled(CLAIM_REASON, message) if message is not None else None

    def _canary_blocked(self, cr: QwenInference) -> Outcome | None:
        """routing.canary naming a fleet that does not exist or cannot take the share: Stalled naming both
        (render/canary.py)."""
        problem = canary_problem(cr, self.store.resources)
        return Outcome.stalled(*problem) if problem is not None else None

    async def _key_secret_missing(self, cr: QwenInference) -> Outcome | None:
        """routing.auth.apiKeys naming a Secret that does not exist: Stalled naming it, nothing applied (Envoy
        Gateway would refuse the SecurityPolicy and answer the route with a 500 of its own). Only the Secret's
        metadata is read (PartialObjectMetadata): the keys never reach the operator. A 403 (the chart's
        rbac.keySecrets false) leaves the check to Envoy Gateway's SecurityPolicy status."""
        for name in key_secret_names(cr):
            try:
                found = await self.kube.metadata_of("v1", "Secret", cr.namespace, name)
            except KubeError as err:
                if err.status == 403:
                    return None
                return Outcome.retrying(f"looking up Secret {cr.namespace}/{name}: {err.status} {err.reason}")
            if found is None:
                return Outcome.stalled(
                    KEY_SECRET_REASON,
                    f"routing.auth.apiKeys.secretRefs names Secret {cr.namespace}/{name}, which does not exist: "
                    "create it (each data key a client name, its value that client's API key: kubectl create "
                    f"secret generic {name} --from-literal=<client>=<key>) or remove it from secretRefs. Nothing of "
                    "this spec was applied; the operator retries on its next resync.")
        return None

    async def _gateway_missing(self, cr: QwenInference) -> Outcome | None:
        """routing.gateway naming a Gateway that does not exist: Stalled with the fix (nothing applied). A route
        to it would only sit unattached, and the fleet would look routed while no request can reach it."""
        gateway = cr.spec.routing.gateway if cr.spec.routing is not None else None
        if gateway is None:
            return None
        namespace = gateway.namespace or cr.namespace
        try:
            found = await self.kube.find("gateway.networking.k8s.io/v1", "Gateway", namespace, gateway.name)
        except KubeError as err:
            # 404: this cluster serves no Gateway kind (the route is for a gateway that reads HTTPRoutes from
            # here but lives elsewhere); 403: an operator confined to its namespaces may not read that one. Both
            # leave the check out rather than refuse a spec that can work.
            if err.status in (403, 404):
                return None
            return Outcome.retrying(f"looking up Gateway {namespace}/{gateway.name}: {err.status} {err.reason}")
        if found is not None:
            return _listener_missing(found, gateway.section_name, f"{namespace}/{gateway.name}")
        return Outcome.stalled(
            "GatewayNotFound",
            f"routing.gateway names Gateway {namespace}/{gateway.name}, which does not exist: create it (of a "
            "GatewayClass whose controller runs in this cluster, e.g. Envoy Gateway's: docs/gateway.md), or correct "
            "routing.gateway.name and namespace. Nothing of this spec was applied; the operator retries on its next "
            "resync.")

    async def _changes(self, key: Key, desired: list[dict[str, Any]] | None, observed: dict[ChildKey, dict[str, Any]],
                       held: bool) -> ChangeSet:
        """The change plan; when children are wanted that the watches have not seen, their names are looked up
        first and the plan made again with what holds them (reconcile/ownership.py)."""
        pods = self.store.pods(key)
        mounted = frozenset(str(c) for p in pods if p.get("phase") not in ("Succeeded", "Failed")
                            for c in p.get("claims") or ())
        changes = plan_changes(desired, observed, refused=held, mounted=mounted)
        if not changes.unseen or desired is None:
            return changes
        found = await self._look_up(key[0], changes.unseen, desired)
        if not any(found.values()):
            return changes
        return plan_changes(desired, observed, refused=held, looked_up=found, mounted=mounted)

    async def _look_up(self, namespace: str, keys: Iterable[ChildKey],
                       desired: list[dict[str, Any]]) -> dict[ChildKey, dict[str, Any] | None]:
        """What the apiserver holds under each name (together: one round trip)."""
        versions = {child_key(o): str(o["apiVersion"]) for o in desired}

        async def one(ckey: ChildKey) -> tuple[ChildKey, dict[str, Any] | None]:
            return ckey, await self.kube.find(versions[ckey], ckey[0], namespace, ckey[1])

        return dict(await asyncio.gather(*(one(k) for k in keys)))

    async def _execute(self, key: Key, changes: ChangeSet, observed: dict[ChildKey, dict[str, Any]],
                       result: Result) -> None:
        """Carry a ChangeSet out (changes.py decides; this only talks to the API)."""
        if changes.dry_run:
            await _all(self.kube.apply(a.obj, dry_run=True) for a in changes.dry_run)
        for obj in changes.handover:
            await self.kube.apply(obj, field_manager=HANDOVER_MANAGER)
        for batch in changes.batches:  # the requests of a batch go out together: a reconcile waits one round trip
            results = await asyncio.gather(*(self.kube.apply(a.obj) for a in batch), return_exceptions=True)
            for change, done in zip(batch, results, strict=True):
                if isinstance(done, BaseException):
                    continue
                self.store.remember_write(key, done)
                observed[change.key] = done
                result.applied.append(change.describe())
            failed = next((r for r in results if isinstance(r, BaseException)), None)
            if failed is None:
                continue
            if changes.undo_on_refusal and isinstance(failed, KubeError) and not failed.transient \
                    and failed.status != 403:
                await self._undo(key, observed, result)
            raise failed
        for prune in changes.prune:
            await self.kube.delete(prune.api_version, prune.kind, key[0], prune.name, prune.uid)
            observed.pop((prune.kind, prune.name), None)
            result.deleted.append(f"{prune.kind}/{prune.name}")

    async def _undo(self, key: Key, observed: dict[ChildKey, dict[str, Any]], result: Result) -> None:
        """Delete the children a reconcile of a new fleet created before the apiserver refused another."""
        for ckey, obj in list(observed.items()):
            meta = obj.get("metadata") or {}
            await self.kube.delete(obj["apiVersion"], ckey[0], key[0], ckey[1], meta.get("uid"))
            del observed[ckey]
        result.applied.clear()

    async def _write_status(self, key: Key, raw: dict[str, Any], generation: int, result: Result,
                            plan: Plan | None, observed: dict[ChildKey, dict[str, Any]],
                            cr: QwenInference | None, prefetch: Prefetch | None = None) -> None:
        pods = self.store.pods(key)
        # The workload the spec asks for (during a migration, the new one: Ready only once it is).
        kind = workload_kind(plan.nodes) if plan is not None else "Deployment"
        workload = rollout_view(observed.get((kind, key[1])))
        pools = None
        if plan is not None and plan.pools and cr is not None and cr.spec.routing is not None:
            # spec.pools: one Deployment per pool, seen together (reconcile/workload.py pools_rollout_view).
            deployments = {p.pool.name: observed.get(("Deployment", pool_name(cr, p.pool.name))) for p in plan.pools}
            workload = pools_rollout_view(list(deployments.values()))
            pools = pools_status(plan, deployments, cr.spec.routing.pool_header, default_pool(cr))
        view = Observed(deployment=workload, autoscaler=_autoscaler(observed, key[1], plan), pods=pods,
                        nccl=nccl_status(pods), prefetch=prefetch)
        old = raw.get("status") or {}
        new = compute_status(old, generation, result.outcome, plan, view, _now(),
                             endpoint=client_endpoint(cr) if cr else None, selector=selector_string(cr) if cr else None,
                             pools=pools, traffic=_traffic(cr, result, old))
        patch = status_patch(old, new)
        if patch is not None:
            try:
                updated = await self.kube.patch_status(API_VERSION, KIND, key[0], key[1], patch)
            except KubeError as err:
                if err.status == 404:
                    # Deleted meanwhile. If the watch missed the deletion (adapter.py, fix 3, is the other
                    # guard), the key would be resynced for ever: drop it, unless a newer object took the name.
                    current = self.store.resources.get(key)
                    if current is not None and current["metadata"].get("uid") == raw["metadata"].get("uid"):
                        del self.store.resources[key]
                    return
                raise RetryLater(f"status update failed: {err}") from None
            self.store.put_resource(key, updated)
            result.status_written = True
        self._events(raw, old, new, result)

    def _events(self, raw: dict[str, Any], old: dict[str, Any], new: dict[str, Any], result: Result) -> None:
        cold = (new.get("autoscaling") or {}).get("lastColdStart")
        if cold and cold != (old.get("autoscaling") or {}).get("lastColdStart"):
            self.emit(raw, "Normal", "ColdStart", describe_cold_start(cold))
        if result.applied:
            self.emit(raw, "Normal", "Applied", "; ".join(result.applied)[:1000])
        if result.deleted:
            self.emit(raw, "Normal", "Deleted", "no longer wanted: " + ", ".join(result.deleted))
        before = {c["type"]: c for c in old.get("conditions") or []}
        for cond in new.get("conditions") or []:
            prev = before.get(cond["type"])
            if prev is not None and prev.get("status") == cond["status"] and prev.get("reason") == cond["reason"]:
                continue
            if cond["type"] == Type.STALLED and cond["status"] == "True":
                self.emit(raw, "Warning", cond["reason"], cond["message"])
            elif cond["type"] == Type.READY and cond["status"] == "True":
                self.emit(raw, "Normal", "Ready", cond["message"])
            elif cond["type"] == Type.READY and cond["reason"] in TROUBLE:
                self.emit(raw, "Warning", cond["reason"], cond["message"])
            elif cond["type"] == Type.READY and cond["reason"] in (Reason.MODEL_PREFETCHING, Reason.SCALING_FROM_ZERO):
                self.emit(raw, "Normal", cond["reason"], cond["message"])
            elif cond["type"] == Type.READY and prev is not None and prev.get("status") == "True":
                self.emit(raw, "Warning", "NotReady", f"{cond['reason']}: {cond['message']}")
            elif cond["type"] == Type.MODEL_CACHED and cond["status"] == "False":
                # Scale to zero downloading the model at every cold start: it works, slowly (cold_start.py).
                self.emit(raw, "Warning", cond["reason"], cond["message"])
            elif cond["type"] == Type.SCALED_OBJECT_FALLBACK and cond["status"] == "True":
                # KEDA's queries fail and it holds a fallback count: the fleet no longer follows its load.
                self.emit(raw, "Warning", "ScaledObjectFallbackTrue", cond["message"])
            elif cond["type"] in AUTOSCALER_CONDITIONS and prev is not None:
                self.emit(raw, "Normal", f"{cond['type']}{cond['status']}", cond["message"])


def _traffic(cr: QwenInference | None, result: Result, old: dict[str, Any]) -> list[dict[str, Any]] | None:
    """status.traffic as applied: the spec's split once this reconcile applied it; while Stalled or retrying the
    route keeps its old weights, and so does the status."""
    if cr is None or result.outcome.kind != "applied":
        kept = old.get("traffic")
        return list(kept) if kept else None
    return traffic_status(cr)


def _listener_missing(gateway: dict[str, Any], section: str | None, where: str) -> Outcome | None:
    """routing.gateway.sectionName naming no listener of the Gateway: Stalled naming the ones it has (a route to
    a missing listener sits unattached). Which listener has TLS is the Gateway's business (docs/gateway.md,
    "TLS"): a fleet picks the HTTPS one by its name."""
    if section is None:
        return None
    listeners = [str(li.get("name")) for li in (gateway.get("spec") or {}).get("listeners") or []]
    if section in listeners:
        return None
    return Outcome.stalled(
        "GatewayListenerNotFound",
        f"routing.gateway.sectionName {section} names no listener of Gateway {where}, whose listeners are "
        f"{', '.join(listeners) or 'none'}: name one of them (e.g. the HTTPS listener, for TLS), or remove sectionName "
        "to attach to every listener that accepts the route. Nothing of this spec was applied.")
