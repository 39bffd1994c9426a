"""The real endpoint picker (cmd/epp of sigs.k8s.io/gateway-api-inference-extension v1.5.0, built from the Go
module proxy: hack/build-binaries.sh epp) choosing among two real vLLM CPU servers, driven through its Envoy
ext-proc gRPC interface exactly as a gateway drives it (docs/routing.md, "The real picker, run").

- The picker runs with the arguments and config file of the Deployment and ConfigMap the operator renders for
  ``spec.routing`` (tests/support/epp.py says what stands in for the pod), as the rendered ServiceAccount: the
  rendered Role is all it may read. It watches the rendered InferencePool in the real apiserver, with the real
  CRDs (hack/third-party-crds.sh).
- The pool's pods are KWOK pods made from the fleet Deployment's pod template (its labels are what the pool
  selects). KWOK gives them addresses from its CIDR; the test then sets each pod's ``status.podIP`` to a loopback
  address of its own (``127.a.b.2``, ``127.a.b.3``: all of 127/8 is local), where a real vLLM server listens,
  started from the same rendered Deployment (tests/support/cpu_rule.py) on the rendered port, which is the pool's
  targetPort. The apiserver accepts a podIP change, and KWOK leaves a Running pod's status alone (its pod-ready
  stage selects Pending pods only).
- The gateway's half is tests/support/extproc.py: ask the picker, send the body it returns to the endpoint it
  names, pass the response back through the stream.
"""

from __future__ import annotations

import copy
import json
import random
import socket
import uuid
from collections import Counter
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest
from bench.autoscaling import EarlyVllmServer

from qwen_fleet.api import QwenInference
from qwen_fleet.config import OperatorConfig
from qwen_fleet.plan import make_plan
from qwen_fleet.render import ALL_CAPABILITIES, render_children
from qwen_fleet_dev import binaries
from qwen_fleet_dev.cluster import LocalCluster, free_port
from tests.support.cpu_rule import local_process
from tests.support.epp import LocalPicker, service_account_kubeconfig, start_picker
from tests.support.extproc import Exchange, Gateway, TlsBridge
from tests.support.kube import apply, condition, get, wait_until
from tests.support.serving import KV_SPACE_GIB, NAME, SPEC, RenderedServer
from tests.support.third_party import crd_name, third_party_crds

# Outside `make test` for now (`make test-picker`): in the cold run of 2026-12-01 all four errored at set-up inside
# the full suite ("serviceaccounts qwen-tiny-epp not found" right after applying it) while the module alone
# passed with the same fresh cache. Cause: the rendered objects carried an owner reference to a QwenInference
# that does not exist, which a garbage collector with synced informers (a long-running cluster) deletes at once;
# now applied without it. To be brought back once a full run has passed with it.
pytestmark = [pytest.mark.cluster, pytest.mark.vllm, pytest.mark.slow, pytest.mark.real_picker]

CRDS = ("inferencepools.inference.networking.k8s.io", "inferenceobjectives.inference.networking.x-k8s.io")
NODE = "cpu-0"  # a KWOK node of the default pools without taints (qwen_fleet_dev.nodes.DEFAULT_POOLS)
MAX_TOKENS = 4


class _EarlyRenderedServer(EarlyVllmServer, RenderedServer):
    """A server from the rendered Deployment, spawned now and waited for later."""


def _render(namespace: str, port: int) -> list[dict[str, Any]]:
    """Every child the operator renders for the tiny fleet with ``spec.routing`` (defaults) on ``port``."""
    spec = {**copy.deepcopy(SPEC), "routing": {}, "service": {"port": port}}
    cr = QwenInference.model_validate({"metadata": {"name": NAME, "namespace": namespace, "uid": "u"},
                                       "spec": spec})
    return render_children(cr, make_plan(cr, OperatorConfig()), ALL_CAPABILITIES)


def _one(children: list[dict[str, Any]], kind: str, name: str) -> dict[str, Any]:
    [found] = [c for c in children if c["kind"] == kind and c["metadata"]["name"] == name]
    return found


