"""Where the locally built control-plane binaries live, and how to get them built.

The binaries are built from the Go module proxy by ``hack/build-binaries.sh`` and cached outside the
repository under ``$QF_CACHE/<component>/<version>/bin`` (default ``~/.cache/qwen-fleet``), so a fresh clone
reuses them and CI rebuilds only when a version changes.
"""

from __future__ import annotations

import os
import subprocess
from dataclasses import dataclass
from pathlib import Path

from qwen_fleet import versions


def cache_root() -> Path:
    explicit = os.environ.get("QF_CACHE")
    if explicit:
        return Path(explicit)
    base = os.environ.get("XDG_CACHE_HOME") or str(Path.home() / ".cache")
    return Path(base) / "qwen-fleet"


def repo_root() -> Path | None:
    """The source checkout this package runs from, if any (the build script lives there)."""
    for parent in Path(__file__).resolve().parents:
        if (parent / "hack" / "build-binaries.sh").exists():
            return parent
    return None


@dataclass(frozen=True)
class Binaries:
    etcd: Path
    kube_apiserver: Path
    kube_controller_manager: Path
    kube_scheduler: Path
    kubectl: Path
    kwok: Path
    kwok_stages: Path
    helm: Path
    # The real node's programs (only a cluster with ``real_node=True`` needs them; see realnode.NodeBinaries).
    kubelet: Path
    kube_proxy: Path
    coredns: Path

    def missing(self) -> list[Path]:
        files = [self.etcd, self.kube_apiserver, self.kube_controller_manager, self.kube_scheduler,
                 self.kubectl, self.kwok, self.helm]
        gone = [p for p in files if not os.access(p, os.X_OK)]
        if not self.kwok_stages.is_dir():
            gone.append(self.kwok_stages)
        return gone

    def missing_node(self) -> list[Path]:
        return [p for p in (self.kubelet, self.kube_proxy, self.coredns) if not os.access(p, os.X_OK)]


def locate() -> Binaries:
    root = cache_root()
    k8s = root / "k8s" / versions.KUBERNETES / "bin"
    kwok = root / "kwok" / versions.KWOK
    return Binaries(
        etcd=root / "etcd" / versions.ETCD / "bin" / "etcd",
        kube_apiserver=k8s / "kube-apiserver",
        kube_controller_manager=k8s / "kube-controller-manager",
        kube_scheduler=k8s / "kube-scheduler",
        kubectl=k8s / "kubectl",
        kwok=kwok / "bin" / "kwok",
        kwok_stages=kwok / "stages",
        helm=root / "helm" / versions.HELM / "bin" / "helm",
        kubelet=k8s / "kubelet",
        kube_proxy=k8s / "kube-proxy",
        coredns=root / "coredns" / versions.COREDNS / "bin" / "coredns",
    )


class BinariesMissing(RuntimeError):
    pass


def ensure(build: bool = True, real_node: bool = False) -> Binaries:
    """Return the binaries, building the missing ones first when ``build`` is set (with ``real_node``,
    also kubelet, kube-proxy and CoreDNS)."""
    bins = locate()
    missing = bins.missing() + (bins.missing_node() if real_node else [])
    if not missing:
        return bins
    root = repo_root()
    if not build or root is None:
        names = ", ".join(str(p) for p in missing)
        raise BinariesMissing(f"binaries missing: {names}; run hack/build-binaries.sh")
    components = [] if bins.missing() else ["node"]
    subprocess.run([str(root / "hack" / "build-binaries.sh"), *components], check=True)
    bins = locate()
    missing = bins.missing() + (bins.missing_node() if real_node else [])
    if missing:
        raise BinariesMissing(f"build finished but binaries are still missing: {missing}")
    return bins


def epp_binary() -> Path:
    """The endpoint picker of the Gateway API Inference Extension (cmd/epp, the version spec.routing's picker
    image runs), built by ``hack/build-binaries.sh epp``."""
    return cache_root() / "epp" / versions.GATEWAY_API_INFERENCE_EXTENSION / "bin" / "epp"


def ensure_epp(build: bool = True) -> Path:
    """The endpoint picker's binary, built first when missing and ``build`` is set. Apart from ``ensure``: only
    the tests that run the picker need it, and the control plane does not wait for its build."""
    path = epp_binary()
    if os.access(path, os.X_OK):
        return path
    root = repo_root()
    if not build or root is None:
        raise BinariesMissing(f"endpoint picker missing: {path}; run hack/build-binaries.sh epp")
    subprocess.run([str(root / "hack" / "build-binaries.sh"), "epp"], check=True)
    if not os.access(path, os.X_OK):
        raise BinariesMissing(f"build finished but the endpoint picker is still missing: {path}")
    return path


def sim_binary() -> Path:
    """The llm-d inference simulator (cmd/llm-d-inference-sim), built by ``hack/build-binaries.sh sim``."""
    return cache_root() / "sim" / versions.LLM_D_INFERENCE_SIM / "bin" / "llm-d-inference-sim"


def ensure_sim(build: bool = True) -> Path:
    """The simulator's binary, built first when missing and ``build`` is set (~10 CPU-minutes cold). Apart from
    ``ensure``, as the picker's: only the tests that run the simulator need it."""
    path = sim_binary()
    if os.access(path, os.X_OK):
        return path
    root = repo_root()
    if not build or root is None:
        raise BinariesMissing(f"llm-d inference simulator missing: {path}; run hack/build-binaries.sh sim")
    subprocess.run([str(root / "hack" / "build-binaries.sh"), "sim"], check=True)
    if not os.access(path, os.X_OK):
        raise BinariesMissing(f"build finished but the simulator is still missing: {path}")
    return path


@dataclass(frozen=True)
class GatewayBinaries:
    """The real gateway's parts (``hack/build-binaries.sh envoy-gateway envoy``): Envoy Gateway's controller, its
    Helm chart (CRDs in its ``crds/``), and the Envoy proxy binary."""

    envoy_gateway: Path
    chart: Path
    envoy: Path

    def missing(self) -> list[Path]:
        gone = [p for p in (self.envoy_gateway, self.envoy) if not os.access(p, os.X_OK)]
        return gone + ([] if (self.chart / "values.yaml").is_file() else [self.chart / "values.yaml"])


def locate_gateway() -> GatewayBinaries:
    eg = cache_root() / "envoy-gateway" / versions.ENVOY_GATEWAY
    return GatewayBinaries(envoy_gateway=eg / "bin" / "envoy-gateway", chart=eg / "chart" / "gateway-helm",
                           envoy=cache_root() / "envoy" / versions.ENVOY / "bin" / "envoy")


def ensure_gateway(build: bool = True) -> GatewayBinaries:
    """The gateway's parts, built first when missing and ``build`` is set. Apart from ``ensure``, as the picker's:
    only a cluster with ``gateway=True`` needs them."""
    parts = locate_gateway()
    if not parts.missing():
        return parts
    root = repo_root()
    if not build or root is None:
        raise BinariesMissing(f"gateway parts missing: {parts.missing()}; "
                              "run hack/build-binaries.sh envoy-gateway envoy")
    subprocess.run([str(root / "hack" / "build-binaries.sh"), "envoy-gateway", "envoy"], check=True)
    parts = locate_gateway()
    if parts.missing():
        raise BinariesMissing(f"build finished but gateway parts are still missing: {parts.missing()}")
    return parts
