"""Multi-node, data- and expert-parallel planning: bad combinations the catalog can judge (the CRD cannot: it
does not know which models have experts), the layout of ranks over pods, and the expert weight split."""

from __future__ import annotations

from typing import Any

import pytest

from qwen_fleet.api import QwenInference
from qwen_fleet.config import OperatorConfig
from qwen_fleet.plan import make_plan
from qwen_fleet.plan.parallel import Layout, format_layout

H100 = "NVIDIA-H100-80GB-HBM3"


def _cr(model: str, parallelism: dict[str, Any], **engine: Any) -> QwenInference:
    return QwenInference.model_validate({"metadata": {"name": "x", "namespace": "d"}, "spec": {
        "model": {"name": model}, "gpu": {"product": H100}, "parallelism": parallelism, "engine": engine}})


# (id, model, parallelism, engine, reason, a phrase that names the fix)
REFUSED = [
    ("expert-on-dense-qwen3", "Qwen/Qwen3-8B", {"tensor": 2, "expert": True}, {}, "ExpertParallelNeedsMoE",
     "remove parallelism.expert"),
    ("expert-on-dense-qwen25", "Qwen/Qwen2.5-7B-Instruct", {"data": 2, "expert": True}, {},
     "ExpertParallelNeedsMoE", "remove parallelism.expert"),
    ("expert-on-dense-qwen36", "Qwen/Qwen3.6-27B", {"tensor": 4, "data": 2, "expert": True, "nodes": 2}, {},
     "ExpertParallelNeedsMoE", "use parallelism.tensor"),
    ("experts-over-3", "Qwen/Qwen3-30B-A3B", {"data": 3, "expert": True}, {}, "ExpertsNotDivisible",
     "choose tensor x data among 2, 4, 8"),
    ("experts-over-6", "Qwen/Qwen3.5-397B-A17B", {"tensor": 2, "data": 3, "expert": True}, {},
     "ExpertsNotDivisible", "choose tensor x data among"),
    ("397b-on-one-node", "Qwen/Qwen3.5-397B-A17B", {"tensor": 8}, {}, "WeightsDoNotFit", "use more GPUs"),
    ("235b-bf16-on-4-gpus", "Qwen/Qwen3-235B-A22B-Instruct-2507", {"tensor": 4}, {}, "WeightsDoNotFit",
     "use more GPUs"),
    ("tensor-6-over-nodes", "Qwen/Qwen3-235B-A22B", {"tensor": 6, "pipeline": 2, "nodes": 2}, {},
     "TensorSizeDoesNotDivideHeads", "valid sizes"),
    ("pipeline-beyond-layers", "Qwen/Qwen3-0.6B", {"pipeline": 32, "nodes": 4}, {},
     "PipelineSizeExceedsLayers", "exceeds the 28 layers"),
]


@pytest.mark.parametrize("case", REFUSED, ids=[c[0] for c in REFUSED])
def test_bad_combination_is_refused_with_the_fix(case: tuple[Any, ...]) -> None:
    _, model, parallelism, engine, reason, fix = case
    plan = make_plan(_cr(model, parallelism, **engine), OperatorConfig())
    assert not plan.feasible
    problem = next(p for p in plan.problems if p.reason == reason)
    assert fix in problem.message, problem.message


ACCEPTED = [
    ("Qwen/Qwen3.5-397B-A17B", {"tensor": 8, "pipeline": 2, "nodes": 2}, 16, 8),
    ("Qwen/Qwen3-30B-A3B-Instruct-2507", {"data": 4, "expert": True}, 4, 4),
    ("Qwen/Qwen3-235B-A22B-Instruct-2507-FP8", {"tensor": 4, "data": 4, "expert": True, "nodes": 2}, 16, 8),
]


@pytest.mark.parametrize("case", ACCEPTED, ids=[c[0] for c in ACCEPTED])
def test_examples_plan_and_each_pod_asks_for_its_share(case: tuple[Any, ...]) -> None:
    model, parallelism, per_replica, per_pod = case
    plan = make_plan(_cr(model, parallelism), OperatorConfig())
    assert plan.feasible, plan.problems
    assert (plan.gpus_per_replica, plan.gpus_per_pod) == (per_replica, per_pod)


def test_expert_parallel_holds_each_expert_once_per_replica() -> None:
    # Qwen3-30B-A3B: 30.5B total, 3.3B active, 8 of 128 experts per token, so the routed experts hold
    # (30.5 - 3.3) / (1 - 8/128) = 29.0133B parameters and the rest 1.4867B. bf16 over data 4 with experts
    # spread: 2 bytes x (1.4867 + 29.0133 / 4) B = 17.48 GB = 16.28 GiB per GPU; without: all 30.5B.
    spread = make_plan(_cr("Qwen/Qwen3-30B-A3B", {"data": 4, "expert": True}), OperatorConfig())
    copied = make_plan(_cr("Qwen/Qwen3-30B-A3B", {"data": 4}), OperatorConfig())
    assert spread.capacity is not None and copied.capacity is not None
    assert spread.capacity.weights_gi_b_per_gpu == pytest.approx(16.28, abs=0.01)
    assert copied.capacity.weights_gi_b_per_gpu == pytest.approx(30.5e9 * 2 / 2**30, abs=0.01)


def test_dense_data_parallel_is_accepted_with_a_warning() -> None:
    plan = make_plan(_cr("Qwen/Qwen3-8B", {"data": 2}), OperatorConfig())
    assert plan.feasible
    assert any("replicas give the same throughput" in w for w in plan.warnings)


def test_layout_follows_vllms_rank_order() -> None:
    # Ranks are (data, pipeline, tensor) with tensor fastest; each node takes a consecutive slice.
    layout = Layout(tensor=4, pipeline=2, data=2, nodes=4)
    assert [layout.pod_ranks(p) for p in range(4)] == [([0], [0]), ([0], [1]), ([1], [0]), ([1], [1])]
    assert layout.data_ranks_per_pod == 1
    dp = Layout(tensor=4, data=4, expert=True, nodes=2)
    assert [dp.pod_ranks(p) for p in range(2)] == [([0, 1], [0]), ([2, 3], [0])]
    assert (dp.data_ranks_per_pod, dp.expert_size) == (2, 16)
    lines = format_layout(dp)
    assert "leader (API server)" in lines[1] and "worker (headless)" in lines[2]
