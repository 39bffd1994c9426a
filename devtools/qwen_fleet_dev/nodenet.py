"""The real node's network: its own network namespace, joined to the host by one veth pair.

Why a namespace of its own: kubelet refuses a loopback node IP, the machine's own interface address is not
ours to use, and kube-proxy owns fixed chain names (KUBE-SERVICES ...), so two clusters' kube-proxies in
one namespace would rewrite each other's rules. Inside the namespace the node has a private address, its
own iptables, its own ports (kubelet 10250 in two clusters side by side) and the CNI bridge of its pods.

Each cluster claims one block ``10.<b>.0.0/16`` (b in 200..243, clear of kwok's fake 10.244/16 and the
default Service range 10.96/16) by creating the namespace ``qwen-fleet-<b>``: ``ip netns add`` fails if the
name exists, so the claim is atomic between sessions. Inside the block:

- ``10.<b>.0.1/30`` host end of the veth (the apiserver listens here so the node and its pods reach it),
- ``10.<b>.0.2/30`` the node's end: its InternalIP,
- ``10.<b>.1.0/24`` pod addresses (CNI bridge ``qfb-<b>``, gateway ``.1``),
- ``10.<b>.128.0/20`` the cluster's Service range (routed to the node, where kube-proxy translates it).

Deleting the namespace deletes everything in it: the veth pair (and so the host's routes through it), the
bridge, every iptables rule kube-proxy and the CNI plugins wrote.
"""

from __future__ import annotations

import ipaddress
import json
import random
import subprocess
from dataclasses import dataclass
from pathlib import Path
from typing import Any

NETNS_DIR = Path("/run/netns")
NETNS_PREFIX = "qwen-fleet-"
BLOCKS = range(200, 244)


class NodeNetworkError(RuntimeError):
    pass


def _ip(*args: str, netns: str | None = None, check: bool = True) -> subprocess.CompletedProcess[str]:
    argv = ["ip", *(("-n", netns) if netns else ()), *args]
    result = subprocess.run(argv, capture_output=True, text=True)
    if check and result.returncode != 0:
        raise NodeNetworkError(f"{' '.join(argv)} failed: {result.stderr.strip()}")
    return result


def _sysctl_in(netns: str, key: str, value: str) -> None:
    # /proc/sys/net shows the namespace of the reading process, so write it from inside.
    path = "/proc/sys/" + key.replace(".", "/")
    subprocess.run(["nsenter", f"--net={NETNS_DIR / netns}", "sh", "-c", f"echo {value} > {path}"],
                   check=True, capture_output=True)


