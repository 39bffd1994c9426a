"""The autoscaler's metrics path on the local cluster: Prometheus, prometheus-adapter, a fake dcgm-exporter.

In production the chain is: vLLM ``/metrics`` (and dcgm-exporter) -> Prometheus (a ServiceMonitor) ->
prometheus-adapter (the chart's rules) -> ``custom.metrics.k8s.io`` -> the HPA controller. Here every link
is the real program except the scraped pods: kwok pods have no containers, so the scrape targets are
processes on loopback (a real vLLM CPU server, :class:`FakeDcgmExporter`) that stand in for pods of the
fleet. File service discovery hands Prometheus the same ``__meta_kubernetes_*`` labels Kubernetes service
discovery would, and the relabelling is the one the Prometheus Operator generates for the operator's
ServiceMonitor, so the series carry ``namespace``, ``pod`` and ``qwenfleet_io_inference`` of a real pod.

The adapter is registered with the aggregation layer as ``custom.metrics.k8s.io`` v1beta2 and v1beta1.
There is no kube-proxy, so a ClusterIP would lead nowhere; the APIService points at a Service of type
ExternalName naming 127.0.0.1 (kwokctl's trick for metrics-server), which the aggregator dials directly.
"""

from __future__ import annotations

import functools
import json
import os
import shutil
import subprocess
import tempfile
import threading
import urllib.parse
import urllib.request
import zlib
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import yaml
from prometheus_client import CollectorRegistry, Gauge, start_http_server

from qwen_fleet import versions
from qwen_fleet_dev.binaries import cache_root, repo_root
from qwen_fleet_dev.cluster import LocalCluster, free_port
from qwen_fleet_dev.processes import Component, wait_for
from qwen_fleet_dev.rest import Rest, RestError

CUSTOM_METRICS_GROUP = "custom.metrics.k8s.io"
# v1beta2 is what the HPA controller prefers; v1beta1 for older clients (kubectl get --raw, other tools).
CUSTOM_METRICS_VERSIONS = ("v1beta2", "v1beta1")
ADAPTER_NAMESPACE = "kube-system"
ADAPTER_SERVICE = "qwen-fleet-prometheus-adapter"
# The operator's own job: the chart's ServiceMonitor sets no scrapeTimeout, so Prometheus gives each scrape its
# default 10 s. The 1 s scrapes of the engine's job (whose timeout cannot exceed its interval) would give the
# operator a tenth of that: a Python process answering late on a loaded machine read as down (up 0, the
# QwenFleetOperatorDown expression true) though it served. Every 10 s with the production timeout.
OPERATOR_SCRAPE = "10s"
# The Prometheus label the operator's ServiceMonitor makes from the pod label qwenfleet.io/inference.
POD_TARGET_LABELS = ("qwenfleet.io/inference",)
ADAPTER_RULES_TEMPLATE = "prometheus-adapter-rules.yaml"


def prometheus_binary() -> Path:
    return cache_root() / "prometheus" / versions.PROMETHEUS / "bin" / "prometheus"


def promtool_binary() -> Path:
    """promtool of the same Prometheus build (the alert rules' unit tests)."""
    return prometheus_binary().with_name("promtool")


def adapter_binary() -> Path:
    return cache_root() / "adapter" / versions.PROMETHEUS_ADAPTER / "bin" / "prometheus-adapter"


def _sanitise(label: str) -> str:
    """Kubernetes SD's label-name mangling: every character outside [a-zA-Z0-9_] becomes '_'."""
    return "".join(c if c.isalnum() or c == "_" else "_" for c in label)


@dataclass(frozen=True)
class PodTarget:
    """A /metrics endpoint that speaks for one pod of the cluster (what Kubernetes SD would discover)."""

    address: str  # host:port actually scraped
    namespace: str
    pod: str
    container: str = "vllm"
    pod_labels: Mapping[str, str] = field(default_factory=dict)
    service: str = ""

    def file_sd_group(self) -> dict[str, Any]:
        labels = {"__meta_kubernetes_namespace": self.namespace, "__meta_kubernetes_pod_name": self.pod,
                  "__meta_kubernetes_pod_container_name": self.container,
                  "__meta_kubernetes_service_name": self.service or self.pod}
        for key, value in self.pod_labels.items():
            labels[f"__meta_kubernetes_pod_label_{_sanitise(key)}"] = value
        return {"targets": [self.address], "labels": labels}


