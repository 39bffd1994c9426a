"""The last lines of ``make run``: what runs where, the answer, the commands to send your own, how to stop.

Pure: :func:`closing_lines` turns a :class:`DemoState` (gathered by demo.py from the running cluster) into the
lines printed, so the text is tested without a cluster. The commands are complete (the kubectl binary's own path
and the kubeconfig: neither is on a new user's PATH or in their environment).
"""

from __future__ import annotations

import json
import shlex
from dataclasses import dataclass, field


@dataclass(frozen=True)
class Node:
    name: str
    kind: str  # "real" (containerd, kubelet, kube-proxy) or "kwok" (fake, nothing runs)
    gpus: str = ""  # e.g. "4x NVIDIA-A10G" for a fake GPU node


@dataclass(frozen=True)
class DemoState:
    kubeconfig: str
    kubectl: str
    apiserver: str
    nodes: tuple[Node, ...]
    operator_pid: int
    operator_identity: str  # ServiceAccount namespace/name
    operator_log: str
    namespace: str
    fleet: str
    ready_replicas: int
    replicas: int
    service_url: str = ""  # http://<ClusterIP>:<port>; empty when nothing serves (fake GPU nodes)
    served_model: str = ""
    answer: str = ""  # the first chat completion's text
    demo_pid: int = 0
    logs_dir: str = ""
    own_cluster: bool = True  # False: the cluster KUBECONFIG named, which the run found and leaves running
    warnings: tuple[str, ...] = field(default_factory=tuple)


def chat_request(model: str, content: str = "Say hello", max_tokens: int = 16) -> str:
    return json.dumps({"model": model, "messages": [{"role": "user", "content": content}],
                       "max_tokens": max_tokens})


def _nodes(nodes: tuple[Node, ...]) -> str:
    """The real node by name; kwok's fake nodes counted by what they claim (a demo cluster has a dozen)."""
    real = [n.name for n in nodes if n.kind == "real"]
    kinds: dict[str, int] = {}
    for node in nodes:
        if node.kind != "real":
            kinds[node.gpus] = kinds.get(node.gpus, 0) + 1
    parts = []
    if real:
        parts.append(f"{', '.join(real)} (real: containerd, kubelet, kube-proxy)")
    if kinds:
        counted = ", ".join(f"{count} with {gpus}" if gpus else f"{count} without GPUs"
                            for gpus, count in sorted(kinds.items()))
        parts.append(f"kwok's fake nodes, where nothing really runs: {counted}")
    return "; ".join(parts) or "none"


def where_lines(state: DemoState) -> list[str]:
    serving = (f"Service {state.namespace}/{state.fleet} at {state.service_url} (ClusterIP, reachable from this "
               "machine)" if state.service_url else "no engine runs: its pods are on fake GPU nodes")
    return [
        "==> what runs where",
        f"  cluster   {state.apiserver}, kubeconfig {state.kubeconfig}",
        f"  nodes     {_nodes(state.nodes)}",
        f"  operator  pid {state.operator_pid}, as ServiceAccount {state.operator_identity}; log {state.operator_log}",
        f"  fleet     QwenInference {state.namespace}/{state.fleet}: {state.ready_replicas}/{state.replicas} "
        "replicas ready",
        f"  serving   {serving}",
    ]


def closing_lines(state: DemoState) -> list[str]:
    """Everything after the fleet is Ready, ending with the line that says how to stop."""
    kubectl = f"{shlex.quote(state.kubectl)} --kubeconfig={shlex.quote(state.kubeconfig)}"
    lines = where_lines(state)
    if state.answer:
        lines += ["==> the answer to a chat request, from the real engine through the Service (a tiny random-weight "
                  "model: it talks nonsense)", f"  {state.answer!r}"]
    lines += ["==> try it, from another terminal on this machine:",
              f"  {kubectl} get qwi,deployments,pods -n {state.namespace} -o wide",
              f"  {kubectl} describe qwi {state.fleet} -n {state.namespace}"]
    if state.service_url:
        lines += [f"  curl -s --noproxy '*' {state.service_url}/v1/chat/completions "
                  f"-H 'Content-Type: application/json' -d {shlex.quote(chat_request(state.served_model))}",
                  f"  curl -s --noproxy '*' {state.service_url}/metrics | grep '^vllm:num_requests'"]
    lines += [f"  {message}" for message in state.warnings]
    stop = f" (or: kill -INT {state.demo_pid})" if state.demo_pid else ""
    logs = f"; logs stay in {state.logs_dir} if it fails" if state.logs_dir else ""
    started = ["operator", "fleet"]
    if state.own_cluster:
        started += ["node", "cluster"] if any(n.kind == "real" for n in state.nodes) else ["cluster"]
    lines.append(f"==> running. Ctrl-C stops everything this run started{stop}: {', '.join(started)}{logs}.")
    return lines
