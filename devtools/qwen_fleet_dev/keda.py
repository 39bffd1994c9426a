"""The real KEDA (github.com/kedacore/keda/v2, built by ``hack/build-binaries.sh keda``) in the local control plane:
its operator and its metrics apiserver, for fleets with ``autoscaling.engine: keda``. Opt-in: ``Keda(cluster)``.

In a real cluster both run as pods of the ``keda`` namespace (config/manager and config/metrics-server of the
module); here they are plain processes next to the control plane, with the same environment (WATCH_NAMESPACE
empty: every namespace; POD_NAMESPACE and KEDA_CLUSTER_OBJECT_NAMESPACE ``keda``) and the same wiring:

- The operator reconciles ScaledObjects: it makes their HPA (``keda-hpa-<name>``) and writes their
  conditions, and it queries the triggers' sources itself (here the test's Prometheus). It serves the values on
  a mutual-TLS gRPC port (the Metrics Service), reading ``ca.crt``/``tls.crt``/``tls.key`` from ``--cert-dir``.
- The metrics apiserver serves ``external.metrics.k8s.io`` v1beta1 to the HPA controller through the
  aggregation layer and asks the operator's gRPC port for each value, with the same certificate as a client
  (it reads the three files from its own ``--cert-dir``).

KEDA's own certificate rotation (``--enable-cert-rotation``: a Secret, and patching the APIService and the
webhook configuration) is off; one loopback CA from the project's PKI signs a certificate for both ends, and
the APIService carries that CA. The admission webhooks (a third binary) do not run: they only refuse bad
ScaledObjects earlier (two on one target, a CPU trigger without requests); the operator checks the same when it
reconciles. As with prometheus-adapter (metrics_stack.py), the APIService points at a Service of type
ExternalName naming 127.0.0.1, so the aggregator dials the loopback port directly.
"""

from __future__ import annotations

import base64
import contextlib
import functools
import os
import shutil
import signal
import subprocess
import tempfile
import time
import urllib.parse
from collections.abc import Callable
from pathlib import Path
from typing import Any

import yaml

from qwen_fleet import versions
from qwen_fleet_dev.binaries import BinariesMissing, cache_root, repo_root
from qwen_fleet_dev.cluster import LocalCluster, free_port
from qwen_fleet_dev.hostsfile import HostsFile
from qwen_fleet_dev.pki import make_loopback_serving_pki
from qwen_fleet_dev.processes import Component, wait_for
from qwen_fleet_dev.rest import Rest, RestError

NAMESPACE = "keda"
SERVICE = "keda-metrics-apiserver"
EXTERNAL_METRICS_GROUP = "external.metrics.k8s.io"
EXTERNAL_METRICS_VERSION = "v1beta1"  # the one version KEDA serves
APISERVICE = f"{EXTERNAL_METRICS_VERSION}.{EXTERNAL_METRICS_GROUP}"
# The label KEDA's HPA puts on its metric selector; the metrics apiserver finds the ScaledObject by it.
SCALED_OBJECT_LABEL = "scaledobject.keda.sh/name"


def keda_home() -> Path:
    return cache_root() / "keda" / versions.KEDA


def operator_binary() -> Path:
    return keda_home() / "bin" / "keda"


def adapter_binary() -> Path:
    return keda_home() / "bin" / "keda-adapter"


def crd_files() -> list[Path]:
    return sorted((keda_home() / "crds").glob("*.yaml"))


def missing() -> list[Path]:
    gone = [p for p in (operator_binary(), adapter_binary()) if not os.access(p, os.X_OK)]
    return gone + ([] if len(crd_files()) == 6 else [keda_home() / "crds"])


def ensure_built() -> None:
    """Build KEDA from the Go module proxy when the cache lacks it (cold: tens of minutes on 2 cores)."""
    if not missing():
        return
    root = repo_root()
    if root is None:
        raise BinariesMissing("KEDA missing (run hack/build-binaries.sh keda): " + ", ".join(map(str, missing())))
    subprocess.run([str(root / "hack" / "build-binaries.sh"), "keda"], check=True)
    if missing():
        raise BinariesMissing(f"the KEDA build finished but these are still missing: {missing()}")