def _service_monitor_relabelling() -> list[dict[str, Any]]:
    """What the Prometheus Operator renders for the operator's ServiceMonitor (podTargetLabels included)."""
    rules: list[dict[str, Any]] = [
        {"source_labels": ["__meta_kubernetes_namespace"], "target_label": "namespace"},
        {"source_labels": ["__meta_kubernetes_service_name"], "target_label": "service"},
        {"source_labels": ["__meta_kubernetes_pod_name"], "target_label": "pod"},
        {"source_labels": ["__meta_kubernetes_pod_container_name"], "target_label": "container"},
    ]
    for label in POD_TARGET_LABELS:
        name = _sanitise(label)
        rules.append({"source_labels": [f"__meta_kubernetes_pod_label_{name}"], "target_label": name,
                      "regex": "(.+)", "replacement": "${1}"})
    return rules


class MetricsStack:
    """Prometheus + prometheus-adapter for a :class:`LocalCluster`; :meth:`start`, then :meth:`stop`.

    ``adapter_rules`` is the adapter's configuration text (``rules: [...]``), e.g. the chart's rendered
    ConfigMap. ``relist_interval`` is how often the adapter re-discovers series names: production charts
    use 1m (the built-in default is 10m); tests shorten it so a new fleet's metrics appear within seconds.
    """

    def __init__(self, cluster: LocalCluster, adapter_rules: str, workdir: Path | None = None, *,
                 scrape_interval: str = "1s", relist_interval: str = "5s", tie_to_parent: bool = True,
                 alert_rules: str | None = None) -> None:
        self.cluster = cluster
        self.adapter_rules = adapter_rules
        self.alert_rules = alert_rules  # a Prometheus rule file (``groups: [...]``) evaluated by Prometheus
        self.owns_workdir = workdir is None
        self.workdir = Path(workdir or tempfile.mkdtemp(prefix="qwen-fleet-metrics-"))
        self.scrape_interval = scrape_interval
        self.relist_interval = relist_interval
        self.tie_to_parent = tie_to_parent
        self.prometheus_port = free_port()
        self.adapter_port = free_port()
        self.components: dict[str, Component] = {}
        self._registered = False

    @property
    def prometheus_url(self) -> str:
        return f"http://127.0.0.1:{self.prometheus_port}"

    # --- lifecycle ------------------------------------------------------------------------------------

    def start(self) -> MetricsStack:
        missing = [p for p in (prometheus_binary(), adapter_binary()) if not os.access(p, os.X_OK)]
        if missing:
            raise FileNotFoundError("metrics binaries missing (hack/build-binaries.sh prometheus adapter): "
                                    + ", ".join(map(str, missing)))
        try:
            self._write_files()
            self._start_prometheus()
            self._start_adapter()
            self._register()
        except BaseException:
            self.stop()
            raise
        return self

    def stop(self) -> None:
        # Unregister first: an APIService whose server is gone makes discovery fail cluster-wide (namespace
        # deletion and garbage collection wait on it).
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

    def __enter__(self) -> MetricsStack:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.cleanup()

    # --- scrape targets -------------------------------------------------------------------------------

    def set_pod_targets(self, targets: Sequence[PodTarget]) -> None:
        """Replace the vLLM targets (Prometheus picks up the file within a second or two)."""
        self._write_json(self.workdir / "targets" / "vllm.json", [t.file_sd_group() for t in targets])

    def set_dcgm_targets(self, addresses: Sequence[str], namespace: str = "gpu-operator",
                         pod: str = "nvidia-dcgm-exporter") -> None:
        """dcgm-exporter endpoints. Their own namespace/pod labels lose to the scraped ones (honor_labels)."""
        groups = [PodTarget(a, namespace, f"{pod}-{i}", container="nvidia-dcgm-exporter", service=pod)
                  .file_sd_group() for i, a in enumerate(addresses)]
        self._write_json(self.workdir / "targets" / "dcgm.json", groups)

    def set_operator_targets(self, addresses: Sequence[str], namespace: str, service: str) -> None:
        """The operator's metrics endpoints, as the chart's ServiceMonitor finds them behind ``service``."""
        groups = [PodTarget(a, namespace, f"{service}-{i}", container="operator", service=service)
                  .file_sd_group() for i, a in enumerate(addresses)]
        self._write_json(self.workdir / "targets" / "operator.json", groups)

    # --- queries --------------------------------------------------------------------------------------

    def query(self, promql: str) -> list[dict[str, Any]]:
        url = f"{self.prometheus_url}/api/v1/query?" + urllib.parse.urlencode({"query": promql})
        with urllib.request.urlopen(url, timeout=10) as resp:
            body = json.loads(resp.read())
        if body.get("status") != "success":
            raise RuntimeError(f"Prometheus query {promql!r} failed: {body}")
        return list(body["data"]["result"])

    def custom_metric(self, namespace: str, metric: str, selector: str = "") -> dict[str, float]:
        """{pod: value} as the HPA controller reads it, through the aggregator and the adapter."""
        path = (f"/apis/{CUSTOM_METRICS_GROUP}/{CUSTOM_METRICS_VERSIONS[0]}/namespaces/{namespace}/pods/*/"
                f"{metric}")
        if selector:
            path += "?" + urllib.parse.urlencode({"labelSelector": selector})
        items = self.cluster.rest().get(path)["items"]
        return {i["describedObject"]["name"]: quantity(i["value"]) for i in items}

    # --- internals ------------------------------------------------------------------------------------

    def _write_json(self, path: Path, doc: Any) -> None:
        path.parent.mkdir(parents=True, exist_ok=True)
        tmp = path.with_suffix(".tmp")
        tmp.write_text(json.dumps(doc))
        tmp.replace(path)  # atomic: Prometheus never reads a half-written file

    def _prometheus_config(self) -> dict[str, Any]:
        targets = self.workdir / "targets"

        def sd(name: str) -> list[dict[str, Any]]:
            return [{"files": [str(targets / f"{name}.json")], "refresh_interval": "5s"}]

        # The Prometheus Operator names a ServiceMonitor's targets' job after their Service (no jobLabel set).
        job_from_service = {"source_labels": ["__meta_kubernetes_service_name"], "target_label": "job"}
        config: dict[str, Any] = {
            "global": {"scrape_interval": self.scrape_interval, "scrape_timeout": self.scrape_interval,
                       "evaluation_interval": self.scrape_interval},
            "scrape_configs": [
                {"job_name": "serviceMonitor/qwen-fleet/vllm/0", "metrics_path": "/metrics",
                 "file_sd_configs": sd("vllm"), "relabel_configs": _service_monitor_relabelling()},
                # dcgm-exporter attributes each GPU to the pod holding it (namespace/pod labels); honor_labels
                # keeps those instead of renaming them exported_* under the exporter's own target labels.
                {"job_name": "dcgm-exporter", "honor_labels": True, "metrics_path": "/metrics",
                 "file_sd_configs": sd("dcgm"), "relabel_configs": _service_monitor_relabelling()},
                # The chart's ServiceMonitor for the operator: honorLabels keeps its gauges' namespace/name.
                {"job_name": "serviceMonitor/qwen-fleet/operator/0", "honor_labels": True,
                 "scrape_interval": OPERATOR_SCRAPE, "scrape_timeout": OPERATOR_SCRAPE,
                 "metrics_path": "/metrics", "file_sd_configs": sd("operator"),
                 "relabel_configs": [*_service_monitor_relabelling(), job_from_service]},
            ],
        }
        if self.alert_rules is not None:
            config["rule_files"] = [str(self.workdir / "alert-rules.yaml")]
        return config

    def _write_files(self) -> None:
        (self.workdir / "logs").mkdir(parents=True, exist_ok=True)
        self.set_pod_targets([])
        self.set_dcgm_targets([])
        self._write_json(self.workdir / "targets" / "operator.json", [])
        if self.alert_rules is not None:
            (self.workdir / "alert-rules.yaml").write_text(self.alert_rules)
        config = yaml.safe_dump(self._prometheus_config(), sort_keys=False)
        (self.workdir / "prometheus.yml").write_text(config)
        (self.workdir / "adapter-config.yaml").write_text(self.adapter_rules)

    def _component(self, name: str, argv: list[str]) -> Component:
        comp = Component(name, argv, self.workdir / "logs" / f"{name}.log")
        self.components[name] = comp
        comp.start(self.tie_to_parent)
        return comp

    def _start_prometheus(self) -> None:
        argv = [str(prometheus_binary()), f"--config.file={self.workdir / 'prometheus.yml'}",
                f"--storage.tsdb.path={self.workdir / 'tsdb'}", "--storage.tsdb.retention.time=2h",
                f"--web.listen-address=127.0.0.1:{self.prometheus_port}", "--log.level=warn"]
        comp = self._component("prometheus", argv)
        wait_for("prometheus /-/ready", lambda: _http_ok(f"{self.prometheus_url}/-/ready"), 60, comp)

    def _start_adapter(self) -> None:
        kubeconfig = str(self.cluster.kubeconfig)
        argv = [str(adapter_binary()), f"--prometheus-url={self.prometheus_url}/",
                f"--config={self.workdir / 'adapter-config.yaml'}",
                f"--metrics-relist-interval={self.relist_interval}",
                "--bind-address=127.0.0.1", f"--secure-port={self.adapter_port}",
                f"--cert-dir={self.workdir / 'adapter-certs'}",
                f"--lister-kubeconfig={kubeconfig}", f"--authentication-kubeconfig={kubeconfig}",
                f"--authorization-kubeconfig={kubeconfig}", "--v=1"]
        comp = self._component("prometheus-adapter", argv)
        probe = Rest(f"https://127.0.0.1:{self.adapter_port}", self.cluster.admin_token, timeout=2)
        wait_for("prometheus-adapter /readyz", lambda: probe.get("/readyz") == "ok", 60, comp)

    def _register(self) -> None:
        rest = self.cluster.rest()
        rest.create(f"/api/v1/namespaces/{ADAPTER_NAMESPACE}/services", {
            "apiVersion": "v1", "kind": "Service",
            "metadata": {"name": ADAPTER_SERVICE, "namespace": ADAPTER_NAMESPACE},
            "spec": {"type": "ExternalName", "externalName": "127.0.0.1"},
        })
        self._registered = True
        for version in CUSTOM_METRICS_VERSIONS:
            rest.create("/apis/apiregistration.k8s.io/v1/apiservices", {
                "apiVersion": "apiregistration.k8s.io/v1", "kind": "APIService",
                "metadata": {"name": f"{version}.{CUSTOM_METRICS_GROUP}"},
                "spec": {"group": CUSTOM_METRICS_GROUP, "version": version,
                         "service": {"namespace": ADAPTER_NAMESPACE, "name": ADAPTER_SERVICE,
                                     "port": self.adapter_port},
                         # The adapter's certificate is self-signed (--cert-dir); loopback only.
                         "insecureSkipTLSVerify": True, "groupPriorityMinimum": 100, "versionPriority": 200},
            })
        adapter = self.components["prometheus-adapter"]
        for version in CUSTOM_METRICS_VERSIONS:
            name = f"{version}.{CUSTOM_METRICS_GROUP}"
            wait_for(f"APIService {name} Available", functools.partial(_available, rest, name), 90, adapter)

    def _unregister(self) -> None:
        rest = self.cluster.rest()
        paths = [f"/apis/apiregistration.k8s.io/v1/apiservices/{v}.{CUSTOM_METRICS_GROUP}"
                 for v in CUSTOM_METRICS_VERSIONS]
        paths.append(f"/api/v1/namespaces/{ADAPTER_NAMESPACE}/services/{ADAPTER_SERVICE}")
        for path in paths:
            try:
                rest.request("DELETE", path)
            except RestError as err:
                if err.status != 404:
                    raise
            except OSError:
                pass  # the control plane is already gone: nothing left to unregister from
        self._registered = False