@dataclass(frozen=True)
class NodeNetwork:
    block: int

    @property
    def netns(self) -> str:
        return f"{NETNS_PREFIX}{self.block}"

    @property
    def netns_path(self) -> Path:
        return NETNS_DIR / self.netns

    @property
    def host_link(self) -> str:
        return f"qfh-{self.block}"

    @property
    def node_link(self) -> str:
        return f"qfn-{self.block}"

    @property
    def bridge(self) -> str:
        return f"qfb-{self.block}"

    @property
    def host_ip(self) -> str:
        return f"10.{self.block}.0.1"

    @property
    def node_ip(self) -> str:
        return f"10.{self.block}.0.2"

    @property
    def pod_cidr(self) -> str:
        return f"10.{self.block}.1.0/24"

    @property
    def service_cidr(self) -> str:
        return f"10.{self.block}.128.0/20"

    @property
    def cgroup_root(self) -> str:
        """Where this node's pods get their cgroups (one directory per hierarchy, named like the netns)."""
        return f"/{self.netns}"

    @property
    def block_cidr(self) -> str:
        return f"10.{self.block}.0.0/16"

    # --- life cycle -----------------------------------------------------------------------------------

    @classmethod
    def create(cls) -> NodeNetwork:
        """Claim a free block and build the namespace, the veth pair and the host routes."""
        taken = _blocks_in_use()
        free = [b for b in BLOCKS if b not in taken]
        random.shuffle(free)
        for block in free:
            net = cls(block)
            if _ip("netns", "add", net.netns, check=False).returncode != 0:
                continue  # another session claimed it between our look and our claim
            try:
                net._wire()
            except BaseException:
                net.delete()
                raise
            return net
        raise NodeNetworkError(f"no free 10.x.0.0/16 block for a node network in 10.{BLOCKS[0]}-{BLOCKS[-1]}")

    def _wire(self) -> None:
        _ip("link", "add", self.host_link, "type", "veth", "peer", "name", self.node_link, "netns", self.netns)
        _ip("addr", "add", f"{self.host_ip}/30", "dev", self.host_link)
        _ip("link", "set", self.host_link, "up")
        _ip("link", "set", "lo", "up", netns=self.netns)
        _ip("addr", "add", f"{self.node_ip}/30", "dev", self.node_link, netns=self.netns)
        _ip("link", "set", self.node_link, "up", netns=self.netns)
        # No default route inside: pods reach the node, the host's end (the apiserver) and each other, and
        # nothing beyond this machine.
        for cidr in (self.pod_cidr, self.service_cidr):
            _ip("route", "add", cidr, "via", self.node_ip, "dev", self.host_link)
        _sysctl_in(self.netns, "net.ipv4.ip_forward", "1")
        # Pod -> Service -> pod on the same bridge: the reply is bridged, and must still pass conntrack to
        # be un-DNATed (what br_netfilter does); per namespace on this kernel.
        _sysctl_in(self.netns, "net.bridge.bridge-nf-call-iptables", "1")

    def delete(self) -> None:
        """Delete the namespace (and with it the veth pair, bridge, routes and rules). Idempotent."""
        _ip("netns", "delete", self.netns, check=False)
        _ip("link", "delete", self.host_link, check=False)

    def exists(self) -> bool:
        return self.netns_path.exists()

    # --- configuration for the node's programs ----------------------------------------------------------

    def cni_conflist(self, ipam_dir: Path) -> dict[str, Any]:
        subnet = ipaddress.ip_network(self.pod_cidr)
        return {
            "cniVersion": "1.0.0",
            "name": f"qwen-fleet-{self.block}",
            "plugins": [
                {
                    "type": "bridge", "bridge": self.bridge, "isGateway": True, "ipMasq": True,
                    "hairpinMode": True,
                    "ipam": {"type": "host-local", "dataDir": str(ipam_dir),
                             "ranges": [[{"subnet": str(subnet), "gateway": str(subnet[1])}]],
                             "routes": [{"dst": "0.0.0.0/0"}]},
                },
                {"type": "portmap", "capabilities": {"portMappings": True}},
            ],
        }


def _blocks_in_use() -> set[int]:
    """Blocks claimed by a namespace, or overlapping any address or route the host already has."""
    used = {int(p.name[len(NETNS_PREFIX):]) for p in NETNS_DIR.glob(f"{NETNS_PREFIX}*")
            if p.name[len(NETNS_PREFIX):].isdigit()} if NETNS_DIR.is_dir() else set()
    nets: list[ipaddress.IPv4Network | ipaddress.IPv6Network] = []
    for entry in json.loads(_ip("-j", "-4", "route", "show", "table", "all").stdout or "[]"):
        dst = entry.get("dst", "")
        if dst and dst != "default":
            nets.append(ipaddress.ip_network(dst if "/" in dst else f"{dst}/32", strict=False))
    for block in BLOCKS:
        mine = ipaddress.ip_network(f"10.{block}.0.0/16")
        if any(mine.overlaps(n) for n in nets if n.version == 4):
            used.add(block)
    return used


def leftover_networks() -> list[str]:
    """Namespaces of this project still present (for ``dev down`` and the no-leftovers test)."""
    if not NETNS_DIR.is_dir():
        return []
    return sorted(p.name for p in NETNS_DIR.glob(f"{NETNS_PREFIX}*"))
