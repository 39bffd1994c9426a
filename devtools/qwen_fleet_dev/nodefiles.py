"""Configuration files of the real node's programs (containerd, kubelet, kube-proxy): pure builders.

Each setting that differs from upstream's default says why; most come from what these machines need
(see the module docstring of ``realnode``).
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Any

from qwen_fleet_dev.images import PAUSE_IMAGE

CNI_BIN_DIR = Path("/usr/lib/cni")  # Debian's containernetworking-plugins
KUBELET_PORT = 10250
CLUSTER_DOMAIN = "cluster.local"
COREDNS_READY_PORT = 8181  # CoreDNS's ready plugin, on the node's loopback


@dataclass(frozen=True)
class NodeDirs:
    """Everything the node writes lives under one directory of the cluster's working directory."""

    root: Path
    block: int | None = None  # the node network's block, once claimed

    @property
    def sockets(self) -> Path:
        """containerd's sockets. Not under ``root``: a unix socket path has at most 107 bytes, and
        containerd adds ``.ttrpc`` to its socket's; a pytest temp dir is already longer than that."""
        return Path(f"/tmp/qwen-fleet-node-{self.block}") if self.block is not None else self.root / "containerd"

    @property
    def containerd_root(self) -> Path:
        return self.root / "containerd" / "root"

    @property
    def containerd_state(self) -> Path:
        return self.root / "containerd" / "state"

    @property
    def containerd_socket(self) -> Path:
        return self.sockets / "containerd.sock"

    @property
    def runc_root(self) -> Path:
        return self.root / "containerd" / "runc"

    @property
    def cni_conf_dir(self) -> Path:
        return self.root / "cni" / "net.d"

    @property
    def cni_ipam_dir(self) -> Path:
        return self.root / "cni" / "ipam"

    @property
    def kubelet_root(self) -> Path:
        return self.root / "kubelet"

    @property
    def pod_logs(self) -> Path:
        return self.root / "pod-logs"

    @property
    def images(self) -> Path:
        return self.root / "images"

    @property
    def sysctls(self) -> Path:
        return self.root / "sysctl"


# The kubelet sets these machine-wide sysctls to its liking at start (vm.overcommit_memory=1,
# kernel.panic_on_oops=1, ...), or refuses to start when told to protect them. Both are wrong for a
# machine we share: inside the node's mount namespace each is covered by a file that already holds the
# kubelet's value, so it finds nothing to change and the machine's real settings stay as they are.
KUBELET_SYSCTLS = {
    "vm/overcommit_memory": "1",
    "vm/panic_on_oom": "0",
    "kernel/panic": "10",
    "kernel/panic_on_oops": "1",
    "kernel/keys/root_maxkeys": "1000000",
    "kernel/keys/root_maxbytes": "25000000",
}
# Fixed paths the node's programs write outside their configured directories: libcni's cache
# (/var/lib/cni), the kubelet's container log links (/var/log/containers), the shims' sockets
# (/run/containerd/s), iptables' lock. A tmpfs over each parent, seen only in the node's mount namespace.
PRIVATE_TMPFS = ("/run", "/var/lib", "/var/log")


def mount_namespace_script(dirs: NodeDirs) -> str:
    """Shell run inside a fresh mount namespace (``unshare --mount``) before its holder process starts."""
    lines = ["set -e"]
    # The tmpfs first: mount(8) itself writes under /run (libmount's utab).
    for path in PRIVATE_TMPFS:
        lines.append(f"mount -t tmpfs -o mode=755 qwen-fleet-node {path}")
    for name in KUBELET_SYSCTLS:
        lines.append(f"mount --bind {dirs.sysctls / name.replace('/', '.')} /proc/sys/{name}")
    lines.append("mkdir -p /var/log/containers /var/log/pods /run/containerd")
    lines.append("echo mount-namespace-ready")
    return "\n".join(lines) + "\n"


def containerd_toml(dirs: NodeDirs) -> str:
    cri = 'plugins."io.containerd.grpc.v1.cri"'
    return f"""\
version = 2
root = "{dirs.containerd_root}"
state = "{dirs.containerd_state}"
# Snapshotters this machine cannot use would only log errors at start.
disabled_plugins = ["io.containerd.snapshotter.v1.aufs", "io.containerd.snapshotter.v1.btrfs",
  "io.containerd.snapshotter.v1.zfs", "io.containerd.snapshotter.v1.devmapper",
  "io.containerd.tracing.processor.v1.otlp", "io.containerd.internal.v1.tracing"]

[grpc]
  address = "{dirs.containerd_socket}"

[plugins."io.containerd.internal.v1.opt"]
  path = "{dirs.root / 'containerd' / 'opt'}"

[{cri}]
  sandbox_image = "{PAUSE_IMAGE}"
  # Writing a negative oom_score_adj is denied here even to root (no CAP_SYS_RESOURCE); without this runc
  # fails with "can't get final child's PID from pipe: EOF".
  restrict_oom_score_adj = true
  # Pod network namespaces are mounted under our state dir, not /run/netns, so a teardown finds them all.
  netns_mounts_under_state_dir = true
  disable_apparmor = true
  stream_server_address = "127.0.0.1"
  stream_server_port = "0"

[{cri}.cni]
  bin_dir = "{CNI_BIN_DIR}"
  conf_dir = "{dirs.cni_conf_dir}"
  max_conf_num = 1

[{cri}.containerd]
  snapshotter = "overlayfs"
  default_runtime_name = "runc"

[{cri}.containerd.runtimes.runc]
  runtime_type = "io.containerd.runc.v2"

[{cri}.containerd.runtimes.runc.options]
  # runc's state per cluster (default /run/containerd/runc), so teardown can find this node's containers.
  Root = "{dirs.runc_root}"
  SystemdCgroup = false
"""


