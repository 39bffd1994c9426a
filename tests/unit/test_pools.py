"""spec.pools (length-aware pools): the plan of each pool, the Deployments, the per-pool InferencePools, pickers
and objectives, the HTTPRoute's header rules, status and the change plan, against values written by hand from
the spec (docs/routing.md "Length-aware pools"). The refusals of bad specs are rows of tests/invalid_specs.py."""

from __future__ import annotations

import copy
from pathlib import Path
from typing import Any

import pytest

from qwen_fleet.api import QwenInference
from qwen_fleet.cli import main
from qwen_fleet.config import OperatorConfig
from qwen_fleet.plan import make_plan
from qwen_fleet.reconcile.changes import plan_changes
from qwen_fleet.reconcile.kinds import may_prune
from qwen_fleet.reconcile.status import Observed, Outcome, compute_status, pools_status
from qwen_fleet.reconcile.workload import pools_rollout_view
from qwen_fleet.render import ALL_CAPABILITIES, render_children

SHORT = {"name": "short", "maxRequestTokens": 4096, "replicas": 6, "engine": {"maxNumSeqs": 256}}
LONG = {"name": "long", "maxRequestTokens": 32768, "replicas": 2, "engine": {"maxNumSeqs": 16}}
SPEC: dict[str, Any] = {
    "model": {"name": "Qwen/Qwen3-8B"}, "gpu": {"product": "NVIDIA-H100-80GB-HBM3"}, "pools": [SHORT, LONG],
    "routing": {"gateway": {"name": "gw", "namespace": "gateways"},
                "priorityClasses": [{"name": "interactive", "priority": 10}]}}


def _cr(**changes: Any) -> QwenInference:
    spec = copy.deepcopy(SPEC)
    spec.update(copy.deepcopy(changes))
    return QwenInference.model_validate({"metadata": {"name": "chat", "namespace": "llm", "uid": "u-1"},
                                         "spec": spec})


def _children(cr: QwenInference | None = None) -> dict[tuple[str, str], dict[str, Any]]:
    cr = cr or _cr()
    return {(c["kind"], c["metadata"]["name"]): c
            for c in render_children(cr, make_plan(cr, OperatorConfig()), ALL_CAPABILITIES)}


def _args(deployment: dict[str, Any]) -> dict[str, str]:
    args = deployment["spec"]["template"]["spec"]["containers"][0]["args"]
    return {a: args[i + 1] for i, a in enumerate(args[:-1]) if a.startswith("--") and not args[i + 1].startswith("--")}


def test_each_pool_is_a_deployment_of_the_same_model_with_its_own_length_and_batch() -> None:
    out = _children()
    short, long = out[("Deployment", "chat-short")], out[("Deployment", "chat-long")]
    assert ("Deployment", "chat") not in out
    assert (short["spec"]["replicas"], long["spec"]["replicas"]) == (6, 2)
    # maxModelLen defaults to the pool's bound; maxNumSeqs is the pool's.
    assert (_args(short)["--max-model-len"], _args(short)["--max-num-seqs"]) == ("4096", "256")
    assert (_args(long)["--max-model-len"], _args(long)["--max-num-seqs"]) == ("32768", "16")
    for dep in (short, long):  # one model, one served name, priority scheduling for the classes
        assert (_args(dep)["--model"], _args(dep)["--served-model-name"]) == ("Qwen/Qwen3-8B", "chat")
        assert _args(dep)["--scheduling-policy"] == "priority"


def test_the_pools_deployments_never_select_each_others_pods_and_the_service_selects_all() -> None:
    out = _children()
    for pool in ("short", "long"):
        dep = out[("Deployment", f"chat-{pool}")]
        want = {"qwenfleet.io/inference": "chat", "qwenfleet.io/pool": pool}
        assert dep["spec"]["selector"]["matchLabels"] == want
        assert dep["spec"]["template"]["metadata"]["labels"].items() >= want.items()
        assert dep["metadata"]["labels"]["qwenfleet.io/pool"] == pool
    assert out[("Service", "chat")]["spec"]["selector"] == {"qwenfleet.io/inference": "chat"}
    assert out[("PodDisruptionBudget", "chat")]["spec"]["selector"]["matchLabels"] == {"qwenfleet.io/inference": "chat"}


def test_a_pool_sets_max_model_len_above_its_bound() -> None:
    short = {**SHORT, "engine": {"maxModelLen": 6144, "maxNumBatchedTokens": 8192}}
    dep = _children(_cr(pools=[short, LONG]))[("Deployment", "chat-short")]
    assert (_args(dep)["--max-model-len"], _args(dep)["--max-num-batched-tokens"]) == ("6144", "8192")


