"""The change plan (reconcile/changes.py), table-tested: desired and observed children in, a ChangeSet out."""

from __future__ import annotations

import copy
from dataclasses import dataclass, field
from typing import Any

import pytest

from qwen_fleet.api import QwenInference
from qwen_fleet.config import OperatorConfig
from qwen_fleet.plan import make_plan
from qwen_fleet.reconcile.changes import ChangeSet, plan_changes
from qwen_fleet.render import Capabilities, render_children

H100 = "NVIDIA-H100-80GB-HBM3"
BASE: dict[str, Any] = {"model": {"name": "Qwen/Qwen3-4B-Instruct-2507"}, "gpu": {"product": H100}}
AUTOSCALED = {"autoscaling": {"enabled": True, "minReplicas": 1, "maxReplicas": 3}}
TWO = {"replicas": 2}
PREFLIGHT = {"parallelism": {"tensor": 2}, "nccl": {"preflight": {"enabled": True}}}
TP2 = {"parallelism": {"tensor": 2}}
ENV = {"engine": {"env": [{"name": "EXTRA_FLAG", "value": "1"}]}}
NODES2 = {"parallelism": {"pipeline": 2, "nodes": 2}}
KEDA = {"autoscaling": {"enabled": True, "engine": "keda", "minReplicas": 1, "maxReplicas": 3,
                        "keda": {"prometheusAddress": "http://prometheus.monitoring.svc:9090"}}}
ROUTED = {"routing": {"gateway": {"name": "gw"}}}
CACHE = {"model": {"name": "Qwen/Qwen3-4B-Instruct-2507", "cache": {"size": "10Gi"}}}
CACHE_DELETE = {"model": {"name": "Qwen/Qwen3-4B-Instruct-2507",
                          "cache": {"size": "10Gi", "retentionPolicy": {"whenRemoved": "Delete"}}}}
PICKER = ["ConfigMap/q-epp", "ServiceAccount/q-epp", "Role/q-epp", "RoleBinding/q-epp", "Deployment/q-epp",
          "Service/q-epp", "InferencePool/q", "HTTPRoute/q"]


def render(**extra: Any) -> list[dict[str, Any]]:
    cr = QwenInference.model_validate({"metadata": {"name": "q", "namespace": "ns", "uid": "u-1"},
                                       "spec": {**copy.deepcopy(BASE), **copy.deepcopy(extra)}})
    return render_children(cr, make_plan(cr, OperatorConfig()), Capabilities())


def stored(children: list[dict[str, Any]]) -> dict[tuple[str, str], dict[str, Any]]:
    """Children as the apiserver holds them after an apply: server metadata and a default added."""
    out = {}
    for i, child in enumerate(copy.deepcopy(children)):
        child["metadata"].update({"uid": f"c-{i}", "resourceVersion": str(100 + i)})
        if child["kind"] == "Deployment":
            child["spec"]["template"]["spec"]["schedulerName"] = "default-scheduler"
        out[(child["kind"], child["metadata"]["name"])] = child
    return out


def ready(children: dict[tuple[str, str], dict[str, Any]], kind: str, replicas: int = 1,
          available: str = "True") -> dict[tuple[str, str], dict[str, Any]]:
    """The workload of ``kind`` as its controller reports it when every replica (group) is up."""
    out = copy.deepcopy(children)
    obj = out[(kind, "q")]
    obj["metadata"]["generation"] = 2
    counts = {"replicas": replicas, "readyReplicas": replicas, "updatedReplicas": replicas, "observedGeneration": 2}
    if kind == "Deployment":
        obj["status"] = {**counts, "availableReplicas": replicas}
    else:
        obj["status"] = {**counts, "conditions": [{"type": "Available", "status": available}]}
    return out


def both(new: dict[tuple[str, str], dict[str, Any]], old: dict[tuple[str, str], dict[str, Any]]
         ) -> dict[tuple[str, str], dict[str, Any]]:
    """A fleet in migration: the old fleet's children plus the new workload."""
    workload = {k: v for k, v in new.items() if k[0] in ("Deployment", "LeaderWorkerSet")}
    return {**old, **workload}