def chart_adapter_rules(helm: Path, chart: Path | None = None) -> str:
    """The adapter configuration exactly as the chart renders it (``metrics.adapterRules.enabled=true``)."""
    if chart is None:
        root = repo_root()
        if root is None:
            raise FileNotFoundError("no source checkout to find charts/qwen-fleet in; pass chart=")
        chart = root / "charts" / "qwen-fleet"
    out = subprocess.run([str(helm), "template", "qwen-fleet", str(chart), "--namespace", "monitoring",
                          "--show-only", f"templates/{ADAPTER_RULES_TEMPLATE}",
                          "--set", "metrics.adapterRules.enabled=true"],
                         check=True, capture_output=True, text=True)
    (config_map,) = [d for d in yaml.safe_load_all(out.stdout) if d]
    return str(config_map["data"]["config.yaml"])


def _available(rest: Rest, name: str) -> bool:
    obj = rest.get(f"/apis/apiregistration.k8s.io/v1/apiservices/{name}")
    return any(c.get("type") == "Available" and c.get("status") == "True"
               for c in (obj.get("status") or {}).get("conditions") or [])


def _http_ok(url: str) -> bool:
    with urllib.request.urlopen(url, timeout=2) as resp:
        return bool(resp.status == 200)


_SUFFIXES = {"n": 1e-9, "u": 1e-6, "m": 1e-3, "k": 1e3, "M": 1e6, "G": 1e9}