def _bindable(host: str, port: int) -> bool:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        try:
            sock.bind((host, port))
        except OSError:
            return False
    return True


def _loopback_pair() -> tuple[tuple[str, str], int]:
    """Two loopback addresses of a random 127.a.b.0/24 and one port free on both."""
    rng = random.SystemRandom()
    for _ in range(50):
        base = f"127.{rng.randint(1, 254)}.{rng.randint(0, 255)}."
        hosts, port = (base + "2", base + "3"), free_port()
        if all(_bindable(h, port) for h in hosts):
            return hosts, port
    raise RuntimeError("no free port on two loopback addresses")


@pytest.fixture(scope="session")
def epp_servers(vllm_python: str, tiny_qwen_dir: Path, tmp_path_factory: pytest.TempPathFactory
                ) -> Iterator[list[_EarlyRenderedServer]]:
    """Two real vLLM servers from the rendered fleet Deployment, each on a loopback address of its own and the
    rendered port, spawned but not yet waited for. Session scope only so that pytest makes them before the
    session's control plane, whose start then overlaps their minute-long one; ``fleet`` stops them."""
    hosts, port = _loopback_pair()
    deployment = _one(_render("llm", port), "Deployment", NAME)
    logs = tmp_path_factory.mktemp("epp-vllm")
    servers: list[_EarlyRenderedServer] = []
    try:
        for i, host in enumerate(hosts):
            local = local_process(deployment, vllm_python, {"model": tiny_qwen_dir}, port, host=host)
            servers.append(_EarlyRenderedServer(
                local.argv, {**local.env, "VLLM_CPU_KVCACHE_SPACE": str(KV_SPACE_GIB)}, port=port, host=host,
                served_model_name=NAME, python=vllm_python, log_path=logs / f"vllm-{i}.log").begin())
        yield servers
    finally:
        for server in servers:
            server.stop()


@dataclass
class Fleet:
    cluster: LocalCluster
    namespace: str
    servers: dict[str, _EarlyRenderedServer]  # "ip:port" -> the server listening there
    pods: dict[str, str]  # "ip:port" -> the KWOK pod whose status.podIP is that ip
    picker: LocalPicker
    picker_deployment: dict[str, Any]  # as rendered
    gateway: Gateway
    bridge: TlsBridge


def _install_crds(cluster: LocalCluster) -> None:
    for path in third_party_crds():  # cached by the script
        if crd_name(path) in CRDS:
            cluster.install_crd(path, name=crd_name(path))


def _kwok_pod(cluster: LocalCluster, ns: str, template: dict[str, Any], name: str, ip: str) -> None:
    """A pod of the fleet's template on a KWOK node, Running and Ready by KWOK, then given ``ip``."""
    apply(cluster, ns, {"apiVersion": "v1", "kind": "Pod",
                        "metadata": {"name": name, "labels": template["metadata"]["labels"]},
                        "spec": {**copy.deepcopy(template["spec"]), "nodeName": NODE}})
    wait_until(f"pod {name} Ready (KWOK)",
               lambda: (condition(get(cluster, "pod", name, ns), "Ready") or {}).get("status") == "True")
    cluster.kubectl("patch", "pod", name, "-n", ns, "--subresource=status", "--type=merge",
                    "-p", json.dumps({"status": {"podIP": ip, "podIPs": [{"ip": ip}]}}))