def names(applies: Any) -> list[str]:
    return [f"{a.key[0]}/{a.key[1]}" for a in applies]


@dataclass
class Case:
    desired: list[dict[str, Any]] | None
    observed: dict[tuple[str, str], dict[str, Any]]
    batches: list[list[str]]
    dry_run: list[str] = field(default_factory=list)
    prune: list[str] = field(default_factory=list)
    undo: bool = False
    refused: bool = False
    looked_up: dict[tuple[str, str], dict[str, Any] | None] | None = None
    held: list[str] = field(default_factory=list)
    mounted: frozenset[str] = frozenset()


def _without(children: dict[tuple[str, str], dict[str, Any]], kind: str) -> dict[tuple[str, str], dict[str, Any]]:
    return {k: v for k, v in children.items() if k[0] != kind}


def _finalizing(children: dict[tuple[str, str], dict[str, Any]], kind: str) -> dict[tuple[str, str], Any]:
    """``kind`` deleted but held by a finalizer (KEDA's on a ScaledObject, finalizer.keda.sh)."""
    return _edited(children, kind, lambda o: o["metadata"].update(deletionTimestamp="2026-12-01T00:00:00Z",
                                                                  finalizers=["finalizer.keda.sh"]))


def _foreign(kind: str, name: str, owner: tuple[str, str] | None = None) -> dict[str, Any]:
    """An object someone else made under a child's name, as a lookup finds it."""
    meta: dict[str, Any] = {"name": name, "namespace": "ns", "uid": f"x-{kind}", "resourceVersion": "7"}
    if owner is not None:
        version = "qwenfleet.io/v1alpha1" if owner[0] == "QwenInference" else "apps/v1"
        meta["ownerReferences"] = [{"apiVersion": version, "kind": owner[0], "name": owner[1], "uid": "o-1",
                                    "controller": True}]
    return {"apiVersion": "v1", "kind": kind, "metadata": meta}


def _unannotated(children: dict[tuple[str, str], dict[str, Any]], kind: str, name: str) -> dict[tuple[str, str], Any]:
    out = copy.deepcopy(children)
    out[(kind, name)]["metadata"].pop("annotations", None)
    return out


def _edited(children: dict[tuple[str, str], dict[str, Any]], kind: str, edit: Any) -> dict[tuple[str, str], Any]:
    out = copy.deepcopy(children)
    edit(out[(kind, "q")])
    return out