def quantity(text: str) -> float:
    """A Kubernetes quantity as the metrics API writes it ('250m', '12', '1500k') to a float."""
    if text and text[-1] in _SUFFIXES:
        return float(text[:-1]) * _SUFFIXES[text[-1]]
    return float(text)


# --- a stand-in for dcgm-exporter on kwok GPU nodes ---------------------------------------------------

DCGM_LABELS = ("gpu", "UUID", "device", "modelName", "Hostname", "DCGM_FI_DRIVER_VERSION",
               "container", "namespace", "pod")


@dataclass(frozen=True)
class GpuAssignment:
    """One GPU held by one pod, as dcgm-exporter's pod-resources mapping reports it."""

    namespace: str
    pod: str
    node: str
    gpu: int = 0
    model_name: str = "NVIDIA A10G"
    container: str = "vllm"

    def labels(self) -> dict[str, str]:
        # Stable per (node, gpu), shaped like NVML's UUIDs.
        uuid = f"GPU-{zlib.crc32(self.node.encode()):08x}-0000-4000-8000-{self.gpu:012x}"
        return {"gpu": str(self.gpu), "UUID": uuid, "device": f"nvidia{self.gpu}",
                "modelName": self.model_name, "Hostname": self.node, "DCGM_FI_DRIVER_VERSION": "580.95.05",
                "container": self.container, "namespace": self.namespace, "pod": self.pod}


