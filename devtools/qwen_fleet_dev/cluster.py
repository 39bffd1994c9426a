"""A real local Kubernetes control plane: etcd, kube-apiserver, kube-controller-manager, kube-scheduler, kwok.

Everything binds to loopback on free ports inside one working directory, so two sessions on one machine do
not collide. kwok plays the kubelet for fake GPU nodes: pods bound to them turn Running/Ready without
containers. With ``real_node=True`` a real node (kubelet, containerd, kube-proxy; see ``realnode``) joins
them in a network namespace of its own; the apiserver then listens on that namespace's host end instead of
loopback, so the node and its pods reach it. With ``leader_worker_set=True`` the real LeaderWorkerSet controller
and its webhooks run too (``lws``). Used by the pytest fixtures, ``qwen-fleet dev up`` and
``make run``.
"""

from __future__ import annotations

import json
import random
import secrets
import shutil
import socket
import subprocess
import tempfile
import time
from collections.abc import Iterator, Sequence
from contextlib import contextmanager, suppress
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import yaml

from qwen_fleet import versions
from qwen_fleet_dev import binaries as binaries_mod
from qwen_fleet_dev.gateway import EnvoyGateway
from qwen_fleet_dev.kubeconfig import write_kubeconfig
from qwen_fleet_dev.lws import LeaderWorkerSetController
from qwen_fleet_dev.nodes import DEFAULT_POOLS, NodePool, node_manifests
from qwen_fleet_dev.pki import FRONT_PROXY_CLIENT, make_pki
from qwen_fleet_dev.processes import Component, cmdline, wait_for
from qwen_fleet_dev.realnode import NodeBinaries, RealNode
from qwen_fleet_dev.rest import Rest
from qwen_fleet_dev.state import STATE_FILE, stop_from_state

__all__ = ["OPERATOR_USER", "STATE_FILE", "LocalCluster", "free_port", "stop_from_state"]

ADMIN_USER = "admin"
OPERATOR_USER = "qwen-fleet-operator"

# Controller-manager and scheduler client limits: the defaults (20 QPS) make the deployment and
# replicaset controllers, not the code under test, the bottleneck at fleet scale.
_CLIENT_QPS = ("--kube-api-qps=200", "--kube-api-burst=400")
_KWOK_STAGES = (
    "node/fast/node-initialize.yaml",
    "node/heartbeat-with-lease/node-heartbeat-with-lease.yaml",
    "pod/fast/pod-ready.yaml",
    "pod/fast/pod-complete.yaml",
    "pod/fast/pod-delete.yaml",
)


def _hold_pods(stage: str, label: str) -> str:
    """kwok's pod-ready Stage, not for pods that carry ``label``."""
    doc = yaml.safe_load(stage)
    doc["spec"]["selector"]["matchExpressions"].append(
        {"key": f'.metadata.labels["{label}"]', "operator": "DoesNotExist"})
    return str(yaml.safe_dump(doc, sort_keys=False))


_AUDIT_POLICY = """\
apiVersion: audit.k8s.io/v1
kind: Policy
omitStages: [RequestReceived]
rules:
- level: Metadata
  users: {users}
  verbs: [create, update, patch, delete, deletecollection]
- level: None
"""


class KubectlError(subprocess.CalledProcessError):
    def __str__(self) -> str:
        return f"kubectl {' '.join(self.cmd[2:])} failed ({self.returncode}): {str(self.stderr).strip()[:2000]}"


def _ephemeral_low() -> int:
    try:
        return int(open("/proc/sys/net/ipv4/ip_local_port_range").read().split()[0])
    except (OSError, ValueError, IndexError):
        return 32768


def _bindable(port: int) -> bool:
    for host in ("127.0.0.1", "0.0.0.0"):
        with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
            try:
                sock.bind((host, port))
            except OSError:
                return False
    return True


def free_port() -> int:
    """A port free now, for a server started a moment later.

    Taken below the kernel's ephemeral range: a port from ``bind(("", 0))`` is one the kernel also hands to
    other processes' sockets (a vLLM engine starting beside the cluster opens dozens), and one of them took an
    operator's liveness port between the pick and the operator's bind ("address already in use"). Also
    above the 10xxx ports kubelet, kube-proxy and the controllers default to, and below the NodePort range
    (30000-32767) that kube-proxy holds on the real node.
    """
    rng = random.SystemRandom()
    high = min(_ephemeral_low() - 1, 29999)
    for _ in range(200):
        port = rng.randint(min(20000, high), high)
        if _bindable(port):
            return port
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