CASES = {
    "create: the Deployment alone first, then the rest together; undone if refused": Case(
        render(**AUTOSCALED), {},
        [["Deployment/q"], ["Service/q", "HorizontalPodAutoscaler/q", "PodDisruptionBudget/q"]], undo=True),
    "create with the preflight ConfigMap": Case(
        render(**PREFLIGHT), {}, [["Deployment/q"], ["ConfigMap/q-nccl-preflight", "Service/q"]], undo=True),
    "unchanged: nothing": Case(render(**AUTOSCALED), stored(render(**AUTOSCALED)), []),
    "update of one child: one apply, no dry run": Case(
        render(engine={"maxNumSeqs": 64}), stored(render()), [["Deployment/q"]]),
    "a child edited by someone else is restored": Case(
        render(), _edited(stored(render()), "Service", lambda s: s["spec"].update(type="NodePort")),
        [["Service/q"]]),
    "a deleted child is recreated, in an existing fleet": Case(
        render(), {k: v for k, v in stored(render()).items() if k[0] != "Service"}, [["Service/q"]]),
    "removal of an env entry applies the Deployment": Case(render(), stored(render(**ENV)), [["Deployment/q"]]),
    "removal of the preflight: Deployment applied, ConfigMap pruned": Case(
        render(**TP2), stored(render(**PREFLIGHT)), [["Deployment/q"]], prune=["ConfigMap/q-nccl-preflight"]),
    "removal of autoscaling: replicas back (an apply), HPA and PDB pruned": Case(
        render(), stored(render(**AUTOSCALED)), [["Deployment/q"]],
        prune=["HorizontalPodAutoscaler/q", "PodDisruptionBudget/q"]),
    "shape change 1 -> 2 replicas: two changes, dry-run together first": Case(
        render(**TWO), stored(render()), [["Deployment/q", "PodDisruptionBudget/q"]],
        dry_run=["Deployment/q", "PodDisruptionBudget/q"]),
    "shape change to autoscaling: three changes checked together": Case(
        render(**AUTOSCALED), stored(render()),
        [["Deployment/q", "HorizontalPodAutoscaler/q", "PodDisruptionBudget/q"]],
        dry_run=["Deployment/q", "HorizontalPodAutoscaler/q", "PodDisruptionBudget/q"]),
    "the Deployment and the Service are never pruned; unknown kinds are not touched": Case(
        render(), {**stored(render()), ("Service", "q-old"): {"kind": "Service", "metadata": {"name": "q-old"}},
                   ("Secret", "q"): {"kind": "Secret", "metadata": {"name": "q"}}}, []),
    "multi-node: a new fleet is the LeaderWorkerSet alone first, then the Service": Case(
        render(**NODES2), {}, [["LeaderWorkerSet/q"], ["Service/q"]], undo=True),
    "multi-node, unchanged: nothing": Case(render(**NODES2), stored(render(**NODES2)), []),
    "multi-node, a new engine setting: the LeaderWorkerSet alone": Case(
        render(**NODES2, engine={"maxNumSeqs": 64}), stored(render(**NODES2)), [["LeaderWorkerSet/q"]]),
    "nodes 1 -> 2: the LeaderWorkerSet is made; the Service keeps the Deployment's pods, nothing pruned": Case(
        render(**NODES2), ready(stored(render()), "Deployment"), [["LeaderWorkerSet/q"]]),
    "nodes 1 -> 2, LeaderWorkerSet not Ready yet: nothing more": Case(
        render(**NODES2), both(stored(render(**NODES2)), ready(stored(render()), "Deployment")), []),
    "nodes 1 -> 2, LeaderWorkerSet ready but not Available: nothing more": Case(
        render(**NODES2), both(ready(stored(render(**NODES2)), "LeaderWorkerSet", available="False"),
                               ready(stored(render()), "Deployment")), []),
    "nodes 1 -> 2, LeaderWorkerSet Ready: the Service moves to the leaders, then the Deployment goes": Case(
        render(**NODES2), both(ready(stored(render(**NODES2)), "LeaderWorkerSet"),
                               ready(stored(render()), "Deployment")),
        [["Service/q"]], prune=["Deployment/q"]),
    "nodes 2 -> 1 with 2 replicas: Deployment made; Service and PDB held until it is Ready": Case(
        render(**TWO), ready(stored(render(**NODES2)), "LeaderWorkerSet"), [["Deployment/q"]]),
    "nodes 2 -> 1, Deployment Ready: Service to all pods, PDB created, the LeaderWorkerSet goes": Case(
        render(**TWO), both(ready(stored(render(**TWO)), "Deployment", replicas=2),
                            ready(stored(render(**NODES2)), "LeaderWorkerSet")),
        [["Service/q", "PodDisruptionBudget/q"]], dry_run=["Service/q", "PodDisruptionBudget/q"],
        prune=["LeaderWorkerSet/q"]),
    "autoscaled nodes 1 -> 2: HPA and PDB kept (not pruned) while the LeaderWorkerSet is made": Case(
        render(**NODES2, **AUTOSCALED), ready(stored(render(**AUTOSCALED)), "Deployment"), [["LeaderWorkerSet/q"]]),
    "autoscaled nodes 1 -> 2, Ready: the HPA retargets the LeaderWorkerSet (the PDB fits both), Deployment goes":
        Case(render(**NODES2, **AUTOSCALED), both(ready(stored(render(**NODES2, **AUTOSCALED)), "LeaderWorkerSet"),
                                                  ready(stored(render(**AUTOSCALED)), "Deployment")),
             [["Service/q", "HorizontalPodAutoscaler/q"]], dry_run=["Service/q", "HorizontalPodAutoscaler/q"],
             prune=["Deployment/q"]),
    # autoscaling.engine keda: a ScaledObject in the HPA's place, and never both at once.
    "create, engine keda: the ScaledObject with the rest, no HPA": Case(
        render(**KEDA), {}, [["Deployment/q"], ["Service/q", "ScaledObject/q", "PodDisruptionBudget/q"]], undo=True),
    "engine keda, unchanged: nothing": Case(render(**KEDA), stored(render(**KEDA)), []),
    "engine hpa -> keda: the HPA is deleted, the ScaledObject waits until it is gone": Case(
        render(**KEDA), stored(render(**AUTOSCALED)), [], prune=["HorizontalPodAutoscaler/q"]),
    "engine hpa -> keda, the HPA gone: the ScaledObject is made": Case(
        render(**KEDA), _without(stored(render(**AUTOSCALED)), "HorizontalPodAutoscaler"), [["ScaledObject/q"]]),
    "engine hpa -> keda with an engine change: the Deployment applied, the HPA deleted, the ScaledObject waits":
        Case(render(**KEDA, engine={"maxNumSeqs": 64}), stored(render(**AUTOSCALED)), [["Deployment/q"]],
             prune=["HorizontalPodAutoscaler/q"]),
    "engine keda -> hpa: the ScaledObject is deleted, the HPA waits until it is gone": Case(
        render(**AUTOSCALED), stored(render(**KEDA)), [], prune=["ScaledObject/q"]),
    "engine keda -> hpa, KEDA's finalizer holds the ScaledObject: nothing (no second delete, no HPA yet)": Case(
        render(**AUTOSCALED), _finalizing(stored(render(**KEDA)), "ScaledObject"), []),
    "engine keda -> hpa, the ScaledObject gone: the HPA is made": Case(
        render(**AUTOSCALED), _without(stored(render(**KEDA)), "ScaledObject"), [["HorizontalPodAutoscaler/q"]]),
    "engine keda turned off: replicas back (an apply), ScaledObject and PDB pruned": Case(
        render(), stored(render(**KEDA)), [["Deployment/q"]], prune=["ScaledObject/q", "PodDisruptionBudget/q"]),
    "engine keda, nodes 1 -> 2: the ScaledObject kept (it names the Deployment) while the LeaderWorkerSet is made":
        Case(render(**NODES2, **KEDA), ready(stored(render(**KEDA)), "Deployment"), [["LeaderWorkerSet/q"]]),
    # spec.routing: the picker's Deployment is a child like the others, never the fleet's workload.
    "create with routing: the fleet's Deployment alone first, the picker with the rest": Case(
        render(**ROUTED), {}, [["Deployment/q"], ["Service/q", *PICKER]], undo=True),
    "routing, unchanged: nothing (the picker's Deployment is no workload of another kind)": Case(
        render(**ROUTED), stored(render(**ROUTED)), []),
    "routing added to a running fleet: the picker's children, checked together first": Case(
        render(**ROUTED), stored(render()), [PICKER], dry_run=PICKER),
    "routing removed: the picker's config, Deployment, pool and route pruned; its Service and identity kept": Case(
        render(), stored(render(**ROUTED)), [],
        prune=["ConfigMap/q-epp", "Deployment/q-epp", "InferencePool/q", "HTTPRoute/q"]),
    "routing, nodes 1 -> 2: the LeaderWorkerSet is made; the picker's Deployment stays": Case(
        render(**NODES2, **ROUTED), ready(stored(render(**ROUTED)), "Deployment"), [["LeaderWorkerSet/q"]]),
    "routing, nodes 1 -> 2, Ready: the fleet's Deployment goes, never the picker's": Case(
        render(**NODES2, **ROUTED), both(ready(stored(render(**NODES2, **ROUTED)), "LeaderWorkerSet"),
                                         ready(stored(render(**ROUTED)), "Deployment")),
        [["Service/q", "InferencePool/q"]], dry_run=["Service/q", "InferencePool/q"], prune=["Deployment/q"]),
    "refused by the planner (Stalled): nothing, the running fleet is kept": Case(
        None, stored(render(**AUTOSCALED)), []),
    "refused by the apiserver for this generation: nothing until the spec changes": Case(
        render(**TWO), {}, [], refused=True),
    # Names held by objects that are not the fleet's (reconcile/ownership.py): nothing at all, the fleet held.
    "create, the Service's name held by someone's Service: nothing, held naming it": Case(
        render(), {}, [], looked_up={("Deployment", "q"): None, ("Service", "q"): _foreign("Service", "q")},
        held=["Service/q (owner: no owner)"]),
    "create, two names held, one by an object another controller owns: both named": Case(
        render(**AUTOSCALED), {}, [],
        looked_up={("Service", "q"): _foreign("Service", "q"),
                   ("PodDisruptionBudget", "q"): _foreign("PodDisruptionBudget", "q", owner=("Deployment", "web"))},
        held=["PodDisruptionBudget/q (owner: Deployment/web)", "Service/q (owner: no owner)"]),
    "a running fleet gains an autoscaler whose name is held: not even the Deployment changes": Case(
        render(**AUTOSCALED), stored(render()), [],
        looked_up={("HorizontalPodAutoscaler", "q"): _foreign("HorizontalPodAutoscaler", "q"),
                   ("PodDisruptionBudget", "q"): None},
        held=["HorizontalPodAutoscaler/q (owner: no owner)"]),
    "owned by another QwenInference of the same namespace: held": Case(
        render(), {}, [], looked_up={("Service", "q"): _foreign("Service", "q", owner=("QwenInference", "other"))},
        held=["Service/q (owner: QwenInference/other)"]),
    "a looked-up child that is the fleet's own (its label stripped): an observed child, not held": Case(
        render(), {}, [["Deployment/q"]], looked_up={("Deployment", "q"): None,
                                                    ("Service", "q"): stored(render())[("Service", "q")]}),
    "every name free: the plan as without a lookup": Case(
        render(), {}, [["Deployment/q"], ["Service/q"]], undo=True,
        looked_up={("Deployment", "q"): None, ("Service", "q"): None}),
    # The model-cache claim when model.cache leaves the spec (model.cache.retentionPolicy.whenRemoved).
    "model.cache removed, Retain (the default): the claim stays": Case(
        render(), stored(render(**CACHE)), [["Deployment/q"]]),
    "model.cache removed, a claim made before the policy (no annotation): it stays": Case(
        render(), _unannotated(stored(render(**CACHE)), "PersistentVolumeClaim", "q-model-cache"), [["Deployment/q"]]),
    "model.cache removed, Delete, no pod mounts it: pruned": Case(
        render(), stored(render(**CACHE_DELETE)), [["Deployment/q"]], prune=["PersistentVolumeClaim/q-model-cache"]),
    "model.cache removed, Delete, a pod still mounts it: kept until it is gone": Case(
        render(), stored(render(**CACHE_DELETE)), [["Deployment/q"]], mounted=frozenset({"q-model-cache"})),
    "model.cache added back to a retained claim: the claim is the fleet's, applied only if it differs": Case(
        render(**CACHE), stored(render(**CACHE)), []),
}


