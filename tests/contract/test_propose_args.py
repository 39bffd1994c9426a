"""Every layout the planner proposes (plan/propose.py), rendered as the operator would, parses in vLLM 0.32's own
argument parser with the proposal's sizes: every catalog model on H100, H200, A10G, L40S and B200."""

from __future__ import annotations

import pytest

from qwen_fleet.api import QwenInference
from qwen_fleet.catalog import all_models, find_gpu
from qwen_fleet.config import OperatorConfig
from qwen_fleet.plan import make_plan
from qwen_fleet.plan.propose import propose_layouts
from qwen_fleet.render.engine_args import engine_args, multi_node_args
from tests.contract.test_engine_args import parse_with_vllm

pytestmark = pytest.mark.vllm
GPU_NAMES = ("H100", "H200", "A10G", "L40S", "B200")


def _proposed() -> list[QwenInference]:
    crs = []
    for gpu_name in GPU_NAMES:
        gpu = find_gpu(gpu_name)
        assert gpu is not None
        for model in all_models():
            for i, proposal in enumerate(propose_layouts(model, gpu)):
                crs.append(QwenInference.model_validate({"metadata": {"name": f"p{i}", "namespace": "ns"},
                                                         "spec": proposal.spec(gpu)}))
    return crs


def test_every_proposal_parses_in_vllm_with_its_sizes(vllm_python: str) -> None:
    crs = _proposed()
    argvs = []
    for cr in crs:
        plan = make_plan(cr, OperatorConfig())
        assert plan.problems == (), (cr.spec.model.name, plan.problems)
        nodes = cr.spec.parallelism.nodes
        argvs.append(engine_args(cr, plan) + (multi_node_args(cr, leader=True) if nodes > 1 else []))
    parsed = parse_with_vllm(vllm_python, argvs)
    refused = [(cr.spec.model.name, argv, got["error"]) for cr, argv, got in zip(crs, argvs, parsed, strict=True)
               if "error" in got]
    assert refused == []
    for cr, got in zip(crs, parsed, strict=True):
        spec = cr.spec
        assert (got["model"], got["quantization"], got["max_model_len"]) == (
            spec.model.name, spec.engine.quantization, spec.engine.max_model_len)
        assert (got["tensor_parallel_size"], got["pipeline_parallel_size"]) == (
            spec.parallelism.tensor, spec.parallelism.pipeline)
    assert len(crs) > 200  # 5 GPUs x ~60 models, most with several ways to hold the weights
