"""The real LeaderWorkerSet controller (sigs.k8s.io/lws, built by ``hack/build-binaries.sh lws``) in the local
control plane: opt-in with ``LocalCluster(leader_worker_set=True)``.

Its manager runs as a plain process next to the control plane: the LWS and pod controllers, and its webhooks
(defaulting and validation of LeaderWorkerSets; the pod webhook that injects LWS_LEADER_ADDRESS,
LWS_GROUP_SIZE and LWS_WORKER_INDEX and the group labels). In a real cluster the webhooks sit behind a Service
with certificates the manager rotates itself; here the apiserver calls them on loopback with a certificate from
the project's PKI (devcluster/pki.py), so its own certificate management is off. The pod webhooks see only
pods of a LeaderWorkerSet (an objectSelector on its name label), so no other pod depends on this process.
"""

from __future__ import annotations

import base64
import json
import urllib.request
from pathlib import Path
from typing import TYPE_CHECKING, Any

from qwen_fleet import versions
from qwen_fleet_dev.binaries import BinariesMissing, cache_root
from qwen_fleet_dev.pki import make_loopback_serving_pki
from qwen_fleet_dev.processes import Component, wait_for

if TYPE_CHECKING:
    from qwen_fleet_dev.cluster import LocalCluster

LWS_NAME_LABEL = "leaderworkerset.sigs.k8s.io/name"
WEBHOOK_CONFIG_NAME = "qwen-fleet-local-lws"
# (name, path, group, resource, operations, only LWS pods) of each webhook, as LWS' config/webhook declares them.
_MUTATING = (("mleaderworkerset.kb.io", "/mutate-leaderworkerset-x-k8s-io-v1-leaderworkerset",
              "leaderworkerset.x-k8s.io", "leaderworkersets", ["CREATE", "UPDATE"]),
             ("mpod.kb.io", "/mutate--v1-pod", "", "pods", ["CREATE"]))
_VALIDATING = (("vleaderworkerset.kb.io", "/validate-leaderworkerset-x-k8s-io-v1-leaderworkerset",
                "leaderworkerset.x-k8s.io", "leaderworkersets", ["CREATE", "UPDATE"]),
               ("vpod.kb.io", "/validate--v1-pod", "", "pods", ["CREATE", "UPDATE"]))


def lws_home() -> Path:
    return cache_root() / "lws" / versions.LWS


def manager_binary() -> Path:
    return lws_home() / "bin" / "lws-manager"


def crd_files() -> list[Path]:
    return sorted((lws_home() / "crds").glob("*.yaml"))


def _webhooks(entries: tuple[tuple[str, str, str, str, list[str]], ...], port: int, ca: str) -> list[dict[str, Any]]:
    out = []
    for name, path, group, resource, operations in entries:
        hook: dict[str, Any] = {
            "name": name, "admissionReviewVersions": ["v1"], "sideEffects": "None", "failurePolicy": "Fail",
            "timeoutSeconds": 10,
            "clientConfig": {"url": f"https://127.0.0.1:{port}{path}", "caBundle": ca},
            "rules": [{"apiGroups": [group], "apiVersions": ["v1"], "operations": operations,
                       "resources": [resource]}],
        }
        if resource == "pods":
            hook["objectSelector"] = {"matchExpressions": [{"key": LWS_NAME_LABEL, "operator": "Exists"}]}
        out.append(hook)
    return out


def webhook_configurations(port: int, ca_pem: bytes) -> list[dict[str, Any]]:
    ca = base64.b64encode(ca_pem).decode()
    meta = {"name": WEBHOOK_CONFIG_NAME}
    return [
        {"apiVersion": "admissionregistration.k8s.io/v1", "kind": "MutatingWebhookConfiguration", "metadata": meta,
         "webhooks": _webhooks(_MUTATING, port, ca)},
        {"apiVersion": "admissionregistration.k8s.io/v1", "kind": "ValidatingWebhookConfiguration",
         "metadata": meta, "webhooks": _webhooks(_VALIDATING, port, ca)},
    ]


