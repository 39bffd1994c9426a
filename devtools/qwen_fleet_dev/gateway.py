"""A real gateway in the local cluster: Envoy Gateway's controller and its Envoy proxies, as pods on the real node.

Opt-in (``LocalCluster(real_node=True, gateway=True)``, or :meth:`EnvoyGateway.start` on a running cluster with a
real node). What runs, all of it upstream's code at the pinned versions (docs/gateway.md):

1. upstream's Helm chart (``charts/gateway-helm`` of ``github.com/envoyproxy/gateway``, from the module cache) is
   installed into ``envoy-gateway-system``: its CRDs (Gateway API v1.4.1 and ``gateway.envoyproxy.io``), its
   certgen Job (the xDS mTLS certificates as Secrets), RBAC and the controller's Deployment, pinned to the real
   node, from the local image ``qwen-fleet.local/envoy-gateway`` (``imagePullPolicy: Never``);
2. an ``EnvoyProxy`` names our Envoy image (``qwen-fleet.local/envoy``: the PyPI build of Envoy on Debian), the
   real node, ``imagePullPolicy: Never`` for the proxy's two containers (a strategic-merge patch: the API has no
   pull-policy field; the provider hard-codes ``IfNotPresent``) and a ``ClusterIP`` Service (no load-balancer
   controller runs here, and a ``LoadBalancer`` Service would leave the Gateway without an address);
3. a ``GatewayClass`` (:data:`GATEWAY_CLASS`) of Envoy Gateway's controller points at that ``EnvoyProxy``.

A ``Gateway`` of that class then makes the controller create an Envoy Deployment and Service in
``envoy-gateway-system``; the proxy reaches the controller's xDS server through cluster DNS
(``envoy-gateway.envoy-gateway-system.svc.cluster.local:18000``) and serves what the routes say. The host reaches
the proxy through its Service's ClusterIP (the host routes the Service range to the node; kube-proxy translates).

Why pods and not a host process for the controller: the proxies' bootstrap names the controller by its Service's
DNS name and mounts the certgen Secrets, so the chart's layout is what they expect; and the chart is what users run.
"""

from __future__ import annotations

import json
import os
import subprocess
import tempfile
import time
from collections.abc import Callable
from pathlib import Path
from typing import TYPE_CHECKING, Any

import yaml

from qwen_fleet_dev import binaries
from qwen_fleet_dev.gateway_images import ENVOY_GATEWAY_IMAGE, ENVOY_IMAGE, ensure_gateway_images
from qwen_fleet_dev.realnode import NODE_LABEL

if TYPE_CHECKING:
    from qwen_fleet_dev.cluster import LocalCluster

NAMESPACE = "envoy-gateway-system"
RELEASE = "eg"
CONTROLLER_NAME = "gateway.envoyproxy.io/gatewayclass-controller"
GATEWAY_CLASS = "qwen-fleet-envoy"
ENVOY_PROXY = "qwen-fleet-envoy"
# Labels Envoy Gateway puts on the proxy objects of a Gateway (internal/gatewayapi/resource, OwningGateway*).
OWNING_GATEWAY_NAME = "gateway.envoyproxy.io/owning-gateway-name"
OWNING_GATEWAY_NAMESPACE = "gateway.envoyproxy.io/owning-gateway-namespace"


class GatewayError(RuntimeError):
    pass


def chart_values() -> dict[str, Any]:
    """What a user sets to run upstream's chart on this cluster's real node from local images."""
    real_node = {NODE_LABEL[0]: NODE_LABEL[1]}
    return {
        "global": {"images": {"envoyGateway": {"image": ENVOY_GATEWAY_IMAGE, "pullPolicy": "Never"}}},
        "deployment": {"pod": {"nodeSelector": real_node},
                       # The node has 2 CPUs shared with engine pods: ask for little, limit memory as upstream.
                       "envoyGateway": {"resources": {"requests": {"cpu": "10m", "memory": "64Mi"},
                                                      "limits": {"memory": "1024Mi"}}}},
        "certgen": {"job": {"nodeSelector": real_node}},
        # The topology injector is a mutating webhook on the proxies' pod bindings (zone labels for
        # zone-aware routing); one node has no zones, and the apiserver would have to call into the pod.
        "topologyInjector": {"enabled": False},
    }