class FakeDcgmExporter:
    """Serves ``DCGM_FI_DEV_GPU_UTIL`` with dcgm-exporter's label schema for GPUs that kwok pods hold.

    There is no GPU here; the value is whatever the caller sets. Everything downstream (Prometheus with
    honor_labels, the adapter's avg-over-GPUs rule, the HPA) is real.
    """

    def __init__(self) -> None:
        self.registry = CollectorRegistry()
        self.gauge = Gauge("DCGM_FI_DEV_GPU_UTIL", "GPU utilization (in %).", DCGM_LABELS,
                           registry=self.registry)
        self.port = free_port()
        self._server: Any = None
        self._thread: threading.Thread | None = None

    @property
    def address(self) -> str:
        return f"127.0.0.1:{self.port}"

    def start(self) -> FakeDcgmExporter:
        self._server, self._thread = start_http_server(self.port, addr="127.0.0.1", registry=self.registry)
        return self

    def set(self, assignment: GpuAssignment, percent: float) -> None:
        self.gauge.labels(**assignment.labels()).set(percent)

    def remove(self, assignment: GpuAssignment) -> None:
        """The pod let go of the GPU: dcgm-exporter drops the series (Prometheus marks it stale)."""
        labels = assignment.labels()
        self.gauge.remove(*(labels[name] for name in DCGM_LABELS))

    def stop(self) -> None:
        if self._server is not None:
            self._server.shutdown()
            self._server.server_close()
            self._server = None
