"""The rendered leader and worker commands of multi-node, data- and expert-parallel examples are accepted by
vLLM 0.32's parser and its own parallel-config validation, and vLLM derives from them the layout the planner
printed: world size, data-parallel ranks per pod, each pod's first data rank, the rendezvous address."""

from __future__ import annotations

import json
import os
import subprocess
from pathlib import Path
from typing import Any

import pytest
import yaml

from qwen_fleet.api import QwenInference
from qwen_fleet.config import OperatorConfig
from qwen_fleet.plan import make_plan
from qwen_fleet.plan.parallel import Layout
from qwen_fleet.render import ALL_CAPABILITIES, render_children

pytestmark = pytest.mark.vllm
HERE = Path(__file__).resolve().parent
EXAMPLES = HERE.parents[1] / "examples"
LEADER_IP = "10.1.2.3"
# Architecture stand-ins with the catalog's head counts: enough for vLLM's config checks, no weights.
_COMMON = {"vocab_size": 151936, "hidden_size": 4096, "intermediate_size": 12288, "num_hidden_layers": 60,
           "num_attention_heads": 64, "num_key_value_heads": 4, "head_dim": 128, "max_position_embeddings": 262144,
           "rms_norm_eps": 1e-6, "rope_theta": 1000000, "torch_dtype": "bfloat16", "tie_word_embeddings": False}
MOE = {**_COMMON, "architectures": ["Qwen3MoeForCausalLM"], "model_type": "qwen3_moe", "num_experts": 128,
       "num_experts_per_tok": 8, "moe_intermediate_size": 1536, "decoder_sparse_step": 1, "mlp_only_layers": [],
       "norm_topk_prob": True}
DENSE = {**_COMMON, "architectures": ["Qwen3ForCausalLM"], "model_type": "qwen3"}


def _kubelet_expand(args: list[str], worker_index: int) -> list[str]:
    """What the kubelet does with $(VAR) in args, given the env the LWS webhook injected."""
    env = {"$(LWS_LEADER_ADDRESS)": LEADER_IP, "$(LWS_WORKER_INDEX)": str(worker_index)}
    return [env.get(a, a) for a in args]


def _pods(example: str, model_dir: Path) -> tuple[Layout, list[tuple[list[str], bool]]]:
    cr = QwenInference.model_validate(yaml.safe_load((EXAMPLES / example).read_text()))
    kids = {c["kind"]: c for c in render_children(cr, make_plan(cr, OperatorConfig()), ALL_CAPABILITIES)}
    par = cr.spec.parallelism
    layout = Layout(tensor=par.tensor, pipeline=par.pipeline, data=par.data, expert=par.expert, nodes=par.nodes)

    def with_model(args: list[str]) -> list[str]:
        args = list(args)
        args[args.index("--model") + 1] = str(model_dir)
        # The model directories hold a config only; vLLM tokenizes a reasoning parser's markers while it builds
        # its config, so that flag and its value stay out of this layout check (tests/contract/
        # test_qwen_layer_engine.py starts the parsers with a real tokenizer).
        if "--reasoning-parser" in args:
            at = args.index("--reasoning-parser")
            del args[at:at + 2]
        return args

    if "Deployment" in kids:
        args = kids["Deployment"]["spec"]["template"]["spec"]["containers"][0]["args"]
        return layout, [(with_model(args), False)]
    template = kids["LeaderWorkerSet"]["spec"]["leaderWorkerTemplate"]
    leader = template["leaderTemplate"]["spec"]["containers"][0]["args"]
    worker = template["workerTemplate"]["spec"]["containers"][0]["args"]
    pods = [(with_model(_kubelet_expand(leader, 0)), False)]
    pods += [(with_model(_kubelet_expand(worker, k)), True) for k in range(1, par.nodes)]
    return layout, pods


def _derive(python: str, jobs: list[dict[str, Any]]) -> list[dict[str, Any]]:
    env = {**{k: v for k, v in os.environ.items() if k not in ("PYTHONPATH", "VIRTUAL_ENV")},
           "VLLM_TARGET_DEVICE": "cpu", "HF_HUB_OFFLINE": "1"}
    out = subprocess.run([python, str(HERE / "vllm_parallel_probe.py")], input=json.dumps(jobs), text=True,
                         capture_output=True, env=env, timeout=600, check=False)
    assert out.returncode == 0, out.stderr[-3000:]
    return list(json.loads(out.stdout))


@pytest.fixture(scope="module")
def model_dirs(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Path]:
    dirs = {}
    for name, config in (("moe", MOE), ("dense", DENSE)):
        path = tmp_path_factory.mktemp(name)
        (path / "config.json").write_text(json.dumps(config))
        dirs[name] = path
    return dirs


CASES = ["qwen3.5-397b-a17b-2x8-h100.yaml", "qwen3-30b-a3b-dp-ep.yaml", "qwen3-235b-a22b-fp8-2x8-h100.yaml"]


@pytest.mark.parametrize("example", CASES)
def test_rendered_pods_build_the_planned_layout_in_vllm(vllm_python: str, model_dirs: dict[str, Path],
                                                        example: str) -> None:
    layout, pods = _pods(example, model_dirs["moe"])
    results = _derive(vllm_python, [{"argv": argv, "headless": headless} for argv, headless in pods])
    for rank, result in enumerate(results):
        assert "error" not in result, (example, rank, result)
        assert result["world_size"] == layout.rank_gpus
        assert result["data"] == layout.data and result["expert"] == layout.expert
        assert (result["nnodes"], result["node_rank"]) == (layout.nodes, rank)
        assert result["data_local"] == layout.data_ranks_per_pod
        # vLLM's first data rank of this pod is the planner's.
        assert result["data_rank"] == layout.pod_ranks(rank)[0][0]
        if layout.multi_node:
            assert (result["master_addr"], result["master_port"]) == (LEADER_IP, 29500)
            assert result["backend"] == "mp"  # vLLM's own multi-node launch, no Ray
            if layout.data > 1:
                assert result["data_address"] == LEADER_IP


def test_the_probe_sees_what_the_planner_refuses(vllm_python: str, model_dirs: dict[str, Path]) -> None:
    """Independent evidence for two planner/CRD rules: vLLM itself refuses expert parallelism on a dense model,
    and a data-parallel rank split unevenly over pods (tensor 2 x data 3 over 2 nodes)."""
    dense = ["--model", str(model_dirs["dense"]), "-tp", "2", "--enable-expert-parallel"]
    uneven = ["--model", str(model_dirs["moe"]), "-tp", "2", "-dp", "3", "--nnodes", "2", "--node-rank", "0",
              "--master-addr", LEADER_IP]
    dense_result, uneven_result = _derive(vllm_python, [{"argv": dense, "headless": False},
                                                        {"argv": uneven, "headless": False}])
    assert "Number of experts in the model must be greater than 0" in dense_result["error"]
    assert "must be divisible by the number of data parallel node groups" in uneven_result["error"]