def test_each_pool_has_its_own_inference_pool_picker_and_objectives() -> None:
    out = _children()
    for pool in ("short", "long"):
        ip = out[("InferencePool", f"chat-{pool}")]
        assert ip["spec"]["selector"]["matchLabels"] == {"qwenfleet.io/inference": "chat", "qwenfleet.io/pool": pool}
        assert ip["spec"]["endpointPickerRef"]["name"] == f"chat-{pool}-epp"
        args = out[("Deployment", f"chat-{pool}-epp")]["spec"]["template"]["spec"]["containers"][0]["args"]
        assert args[args.index("--pool-name") + 1] == f"chat-{pool}"
        assert out[("Service", f"chat-{pool}-epp")]["spec"]["selector"] == {
            "qwenfleet.io/endpoint-picker": f"chat-{pool}"}
        for kind in ("ServiceAccount", "Role", "RoleBinding", "ConfigMap"):
            assert (kind, f"chat-{pool}-epp") in out
        objective = out[("InferenceObjective", f"chat-{pool}-interactive")]
        assert objective["spec"]["poolRef"]["name"] == f"chat-{pool}"  # a picker reads only its pool's
        assert objective["metadata"]["annotations"]["qwenfleet.io/vllm-priority"] == "-10"
    assert ("InferencePool", "chat") not in out and ("Deployment", "chat-epp") not in out


def _rules(cr: QwenInference) -> list[tuple[list[list[dict[str, str]]], str]]:
    route = _children(cr)[("HTTPRoute", "chat")]
    return [([m.get("headers", []) for m in r["matches"]], r["backendRefs"][0]["name"])
            for r in route["spec"]["rules"]]


def _header(value: str, name: str = "x-qwen-pool") -> list[dict[str, str]]:
    return [{"type": "Exact", "name": name, "value": value}]


def test_the_route_matches_the_pool_header_and_sends_the_rest_to_the_longest_pool() -> None:
    assert _rules(_cr()) == [([_header("short")], "chat-short"), ([_header("long"), []], "chat-long")]


def test_the_default_pool_and_the_header_are_the_specs() -> None:
    cr = _cr(routing={**SPEC["routing"], "defaultPool": "short", "poolHeader": "x-length-class"})
    assert _rules(cr) == [([_header("short", "x-length-class"), []], "chat-short"),
                          ([_header("long", "x-length-class")], "chat-long")]


def test_the_fleet_is_planned_per_pool() -> None:
    plan = make_plan(_cr(), OperatorConfig())
    assert not plan.problems and plan.replicas == 8 and plan.capacity is None
    assert [(p.pool.name, p.plan.replicas, p.plan.capacity.max_model_len if p.plan.capacity else None)
            for p in plan.pools] == [("short", 6, 4096), ("long", 2, 32768)]


def test_a_pool_that_does_not_fit_stalls_the_fleet_naming_the_pool() -> None:
    # Qwen3-8B's weights fit a 24 GB A10G; one sequence of a 1M-token window does not fit what is left.
    huge = {"name": "huge", "maxRequestTokens": 1_048_576, "replicas": 1}
    plan = make_plan(_cr(gpu={"product": "NVIDIA-A10G"}, pools=[SHORT, huge]), OperatorConfig())
    assert plan.problems and all(p.message.startswith("pools[huge]: ") for p in plan.problems), plan.problems


def test_a_pool_whose_merged_engine_breaks_an_engine_rule_stalls() -> None:
    """spec.engine turns chunked prefill off; the short pool's batch budget is below its maxModelLen: no CEL rule
    sees both, so the planner refuses it (Stalled, naming the pool)."""
    short = {**SHORT, "engine": {"maxNumBatchedTokens": 2048, "maxNumSeqs": 256}}
    plan = make_plan(_cr(engine={"enableChunkedPrefill": False}, pools=[short, LONG]), OperatorConfig())
    assert [p.reason for p in plan.problems] == ["InvalidPool"]
    assert plan.problems[0].message.startswith("pools[short]: ")
    assert "maxNumBatchedTokens must be at least engine.maxModelLen" in plan.problems[0].message


def _deployment(replicas: int, ready: int, generation: int = 2, seen: int = 2) -> dict[str, Any]:
    return {"kind": "Deployment", "metadata": {"generation": generation}, "spec": {"replicas": replicas},
            "status": {"observedGeneration": seen, "replicas": replicas, "readyReplicas": ready,
                       "updatedReplicas": replicas, "availableReplicas": ready}}


