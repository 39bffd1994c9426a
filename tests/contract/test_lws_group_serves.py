"""The rendered multi-node group serves: the leader's and the worker's commands from the LeaderWorkerSet the
operator renders (pipeline parallel over 2 nodes) start the real vLLM CPU engine as two processes that
rendezvous over TCP with gloo, like two pods of one group, and the leader answers a completion.

vLLM 0.32's CPU engine runs the multi-node launch with pipeline parallelism (the mp executor; its platform's
distributed backend is gloo); tensor parallelism is for GPUs (tests/support/cpu_rule.py).
"""

from __future__ import annotations

import re
from pathlib import Path
from typing import Any

import pytest

from qwen_fleet.api import QwenInference
from qwen_fleet.config import OperatorConfig
from qwen_fleet.plan import make_plan
from qwen_fleet.render import Capabilities, render_children
from tests.support.lws_group import group_processes
from tests.support.serving import KV_SPACE_GIB, SPEC

pytestmark = [pytest.mark.vllm, pytest.mark.slow]


def _group_spec() -> dict[str, Any]:
    """The shared serving spec (tiny Qwen2 from a PVC) as one replica over 2 nodes, 1 GPU each, pipeline 2."""
    spec = {k: v for k, v in SPEC.items() if k not in ("autoscaling", "monitoring")}
    return {**spec, "gpu": {"product": "NVIDIA-H100-80GB-HBM3"}, "parallelism": {"pipeline": 2, "nodes": 2}}


def test_the_rendered_leader_and_worker_form_a_pipeline_group_that_answers(
        vllm_python: str, tiny_qwen_dir: Path, tmp_path: Path) -> None:
    cr = QwenInference.model_validate({"metadata": {"name": "qwen-tiny", "namespace": "llm", "uid": "u"},
                                       "spec": _group_spec()})
    kids = {c["kind"]: c for c in render_children(cr, make_plan(cr, OperatorConfig()), Capabilities())}
    leader, workers = group_processes(kids["LeaderWorkerSet"], vllm_python, tiny_qwen_dir, tmp_path, KV_SPACE_GIB)
    assert len(workers) == 1
    worker = workers[0]
    assert "--headless" in worker.argv() and worker.argv()[worker.argv().index("--node-rank") + 1] == "1"
    with worker, leader:
        status, reply = leader.post_json("/v1/completions", {
            "model": "qwen-tiny", "prompt": "Hello", "max_tokens": 8, "ignore_eos": True})
        assert status == 200, reply
        assert reply["usage"]["completion_tokens"] == 8
        assert worker.running(), worker.tail()
        # Two ranks in one torch.distributed world over gloo; the worker holds the second pipeline stage.
        assert re.search(r"world_size=2 rank=0 .*backend=gloo", leader.log()), leader.tail()
        assert re.search(r"world_size=2 rank=1 .*backend=gloo", worker.log()), worker.tail()
        assert "Worker_PP1" in worker.log() and "Worker_PP1" not in leader.log()