def kubelet_config(dirs: NodeDirs, node_ip: str, client_ca: Path, cgroup_root: str) -> dict[str, Any]:
    return {
        "apiVersion": "kubelet.config.k8s.io/v1beta1",
        "kind": "KubeletConfiguration",
        "address": node_ip,
        "port": KUBELET_PORT,
        "readOnlyPort": 0,
        "healthzBindAddress": "127.0.0.1",
        "healthzPort": 10248,
        # The apiserver reaches the kubelet (logs, exec) with a client certificate from this CA, and the
        # kubelet asks the apiserver whether that user may (SubjectAccessReview).
        "authentication": {"anonymous": {"enabled": False}, "webhook": {"enabled": True},
                           "x509": {"clientCAFile": str(client_ca)}},
        "authorization": {"mode": "Webhook"},
        "containerRuntimeEndpoint": f"unix://{dirs.containerd_socket}",
        # The cgroup mount here is hybrid (v1 controllers + unified); kubelet 1.35+ refuses v1 unless told,
        # and without systemd the driver is cgroupfs. The pods' cgroups (QoS classes, then pods) go under
        # a directory of this node's own in each hierarchy, made before and removed after the node; the
        # rest of the machine's tree is not ours, so no node-allocatable enforcement on it.
        "failCgroupV1": False,
        "cgroupDriver": "cgroupfs",
        "cgroupsPerQOS": True,
        "cgroupRoot": cgroup_root,
        "enforceNodeAllocatable": [],
        "failSwapOn": False,
        "podLogsDir": str(dirs.pod_logs),
        # Pods resolve <service>.<namespace>.svc through the node's CoreDNS (see ``corefile``).
        "clusterDNS": [node_ip],
        "clusterDomain": CLUSTER_DOMAIN,
        # Shared CI disks are often fuller than the 10-15% defaults; the node should not evict test pods. Absolute
        # floors, not 1%: on this machine's 252 GB disk 1% is 2.5 GB, and with other work's files and the engine
        # image's ~13 GB in the node's containerd the disk went under it: every fleet pod was evicted (DiskPressure).
        "evictionHard": {"memory.available": "100Mi", "nodefs.available": "512Mi", "imagefs.available": "512Mi",
                         "nodefs.inodesFree": "1%"},
        "imageGCHighThresholdPercent": 100,
        "imageGCLowThresholdPercent": 99,
        "serializeImagePulls": False,
        "syncFrequency": "10s",
        "nodeStatusUpdateFrequency": "5s",
        "maxPods": 110,
    }


def corefile(node_ip: str, kubeconfig: Path) -> str:
    """CoreDNS answering the cluster's names on the node's address (the kubelet's ``clusterDNS``). No ``forward``:
    nothing outside the cluster can be reached from these machines, so other names fail at once instead of
    waiting on an upstream. No ``cache``: a Service made a moment ago resolves on the next lookup."""
    return f"""\
.:53 {{
    bind {node_ip}
    errors
    ready 127.0.0.1:{COREDNS_READY_PORT}
    kubernetes {CLUSTER_DOMAIN} in-addr.arpa ip6.arpa {{
        kubeconfig {kubeconfig}
        fallthrough in-addr.arpa ip6.arpa
    }}
}}
"""


def kube_proxy_config(kubeconfig: Path, node_name: str, node_ip: str, pod_cidr: str) -> dict[str, Any]:
    return {
        "apiVersion": "kubeproxy.config.k8s.io/v1alpha1",
        "kind": "KubeProxyConfiguration",
        "clientConnection": {"kubeconfig": str(kubeconfig)},
        "mode": "iptables",
        "hostnameOverride": node_name,
        "bindAddress": node_ip,
        "clusterCIDR": pod_cidr,
        "healthzBindAddress": "127.0.0.1:10256",
        "metricsBindAddress": "127.0.0.1:10249",
        "nodePortAddresses": [f"{node_ip}/32"],
        # Zero means "leave the kernel's value": nf_conntrack_max is global to the machine, not ours to set.
        "conntrack": {"maxPerCore": 0, "min": 0, "tcpEstablishedTimeout": "0s", "tcpCloseWaitTimeout": "0s"},
        # NodePorts on 127.0.0.1 need route_localnet; we do not need them.
        "iptables": {"localhostNodePorts": False},
    }
