"""A real Kubernetes node beside kwok's fake ones: containerd + runc + CNI bridge, kubelet, kube-proxy and CoreDNS.

Opt-in (``LocalCluster(real_node=True)``, ``qwen-fleet dev up --real-node``): pods scheduled here really
run, so probes, logs, exec, Service routing, cluster DNS and graceful termination are the real thing.

The node lives in a network namespace of its own (``nodenet``), so kubelet gets a non-loopback node IP that
belongs to this project, and two clusters side by side keep their kube-proxy rules and ports apart. Its
programs also share a mount namespace of their own, where the kubelet's machine-wide sysctls are masked
and fixed paths they write (/run/containerd, /var/lib/cni, /var/log/containers) are private tmpfs; every
mount the node makes lives there and goes when its last process does. Images come from docker-archive
tars imported with ``ctr`` (``images``); there is no registry.

Settings these machines needed (hybrid cgroup v1 mount, no systemd, no CAP_SYS_RESOURCE) are in
``nodefiles``. Teardown (``nodeclean``) removes containers, shims, mounts and the namespace even after a
crash of any of the programs.
"""

from __future__ import annotations

import json
import os
import secrets
import shutil
import subprocess
import sys
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import yaml

from qwen_fleet_dev import images, nodeclean
from qwen_fleet_dev.kubeconfig import write_kubeconfig
from qwen_fleet_dev.nodefiles import (
    COREDNS_READY_PORT,
    KUBELET_SYSCTLS,
    PRIVATE_TMPFS,
    NodeDirs,
    containerd_toml,
    corefile,
    kube_proxy_config,
    kubelet_config,
    mount_namespace_script,
)
from qwen_fleet_dev.nodenet import NodeNetwork, leftover_networks
from qwen_fleet_dev.pki import KubeletClientPki, make_kubelet_client_pki
from qwen_fleet_dev.processes import Component, alive, wait_for
from qwen_fleet_dev.rest import Rest

NODE_NAME = "real-node-0"
NODE_LABEL = ("type", "real")
KUBE_PROXY_USER = "system:kube-proxy"  # bound to ClusterRole system:node-proxier by default RBAC
COREDNS_USER = "qwen-fleet:coredns"  # bound at start to a ClusterRole with what CoreDNS's kubernetes plugin reads
COREDNS_RULES = [{"apiGroups": [""], "resources": ["services", "namespaces"], "verbs": ["list", "watch"]},
                 {"apiGroups": ["discovery.k8s.io"], "resources": ["endpointslices"], "verbs": ["list", "watch"]}]
# What the node runs or calls besides kubelet and kube-proxy (Debian packages: hack/real-node-deps.sh).
RUNTIME_PROGRAMS = ("containerd", "ctr", "runc", "containerd-shim-runc-v2", "iptables", "ip", "nsenter", "unshare",
                    "curl")


# A unix socket's path holds at most 107 bytes (sun_path is 108 with its NUL). The kubelet's longest socket is
# made under its --root-dir as pod-resources/<10 random digits> before its rename to kubelet.sock: the root's
# length plus these 25 bytes (a "/" included). containerd's sockets are kept out of the root (NodeDirs.sockets).
UNIX_PATH_MAX = 107
KUBELET_SOCKET_SUFFIX = len("/pod-resources/") + 10


class RealNodeError(RuntimeError):
    pass


@dataclass(frozen=True)
class NodeBinaries:
    kubelet: Path
    kube_proxy: Path
    coredns: Path

    def missing(self) -> list[str]:
        gone = [str(p) for p in (self.kubelet, self.kube_proxy, self.coredns) if not os.access(p, os.X_OK)]
        gone += [name for name in RUNTIME_PROGRAMS if shutil.which(name) is None]
        gone += [str(p) for p in (images.BUSYBOX, Path("/usr/lib/cni/bridge")) if not p.exists()]
        return gone