def envoy_proxy() -> dict[str, Any]:
    real_node = {NODE_LABEL[0]: NODE_LABEL[1]}
    never = [{"name": "envoy", "imagePullPolicy": "Never"}, {"name": "shutdown-manager", "imagePullPolicy": "Never"}]
    return {
        "apiVersion": "gateway.envoyproxy.io/v1alpha1", "kind": "EnvoyProxy",
        "metadata": {"name": ENVOY_PROXY, "namespace": NAMESPACE},
        "spec": {"provider": {"type": "Kubernetes", "kubernetes": {
            "envoyDeployment": {
                "replicas": 1,
                "container": {"image": ENVOY_IMAGE,
                              "resources": {"requests": {"cpu": "10m", "memory": "64Mi"}}},
                "pod": {"nodeSelector": real_node},
                "patch": {"type": "StrategicMerge",
                          "value": {"spec": {"template": {"spec": {"containers": never}}}}},
            },
            "envoyService": {"type": "ClusterIP"},
        }}},
    }


def gateway_class() -> dict[str, Any]:
    return {
        "apiVersion": "gateway.networking.k8s.io/v1", "kind": "GatewayClass",
        "metadata": {"name": GATEWAY_CLASS},
        "spec": {"controllerName": CONTROLLER_NAME,
                 "parametersRef": {"group": "gateway.envoyproxy.io", "kind": "EnvoyProxy", "name": ENVOY_PROXY,
                                   "namespace": NAMESPACE}},
    }


def gateway(namespace: str, name: str, port: int = 80) -> dict[str, Any]:
    """A Gateway of our class with one HTTP listener (``http``) that takes routes from its own namespace."""
    return {
        "apiVersion": "gateway.networking.k8s.io/v1", "kind": "Gateway",
        "metadata": {"name": name, "namespace": namespace},
        "spec": {"gatewayClassName": GATEWAY_CLASS,
                 "listeners": [{"name": "http", "protocol": "HTTP", "port": port,
                                "allowedRoutes": {"namespaces": {"from": "Same"}}}]},
    }


def _condition(obj: dict[str, Any], kind: str) -> dict[str, Any]:
    for cond in (obj.get("status") or {}).get("conditions") or []:
        if cond.get("type") == kind:
            return dict(cond)
    return {}