@pytest.mark.parametrize("case", CASES.values(), ids=list(CASES))
def test_change_plan(case: Case) -> None:
    changes = plan_changes(case.desired, case.observed, refused=case.refused, looked_up=case.looked_up,
                           mounted=case.mounted)
    assert [f.describe() for f in changes.held] == case.held
    assert [names(batch) for batch in changes.batches] == case.batches
    assert names(changes.dry_run) == case.dry_run
    assert [f"{p.kind}/{p.name}" for p in changes.prune] == case.prune
    assert changes.undo_on_refusal == (case.undo and bool(changes))
    assert bool(changes) == bool(case.batches or case.prune)


def test_prunes_carry_the_uid_and_api_version_of_what_was_seen() -> None:
    observed = stored(render(**AUTOSCALED))
    (hpa, pdb) = plan_changes(render(), observed).prune
    seen = observed[("HorizontalPodAutoscaler", "q")]["metadata"]["uid"]
    assert (hpa.api_version, hpa.uid) == ("autoscaling/v2", seen)
    assert pdb.api_version == "policy/v1"


def test_an_update_says_what_drifted_and_a_create_says_created() -> None:
    (apply,) = plan_changes(render(engine={"maxNumSeqs": 64}), stored(render())).applies
    assert apply.existing and any(".args" in d for d in apply.drifted)
    assert apply.describe().startswith("Deployment/q updated: the rendered object changed, .spec.template")
    first = plan_changes(render(), {}).batches[0][0]
    assert not first.existing and first.describe() == "Deployment/q created"