class RealNode:
    """Created by ``LocalCluster``: :meth:`create_network` before the apiserver (which listens on the
    namespace's host end), :meth:`start` after the scheduler, :meth:`stop` first on the way down."""

    def __init__(self, workdir: Path, bins: NodeBinaries, tie_to_parent: bool, name: str = NODE_NAME) -> None:
        self.dirs = NodeDirs(workdir / "node")
        self.logs = workdir / "logs"
        self.bins = bins
        self.tie_to_parent = tie_to_parent
        self.name = name
        self.net: NodeNetwork | None = None
        self.kubelet_token = secrets.token_hex(16)
        self.proxy_token = secrets.token_hex(16)
        self.dns_token = secrets.token_hex(16)
        self.components: dict[str, Component] = {}
        self.client_pki: KubeletClientPki | None = None
        self.mntns: Path | None = None

    # --- what the control plane needs from us --------------------------------------------------------

    def create_network(self) -> NodeNetwork:
        root = str(self.dirs.root.resolve())
        hidden = [p for p in PRIVATE_TMPFS if root == p or root.startswith(p + "/")]
        if hidden:
            raise RealNodeError(f"the node's directory {root} is under {hidden[0]}, which the node's mount "
                                "namespace covers with a tmpfs; use a working directory elsewhere")
        longest = len(str(self.dirs.kubelet_root.resolve())) + KUBELET_SOCKET_SUFFIX
        if longest > UNIX_PATH_MAX:
            raise RealNodeError(
                f"the node's directory {root} is too long: the kubelet makes its sockets under "
                f"{self.dirs.kubelet_root.name}/ in it (pod-resources/<10 digits>), {longest} bytes where a unix "
                f"socket path holds at most {UNIX_PATH_MAX}, and it would exit at start ('bind: invalid "
                f"argument'); use a working directory at least {longest - UNIX_PATH_MAX} bytes shorter")
        missing = self.bins.missing()
        if missing:
            raise RealNodeError("real node components missing: " + ", ".join(missing)
                                + " (run hack/real-node-deps.sh and hack/build-binaries.sh node)")
        sweep_stale_nodes()
        self.net = NodeNetwork.create()
        self.dirs = NodeDirs(self.dirs.root, self.net.block)
        _record_owner(self.net.block, self.dirs.root)
        self.client_pki = make_kubelet_client_pki(self.dirs.root / "pki")
        return self.net

    def token_lines(self) -> str:
        return (f'{self.kubelet_token},system:node:{self.name},{self.name},"system:nodes"\n'
                f"{self.proxy_token},{KUBE_PROXY_USER},{KUBE_PROXY_USER}\n"
                f"{self.dns_token},{COREDNS_USER},{COREDNS_USER}\n")

    def apiserver_flags(self) -> list[str]:
        assert self.net and self.client_pki
        return [f"--kubelet-client-certificate={self.client_pki.cert}",
                f"--kubelet-client-key={self.client_pki.key}",
                "--kubelet-preferred-address-types=InternalIP"]

    # --- start ---------------------------------------------------------------------------------------

    def start(self, server: str, rest: Rest) -> None:
        assert self.net and self.client_pki
        self._write_files(server)
        self._start_mount_namespace()
        nodeclean.make_cgroups(self.net.cgroup_root)
        self._start_containerd()
        self.import_images([images.pause_image(), images.busybox_image()])
        self._component("kubelet", self._kubelet_argv())
        self._component("kube-proxy", [str(self.bins.kube_proxy),
                                       f"--config={self.dirs.root / 'kube-proxy.yaml'}"])
        self._allow_coredns(rest)
        dns = self._component("coredns", [str(self.bins.coredns), "-conf", str(self.dirs.root / "Corefile")])
        wait_for(f"node {self.name} Ready", lambda: _node_ready(rest, self.name), 120, self.components["kubelet"])
        # kube-proxy's /healthz turns 200 once its first full sync of the Service rules is done.
        wait_for("kube-proxy /healthz", lambda: self._in_node("curl", "-sf", "http://127.0.0.1:10256/healthz"),
                 60, self.components["kube-proxy"])
        # CoreDNS's /ready turns 200 once its kubernetes plugin has synced Services and EndpointSlices.
        wait_for("coredns /ready", lambda: self._in_node("curl", "-sf", f"http://127.0.0.1:{COREDNS_READY_PORT}/ready"),
                 60, dns)

    @staticmethod
    def _allow_coredns(rest: Rest) -> None:
        name = "qwen-fleet:coredns"
        rest.create("/apis/rbac.authorization.k8s.io/v1/clusterroles", {
            "apiVersion": "rbac.authorization.k8s.io/v1", "kind": "ClusterRole", "metadata": {"name": name},
            "rules": COREDNS_RULES})
        rest.create("/apis/rbac.authorization.k8s.io/v1/clusterrolebindings", {
            "apiVersion": "rbac.authorization.k8s.io/v1", "kind": "ClusterRoleBinding", "metadata": {"name": name},
            "roleRef": {"apiGroup": "rbac.authorization.k8s.io", "kind": "ClusterRole", "name": name},
            "subjects": [{"apiGroup": "rbac.authorization.k8s.io", "kind": "User", "name": COREDNS_USER}]})

    def _write_files(self, server: str) -> None:
        assert self.net and self.client_pki
        d = self.dirs
        for path in (d.cni_conf_dir, d.cni_ipam_dir, d.kubelet_root, d.pod_logs, d.images, d.runc_root, d.sockets):
            path.mkdir(parents=True, exist_ok=True)
        d.sysctls.mkdir(parents=True, exist_ok=True)
        for name, value in KUBELET_SYSCTLS.items():
            (d.sysctls / name.replace("/", ".")).write_text(value + "\n")
        (d.root / "containerd.toml").write_text(containerd_toml(d))
        (d.cni_conf_dir / "10-qwen-fleet.conflist").write_text(
            json.dumps(self.net.cni_conflist(d.cni_ipam_dir), indent=2))
        write_kubeconfig(d.root / "kubelet.kubeconfig", server, f"system:node:{self.name}", self.kubelet_token)
        write_kubeconfig(d.root / "kube-proxy.kubeconfig", server, KUBE_PROXY_USER, self.proxy_token)
        write_kubeconfig(d.root / "coredns.kubeconfig", server, COREDNS_USER, self.dns_token)
        (d.root / "Corefile").write_text(corefile(self.net.node_ip, d.root / "coredns.kubeconfig"))
        (d.root / "kubelet.yaml").write_text(yaml.safe_dump(
            kubelet_config(d, self.net.node_ip, self.client_pki.ca, self.net.cgroup_root), sort_keys=False))
        (d.root / "kube-proxy.yaml").write_text(yaml.safe_dump(kube_proxy_config(
            d.root / "kube-proxy.kubeconfig", self.name, self.net.node_ip, self.net.pod_cidr), sort_keys=False))

    def _component(self, name: str, argv: list[str]) -> Component:
        assert self.net
        comp = Component(name, argv, self.logs / f"{name}.log", netns=self.net.netns_path, mntns=self.mntns)
        self.components[name] = comp
        comp.start(self.tie_to_parent)
        return comp

    def _start_mount_namespace(self) -> None:
        """A mount namespace for the node's programs, held open by a sleeping process that names our
        directory (so a later sweep finds it). The node's mounts (rootfs overlays, volumes, pod network
        namespaces) live and die with it: the host never sees them."""
        holder = [sys.executable, "-c", "import signal; signal.pause()", f"{self.dirs.root}/mount-namespace"]
        argv = ["unshare", "--mount", "--propagation", "private", "--", "sh", "-c",
                mount_namespace_script(self.dirs) + 'exec "$@"', "sh", *holder]
        comp = self._component("node-mounts", argv)
        wait_for("the node's mount namespace", lambda: "mount-namespace-ready" in comp.tail(5), 30, comp)
        self.mntns = Path(f"/proc/{comp.pid}/ns/mnt")

    def _start_containerd(self) -> None:
        comp = self._component("containerd", ["containerd", f"--config={self.dirs.root / 'containerd.toml'}"])
        wait_for("containerd", lambda: self.ctr("version").returncode == 0, 60, comp)

    def _kubelet_argv(self) -> list[str]:
        assert self.net
        d = self.dirs
        return [str(self.bins.kubelet), f"--config={d.root / 'kubelet.yaml'}",
                f"--kubeconfig={d.root / 'kubelet.kubeconfig'}", f"--root-dir={d.kubelet_root}",
                f"--cert-dir={d.kubelet_root / 'pki'}", f"--hostname-override={self.name}",
                f"--node-ip={self.net.node_ip}", f"--node-labels={NODE_LABEL[0]}={NODE_LABEL[1]}", "--v=1"]

    def ctr(self, *args: str, timeout: float = 120) -> subprocess.CompletedProcess[str]:
        return subprocess.run(["ctr", f"--address={self.dirs.containerd_socket}", "--namespace=k8s.io", *args],
                              capture_output=True, text=True, timeout=timeout)

    def import_images(self, specs: list[images.ImageSpec]) -> None:
        """Write each image as a docker-archive and import it into the node's containerd."""
        for spec in specs:
            tar = self.dirs.images / (spec.tag.replace("/", "_").replace(":", "_") + ".tar")
            images.write_docker_archive(spec, tar)
            result = self.ctr("images", "import", "--no-unpack=false", str(tar), timeout=600)
            if result.returncode != 0:
                raise RealNodeError(f"ctr images import {tar} failed: {result.stderr.strip()}")

    def import_archive_dir(self, archive_dir: Path, timeout: float = 1800) -> None:
        """Import an unpacked docker-archive (``images.write_archive_dir``): tar streams it into ``ctr``."""
        members = images.archive_members(archive_dir)
        tar = subprocess.Popen(["tar", "-C", str(archive_dir), "-cf", "-", *members], stdout=subprocess.PIPE)
        try:
            result = subprocess.run(["ctr", f"--address={self.dirs.containerd_socket}", "--namespace=k8s.io",
                                     "images", "import", "--no-unpack=false", "-"], stdin=tar.stdout,
                                    capture_output=True, text=True, timeout=timeout)
        finally:
            assert tar.stdout is not None
            tar.stdout.close()
            tar.wait()
        if result.returncode != 0 or tar.returncode != 0:
            raise RealNodeError(f"ctr images import of {archive_dir} failed: {result.stderr.strip()}")

    def _in_node(self, *argv: str) -> bool:
        assert self.net
        return subprocess.run(["nsenter", f"--net={self.net.netns_path}", *argv],
                              capture_output=True, timeout=10).returncode == 0

    # --- stop ----------------------------------------------------------------------------------------

    def stop(self) -> None:
        """Stop everything and remove what the node made. Safe after a partial start or a crash."""
        for name in ("coredns", "kube-proxy", "kubelet", "containerd", "node-mounts"):
            if name == "containerd":
                # Before containerd goes: containers killed through runc's state, cgroups removed with them.
                nodeclean.delete_containers(self.dirs.runc_root)
            if name in self.components:
                self.components.pop(name).stop()
        clean_up_node(self.dirs.root, self.net.block if self.net else None)
        self.components.clear()
        self.net = None
        self.mntns = None

    def state(self) -> dict[str, Any]:
        """What ``stop_from_state`` needs to clean up after this node from another process."""
        return {"root": str(self.dirs.root), "block": self.net.block if self.net else None,
                "name": self.name}