class BackgroundBuild:
    """``hack/build-binaries.sh <components>`` started now and left to run at nice 19 while other work goes on: a
    test session starts it when it has KEDA tests and the cache lacks KEDA (tests/support/keda_prebuild.py), so the
    cold build uses the CPU the earlier tests leave idle instead of adding its ~25 min to the set-up.

    The build holds each component's cache lock (hack/cache-lib.sh), so whoever needs the binaries meanwhile (a
    fixture's :func:`ensure_built`, a second session) waits on that lock and then finds them done. Stopping it (the
    session is over before it finished) kills its process group: an interrupted build leaves no complete entry,
    and Go's build cache keeps what it compiled for the next one. Its terminal lines go to ``log``."""

    def __init__(self, components: list[str], log: Path, *, script: Path | None = None) -> None:
        root = repo_root()
        if script is None:
            if root is None:
                raise BinariesMissing(f"no source checkout to build {components} from (hack/build-binaries.sh)")
            script = root / "hack" / "build-binaries.sh"
        self.components = components
        self.log = log
        log.parent.mkdir(parents=True, exist_ok=True)
        self.started = time.monotonic()
        self.finished: float | None = None
        with log.open("ab") as out:
            # Its own session (process group), so stop() reaches go build and its compilers too.
            self.proc = subprocess.Popen(["nice", "-n", "19", str(script), *components],
                                         stdin=subprocess.DEVNULL, stdout=out, stderr=out, start_new_session=True)

    def running(self) -> bool:
        return self.proc.poll() is None

    def wait(self) -> int:
        """Block until the build is done; its exit status."""
        rc = self.proc.wait()
        if self.finished is None:
            self.finished = time.monotonic()
        return rc

    def wait_until(self, done: Callable[[], bool], poll: float = 2.0) -> None:
        """Block until ``done()`` (what one caller needs is built: KEDA before the add-on is) or the build ended."""
        while self.running() and not done():
            time.sleep(poll)
        if not self.running():
            self.wait()

    def took(self) -> float | None:
        """Seconds from its start to its end, if it ended."""
        if self.finished is None and not self.running():
            self.wait()
        return None if self.finished is None else self.finished - self.started

    def stop(self) -> None:
        if not self.running():
            self.wait()
            return
        self.finished = time.monotonic()
        with contextlib.suppress(ProcessLookupError):
            os.killpg(self.proc.pid, signal.SIGTERM)
        try:
            self.proc.wait(timeout=30)
        except subprocess.TimeoutExpired:
            os.killpg(self.proc.pid, signal.SIGKILL)
            self.proc.wait()