def test_every_wanted_child_not_seen_is_looked_up_and_a_held_plan_does_nothing_at_all() -> None:
    assert plan_changes(render(**AUTOSCALED), stored(render())).unseen == (
        ("HorizontalPodAutoscaler", "q"), ("PodDisruptionBudget", "q"))
    assert plan_changes(render(), stored(render())).unseen == ()
    # A prefetch holds the Deployment and the Service back: their names are looked up all the same.
    cache = {"model": {"name": "Qwen/Qwen3-4B-Instruct-2507", "cache": {"size": "1Gi", "prefetch": {"enabled": True}}}}
    first = plan_changes(render(**cache), {})
    assert ("Service", "q") in first.unseen and ("Service", "q") not in [a.key for a in first.applies]
    held = plan_changes(render(**AUTOSCALED), stored(render()),
                        looked_up={("PodDisruptionBudget", "q"): _foreign("PodDisruptionBudget", "q")})
    assert held.held and not held and not held.handover and not held.dry_run and not held.unseen


def test_nothing_to_do_is_falsy() -> None:
    assert not ChangeSet()
    assert not plan_changes(render(), stored(render()))


def test_autoscaling_turned_on_hands_the_replica_count_over_first() -> None:
    running = stored(render(replicas=3))
    changes = plan_changes(render(**AUTOSCALED), running)
    assert changes.handover == ({"apiVersion": "apps/v1", "kind": "Deployment",
                                 "metadata": {"name": "q", "namespace": "ns"}, "spec": {"replicas": 3}},)
    # Only at the switch: not for a new fleet, not while the HPA exists, not without autoscaling.
    assert plan_changes(render(**AUTOSCALED), {}).handover == ()
    autoscaled = stored(render(**AUTOSCALED))
    autoscaled[("Deployment", "q")]["spec"]["replicas"] = 3
    assert plan_changes(render(**AUTOSCALED, engine={"maxNumSeqs": 8}), autoscaled).handover == ()
    assert plan_changes(render(replicas=2), running).handover == ()