def _node_ready(rest: Rest, name: str) -> bool:
    node = rest.get(f"/api/v1/nodes/{name}")
    for cond in node.get("status", {}).get("conditions", []):
        if cond.get("type") == "Ready":
            return bool(cond.get("status") == "True")
    return False


def clean_up_node(root: Path, block: int | None) -> None:
    """Remove what a node under ``root`` left behind, whether its programs stopped cleanly or not."""
    dirs = NodeDirs(root, block)
    nodeclean.delete_containers(dirs.runc_root)
    # Shims outlive containerd by design (theirs name our socket), and so does a containerd or kubelet
    # whose parent was killed before it could stop them: every process naming our directories goes.
    nodeclean.kill_all(nodeclean.processes_naming(f"{dirs.root}/") + nodeclean.processes_naming(f"{dirs.sockets}/"))
    shutil.rmtree(dirs.sockets, ignore_errors=True)
    nodeclean.unmount_under(dirs.root)
    if block is not None:
        nodeclean.remove_cgroups(NodeNetwork(block).cgroup_root)
        NodeNetwork(block).delete()
        (OWNERS / f"{block}.json").unlink(missing_ok=True)


# Who made each node network, so that a later start can clean up after a session that was SIGKILLed: the
# kernel stops its kubelet, containerd and kube-proxy (PR_SET_PDEATHSIG), but the pods' shims, containers,
# mounts and the network namespace stay. /run is a tmpfs: the records go with a reboot, as do the namespaces.
OWNERS = Path("/run/qwen-fleet/nodes")
_NODE_PROGRAM_MARKERS = ("containerd.toml", "kubelet.yaml", "kube-proxy.yaml")


