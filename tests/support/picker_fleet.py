"""A fleet behind the real endpoint picker, without a kubelet: the set-up tests/integration/test_epp_picks.py and
bench/routing.py share (docs/routing.md, "The real picker, run").

- The picker (cmd/epp v1.5.0, built from the Go module proxy) runs with the arguments and config file of the
  Deployment and ConfigMap the operator renders for ``spec.routing`` (tests/support/epp.py says what stands in
  for the pod), as the rendered ServiceAccount, so the rendered Role is all it may read. It watches the rendered
  InferencePool (and InferenceObjectives) in the real apiserver, with the real CRDs (hack/third-party-crds.sh).
- The pool's pods are KWOK pods made from the fleet Deployment's pod template (its labels are what the pool
  selects). KWOK gives them addresses from its CIDR; each pod's ``status.podIP`` is then set to a loopback
  address of its own (``127.a.b.2``, ``127.a.b.3``, ...: all of 127/8 is local), where a real vLLM server
  listens, started from the same rendered Deployment (tests/support/cpu_rule.py) on the rendered port, which is
  the pool's targetPort. The apiserver accepts a podIP change, and KWOK leaves a Running pod's status alone (its
  pod-ready stage selects Pending pods only).
- The gateway's half is tests/support/extproc.py: ask the picker, send the body it returns to the endpoint it
  names, pass the response back through the stream.
- No kubelet runs probes: ``set_not_ready`` writes what the kubelet writes when a readiness probe fails,
  ``set_ready`` what it writes when a restarted container passes it again.
"""

from __future__ import annotations

import copy
import json
import random
import socket
import uuid
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from bench.autoscaling import EarlyVllmServer

from qwen_fleet.api import QwenInference
from qwen_fleet.config import OperatorConfig
from qwen_fleet.plan import make_plan
from qwen_fleet.render import ALL_CAPABILITIES, render_children
from qwen_fleet_dev.cluster import LocalCluster, free_port
from tests.support.cpu_rule import local_process
from tests.support.epp import LocalPicker, service_account_kubeconfig, start_picker
from tests.support.extproc import Gateway, TlsBridge
from tests.support.kube import apply, condition, get, wait_until
from tests.support.serving import KV_SPACE_GIB, NAME, SPEC, RenderedServer
from tests.support.third_party import crd_name, third_party_crds

CRDS = ("inferencepools.inference.networking.k8s.io", "inferenceobjectives.inference.networking.x-k8s.io")
NODE = "cpu-0"  # a KWOK node of the default pools without taints (qwen_fleet_dev.nodes.DEFAULT_POOLS)
EPP = f"{NAME}-epp"


class EarlyRenderedServer(EarlyVllmServer, RenderedServer):
    """A server from the rendered Deployment, spawned now and waited for later."""


def render(namespace: str, port: int, routing: dict[str, Any] | None = None,
           engine: dict[str, Any] | None = None) -> list[dict[str, Any]]:
    """Every child the operator renders for the suite's tiny fleet (tests/support/serving.py SPEC) with
    ``spec.routing`` (default: all defaults) on ``port``; ``engine`` is merged over SPEC's."""
    spec = {**copy.deepcopy(SPEC), "routing": copy.deepcopy(routing or {}), "service": {"port": port}}
    spec["engine"] = {**spec["engine"], **copy.deepcopy(engine or {})}
    cr = QwenInference.model_validate({"metadata": {"name": NAME, "namespace": namespace, "uid": "u"},
                                       "spec": spec})
    return render_children(cr, make_plan(cr, OperatorConfig()), ALL_CAPABILITIES)


def one(children: list[dict[str, Any]], kind: str, name: str) -> dict[str, Any]:
    [found] = [c for c in children if c["kind"] == kind and c["metadata"]["name"] == name]
    return found


def _bindable(host: str, port: int) -> bool:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        try:
            sock.bind((host, port))
        except OSError:
            return False
    return True