def test_engine_keda_turned_on_hands_the_replica_count_over_and_a_switch_does_not() -> None:
    running = stored(render(replicas=3))
    assert plan_changes(render(**KEDA), running).handover == (
        {"apiVersion": "apps/v1", "kind": "Deployment", "metadata": {"name": "q", "namespace": "ns"},
         "spec": {"replicas": 3}},)
    # Switching engines: replicas already belong to an autoscaler (the old one's HPA); the Deployment, applied
    # for another change meanwhile, still carries no replicas and nothing is handed over.
    autoscaled = stored(render(**AUTOSCALED))
    autoscaled[("Deployment", "q")]["spec"]["replicas"] = 3
    switch = plan_changes(render(**KEDA, engine={"maxNumSeqs": 8}), autoscaled)
    assert switch.handover == ()
    (deployment,) = switch.applies
    assert "replicas" not in deployment.obj["spec"]


def test_keda_without_its_crd_is_stalled_with_the_fix_and_hpa_needs_nothing() -> None:
    from qwen_fleet.reconcile.workload import missing_capability

    def plan_of(extra: dict[str, Any]) -> Any:
        cr = QwenInference.model_validate({"metadata": {"name": "q", "namespace": "ns"},
                                           "spec": {**copy.deepcopy(BASE), **copy.deepcopy(extra)}})
        return make_plan(cr, OperatorConfig())

    outcome = missing_capability(plan_of(KEDA), Capabilities())
    assert outcome is not None and (outcome.kind, outcome.reason) == ("stalled", "KedaMissing")
    assert "keda.sh/v1alpha1 scaledobjects" in outcome.message and "install KEDA" in outcome.message
    assert "autoscaling.engine to hpa" in outcome.message
    assert missing_capability(plan_of(KEDA), Capabilities(keda=True)) is None
    assert missing_capability(plan_of(AUTOSCALED), Capabilities()) is None
    # Engine keda with autoscaling off asks for no ScaledObject, so it needs no KEDA either.
    off = {"autoscaling": {**KEDA["autoscaling"], "enabled": False}}
    assert missing_capability(plan_of(off), Capabilities()) is None