def _process_start(pid: int) -> str | None:
    try:
        return Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[19]
    except (OSError, IndexError):
        return None


def _record_owner(block: int, root: Path) -> None:
    OWNERS.mkdir(parents=True, exist_ok=True)
    record = {"pid": os.getpid(), "start": _process_start(os.getpid()), "root": str(root)}
    (OWNERS / f"{block}.json").write_text(json.dumps(record))


def _is_stale(record: dict[str, Any]) -> bool:
    """Its creator is gone and none of its node programs runs (a ``dev up`` node outlives its creator)."""
    pid = int(record["pid"])
    if _process_start(pid) == record.get("start") and alive(pid):
        return False
    root = record["root"]
    return not any(nodeclean.processes_naming(f"{root}/{marker}") for marker in _NODE_PROGRAM_MARKERS)


def sweep_stale_nodes() -> list[int]:
    """Clean up node networks (and their containers and mounts) whose session died; returns their blocks."""
    swept = []
    for name in leftover_networks():
        block = int(name.rsplit("-", 1)[1])
        path = OWNERS / f"{block}.json"
        try:
            record = json.loads(path.read_text())
        except (OSError, ValueError):
            continue  # claimed a moment ago by a session that has not written its record yet
        if _is_stale(record):
            clean_up_node(Path(record["root"]), block)
            swept.append(block)
    return swept
