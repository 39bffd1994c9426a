"""The real KEDA HTTP add-on (github.com/kedacore/http-add-on, built by ``hack/build-binaries.sh keda-http``) beside
the local control plane, for fleets with ``autoscaling.scaleToZero``: its interceptor, external scaler and operator.
Opt-in, on top of :class:`qwen_fleet_dev.keda.Keda` (the add-on is a scaler of KEDA's, nothing without it).

In a cluster the three run as pods of the ``keda`` namespace (the module's config/interceptor, config/scaler,
config/operator, names prefixed ``keda-add-ons-http-``); here they are processes with the same environment:

- The interceptor (proxy and admin ports) watches InterceptorRoutes, HTTPScaledObjects and EndpointSlices in every
  namespace (KEDA_HTTP_WATCH_NAMESPACE empty). It routes a request by Host to the route's target Service, dials it
  as ``<service>.<namespace>:<port>``, and holds the request while the Service has no ready endpoint.
- The external scaler polls every interceptor's admin port for the counts per route, finding the interceptors by
  the EndpointSlices of the ``keda-add-ons-http-interceptor-admin`` Service (KEDA_HTTP_SCALER_TARGET_ADMIN_*), and
  serves KEDA's external scaler gRPC API; KEDA dials it at a ScaledObject trigger's ``scalerAddress``.
- The operator marks InterceptorRoutes Ready (and turns HTTPScaledObjects into ScaledObjects, unused here).

What stands in for the cluster: names are resolved through a :class:`~qwen_fleet_dev.hostsfile.HostsFile` (cluster
DNS): the interceptor and the scaler run with it, and so must KEDA's operator (``Keda(..., hosts=...)``), which
dials the scaler by name. The admin Service has no selector; its EndpointSlice names the interceptor by an FQDN
address that the hosts file maps to the loopback (an EndpointSlice may not hold a loopback IP; the scaler dials
whatever address the slice holds). :meth:`route` maps a fleet's Service name to the address of the server that
stands behind it. Services only DNS would read (the proxy's, the scaler's) are not made: the hosts file answers.
"""

from __future__ import annotations

import json
import os
import shutil
import socket
import subprocess
import tempfile
import urllib.request
from pathlib import Path
from typing import Any

import yaml

from qwen_fleet import versions
from qwen_fleet.api.scaling import HTTP_ADD_ON_NAMESPACE, SCALER_SERVICE
from qwen_fleet_dev.binaries import BinariesMissing, cache_root, repo_root
from qwen_fleet_dev.cluster import LocalCluster, free_port
from qwen_fleet_dev.hostsfile import HostsFile
from qwen_fleet_dev.processes import Component, wait_for

NAMESPACE = HTTP_ADD_ON_NAMESPACE
PREFIX = "keda-add-ons-http-"
ADMIN_SERVICE = PREFIX + "interceptor-admin"  # config/interceptor/admin-service.yaml, prefixed
INTERCEPTOR_DEPLOYMENT = PREFIX + "interceptor"
# The interceptor's "pod" as the admin Service's EndpointSlice names it (see the module's docstring).
INTERCEPTOR_HOST = f"{PREFIX}interceptor.{NAMESPACE}.local"
COMMANDS = ("interceptor", "scaler", "operator")
_DIRECT = urllib.request.build_opener(urllib.request.ProxyHandler({}))  # loopback: no proxy from the environment


def home() -> Path:
    return cache_root() / "keda-http" / versions.KEDA_HTTP_ADDON


def binary(command: str) -> Path:
    return home() / "bin" / f"keda-http-{command}"


def crd_files() -> list[Path]:
    return sorted((home() / "crds").glob("*.yaml"))


def missing() -> list[Path]:
    gone = [binary(c) for c in COMMANDS if not os.access(binary(c), os.X_OK)]
    return gone + ([] if len(crd_files()) == 2 else [home() / "crds"])


def ensure_built() -> None:
    """Build the add-on from the Go module proxy when the cache lacks it (cold: ~10-15 min on 2 cores)."""
    if not missing():
        return
    root = repo_root()
    if root is None:
        raise BinariesMissing("the KEDA HTTP add-on is missing (run hack/build-binaries.sh keda-http): "
                              + ", ".join(map(str, missing())))
    subprocess.run([str(root / "hack" / "build-binaries.sh"), "keda-http"], check=True)
    if missing():
        raise BinariesMissing(f"the keda-http build finished but these are still missing: {missing()}")