def test_the_fleet_is_ready_when_every_pool_is() -> None:
    cr = _cr()
    plan = make_plan(cr, OperatorConfig())

    def ready(*deps: dict[str, Any] | None) -> tuple[str, str, int]:
        status = compute_status(None, 1, Outcome.applied(), plan, Observed(deployment=pools_rollout_view(list(deps))),
                                "2026-12-01T00:00:00Z")
        cond = next(c for c in status["conditions"] if c["type"] == "Ready")
        return cond["status"], cond["reason"], status["readyReplicas"]

    assert ready(_deployment(6, 6), _deployment(2, 2)) == ("True", "Ready", 8)
    assert ready(_deployment(6, 6), _deployment(2, 1))[:2] == ("False", "RollingOut")
    assert ready(_deployment(6, 6), _deployment(2, 2, generation=3))[:2] == ("False", "RollingOut")
    assert ready(_deployment(6, 6), None)[:2] == ("False", "Creating")


def test_status_lists_each_pools_bounds_header_and_counts() -> None:
    cr = _cr()
    plan = make_plan(cr, OperatorConfig())
    entries = pools_status(plan, {"short": _deployment(6, 5), "long": None}, "x-qwen-pool", "long")
    assert [{k: e[k] for k in ("name", "maxRequestTokens", "maxModelLen", "header", "default", "deployment",
                               "inferencePool", "replicas", "readyReplicas")} for e in entries] == [
        {"name": "short", "maxRequestTokens": 4096, "maxModelLen": 4096, "header": "x-qwen-pool: short",
         "default": False, "deployment": "chat-short", "inferencePool": "chat-short", "replicas": 6,
         "readyReplicas": 5},
        {"name": "long", "maxRequestTokens": 32768, "maxModelLen": 32768, "header": "x-qwen-pool: long",
         "default": True, "deployment": "chat-long", "inferencePool": "chat-long", "replicas": 0,
         "readyReplicas": 0}]
    # The short pool's KV cache holds more 4K sequences than the long pool's holds 32K ones.
    assert entries[0]["maxConcurrentSequences"] > entries[1]["maxConcurrentSequences"]
    QwenInference.model_validate({"metadata": {"name": "chat"}, "spec": SPEC, "status": {"pools": entries}})


def test_a_new_fleet_applies_every_pools_deployment_first() -> None:
    desired = list(_children().values())
    changes = plan_changes(desired, {})
    assert [a.key for a in changes.batches[0]] == [("Deployment", "chat-short"), ("Deployment", "chat-long")]
    assert ("Deployment", "chat-short-epp") in [a.key for a in changes.batches[1]]


def test_a_removed_pool_loses_its_deployment_and_picker_but_never_the_fleets_service() -> None:
    three = [SHORT, {**SHORT, "name": "medium", "maxRequestTokens": 16384}, LONG]
    observed = _children(_cr(pools=three))
    changes = plan_changes(list(_children().values()), observed)
    pruned = sorted((p.kind, p.name) for p in changes.prune)
    assert pruned == [("ConfigMap", "chat-medium-epp"), ("Deployment", "chat-medium"),
                      ("Deployment", "chat-medium-epp"), ("InferenceObjective", "chat-medium-interactive"),
                      ("InferencePool", "chat-medium")]
    # The picker's Service and identity stay, as for routing turned off (the operator may not delete them).


@pytest.mark.parametrize(("kind", "name", "labels", "pruned"), [
    ("Deployment", "chat", {"qwenfleet.io/inference": "chat"}, False),  # the fleet's own workload
    ("Deployment", "chat-medium", {"qwenfleet.io/pool": "medium"}, True),
    ("Deployment", "chat-medium-epp", {"qwenfleet.io/endpoint-picker": "chat-medium"}, True),
    ("Deployment", "chat-epp", {}, True),
    ("Service", "chat-medium-epp", {"qwenfleet.io/pool": "medium"}, False),
])
def test_which_children_may_be_pruned(kind: str, name: str, labels: dict[str, str], pruned: bool) -> None:
    assert may_prune(kind, name, "chat", labels) is pruned


def test_qwen_fleet_plan_plans_each_pool(capsys: pytest.CaptureFixture[str]) -> None:
    """``qwen-fleet plan -f`` on a spec with pools: one layout and one table row per pool, at its own length."""
    example = Path(__file__).resolve().parents[2] / "examples" / "qwen3-8b-length-pools.yaml"
    assert main(["plan", "-f", str(example)]) == 0
    out = capsys.readouterr().out
    assert "qwen3-8b-chat-short:" in out and "qwen3-8b-chat-long:" in out
    rows = [line.split() for line in out.splitlines() if line.startswith("Qwen/Qwen3-8B ")]
    assert [row[5] for row in rows] == ["4,096", "32,768"]  # CONTEXT, per pool