def test_a_workload_is_ready_only_when_its_controller_says_so_for_its_generation() -> None:
    from qwen_fleet.reconcile.workload import rollout_view, workload_ready

    lws = ready(stored(render(**NODES2)), "LeaderWorkerSet")[("LeaderWorkerSet", "q")]
    assert workload_ready(lws)
    assert rollout_view(lws)["status"] == {  # type: ignore[index]
        "replicas": 1, "readyReplicas": 1, "updatedReplicas": 1, "availableReplicas": 1, "observedGeneration": 2}
    stale = copy.deepcopy(lws)
    stale["metadata"]["generation"] = 3  # a spec change its controller has not seen yet
    assert not workload_ready(stale)
    assert not workload_ready(stored(render(**NODES2))[("LeaderWorkerSet", "q")])  # no status yet
    assert not workload_ready(None)
    dep = ready(stored(render(**TWO)), "Deployment", replicas=2)[("Deployment", "q")]
    assert workload_ready(dep)
    dep["status"]["availableReplicas"] = 1
    assert not workload_ready(dep)


def test_multi_node_without_the_leaderworkerset_api_is_stalled_with_the_fix() -> None:
    from qwen_fleet.reconcile.workload import missing_capability

    cr = QwenInference.model_validate({"metadata": {"name": "q", "namespace": "ns"},
                                       "spec": {**copy.deepcopy(BASE), **copy.deepcopy(NODES2)}})
    plan = make_plan(cr, OperatorConfig())
    outcome = missing_capability(plan, Capabilities())
    assert outcome is not None and (outcome.kind, outcome.reason) == ("stalled", "LeaderWorkerSetMissing")
    assert "install LeaderWorkerSet" in outcome.message and "parallelism.nodes to 1" in outcome.message
    assert missing_capability(plan, Capabilities(leader_worker_set=True)) is None
    single = QwenInference.model_validate({"metadata": {"name": "q", "namespace": "ns"}, "spec": copy.deepcopy(BASE)})
    assert missing_capability(make_plan(single, OperatorConfig()), Capabilities()) is None


def test_routing_without_its_crds_is_stalled_naming_the_missing_kind() -> None:
    from qwen_fleet.reconcile.workload import missing_capability

    def plan_of(routing: dict[str, Any]) -> Any:
        cr = QwenInference.model_validate({"metadata": {"name": "q", "namespace": "ns"},
                                           "spec": {**copy.deepcopy(BASE), "routing": routing}})
        return make_plan(cr, OperatorConfig())

    classes = {"priorityClasses": [{"name": "interactive", "priority": 10}]}
    everything = Capabilities(inference_pool=True, inference_objective=True, http_route=True)
    outcome = missing_capability(plan_of({}), Capabilities())
    assert outcome is not None and (outcome.kind, outcome.reason) == ("stalled", "InferencePoolMissing")
    assert "inference.networking.k8s.io/v1 inferencepools" in outcome.message
    assert "gateway-api-inference-extension v1.5.0" in outcome.message and "remove routing." in outcome.message
    assert missing_capability(plan_of({}), Capabilities(inference_pool=True)) is None
    outcome = missing_capability(plan_of({"gateway": {"name": "gw"}}), Capabilities(inference_pool=True))
    assert outcome is not None and outcome.reason == "HTTPRouteMissing"
    assert "gateway.networking.k8s.io/v1 httproutes" in outcome.message and "remove routing.gateway" in outcome.message
    outcome = missing_capability(plan_of(classes), Capabilities(inference_pool=True, http_route=True))
    assert outcome is not None and outcome.reason == "InferenceObjectiveMissing"
    assert "remove routing.priorityClasses" in outcome.message
    assert missing_capability(plan_of({"gateway": {"name": "gw"}, **classes}), everything) is None