class KedaHttpAddOn:
    """The add-on's three programs for a :class:`LocalCluster` that runs KEDA: :meth:`start`, then :meth:`stop`."""

    def __init__(self, cluster: LocalCluster, hosts: HostsFile, workdir: Path | None = None, *,
                 tie_to_parent: bool = True, log_level: str = "info") -> None:
        self.cluster = cluster
        self.hosts = hosts
        self.owns_workdir = workdir is None
        self.workdir = Path(workdir or tempfile.mkdtemp(prefix="qwen-fleet-keda-http-"))
        self.tie_to_parent = tie_to_parent
        self.log_level = log_level
        self.proxy_port, self.admin_port = free_port(), free_port()
        self.scaler_port, self.operator_health_port = free_port(), free_port()
        self.metrics_ports = {"interceptor": free_port(), "scaler": free_port()}
        self.components: dict[str, Component] = {}

    # --- lifecycle ------------------------------------------------------------------------------------

    def start(self) -> KedaHttpAddOn:
        if missing():
            raise BinariesMissing("the KEDA HTTP add-on is missing (run hack/build-binaries.sh keda-http): "
                                  + ", ".join(map(str, missing())))
        try:
            for crd in crd_files():
                self.cluster.install_crd(crd, name=str(yaml.safe_load(crd.read_text())["metadata"]["name"]))
            self._namespace()
            self.hosts.add(INTERCEPTOR_HOST, "127.0.0.1")
            self.hosts.add(f"{SCALER_SERVICE}.{NAMESPACE}", "127.0.0.1")
            self._admin_endpoints()
            self._start_interceptor()
            self._start_scaler()
            self._start_operator()
        except BaseException:
            self.stop()
            raise
        return self

    def stop(self) -> None:
        for name in reversed(list(self.components)):
            self.components[name].stop()
        self.components.clear()

    def cleanup(self) -> None:
        self.stop()
        if self.owns_workdir:
            shutil.rmtree(self.workdir, ignore_errors=True)

    def __enter__(self) -> KedaHttpAddOn:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.cleanup()

    def tail(self, lines: int = 30) -> str:
        return "\n".join(f"--- {name} ---\n{c.tail(lines)}" for name, c in self.components.items())

    # --- for tests --------------------------------------------------------------------------------------

    @property
    def proxy_url(self) -> str:
        """The interceptor's proxy, where the fleet's ``<name>-proxy`` Service leads."""
        return f"http://127.0.0.1:{self.proxy_port}"

    def route(self, service: str, namespace: str, address: str) -> None:
        """Make ``<service>.<namespace>``, the name the interceptor dials for a route's target, resolve to
        ``address`` (where the server standing behind that Service listens, on the Service's port)."""
        self.hosts.add(f"{service}.{namespace}", address)

    def counts(self) -> dict[str, Any]:
        """The interceptor's counts per route (its admin /queue, what the scaler polls): held and in flight
        requests (Concurrency) and the total (RequestCount), keyed ``<namespace>/<route>``."""
        with _DIRECT.open(f"http://127.0.0.1:{self.admin_port}/queue", timeout=5) as resp:
            return dict(json.load(resp))

    # --- internals ------------------------------------------------------------------------------------

    def _namespace(self) -> None:
        # Made already when KEDA runs (keda.py); create() takes an existing one as done.
        self.cluster.rest().create("/api/v1/namespaces", {
            "apiVersion": "v1", "kind": "Namespace", "metadata": {"name": NAMESPACE}})

    def _admin_endpoints(self) -> None:
        rest = self.cluster.rest()
        rest.create(f"/api/v1/namespaces/{NAMESPACE}/services", {
            "apiVersion": "v1", "kind": "Service", "metadata": {"name": ADMIN_SERVICE, "namespace": NAMESPACE},
            "spec": {"ports": [{"name": "admin", "port": self.admin_port, "protocol": "TCP"}]}})
        rest.create(f"/apis/discovery.k8s.io/v1/namespaces/{NAMESPACE}/endpointslices", {
            "apiVersion": "discovery.k8s.io/v1", "kind": "EndpointSlice",
            "metadata": {"name": ADMIN_SERVICE, "namespace": NAMESPACE,
                         "labels": {"kubernetes.io/service-name": ADMIN_SERVICE,
                                    "endpointslice.kubernetes.io/managed-by": "qwen-fleet-dev"}},
            "addressType": "FQDN",
            "endpoints": [{"addresses": [INTERCEPTOR_HOST], "conditions": {"ready": True}}],
            "ports": [{"name": "admin", "port": self.admin_port, "protocol": "TCP"}]})

    def _env(self, extra: dict[str, str]) -> dict[str, str]:
        return {**os.environ, "KUBECONFIG": str(self.cluster.kubeconfig), **extra}

    def _component(self, name: str, argv: list[str], env: dict[str, str]) -> Component:
        comp = Component(name, self.hosts.wrap(argv), self.workdir / "logs" / f"{name}.log", env=self._env(env))
        self.components[name] = comp
        comp.start(self.tie_to_parent)
        return comp

    def _logging(self) -> list[str]:
        return [f"--zap-log-level={self.log_level}", "--zap-encoder=console"]

    def _start_interceptor(self) -> None:
        # config/interceptor/deployment.yaml; every timeout at the add-on's defaults (routes set their own).
        env = {"KEDA_HTTP_PROXY_PORT": str(self.proxy_port), "KEDA_HTTP_ADMIN_PORT": str(self.admin_port),
               "KEDA_HTTP_WATCH_NAMESPACE": "",
               "OTEL_PROM_EXPORTER_PORT": str(self.metrics_ports["interceptor"])}
        comp = self._component("keda-http-interceptor", [str(binary("interceptor")), *self._logging()], env)
        wait_for("keda-http-interceptor /readyz", lambda: _http_ok(f"http://127.0.0.1:{self.admin_port}/readyz"),
                 90, comp)

    def _start_scaler(self) -> None:
        # config/scaler/deployment.yaml: the interceptors' admin Service and Deployment in the add-on's namespace.
        env = {"KEDA_HTTP_SCALER_PORT": str(self.scaler_port),
               "KEDA_HTTP_SCALER_TARGET_ADMIN_NAMESPACE": NAMESPACE,
               "KEDA_HTTP_SCALER_TARGET_ADMIN_SERVICE": ADMIN_SERVICE,
               "KEDA_HTTP_SCALER_TARGET_ADMIN_DEPLOYMENT": INTERCEPTOR_DEPLOYMENT,
               "KEDA_HTTP_SCALER_TARGET_ADMIN_PORT": str(self.admin_port),
               "OTEL_PROM_EXPORTER_PORT": str(self.metrics_ports["scaler"])}
        comp = self._component("keda-http-scaler", [str(binary("scaler")), *self._logging()], env)
        wait_for("keda-http-scaler gRPC port", lambda: _tcp_open(self.scaler_port), 90, comp)

    def _start_operator(self) -> None:
        # config/operator/deployment.yaml, without leader election and its metrics endpoint.
        env = {"KEDA_HTTP_OPERATOR_EXTERNAL_SCALER_SERVICE": SCALER_SERVICE,
               "KEDA_HTTP_OPERATOR_EXTERNAL_SCALER_PORT": str(self.scaler_port),
               "KEDA_HTTP_OPERATOR_NAMESPACE": NAMESPACE}
        argv = [str(binary("operator")), "--leader-elect=false", "--metrics-bind-address=0",
                f"--health-probe-bind-address=127.0.0.1:{self.operator_health_port}", *self._logging()]
        comp = self._component("keda-http-operator", argv, env)
        wait_for("keda-http-operator /readyz",
                 lambda: _http_ok(f"http://127.0.0.1:{self.operator_health_port}/readyz"), 90, comp)


def _http_ok(url: str) -> bool:
    with _DIRECT.open(url, timeout=2) as resp:
        return bool(resp.status == 200)


def _tcp_open(port: int) -> bool:
    with socket.create_connection(("127.0.0.1", port), timeout=2):
        return True