def loopback_hosts(count: int = 2) -> tuple[tuple[str, ...], int]:
    """``count`` loopback addresses of a random 127.a.b.0/24 (from .2 on) and one port free on all of them."""
    rng = random.SystemRandom()
    for _ in range(50):
        base = f"127.{rng.randint(1, 254)}.{rng.randint(0, 255)}."
        hosts, port = tuple(base + str(2 + i) for i in range(count)), free_port()
        if all(_bindable(h, port) for h in hosts):
            return hosts, port
    raise RuntimeError(f"no free port on {count} loopback addresses")


def spawn_servers(deployment: dict[str, Any], python: str, model_dir: Path, hosts: tuple[str, ...], port: int,
                  logs: Path) -> list[EarlyRenderedServer]:
    """A real vLLM server per host, from the rendered fleet Deployment, spawned (not yet waited for)."""
    servers: list[EarlyRenderedServer] = []
    try:
        for i, host in enumerate(hosts):
            local = local_process(deployment, python, {"model": model_dir}, port, host=host)
            server = EarlyRenderedServer(
                local.argv, {**local.env, "VLLM_CPU_KVCACHE_SPACE": str(KV_SPACE_GIB)}, port=port, host=host,
                served_model_name=NAME, python=python, log_path=logs / f"vllm-{i}.log")
            servers.append(server)
            server.begin()
    except BaseException:
        for server in servers:
            server.stop()
        raise
    return servers


def install_crds(cluster: LocalCluster) -> None:
    for path in third_party_crds():  # cached by the script
        if crd_name(path) in CRDS:
            cluster.install_crd(path, name=crd_name(path))


def kwok_pod(cluster: LocalCluster, ns: str, template: dict[str, Any], name: str, ip: str) -> None:
    """A pod of the fleet's template on a KWOK node, Running and Ready by KWOK, then given ``ip``. It gets the
    template's labels (what the pool selects) only once it has ``ip``, so that a picker already watching never
    takes it at the address KWOK gave it."""
    apply(cluster, ns, {"apiVersion": "v1", "kind": "Pod", "metadata": {"name": name},
                        "spec": {**copy.deepcopy(template["spec"]), "nodeName": NODE}})
    wait_until(f"pod {name} Ready (KWOK)",
               lambda: (condition(get(cluster, "pod", name, ns), "Ready") or {}).get("status") == "True")
    cluster.kubectl("patch", "pod", name, "-n", ns, "--subresource=status", "--type=merge",
                    "-p", json.dumps({"status": {"podIP": ip, "podIPs": [{"ip": ip}]}}))
    cluster.kubectl("label", "pod", name, "-n", ns, *(f"{k}={v}" for k, v in template["metadata"]["labels"].items()))


def set_not_ready(cluster: LocalCluster, ns: str, pod: str, reason: str = "ReadinessProbeFailed") -> None:
    """What the kubelet writes when the pod's readiness probe has failed, or (``ContainersNotReady``) its
    container has exited (KWOK does neither)."""
    not_ready = [{"type": t, "status": "False", "reason": reason} for t in ("Ready", "ContainersReady")]
    cluster.kubectl("patch", "pod", pod, "-n", ns, "--subresource=status", "--type=strategic",
                    "-p", json.dumps({"status": {"conditions": not_ready}}))


def set_ready(cluster: LocalCluster, ns: str, pod: str) -> None:
    """What the kubelet writes once a restarted container passes its readiness probe again."""
    ready = [{"type": t, "status": "True", "reason": None} for t in ("Ready", "ContainersReady")]
    cluster.kubectl("patch", "pod", pod, "-n", ns, "--subresource=status", "--type=strategic",
                    "-p", json.dumps({"status": {"conditions": ready}}))


def wait_picker(picker: LocalPicker, what: str, check: Callable[[], Any], timeout: float = 90) -> None:
    try:
        wait_until(what, lambda: picker.component.running() and check(), timeout)
    except AssertionError as err:
        raise AssertionError(f"{err}\nthe picker's log:\n{picker.component.tail(40)}") from None