@pytest.fixture(scope="module")
def fleet(epp_servers: list[_EarlyRenderedServer], cluster: LocalCluster, tmp_path_factory: pytest.TempPathFactory
          ) -> Iterator[Fleet]:
    binary = binaries.ensure_epp()  # built from the module proxy when missing, never skipped
    ns = f"epp-{uuid.uuid4().hex[:8]}"
    cluster.kubectl("create", "namespace", ns)
    workdir = tmp_path_factory.mktemp("epp")
    picker: LocalPicker | None = None
    bridge: TlsBridge | None = None
    gateway: Gateway | None = None
    try:
        _install_crds(cluster)
        port = epp_servers[0].port
        children = _render(ns, port)
        epp = f"{NAME}-epp"
        for kind, name in (("ServiceAccount", epp), ("Role", epp), ("RoleBinding", epp), ("ConfigMap", epp),
                           ("InferencePool", NAME)):
            # Without the owner reference to the QwenInference this test never creates (uid "u"): a dangling
            # owner makes the garbage collector delete the object, as soon as its informers have synced (in a
            # long-running cluster: at once; cold3 met "serviceaccounts qwen-tiny-epp not found").
            obj = copy.deepcopy(_one(children, kind, name))
            obj["metadata"].pop("ownerReferences", None)
            apply(cluster, ns, obj)
        template = _one(children, "Deployment", NAME)["spec"]["template"]
        pods = {}
        for i, server in enumerate(epp_servers):
            pods[f"{server.host}:{port}"] = name = f"{NAME}-kwok-{i}"
            _kwok_pod(cluster, ns, template, name, server.host)
        for endpoint, name in pods.items():  # KWOK has not put its own address back
            assert (get(cluster, "pod", name, ns) or {})["status"]["podIP"] == endpoint.rsplit(":", 1)[0]
        kubeconfig = service_account_kubeconfig(cluster, ns, epp, workdir / "epp.kubeconfig")
        picker_deployment = _one(children, "Deployment", epp)
        picker = start_picker(binary, picker_deployment, _one(children, "ConfigMap", epp), kubeconfig, workdir)
        for server in epp_servers:
            server.wait_ready()
        expected = {f"{name}-rank-0" for name in pods.values()}
        _wait_picker(picker, "both pods in the picker's datastore", lambda: picker.endpoints() == expected)
        bridge = TlsBridge(("127.0.0.1", picker.local_port("grpc"))).start()
        gateway = Gateway(bridge.address)
        yield Fleet(cluster, ns, {f"{s.host}:{port}": s for s in epp_servers}, pods, picker, picker_deployment,
                    gateway, bridge)
    finally:
        if gateway is not None:
            gateway.close()
        if bridge is not None:
            bridge.stop()
        if picker is not None:
            picker.stop()
        for server in epp_servers:
            server.stop()
        cluster.kubectl("delete", "namespace", ns, "--wait=false", check=False)


def _wait_picker(picker: LocalPicker, what: str, check: Any, timeout: float = 90) -> None:
    try:
        wait_until(what, lambda: picker.component.running() and check(), timeout)
    except AssertionError as err:
        raise AssertionError(f"{err}\nthe picker's log:\n{picker.component.tail(40)}") from None


def _chat(fleet: Fleet, content: str) -> Exchange:
    body = {"model": NAME, "messages": [{"role": "user", "content": content}], "max_tokens": MAX_TOKENS,
            "ignore_eos": True}
    exchange = fleet.gateway.post("/v1/chat/completions", body)
    # The picker names its choice twice (header and envoy.lb metadata), and the endpoint answered in full.
    assert exchange.endpoint == exchange.metadata_endpoint, exchange
    assert exchange.status == 200, exchange.reply
    assert exchange.reply["usage"]["completion_tokens"] == MAX_TOKENS, exchange.reply
    return exchange


def _successes(fleet: Fleet) -> dict[str, float]:
    return {endpoint: s.metrics().get("vllm:request_success_total", 0.0) for endpoint, s in fleet.servers.items()}


def test_the_rendered_probes_pass(fleet: Fleet) -> None:
    """The kubelet's gRPC probes of the rendered Deployment, asked of the running picker: SERVING (1) once it
    has the pool (runner/health.go; with leader election off any service name is the overall health)."""
    [container] = fleet.picker_deployment["spec"]["template"]["spec"]["containers"]
    assert [fleet.picker.probe(container[p]) for p in ("livenessProbe", "readinessProbe")] == [1, 1]


