"""The last lines of `make run` (devtools/qwen_fleet_dev/demo_text.py): what runs where, the answer, the commands
to send your own, how to stop."""

from __future__ import annotations

import json
import shlex
from pathlib import Path

from qwen_fleet_dev import demo
from qwen_fleet_dev.demo_text import DemoState, Node, chat_request, closing_lines

REAL = DemoState(
    kubeconfig="/tmp/qwen-fleet-run-x/cluster/kubeconfig", kubectl="/c/k8s/v1.36.3/bin/kubectl",
    apiserver="https://10.201.0.1:36443",
    nodes=(Node("real-node-0", "real"), Node("gpu-a10g-0", "kwok", "1x NVIDIA-A10G")),
    operator_pid=4242, operator_identity="qwen-fleet-system/qwen-fleet", operator_log="/tmp/qwen-fleet-run-x/op.log",
    namespace="default", fleet="qwen-tiny", ready_replicas=1, replicas=1,
    service_url="http://10.96.0.17:8000", served_model="qwen-tiny", answer="hello hello", demo_pid=99,
    logs_dir="/tmp/qwen-fleet-run-x")


def test_real_fleet_lines_say_where_show_the_answer_and_give_commands_that_parse() -> None:
    lines = closing_lines(REAL)
    text = "\n".join(lines)
    assert lines[0] == "==> what runs where"
    assert "  cluster   https://10.201.0.1:36443, kubeconfig /tmp/qwen-fleet-run-x/cluster/kubeconfig" in lines
    assert ("  nodes     real-node-0 (real: containerd, kubelet, kube-proxy); kwok's fake nodes, where nothing "
            "really runs: 1 with 1x NVIDIA-A10G") in lines
    assert "pid 4242, as ServiceAccount qwen-fleet-system/qwen-fleet" in text
    assert "QwenInference default/qwen-tiny: 1/1 replicas ready" in text
    assert "Service default/qwen-tiny at http://10.96.0.17:8000" in text
    assert "  'hello hello'" in lines
    # The curl line is a complete command: its body is JSON naming the served model.
    (curl,) = [line for line in lines if "/v1/chat/completions" in line]
    argv = shlex.split(curl)
    assert argv[:4] == ["curl", "-s", "--noproxy", "*"]
    assert argv[4] == "http://10.96.0.17:8000/v1/chat/completions"
    body = json.loads(argv[argv.index("-d") + 1])
    assert body["model"] == "qwen-tiny" and body["messages"][0]["role"] == "user"
    (get,) = [line for line in lines if " get qwi" in line]
    assert shlex.split(get)[:2] == ["/c/k8s/v1.36.3/bin/kubectl", f"--kubeconfig={REAL.kubeconfig}"]
    assert lines[-1] == ("==> running. Ctrl-C stops everything this run started (or: kill -INT 99): operator, fleet, "
                         "node, cluster; logs stay in /tmp/qwen-fleet-run-x if it fails.")
    # test_make_run reads the printed `export KUBECONFIG=` once, before this block: the block must not repeat it.
    assert "export KUBECONFIG=" not in text


def test_fake_gpu_fleet_lines_say_nothing_serves_and_offer_no_curl() -> None:
    state = DemoState(kubeconfig="/k", kubectl="kubectl", apiserver="https://127.0.0.1:6443",
                      nodes=(Node("gpu-0", "kwok", "4x NVIDIA-A10G"),), operator_pid=1, operator_identity="ns/sa",
                      operator_log="/l", namespace="default", fleet="qwen3-4b", ready_replicas=2, replicas=2)
    lines = closing_lines(state)
    assert "  serving   no engine runs: its pods are on fake GPU nodes" in lines
    many = (Node("cpu-0", "kwok"), *(Node(f"a{i}", "kwok", "1x NVIDIA-A10G") for i in range(8)),
            Node("h0", "kwok", "8x NVIDIA-H100"), Node("h1", "kwok", "8x NVIDIA-H100"))
    crowded = closing_lines(DemoState(**{**state.__dict__, "nodes": many}))
    (nodes,) = [line for line in crowded if line.startswith("  nodes")]
    assert nodes == ("  nodes     kwok's fake nodes, where nothing really runs: 1 without GPUs, 8 with 1x NVIDIA-A10G, "
                     "2 with 8x NVIDIA-H100")
    assert not [line for line in lines if "curl" in line or "answer" in line]
    assert lines[-1] == "==> running. Ctrl-C stops everything this run started: operator, fleet, cluster."
    found = closing_lines(DemoState(**{**state.__dict__, "own_cluster": False}))
    assert found[-1] == "==> running. Ctrl-C stops everything this run started: operator, fleet."


def test_chat_request_is_the_openai_shape() -> None:
    assert json.loads(chat_request("m", "hi", 8)) == {"model": "m", "messages": [{"role": "user", "content": "hi"}],
                                                      "max_tokens": 8}


class FakeKubectl:
    """Answers the three reads demo._demo_state makes, with objects shaped as the apiserver returns them."""

    kubectl = "/c/bin/kubectl"

    def __call__(self, *args: str, **_: object) -> str:
        if args[:2] == ("get", "nodes"):
            return json.dumps({"items": [
                {"metadata": {"name": "real-node-0", "labels": {"type": "real"}}, "status": {"capacity": {}}},
                {"metadata": {"name": "gpu-0", "labels": {"nvidia.com/gpu.product": "NVIDIA-A10G"}},
                 "status": {"capacity": {"nvidia.com/gpu": "4"}}}]})
        if args[:2] == ("get", "qwi"):
            return json.dumps({"status": {"readyReplicas": 1, "replicas": 2}})
        if args[:2] == ("get", "service"):
            return json.dumps({"spec": {"clusterIP": "10.96.0.9", "ports": [{"name": "metrics", "port": 9000},
                                                                             {"name": "http", "port": 8000}]}})
        raise AssertionError(args)


def test_demo_state_reads_nodes_replicas_service_and_the_answer(tmp_path: Path) -> None:
    kubeconfig = tmp_path / "kubeconfig"
    kubeconfig.write_text("clusters:\n- cluster: {server: 'https://10.201.0.1:36443'}\n  name: local\n")

    class Operator:
        pid = 77

    answer = {"model": "qwen-tiny", "choices": [{"message": {"role": "assistant", "content": "hi there"}}]}
    state = demo._demo_state(FakeKubectl(), kubeconfig, Operator(), tmp_path / "op.log",  # type: ignore[arg-type]
                             "qwen-tiny", answer, tmp_path, own_cluster=True)
    assert state.nodes == (Node("real-node-0", "real"), Node("gpu-0", "kwok", "4x NVIDIA-A10G"))
    assert (state.ready_replicas, state.replicas) == (1, 2)
    assert state.service_url == "http://10.96.0.9:8000"
    assert (state.served_model, state.answer, state.apiserver) == ("qwen-tiny", "hi there", "https://10.201.0.1:36443")
    unserved = demo._demo_state(FakeKubectl(), kubeconfig, Operator(), tmp_path / "op.log",  # type: ignore[arg-type]
                                "qwen3-4b", None, tmp_path, own_cluster=False)
    assert (unserved.service_url, unserved.answer, unserved.served_model) == ("", "", "qwen3-4b")