@dataclass
class PickerFleet:
    cluster: LocalCluster
    namespace: str
    servers: dict[str, EarlyRenderedServer]  # "ip:port" -> the server listening there
    pods: dict[str, str]  # "ip:port" -> the KWOK pod whose status.podIP is that ip
    picker: LocalPicker
    picker_deployment: dict[str, Any]  # as rendered
    gateway: Gateway
    bridge: TlsBridge

    def close(self) -> None:
        self.gateway.close()
        self.bridge.stop()
        self.picker.stop()
        for server in self.servers.values():
            server.stop()
        self.cluster.kubectl("delete", "namespace", self.namespace, "--wait=false", check=False)


def start_picker_fleet(cluster: LocalCluster, binary: Path, servers: list[EarlyRenderedServer],
                       children: list[dict[str, Any]], workdir: Path) -> PickerFleet:
    """The rendered pool, RBAC, config and objectives applied in a namespace of their own, a KWOK pod per server
    at its address, the picker started as the rendered ServiceAccount; returns once every server serves and the
    picker holds every pod. ``children``: ``render`` for that namespace. On failure everything is stopped."""
    namespace = one(children, "InferencePool", NAME)["metadata"]["namespace"]
    workdir.mkdir(parents=True, exist_ok=True)
    cluster.kubectl("create", "namespace", namespace)
    picker: LocalPicker | None = None
    bridge: TlsBridge | None = None
    try:
        install_crds(cluster)
        port = servers[0].port
        wanted = [c for c in children if c["kind"] in ("ServiceAccount", "Role", "RoleBinding", "ConfigMap")
                  and c["metadata"]["name"] == EPP] + [one(children, "InferencePool", NAME)] + \
            [c for c in children if c["kind"] == "InferenceObjective"]
        for rendered in wanted:
            # Without the owner reference to the QwenInference no test creates (uid "u"): a dangling owner makes
            # the garbage collector delete the object as soon as its informers have synced (in a long-running
            # cluster: at once; cold3 met "serviceaccounts qwen-tiny-epp not found").
            obj = copy.deepcopy(rendered)
            obj["metadata"].pop("ownerReferences", None)
            apply(cluster, namespace, obj)
        template = one(children, "Deployment", NAME)["spec"]["template"]
        pods = {}
        for i, server in enumerate(servers):
            pods[f"{server.host}:{port}"] = name = f"{NAME}-kwok-{i}"
            kwok_pod(cluster, namespace, template, name, server.host)
        for endpoint, name in pods.items():  # KWOK has not put its own address back
            assert (get(cluster, "pod", name, namespace) or {})["status"]["podIP"] == endpoint.rsplit(":", 1)[0]
        kubeconfig = service_account_kubeconfig(cluster, namespace, EPP, workdir / "epp.kubeconfig")
        picker_deployment = one(children, "Deployment", EPP)
        picker = start_picker(binary, picker_deployment, one(children, "ConfigMap", EPP), kubeconfig, workdir)
        for server in servers:
            server.wait_ready()
        expected = {f"{name}-rank-0" for name in pods.values()}
        wait_picker(picker, "every pod in the picker's datastore", lambda: picker.endpoints() == expected)
        picker.wait_ext_proc()  # the port the gateway talks to listens last (LocalPicker.ext_proc_serving)
        bridge = TlsBridge(("127.0.0.1", picker.local_port("grpc"))).start()
        return PickerFleet(cluster, namespace, {f"{s.host}:{port}": s for s in servers}, pods, picker,
                           picker_deployment, Gateway(bridge.address), bridge)
    except BaseException:
        if bridge is not None:
            bridge.stop()
        if picker is not None:
            picker.stop()
        for server in servers:
            server.stop()
        cluster.kubectl("delete", "namespace", namespace, "--wait=false", check=False)
        raise


def new_namespace(prefix: str = "epp") -> str:
    return f"{prefix}-{uuid.uuid4().hex[:8]}"