def test_the_picker_serves_tls_and_picks_among_both_servers(fleet: Fleet) -> None:
    before = _successes(fleet)
    picks = [_chat(fleet, f"{uuid.uuid4().hex} hello {i}").endpoint for i in range(16)]
    assert set(fleet.bridge.alpn) == {"h2"}  # ext-proc over TLS (--secure-serving's default), HTTP/2
    # Short, unrelated prompts on two idle servers tie on every scorer, and the max-score picker breaks ties at
    # random (picker/max_score_picker.go): both are picked (all 16 on one: probability 2**-15).
    assert set(picks) == set(fleet.servers), Counter(picks)
    # Each server's own count of finished requests grew by the requests sent to its address.
    wait_until("each server counted the requests it was picked for",
               lambda: {e: n - before[e] for e, n in _successes(fleet).items()} == dict(Counter(picks)), 30)


def test_a_shared_prefix_stays_on_one_server(fleet: Fleet) -> None:
    """The prefix-cache scorer (weight 3) outweighs the queue and KV-cache scorers' tie: a prompt whose first
    block the picker indexed on one server goes back there. The picker hashes the prompt (the messages' JSON) in
    blocks of vLLM's own block size, 4 characters a token (autoTune reads ``block_size`` of
    ``vllm:cache_config_info``); the prompt is one such block long, so each repeat matches exactly one block."""
    info = next(iter(fleet.servers.values())).get("/metrics")[1]
    [block_size] = {int(line.split('block_size="')[1].split('"')[0]) for line in info.splitlines()
                    if line.startswith("vllm:cache_config_info{")}
    # One token a byte (the tiny model's tokenizer): 800 characters leave room in max_model_len (1024).
    prompt = (uuid.uuid4().hex + " the same long system prompt, tool schemas and history," * 20)[:800]
    assert 4 * block_size <= len(prompt) and len(prompt) + 40 < 2 * 4 * block_size, block_size  # one block
    hit_bytes = "inference_extension_prefix_indexer_hit_bytes_sum"
    before = fleet.picker.samples().get(hit_bytes, 0.0)
    first = _chat(fleet, prompt).endpoint
    assert [_chat(fleet, prompt).endpoint for _ in range(4)] == [first] * 4
    # The picker's own count of matched prefix bytes: nothing for the first, one block for each repeat.
    assert fleet.picker.samples()[hit_bytes] - before == 4 * (4 * block_size)


def test_a_stopped_server_whose_pod_is_not_ready_is_never_picked(fleet: Fleet) -> None:
    """Runs last: it stops one server for good. The picker does not check a server's health: until the pod's
    readiness changes it keeps a server it can no longer scrape among its candidates. The kubelet would mark the
    pod NotReady once its readiness probe fails; KWOK runs no probes, so the test writes that condition."""
    gone, kept = sorted(fleet.servers)
    ip = gone.rsplit(":", 1)[0]
    failed_polls = len([e for e in fleet.picker.log_events("poll failed") if e.get("endpoint") == ip])
    fleet.servers[gone].stop()
    _wait_picker(fleet.picker, f"the picker to fail a scrape of {gone}",
                 lambda: len([e for e in fleet.picker.log_events("poll failed") if e.get("endpoint") == ip])
                 > failed_polls)
    assert fleet.picker.endpoints() == {f"{fleet.pods[gone]}-rank-0", f"{fleet.pods[kept]}-rank-0"}
    not_ready = [{"type": t, "status": "False", "reason": "ReadinessProbeFailed"}
                 for t in ("Ready", "ContainersReady")]
    fleet.cluster.kubectl("patch", "pod", fleet.pods[gone], "-n", fleet.namespace, "--subresource=status",
                          "--type=strategic", "-p", json.dumps({"status": {"conditions": not_ready}}))
    _wait_picker(fleet.picker, f"the picker to drop {fleet.pods[gone]}",
                 lambda: fleet.picker.endpoints() == {f"{fleet.pods[kept]}-rank-0"})
    picks = [_chat(fleet, f"{uuid.uuid4().hex} after the stop {i}").endpoint for i in range(12)]
    assert picks == [kept] * 12