class EnvoyGateway:
    """Envoy Gateway on a running cluster's real node. :meth:`start` installs it; :meth:`stop` uninstalls it
    (the cluster's own teardown removes everything anyway)."""

    def __init__(self, cluster: LocalCluster) -> None:
        if cluster.real_node is None:
            raise GatewayError("the gateway's pods run on the real node: start the cluster with real_node=True")
        self.cluster = cluster
        self.node = cluster.real_node
        self.helm_home = Path(tempfile.mkdtemp(prefix="helm-", dir=cluster.workdir))
        self.installed = False
        self.start_seconds: float | None = None

    def start(self, timeout_s: int = 300) -> EnvoyGateway:
        began = time.monotonic()
        parts = binaries.ensure_gateway()
        images = ensure_gateway_images(parts)
        self.node.import_archive_dir(images.envoy_gateway)
        self.node.import_archive_dir(images.envoy)
        values = self.helm_home / "values.yaml"
        values.write_text(yaml.safe_dump(chart_values()))
        self.helm("install", RELEASE, str(parts.chart), "-n", NAMESPACE, "--create-namespace", "--values",
                  str(values), "--wait", "--timeout", f"{timeout_s}s", timeout=timeout_s + 60)
        self.installed = True
        self.apply(envoy_proxy())
        self.apply(gateway_class())
        self.wait_for(f"GatewayClass {GATEWAY_CLASS} Accepted",
                      lambda: _condition(self.get("gatewayclass", GATEWAY_CLASS), "Accepted").get("status") == "True",
                      60)
        self.start_seconds = time.monotonic() - began
        return self

    def stop(self) -> None:
        if self.installed:
            self.helm("uninstall", RELEASE, "-n", NAMESPACE, "--wait", "--timeout", "120s", check=False, timeout=180)
            self.installed = False

    # --- helpers the tests and the demo use --------------------------------------------------------------

    def helm(self, *args: str, check: bool = True, timeout: float = 360) -> subprocess.CompletedProcess[str]:
        env = {k: v for k, v in os.environ.items() if not k.startswith("HELM_")}
        env |= {"HELM_CONFIG_HOME": str(self.helm_home / "config"), "HELM_CACHE_HOME": str(self.helm_home / "cache"),
                "HELM_DATA_HOME": str(self.helm_home / "data"), "KUBECONFIG": str(self.cluster.kubeconfig)}
        argv = [str(self.cluster.bins.helm), *args]
        result = subprocess.run(argv, capture_output=True, text=True, env=env, timeout=timeout, check=False)
        if check and result.returncode != 0:
            raise GatewayError(f"helm {' '.join(args[:2])} failed ({result.returncode}): "
                               f"{result.stderr.strip()[-3000:]}\n{self.diagnose()}")
        return result

    def apply(self, obj: dict[str, Any]) -> None:
        self.cluster.kubectl("apply", "--server-side", "-f", "-", input=json.dumps(obj))

    def get(self, kind: str, name: str, namespace: str | None = None) -> dict[str, Any]:
        scope = ["-n", namespace] if namespace else []
        return dict(json.loads(self.cluster.kubectl("get", *scope, kind, name, "-o", "json").stdout))

    def wait_for(self, what: str, check: Callable[[], bool], timeout: float) -> None:
        deadline = time.monotonic() + timeout
        last: BaseException | None = None
        while time.monotonic() < deadline:
            try:
                if check():
                    return
            except (subprocess.SubprocessError, ValueError, KeyError) as exc:
                last = exc
            time.sleep(1)
        raise GatewayError(f"timed out after {timeout:.0f} s waiting for {what} ({last})\n{self.diagnose()}")

    def wait_programmed(self, namespace: str, name: str, timeout: float = 240) -> str:
        """Wait until the Gateway is Programmed (its Envoy pod Ready, its Service addressed); returns the address
        (the proxy Service's ClusterIP, which the host reaches)."""
        self.wait_for(f"Gateway {namespace}/{name} Programmed",
                      lambda: _condition(self.get("gateway", name, namespace), "Programmed").get("status") == "True",
                      timeout)
        addresses = self.get("gateway", name, namespace)["status"].get("addresses") or []
        if not addresses:
            raise GatewayError(f"Gateway {namespace}/{name} is Programmed but has no address")
        return str(addresses[0]["value"])

    def proxy_pods(self, namespace: str, name: str) -> list[dict[str, Any]]:
        return self._owned("pods", namespace, name)

    def proxy_services(self, namespace: str, name: str) -> list[dict[str, Any]]:
        return self._owned("services", namespace, name)

    def _owned(self, kind: str, namespace: str, name: str) -> list[dict[str, Any]]:
        """What Envoy Gateway made for the Gateway ``namespace/name`` (found by its owning-gateway labels)."""
        selector = f"{OWNING_GATEWAY_NAMESPACE}={namespace},{OWNING_GATEWAY_NAME}={name}"
        out = self.cluster.kubectl("get", kind, "-n", NAMESPACE, "-l", selector, "-o", "json").stdout
        return list(json.loads(out)["items"])

    def diagnose(self) -> str:
        """The controller's and proxies' pods, recent Events and log tails: what a failed start needs."""
        k = self.cluster.kubectl
        parts = [k("get", "pods,svc,jobs", "-n", NAMESPACE, "-o", "wide", check=False).stdout,
                 k("get", "events", "-n", NAMESPACE, "--sort-by=.lastTimestamp", check=False).stdout[-3000:],
                 k("logs", "-n", NAMESPACE, "deploy/envoy-gateway", "--tail=40", check=False).stdout[-4000:]]
        return "\n".join(parts)
