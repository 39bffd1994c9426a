"""Multi-node replicas render as a LeaderWorkerSet; single-node replicas keep their Deployment."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import yaml

from qwen_fleet.api import QwenInference
from qwen_fleet.config import OperatorConfig
from qwen_fleet.plan import make_plan
from qwen_fleet.render import ALL_CAPABILITIES, Capabilities, render_children

EXAMPLES = Path(__file__).resolve().parents[2] / "examples"


def _children(example: str) -> dict[str, dict[str, Any]]:
    cr = QwenInference.model_validate(yaml.safe_load((EXAMPLES / example).read_text()))
    return {c["kind"]: c for c in render_children(cr, make_plan(cr, OperatorConfig()), ALL_CAPABILITIES)}


def _flag(args: list[str], flag: str) -> str:
    return args[args.index(flag) + 1]


def test_a_replica_spanning_nodes_is_one_lws_group() -> None:
    kids = _children("qwen3.5-397b-a17b-2x8-h100.yaml")
    assert "Deployment" not in kids
    lws = kids["LeaderWorkerSet"]
    assert lws["apiVersion"] == "leaderworkerset.x-k8s.io/v1"
    template = lws["spec"]["leaderWorkerTemplate"]
    assert (template["size"], template["restartPolicy"]) == (2, "RecreateGroupOnPodRestart")
    assert lws["spec"]["startupPolicy"] == "LeaderCreated"
    assert lws["spec"]["replicas"] == 1
    annotations = dict(lws["metadata"]["annotations"])
    assert annotations.pop("qwenfleet.io/rendered-hash")  # every child carries its stamp (render/stamp.py)
    assert annotations == {"leaderworkerset.sigs.k8s.io/exclusive-topology": "topology.kubernetes.io/zone"}


def test_leader_serves_and_workers_join_headless() -> None:
    template = _children("qwen3.5-397b-a17b-2x8-h100.yaml")["LeaderWorkerSet"]["spec"]["leaderWorkerTemplate"]
    leader = template["leaderTemplate"]["spec"]["containers"][0]
    worker = template["workerTemplate"]["spec"]["containers"][0]
    assert leader["command"][-1] == "vllm.entrypoints.openai.api_server"
    assert worker["command"] == ["vllm", "serve"]
    assert (_flag(leader["args"], "--node-rank"), _flag(worker["args"], "--node-rank")) == ("0", "$(LWS_WORKER_INDEX)")
    for args in (leader["args"], worker["args"]):
        assert _flag(args, "--nnodes") == "2"
        assert _flag(args, "--master-addr") == "$(LWS_LEADER_ADDRESS)"
        assert _flag(args, "--tensor-parallel-size") == "8" and _flag(args, "--pipeline-parallel-size") == "2"
    assert "--headless" in worker["args"] and "--headless" not in leader["args"]
    assert "readinessProbe" in leader and "readinessProbe" not in worker and "ports" not in worker
    # The leader serves: it has the single-node pod's probes, startup timing included (render/deployment.py).
    single = _children("qwen3-8b-long-context.yaml")["Deployment"]["spec"]["template"]["spec"]["containers"][0]
    assert {p: leader[p]["periodSeconds"] for p in ("startupProbe", "readinessProbe", "livenessProbe")} == {
        p: single[p]["periodSeconds"] for p in ("startupProbe", "readinessProbe", "livenessProbe")}
    for pod in (template["leaderTemplate"], template["workerTemplate"]):
        assert pod["spec"]["containers"][0]["resources"]["limits"]["nvidia.com/gpu"] == "8"


def test_service_selects_leaders_and_hpa_scales_the_lws() -> None:
    kids = _children("qwen3-235b-a22b-fp8-2x8-h100.yaml")
    leader_labels = kids["LeaderWorkerSet"]["spec"]["leaderWorkerTemplate"]["leaderTemplate"]["metadata"]["labels"]
    worker_labels = kids["LeaderWorkerSet"]["spec"]["leaderWorkerTemplate"]["workerTemplate"]["metadata"]["labels"]
    selector = kids["Service"]["spec"]["selector"]
    assert selector.items() <= leader_labels.items()
    assert not selector.items() <= worker_labels.items()
    assert kids["HorizontalPodAutoscaler"]["spec"]["scaleTargetRef"] == {
        "apiVersion": "leaderworkerset.x-k8s.io/v1", "kind": "LeaderWorkerSet", "name": "qwen3-235b-fp8"}
    assert "replicas" not in kids["LeaderWorkerSet"]["spec"]  # the HPA owns it
    # The PDB covers leaders and workers alike: one eviction at a time, so one group at a time.
    pdb = kids["PodDisruptionBudget"]["spec"]
    assert pdb["maxUnavailable"] == 1
    assert pdb["selector"]["matchLabels"].items() <= worker_labels.items()
    args = kids["LeaderWorkerSet"]["spec"]["leaderWorkerTemplate"]["leaderTemplate"]["spec"]["containers"][0]["args"]
    assert _flag(args, "--data-parallel-size") == "4" and "--enable-expert-parallel" in args


def test_single_node_data_expert_parallel_keeps_a_deployment_with_all_gpus() -> None:
    kids = _children("qwen3-30b-a3b-dp-ep.yaml")
    assert "LeaderWorkerSet" not in kids
    container = kids["Deployment"]["spec"]["template"]["spec"]["containers"][0]
    assert container["resources"]["limits"]["nvidia.com/gpu"] == "4"  # tensor 1 x data 4
    assert _flag(container["args"], "--data-parallel-size") == "4"
    assert "--enable-expert-parallel" in container["args"] and "--nnodes" not in container["args"]
    assert kids["Service"]["spec"]["selector"] == {"qwenfleet.io/inference": "qwen3-30b-a3b-dp-ep"}


def test_each_group_gets_its_own_headless_service_not_the_fleets_service_name() -> None:
    """LWS names a Shared subdomain's headless Service after the LeaderWorkerSet, which is the fleet's Service's
    name; it leaves an existing Service alone, so the leader address would never resolve. Per replica, it is
    named after the leader pod (big-0), and LWS_LEADER_ADDRESS points there."""
    cr = QwenInference.model_validate({"metadata": {"name": "big", "namespace": "ns"},
                                       "spec": {"model": {"name": "Qwen/Qwen3-4B-Instruct-2507"},
                                                "gpu": {"product": "NVIDIA-H100-80GB-HBM3"},
                                                "parallelism": {"pipeline": 2, "nodes": 2}}})
    kids = {c["kind"]: c for c in render_children(cr, make_plan(cr, OperatorConfig()), Capabilities())}
    assert kids["LeaderWorkerSet"]["spec"]["networkConfig"] == {"subdomainPolicy": "UniquePerReplica"}
    assert kids["Service"]["metadata"]["name"] == "big"


def _group_preflight_lws() -> dict[str, Any]:
    doc = yaml.safe_load((EXAMPLES / "qwen3.5-397b-a17b-2x8-h100.yaml").read_text())
    doc["spec"]["nccl"] = {"ibDisable": False, "preflight": {"enabled": True, "minBusBandwidthGBps": 40}}
    cr = QwenInference.model_validate(doc)
    kids = {c["kind"]: c for c in render_children(cr, make_plan(cr, OperatorConfig()), ALL_CAPABILITIES)}
    assert "ConfigMap" in kids  # the script the init containers run
    return kids["LeaderWorkerSet"]


def _init(template: dict[str, Any]) -> dict[str, Any]:
    (init,) = template["spec"]["initContainers"]
    assert init["name"] == "nccl-preflight"
    return init


def test_every_pod_of_a_group_runs_the_preflight_against_the_leaders_store() -> None:
    template = _group_preflight_lws()["spec"]["leaderWorkerTemplate"]
    leader, worker = _init(template["leaderTemplate"]), _init(template["workerTemplate"])
    for init in (leader, worker):
        assert init["args"][-5:] == ["--nnodes=$(LWS_GROUP_SIZE)", "--node-rank=$(LWS_WORKER_INDEX)",
                                     "--master-addr=$(LWS_LEADER_ADDRESS)", "--master-port=29400",
                                     "--rendezvous-timeout-s=900"]
        assert "--min-bus-bandwidth-gbps=40" in init["args"]
        assert init["resources"]["limits"]["nvidia.com/gpu"] == "8"  # all of the pod's GPUs join
        assert {"name": "NCCL_IB_DISABLE", "value": "0"} in init["env"]
    # The leader holds the store on the fixed port it declares; a worker only dials out.
    assert leader["ports"] == [{"name": "nccl-preflight", "containerPort": 29400, "protocol": "TCP"}]
    assert "ports" not in worker
    # The preflight's port is not vLLM's rendezvous port: nothing else in the leader pod claims it.
    leader_ports = [p["containerPort"] for c in template["leaderTemplate"]["spec"]["containers"] for p in c["ports"]]
    assert 29400 not in leader_ports


def test_the_group_preflight_args_parse_once_the_kubelet_expands_the_lws_env() -> None:
    from qwen_fleet.preflight import nccl_preflight as script
    from tests.support.lws_group import expand

    template = _group_preflight_lws()["spec"]["leaderWorkerTemplate"]
    for role, index in (("leaderTemplate", "0"), ("workerTemplate", "1")):
        env = {"LWS_LEADER_ADDRESS": "qwen35-397b-0.qwen35-397b-0.llm", "LWS_GROUP_SIZE": "2",
               "LWS_WORKER_INDEX": index}
        opts = script.build_parser().parse_args([expand(a, env) for a in _init(template[role])["args"]])
        assert (opts.nnodes, opts.node_rank, opts.master_port) == (2, int(index), 29400)
        assert opts.master_addr == "qwen35-397b-0.qwen35-397b-0.llm"
        assert opts.nproc == 0  # one rank per visible GPU: world = 2 pods x 8 GPUs


def test_a_group_without_preflight_has_no_init_container() -> None:
    template = _children("qwen3.5-397b-a17b-2x8-h100.yaml")["LeaderWorkerSet"]["spec"]["leaderWorkerTemplate"]
    for role in ("leaderTemplate", "workerTemplate"):
        assert "initContainers" not in template[role]["spec"]