def manager_configuration(webhook_port: int, health_port: int, cert_dir: Path) -> dict[str, Any]:
    """LWS' own Configuration file (config.lws.x-k8s.io/v1alpha1): one manager, no leader election, its
    certificate management off (ours is on disk), metrics off, the health probe on loopback."""
    return {
        "apiVersion": "config.lws.x-k8s.io/v1alpha1", "kind": "Configuration",
        "leaderElection": {"leaderElect": False},
        "internalCertManagement": {"enable": False},
        "webhook": {"port": webhook_port, "host": "127.0.0.1", "certDir": str(cert_dir)},
        "metrics": {"bindAddress": "0"},
        "health": {"healthProbeBindAddress": f"127.0.0.1:{health_port}"},
    }


def _http_ok(url: str) -> bool:
    try:
        with urllib.request.urlopen(url, timeout=2) as resp:
            return bool(resp.status == 200)
    except OSError:
        return False


class LeaderWorkerSetController:
    """Started by LocalCluster after the control plane is up; stopped with the other components."""

    def __init__(self, workdir: Path, kubeconfig: Path, webhook_port: int, health_port: int) -> None:
        self.workdir = workdir / "lws"
        self.kubeconfig = kubeconfig
        self.webhook_port = webhook_port
        self.health_port = health_port

    @staticmethod
    def missing() -> list[Path]:
        gone = [] if manager_binary().exists() else [manager_binary()]
        return gone + ([] if crd_files() else [lws_home() / "crds"])

    def component(self) -> Component:
        """Certificates and configuration written; the manager's process (not yet started)."""
        if self.missing():
            raise BinariesMissing("LeaderWorkerSet missing (run hack/build-binaries.sh lws): "
                                  + ", ".join(map(str, self.missing())))
        pki = make_loopback_serving_pki(self.workdir / "certs", "lws-webhook")
        config = self.workdir / "config.yaml"
        config.write_text(json.dumps(manager_configuration(self.webhook_port, self.health_port, pki.cert.parent)))
        argv = [str(manager_binary()), f"--config={config}", f"--kubeconfig={self.kubeconfig}"]
        return Component("lws-manager", argv, self.workdir.parent / "logs" / "lws-manager.log")

    def wait_ready(self, comp: Component) -> None:
        wait_for("lws-manager /readyz", lambda: _http_ok(f"http://127.0.0.1:{self.health_port}/readyz"), 90, comp)

    def webhook_documents(self) -> list[dict[str, Any]]:
        return webhook_configurations(self.webhook_port, (self.workdir / "certs" / "ca.crt").read_bytes())

    def start(self, cluster: LocalCluster, tie_to_parent: bool) -> Component:
        """CRDs, the manager, its webhooks; returns once a LeaderWorkerSet passes them (a server-side dry run)."""
        comp = self.component()
        for crd in crd_files():
            name = str(_crd_name(crd))
            cluster.install_crd(crd, name=name)
        comp.start(tie_to_parent)
        self.wait_ready(comp)
        cluster.kubectl("apply", "-f", "-", input=json.dumps({"apiVersion": "v1", "kind": "List",
                                                               "items": self.webhook_documents()}))
        probe = json.dumps(_probe_lws())
        wait_for("the LWS webhooks", lambda: cluster.kubectl(
            "create", "--dry-run=server", "-n", "default", "-f", "-", input=probe, check=False).returncode == 0,
            90, comp)
        return comp


def _crd_name(path: Path) -> str:
    """metadata.name of a CRD file (the line under ``metadata:``; the files are controller-gen's)."""
    lines = path.read_text().splitlines()
    at = lines.index("metadata:")
    for line in lines[at + 1:]:
        if line.strip().startswith("name:"):
            return line.split(":", 1)[1].strip()
    raise ValueError(f"no metadata.name in {path}")


def _probe_lws() -> dict[str, Any]:
    container = {"name": "c", "image": "registry.invalid/probe:1"}
    return {"apiVersion": "leaderworkerset.x-k8s.io/v1", "kind": "LeaderWorkerSet",
            "metadata": {"name": "qwen-fleet-webhook-probe"},
            "spec": {"leaderWorkerTemplate": {"size": 2, "workerTemplate": {"spec": {"containers": [container]}}}}}