class Keda:
    """KEDA's operator and metrics apiserver for a :class:`LocalCluster`: :meth:`start`, then :meth:`stop`."""

    def __init__(self, cluster: LocalCluster, workdir: Path | None = None, *, tie_to_parent: bool = True,
                 log_level: str = "info", hosts: HostsFile | None = None) -> None:
        self.cluster = cluster
        # Names of Services KEDA dials (an external scaler's scalerAddress: keda_http.py), as cluster DNS would.
        self.hosts = hosts
        self.owns_workdir = workdir is None
        self.workdir = Path(workdir or tempfile.mkdtemp(prefix="qwen-fleet-keda-"))
        self.tie_to_parent = tie_to_parent
        self.log_level = log_level
        self.health_port = free_port()
        self.grpc_port = free_port()
        self.adapter_port = free_port()
        self.adapter_metrics_port = free_port()
        self.components: dict[str, Component] = {}
        self._registered = False

    # --- lifecycle ------------------------------------------------------------------------------------

    def start(self) -> Keda:
        if missing():
            raise BinariesMissing("KEDA missing (run hack/build-binaries.sh keda): " + ", ".join(map(str, missing())))
        try:
            for crd in crd_files():
                self.cluster.install_crd(crd, name=_crd_name(crd))
            self.cluster.rest().create("/api/v1/namespaces", {
                "apiVersion": "v1", "kind": "Namespace", "metadata": {"name": NAMESPACE}})
            self.certs = make_loopback_serving_pki(self.workdir / "certs", "keda",
                                                   dns_names=(f"{SERVICE}.{NAMESPACE}.svc",), client_auth=True)
            self._start_operator()
            self._start_adapter()
            self._register()
        except BaseException:
            self.stop()
            raise
        return self

    def stop(self) -> None:
        # Unregister first: an APIService whose server is gone makes discovery fail cluster-wide.
        try:
            if self._registered:
                self._unregister()
        finally:
            for name in reversed(list(self.components)):
                self.components[name].stop()
            self.components.clear()

    def cleanup(self) -> None:
        self.stop()
        if self.owns_workdir:
            shutil.rmtree(self.workdir, ignore_errors=True)

    def __enter__(self) -> Keda:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.cleanup()

    def tail(self, lines: int = 30) -> str:
        return "\n".join(f"--- {name} ---\n{c.tail(lines)}" for name, c in self.components.items())

    # --- queries --------------------------------------------------------------------------------------

    def external_metric(self, namespace: str, metric: str, scaled_object: str) -> list[dict[str, Any]]:
        """The items of an External metric as KEDA's HPA reads it: through the aggregator, selected by the
        ScaledObject's name (KEDA's metrics apiserver refuses a request without it)."""
        query = urllib.parse.urlencode({"labelSelector": f"{SCALED_OBJECT_LABEL}={scaled_object}"})
        path = f"/apis/{EXTERNAL_METRICS_GROUP}/{EXTERNAL_METRICS_VERSION}/namespaces/{namespace}/{metric}?{query}"
        return list(self.cluster.rest().get(path)["items"])

    # --- internals ------------------------------------------------------------------------------------

    def _env(self) -> dict[str, str]:
        # What config/manager and config/metrics-server set (the pod's namespace from the downward API).
        return {**os.environ, "WATCH_NAMESPACE": "", "POD_NAMESPACE": NAMESPACE,
                "KEDA_CLUSTER_OBJECT_NAMESPACE": NAMESPACE, "KUBECONFIG": str(self.cluster.kubeconfig)}

    def _component(self, name: str, argv: list[str]) -> Component:
        argv = self.hosts.wrap(argv) if self.hosts is not None else argv
        comp = Component(name, argv, self.workdir / "logs" / f"{name}.log", env=self._env())
        self.components[name] = comp
        comp.start(self.tie_to_parent)
        return comp

    def _start_operator(self) -> None:
        argv = [str(operator_binary()), f"--kubeconfig={self.cluster.kubeconfig}",
                "--leader-elect=false", "--metrics-bind-address=0",
                f"--health-probe-bind-address=127.0.0.1:{self.health_port}",
                f"--metrics-service-bind-address=127.0.0.1:{self.grpc_port}",
                f"--cert-dir={self.certs.cert.parent}", f"--zap-log-level={self.log_level}",
                "--zap-encoder=console"]
        comp = self._component("keda-operator", argv)
        wait_for("keda-operator /readyz", lambda: _http_ok(f"http://127.0.0.1:{self.health_port}/readyz"), 90, comp)

    def _start_adapter(self) -> None:
        kc = str(self.cluster.kubeconfig)
        certs = self.certs
        argv = [str(adapter_binary()), f"--kubeconfig={kc}", f"--lister-kubeconfig={kc}",
                f"--authentication-kubeconfig={kc}", f"--authorization-kubeconfig={kc}",
                "--bind-address=127.0.0.1", f"--secure-port={self.adapter_port}",
                f"--cert-dir={certs.cert.parent}", f"--tls-cert-file={certs.cert}",
                f"--tls-private-key-file={certs.key}", f"--port={self.adapter_metrics_port}",
                f"--metrics-service-address=127.0.0.1:{self.grpc_port}", f"--zap-log-level={self.log_level}",
                "--zap-encoder=console"]
        comp = self._component("keda-metrics-apiserver", argv)
        probe = Rest(f"https://127.0.0.1:{self.adapter_port}", self.cluster.admin_token, timeout=2)
        wait_for("keda-metrics-apiserver /readyz", lambda: probe.get("/readyz") == "ok", 90, comp)

    def _register(self) -> None:
        rest = self.cluster.rest()
        rest.create(f"/api/v1/namespaces/{NAMESPACE}/services", {
            "apiVersion": "v1", "kind": "Service", "metadata": {"name": SERVICE, "namespace": NAMESPACE},
            "spec": {"type": "ExternalName", "externalName": "127.0.0.1"},
        })
        self._registered = True
        # config/metrics-server/api_service.yaml, with our CA instead of insecureSkipTLSVerify.
        rest.create("/apis/apiregistration.k8s.io/v1/apiservices", {
            "apiVersion": "apiregistration.k8s.io/v1", "kind": "APIService", "metadata": {"name": APISERVICE},
            "spec": {"group": EXTERNAL_METRICS_GROUP, "version": EXTERNAL_METRICS_VERSION,
                     "service": {"namespace": NAMESPACE, "name": SERVICE, "port": self.adapter_port},
                     "caBundle": base64.b64encode(self.certs.ca.read_bytes()).decode(),
                     "groupPriorityMinimum": 100, "versionPriority": 100},
        })
        wait_for(f"APIService {APISERVICE} Available", functools.partial(_available, rest, APISERVICE), 90,
                 self.components["keda-metrics-apiserver"])

    def _unregister(self) -> None:
        rest = self.cluster.rest()
        for path in (f"/apis/apiregistration.k8s.io/v1/apiservices/{APISERVICE}",
                     f"/api/v1/namespaces/{NAMESPACE}/services/{SERVICE}"):
            try:
                rest.request("DELETE", path)
            except RestError as err:
                if err.status != 404:
                    raise
            except OSError:
                pass  # the control plane is already gone
        self._registered = False


def _crd_name(path: Path) -> str:
    return str(yaml.safe_load(path.read_text())["metadata"]["name"])


def _available(rest: Rest, name: str) -> bool:
    obj = rest.get(f"/apis/apiregistration.k8s.io/v1/apiservices/{name}")
    return any(c.get("type") == "Available" and c.get("status") == "True"
               for c in (obj.get("status") or {}).get("conditions") or [])


def _http_ok(url: str) -> bool:
    import urllib.request

    with urllib.request.urlopen(url, timeout=2) as resp:
        return bool(resp.status == 200)