@dataclass(frozen=True)
class Ports:
    etcd_client: int
    etcd_peer: int
    apiserver: int
    controller_manager: int
    scheduler: int
    kwok: int

    @classmethod
    def allocate(cls) -> Ports:
        ports: list[int] = []
        while len(ports) < 6:
            port = free_port()
            if port not in ports:
                ports.append(port)
        return cls(*ports)


class LocalCluster:
    """Start with :meth:`start` (or as a context manager); everything stops in :meth:`stop`."""

    def __init__(
        self,
        workdir: Path | None = None,
        node_pools: Sequence[NodePool] = DEFAULT_POOLS,
        hpa_sync_period: str = "15s",
        hpa_downscale_stabilization: str = "5m0s",
        tie_to_parent: bool = True,
        audit_users: Sequence[str] = (OPERATOR_USER,),
        controller_flags: Sequence[str] = (),
        apiserver_flags: Sequence[str] = (),
        real_node: bool = False,
        leader_worker_set: bool = False,
        held_pod_label: str | None = None,
        gateway: bool = False,
    ) -> None:
        self.owns_workdir = workdir is None
        self.workdir = Path(workdir or tempfile.mkdtemp(prefix="qwen-fleet-cluster-"))
        self.workdir.mkdir(parents=True, exist_ok=True)
        self.node_pools = tuple(node_pools)
        self.hpa_sync_period = hpa_sync_period
        self.hpa_downscale_stabilization = hpa_downscale_stabilization
        self.tie_to_parent = tie_to_parent
        self.audit_users = list(audit_users)
        self.controller_flags = list(controller_flags)
        # Extra kube-apiserver flags, after the defaults (a later flag wins): tests/chaos starts apiservers that
        # throttle (--max-requests-inflight) or keep no watch cache.
        self.apiserver_flags = list(apiserver_flags)
        self.bins = binaries_mod.locate()
        self.ports = Ports.allocate()
        self.admin_token = secrets.token_hex(16)
        self.operator_token = secrets.token_hex(16)
        self.components: dict[str, Component] = {}
        self.started_at: float | None = None
        self.startup_seconds: float | None = None
        self.apiserver_host = "127.0.0.1"
        node_bins = NodeBinaries(self.bins.kubelet, self.bins.kube_proxy, self.bins.coredns)
        self.real_node = RealNode(self.workdir, node_bins, tie_to_parent) if real_node else None
        # The real LeaderWorkerSet controller and its webhooks (devcluster/lws.py).
        self.lws = LeaderWorkerSetController(self.workdir, self.kubeconfig, free_port(), free_port()) \
            if leader_worker_set else None
        # Pods with this label are left Pending by kwok (no IP, not Running, not Ready): the caller plays their
        # kubelet and reports them Ready when a real server behind them answers (bench/scale_to_zero.py).
        self.held_pod_label = held_pod_label
        # The real gateway (Envoy Gateway and its Envoy proxies as pods on the real node; devtools gateway.py).
        if gateway and not real_node:
            raise ValueError("gateway=True needs real_node=True: the gateway's pods run on the real node")
        self.want_gateway = gateway
        self.gateway: EnvoyGateway | None = None

    # --- public surface -------------------------------------------------------------------------------

    @property
    def server(self) -> str:
        return f"https://{self.apiserver_host}:{self.ports.apiserver}"

    @property
    def kubeconfig(self) -> Path:
        return self.workdir / "kubeconfig"

    @property
    def operator_kubeconfig(self) -> Path:
        """Credentials of a separate user, so the audit log can count the operator's own writes."""
        return self.workdir / "operator.kubeconfig"

    @property
    def audit_log(self) -> Path:
        return self.workdir / "logs" / "audit.log"

    def rest(self) -> Rest:
        return Rest(self.server, self.admin_token)

    def start(self) -> LocalCluster:
        missing = self.bins.missing()
        if missing:
            raise binaries_mod.BinariesMissing(
                "control-plane binaries missing (run hack/build-binaries.sh): " + ", ".join(map(str, missing)))
        began = time.monotonic()
        try:
            if self.real_node is not None:
                self.apiserver_host = self.real_node.create_network().host_ip
            self._prepare_files()
            self._start_etcd()
            self._start_apiserver()
            self._start_component("kube-controller-manager", self._controller_manager_argv(),
                                  self.ports.controller_manager)
            self._start_component("kube-scheduler", self._scheduler_argv(), self.ports.scheduler)
            self._start_kwok()
            self._create_nodes()
            self._wait_for_default_service_account()
            if self.lws is not None:
                self.components["lws-manager"] = self.lws.start(self, self.tie_to_parent)
            if self.real_node is not None:
                self.real_node.start(self.server, self.rest())
            if self.want_gateway:
                self.gateway = EnvoyGateway(self).start()
        except BaseException:
            self.stop()
            raise
        self.startup_seconds = time.monotonic() - began
        self._write_state()
        return self

    def stop(self) -> None:
        if self.real_node is not None:
            self.real_node.stop()
        for name in reversed(list(self.components)):
            self.components[name].stop()
        self.components.clear()
        state = self.workdir / STATE_FILE
        with suppress(FileNotFoundError):
            state.unlink()

    def cleanup(self) -> None:
        """Stop, and remove the working directory when this object created it."""
        self.stop()
        if self.owns_workdir:
            shutil.rmtree(self.workdir, ignore_errors=True)

    def __enter__(self) -> LocalCluster:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.cleanup()

    def pids(self) -> dict[str, int]:
        node = self.real_node.components if self.real_node else {}
        return {name: c.pid for name, c in {**self.components, **node}.items() if c.pid is not None}

    def kubectl(self, *args: str, check: bool = True, input: str | None = None,
                kubeconfig: Path | None = None, timeout: float = 120) -> subprocess.CompletedProcess[str]:
        argv = [str(self.bins.kubectl), f"--kubeconfig={kubeconfig or self.kubeconfig}", *args]
        result = subprocess.run(argv, capture_output=True, text=True, input=input, timeout=timeout)
        if check and result.returncode != 0:
            raise KubectlError(result.returncode, argv, result.stdout, result.stderr)
        return result

    def install_crd(self, path: Path, name: str = "qweninferences.qwenfleet.io", timeout: float = 60) -> None:
        """Apply a CRD and wait until it is Established (polling: a brand-new CRD may have no conditions yet,
        which `kubectl wait` reports as an error instead of waiting)."""
        self.kubectl("apply", "--server-side", "-f", str(path))
        query = "jsonpath={.status.conditions[?(@.type=='Established')].status}"
        wait_for(f"CRD {name} Established", lambda: self.kubectl("get", f"crd/{name}", "-o", query).stdout == "True",
                 timeout)

    @contextmanager
    def outage(self, *names: str) -> Iterator[None]:
        """Stop the named components (e.g. etcd, kube-apiserver) and start them again on exit."""
        for name in reversed(names):
            self.components[name].stop()
        try:
            yield
        finally:
            for name in names:
                self._restart(name)

    # --- files ----------------------------------------------------------------------------------------

    def _prepare_files(self) -> None:
        self.pki = make_pki(self.workdir / "pki")
        (self.workdir / "logs").mkdir(exist_ok=True)
        tokens = (f'{self.admin_token},{ADMIN_USER},1,"system:masters"\n'
                  f'{self.operator_token},{OPERATOR_USER},2,"system:masters"\n')
        if self.real_node is not None:
            tokens += self.real_node.token_lines()
        (self.workdir / "tokens.csv").write_text(tokens)
        users = json.dumps(self.audit_users or ["nobody"])
        (self.workdir / "audit-policy.yaml").write_text(_AUDIT_POLICY.format(users=users))
        write_kubeconfig(self.kubeconfig, self.server, ADMIN_USER, self.admin_token, "default")
        write_kubeconfig(self.operator_kubeconfig, self.server, OPERATOR_USER, self.operator_token, "default")
        stages = [(self.bins.kwok_stages / rel).read_text() for rel in _KWOK_STAGES]
        if self.held_pod_label:
            stages = [_hold_pods(text, self.held_pod_label) if rel.endswith("/pod-ready.yaml") else text
                      for rel, text in zip(_KWOK_STAGES, stages, strict=True)]
        (self.workdir / "kwok.yaml").write_text("\n---\n".join(stages))

    # --- components -----------------------------------------------------------------------------------

    def _component(self, name: str, argv: list[str]) -> Component:
        comp = Component(name, argv, self.workdir / "logs" / f"{name}.log")
        self.components[name] = comp
        comp.start(self.tie_to_parent)
        return comp

    def _start_etcd(self) -> None:
        client = f"http://127.0.0.1:{self.ports.etcd_client}"
        peer = f"http://127.0.0.1:{self.ports.etcd_peer}"
        argv = [
            str(self.bins.etcd), "--name=qwen-fleet", f"--data-dir={self.workdir / 'etcd'}",
            f"--listen-client-urls={client}", f"--advertise-client-urls={client}",
            f"--listen-peer-urls={peer}", f"--initial-advertise-peer-urls={peer}",
            f"--initial-cluster=qwen-fleet={peer}", "--unsafe-no-fsync", "--log-level=warn",
            "--quota-backend-bytes=8589934592",
        ]
        comp = self._component("etcd", argv)
        wait_for("etcd health", lambda: _http_ok(f"{client}/health"), 60, comp)

    def _apiserver_argv(self) -> list[str]:
        d = self.workdir
        return [
            str(self.bins.kube_apiserver),
            f"--etcd-servers=http://127.0.0.1:{self.ports.etcd_client}",
            f"--bind-address={self.apiserver_host}", f"--secure-port={self.ports.apiserver}",
            f"--cert-dir={d / 'pki' / 'serving'}",
            f"--token-auth-file={d / 'tokens.csv'}",
            "--authorization-mode=Node,RBAC",
            "--service-account-issuer=https://kubernetes.default.svc.cluster.local",
            f"--service-account-key-file={self.pki.sa_key}",
            f"--service-account-signing-key-file={self.pki.sa_key}",
            f"--service-cluster-ip-range={self._service_cidr()}",
            "--allow-privileged=true",
            # The aggregation layer (for metrics adapters registered as APIServices).
            f"--requestheader-client-ca-file={self.pki.front_proxy_ca}",
            f"--requestheader-allowed-names={FRONT_PROXY_CLIENT}",
            "--requestheader-username-headers=X-Remote-User",
            "--requestheader-group-headers=X-Remote-Group",
            "--requestheader-extra-headers-prefix=X-Remote-Extra-",
            f"--proxy-client-cert-file={self.pki.front_proxy_client_cert}",
            f"--proxy-client-key-file={self.pki.front_proxy_client_key}",
            f"--audit-policy-file={d / 'audit-policy.yaml'}",
            f"--audit-log-path={self.audit_log}", "--audit-log-format=json",
            "--audit-log-mode=blocking",
            *(self._real_node_apiserver_flags()),
            *self.apiserver_flags,
        ]

    def _service_cidr(self) -> str:
        # A real node's kube-proxy routes Services, and the host routes the range to that node: each
        # cluster with a real node gets its own range so two of them side by side do not overlap.
        return self.real_node.net.service_cidr if self.real_node and self.real_node.net else "10.96.0.0/16"

    def _real_node_apiserver_flags(self) -> list[str]:
        if self.real_node is None:
            return []
        # The `kubernetes` Service's endpoint: where pods on the real node reach the apiserver.
        return [f"--advertise-address={self.apiserver_host}", *self.real_node.apiserver_flags()]

    def _start_apiserver(self) -> None:
        comp = self._component("kube-apiserver", self._apiserver_argv())
        rest = self.rest()
        wait_for("kube-apiserver /readyz", lambda: rest.get("/readyz") == "ok", 120, comp)

    def _controller_manager_argv(self) -> list[str]:
        kc = str(self.kubeconfig)
        return [
            str(self.bins.kube_controller_manager),
            f"--kubeconfig={kc}", f"--authentication-kubeconfig={kc}", f"--authorization-kubeconfig={kc}",
            "--leader-elect=false", "--bind-address=127.0.0.1",
            f"--secure-port={self.ports.controller_manager}",
            f"--service-account-private-key-file={self.pki.sa_key}",
            f"--root-ca-file={self.workdir / 'pki' / 'serving' / 'apiserver.crt'}",
            "--controllers=*", "--use-service-account-credentials=false",
            f"--horizontal-pod-autoscaler-sync-period={self.hpa_sync_period}",
            f"--horizontal-pod-autoscaler-downscale-stabilization={self.hpa_downscale_stabilization}",
            "--concurrent-deployment-syncs=20", "--concurrent-replicaset-syncs=20",
            "--concurrent-gc-syncs=40",
            *_CLIENT_QPS, *self.controller_flags,
        ]

    def _scheduler_argv(self) -> list[str]:
        kc = str(self.kubeconfig)
        return [
            str(self.bins.kube_scheduler),
            f"--kubeconfig={kc}", f"--authentication-kubeconfig={kc}", f"--authorization-kubeconfig={kc}",
            "--leader-elect=false", "--bind-address=127.0.0.1", f"--secure-port={self.ports.scheduler}",
            *_CLIENT_QPS,
        ]

    def _start_component(self, name: str, argv: list[str], port: int) -> None:
        comp = self._component(name, argv)
        wait_for(f"{name} /healthz", lambda: _https_ok(f"https://127.0.0.1:{port}/healthz", self.admin_token),
                 90, comp)

    def _kwok_argv(self) -> list[str]:
        return [
            str(self.bins.kwok), f"--kubeconfig={self.kubeconfig}", f"--config={self.workdir / 'kwok.yaml'}",
            "--manage-all-nodes=false", "--manage-nodes-with-label-selector=type=kwok",
            "--node-lease-duration-seconds=40", "--cidr=10.244.0.0/16", "--node-ip=127.0.0.1",
            "--node-name=localhost", f"--node-port={self.ports.kwok}",
            f"--server-address=127.0.0.1:{self.ports.kwok}",
        ]

    def _start_kwok(self) -> None:
        comp = self._component("kwok", self._kwok_argv())
        wait_for("kwok /healthz", lambda: _http_ok(f"http://127.0.0.1:{self.ports.kwok}/healthz"), 60, comp)

    def _restart(self, name: str) -> None:
        if name == "etcd":
            self._start_etcd()
        elif name == "kube-apiserver":
            self._start_apiserver()
        elif name == "kwok":
            self._start_kwok()
        elif name == "kube-controller-manager":
            self._start_component(name, self._controller_manager_argv(), self.ports.controller_manager)
        elif name == "kube-scheduler":
            self._start_component(name, self._scheduler_argv(), self.ports.scheduler)
        else:
            raise KeyError(name)

    # --- cluster content ------------------------------------------------------------------------------

    def _create_nodes(self) -> None:
        rest = self.rest()
        manifests = node_manifests(self.node_pools)
        for node in manifests:
            rest.create("/api/v1/nodes", node)
        names = {n["metadata"]["name"] for n in manifests}

        def all_ready() -> bool:
            items = rest.get("/api/v1/nodes?labelSelector=type%3Dkwok")["items"]
            ready = {n["metadata"]["name"] for n in items if _condition(n, "Ready") == "True"}
            return names <= ready

        wait_for(f"{len(names)} kwok nodes Ready", all_ready, 120, self.components["kwok"])

    def _wait_for_default_service_account(self) -> None:
        rest = self.rest()
        wait_for("the default ServiceAccount", lambda: rest.get(
            "/api/v1/namespaces/default/serviceaccounts/default") is not None, 90,
            self.components["kube-controller-manager"])

    def _write_state(self) -> None:
        state = {
            "server": self.server, "kubeconfig": str(self.kubeconfig), "pids": self.pids(),
            "real_node": self.real_node.state() if self.real_node else None,
            # What each PID runs now (a wrapper such as unshare has exec'd its program by this time).
            "binaries": {name: (cmdline(pid) or [""])[0] for name, pid in self.pids().items()},
            "kubernetes": versions.KUBERNETES, "startup_seconds": self.startup_seconds,
        }
        (self.workdir / STATE_FILE).write_text(json.dumps(state, indent=2))


def _condition(obj: dict[str, Any], kind: str) -> str | None:
    for cond in obj.get("status", {}).get("conditions", []) or []:
        if cond.get("type") == kind:
            return str(cond.get("status"))
    return None


def _http_ok(url: str) -> bool:
    import urllib.request

    with urllib.request.urlopen(url, timeout=2) as resp:
        return bool(resp.status == 200)


def _https_ok(url: str, token: str) -> bool:
    rest = Rest(url.rsplit("/", 1)[0], token, timeout=2)
    return bool(rest.get("/" + url.rsplit("/", 1)[1]) == "ok")

