"""The planner's proposals (plan/propose.py): each one a spec the planner itself then accepts."""

from __future__ import annotations

from pathlib import Path

import pytest
import yaml

from qwen_fleet.api import QwenInference
from qwen_fleet.catalog import all_models, find_gpu, find_model
from qwen_fleet.catalog.types import GpuFacts, ModelFacts
from qwen_fleet.cli import main
from qwen_fleet.config import OperatorConfig
from qwen_fleet.plan import make_plan
from qwen_fleet.plan.propose import Constraints, Proposal, propose_layouts

GPU_NAMES = ("H100", "H200", "A10G", "L40S", "B200")
SERVABLE = [m for m in all_models() if m.engine_unsupported is None]


def _gpu(name: str) -> GpuFacts:
    gpu = find_gpu(name)
    assert gpu is not None, name
    return gpu


def _model(name: str) -> ModelFacts:
    model = find_model(name)
    assert model is not None, name
    return model


def _replan(proposal: Proposal, gpu: GpuFacts) -> QwenInference:
    return QwenInference.model_validate({"metadata": {"name": "p", "namespace": "ns"},
                                         "spec": proposal.spec(gpu)})


@pytest.mark.parametrize("gpu_name", GPU_NAMES)
def test_every_proposal_for_every_catalog_model_is_accepted_as_a_spec(gpu_name: str) -> None:
    gpu = _gpu(gpu_name)
    refused, proposed = [], 0
    for model in SERVABLE:
        for proposal in propose_layouts(model, gpu):
            proposed += 1
            plan = make_plan(_replan(proposal, gpu), OperatorConfig())
            if plan.problems:
                refused.append((model.name, proposal.spec(gpu), [p.reason for p in plan.problems]))
            assert plan.capacity is not None and plan.capacity.max_model_len == proposal.capacity.max_model_len
    assert refused == []
    assert proposed >= len(SERVABLE)  # every servable model gets at least one layout within 4 nodes of 8


def test_the_397b_on_h100_needs_a_node_in_fp8_or_two_in_bfloat16() -> None:
    # 403e9 parameters: ~403 GB in FP8 = 47 GiB per GPU over 8 H100s (73.3 GiB usable each); ~806 GB in bfloat16
    # = 94 GiB per GPU over 8, so two nodes with a pipeline stage each.
    gpu = _gpu("H100")
    proposals = propose_layouts(_model("Qwen/Qwen3.5-397B-A17B"), gpu)
    shapes = {(p.model.name, p.quantization): (p.layout.tensor, p.layout.pipeline, p.layout.nodes) for p in proposals}
    assert shapes == {("Qwen/Qwen3.5-397B-A17B-FP8", None): (8, 1, 1), ("Qwen/Qwen3.5-397B-A17B", "fp8"): (8, 1, 1),
                      ("Qwen/Qwen3.5-397B-A17B", None): (8, 2, 2)}
    assert proposals[0].model.name == "Qwen/Qwen3.5-397B-A17B-FP8"  # the published checkpoint first at a tie


def test_constraints_narrow_the_proposals() -> None:
    gpu = _gpu("L40S")
    model = _model("Qwen/Qwen2.5-72B-Instruct")
    # 145 GB in bfloat16 does not fit 4 GPUs of 44 GiB at a 32k context with nodes of 2: pipeline over nodes.
    small_nodes = propose_layouts(model, gpu, Constraints(max_gpus_per_node=2, context=32768))
    assert small_nodes and all(p.layout.tensor <= 2 for p in small_nodes)
    assert all(p.capacity.max_model_len == 32768 for p in small_nodes)
    assert any(p.layout.nodes > 1 for p in small_nodes)
    # A concurrency target is met by replicas of the smallest layout.
    busy = propose_layouts(model, gpu, Constraints(context=8192, concurrency=100))
    assert busy and all(p.replicas * int(p.capacity.max_concurrency) >= 100 for p in busy)
    assert propose_layouts(model, gpu, Constraints(max_gpus_per_node=1, max_nodes=1)) == []


def test_a_model_vllm_cannot_load_gets_no_proposal() -> None:
    assert propose_layouts(_model("Qwen/Qwen-7B"), _gpu("H100")) == []


def test_fp8_on_the_fly_only_where_the_gpu_runs_it() -> None:
    t4 = _gpu("T4")  # compute capability 7.5: no FP8 kernels
    assert all(p.quantization is None for p in propose_layouts(_model("Qwen/Qwen3-8B"), t4))
    assert any(p.quantization == "fp8" for p in propose_layouts(_model("Qwen/Qwen3-8B"), _gpu("A10G")))


def test_a_spec_that_does_not_fit_names_layouts_that_do() -> None:
    cr = QwenInference.model_validate({"metadata": {"name": "big", "namespace": "ns"}, "spec": {
        "model": {"name": "Qwen/Qwen3.5-397B-A17B"}, "gpu": {"product": "NVIDIA-H100-80GB-HBM3"},
        "parallelism": {"tensor": 8}}})
    (problem,) = make_plan(cr, OperatorConfig()).problems
    assert problem.reason == "WeightsDoNotFit"
    assert "Layouts that fit: Qwen/Qwen3.5-397B-A17B-FP8 (FP8 block 128x128): 8 x H100-80GB per replica" in \
        problem.message


def test_plan_command_prints_the_layouts_and_the_first_as_a_spec(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["plan", "--model", "Qwen/Qwen3.5-397B-A17B", "--gpu", "h100", "--max-nodes", "2"]) == 1
    out = capsys.readouterr().out
    layouts = out[out.index("layouts that fit"):]
    assert "Qwen/Qwen3.5-397B-A17B-FP8 (FP8 block 128x128): 8 x H100-80GB per replica on 1 node(s)" in layouts
    spec = yaml.safe_load(layouts[layouts.index("spec of the first:") + len("spec of the first:"):])
    assert spec["spec"]["model"]["name"] == "Qwen/Qwen3.5-397B-A17B-FP8"
    assert spec["spec"]["parallelism"] == {"tensor": 8, "pipeline": 1, "nodes": 1}
    assert main(["plan", "--model", "Qwen/Qwen3.5-397B-A17B", "--gpu", "a10g", "--max-nodes", "1"]) == 1
    assert "layouts that fit: none within 1 node(s) of 8 A10G" in capsys.readouterr().out


def test_plan_of_a_file_that_does_not_fit_prints_the_layouts_that_do(
        tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    cr = {"apiVersion": "qwenfleet.io/v1alpha1", "kind": "QwenInference", "metadata": {"name": "big"},
          "spec": {"model": {"name": "Qwen/Qwen3.5-397B-A17B"}, "gpu": {"product": "NVIDIA-H100-80GB-HBM3"},
                   "parallelism": {"tensor": 8}, "engine": {"maxModelLen": 65536}}}
    path = tmp_path / "big.yaml"
    path.write_text(yaml.safe_dump(cr))
    assert main(["plan", "-f", str(path)]) == 1
    out = capsys.readouterr().out
    assert "  layouts that fit:\n    Qwen/Qwen3.5-397B-A17B-FP8 (FP8 block 128x128): 8 x H100-80GB" in out
    assert "maxModelLen 65,536" in out
