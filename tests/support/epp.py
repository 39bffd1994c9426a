"""The real endpoint picker (``cmd/epp`` of sigs.k8s.io/gateway-api-inference-extension, built by
``hack/build-binaries.sh epp``) run as a local process from the Deployment and ConfigMap the operator renders
for ``spec.routing``, the way tests/support/cpu_rule.py runs the vLLM container. Only what a pod has and a
process on this machine has not changes; the arguments are otherwise the rendered ones, verbatim:

1. the program: the image's entrypoint (``/epp``) -> the binary built from the module version of the image's tag
   (refused when the tags differ);
2. the config volume: the rendered ConfigMap's files are written to a local directory, and an argument under the
   volume's mountPath (``--config-file /config/config.yaml``) is rewritten to it (cpu_rule.rewrite_mounts);
3. network: a pod has a network namespace of its own, this process shares the machine's, where a fixed port
   may be taken: each argument equal to a containerPort (``--grpc-port 9002``, ``--grpc-health-port 9003``,
   ``--metrics-port 9090``) becomes a free port, which ``ports`` maps;
4. identity: a pod gets its ServiceAccount's token; here a token of the rendered ServiceAccount (TokenRequest,
   ``kubectl create token``) in ``KUBECONFIG``, so the picker reads the cluster with the rendered Role and no
   more. The downward-API variables (``NAMESPACE``, ``POD_NAME``) get the values the kubelet would give.
"""

from __future__ import annotations

import json
import socket
import ssl
import time
import urllib.request
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import grpc
from prometheus_client.parser import text_string_to_metric_families

from qwen_fleet import versions
from qwen_fleet_dev.cluster import LocalCluster, free_port
from qwen_fleet_dev.kubeconfig import write_kubeconfig
from qwen_fleet_dev.processes import Component
from tests.support.cpu_rule import rewrite_mounts


@dataclass
class LocalPicker:
    component: Component
    container_ports: dict[str, int]  # port name -> containerPort, as rendered
    ports: dict[int, int]  # containerPort -> the local port standing in for it

    def local_port(self, name: str) -> int:
        return self.ports[self.container_ports[name]]

    def _families(self) -> list[Any]:
        url = f"http://127.0.0.1:{self.local_port('metrics')}/metrics"
        with urllib.request.urlopen(url, timeout=30) as resp:  # a loaded machine: not a speed bar
            return list(text_string_to_metric_families(resp.read().decode()))

    def endpoints(self) -> set[str]:
        """The endpoints in the picker's datastore, read from its own metrics: the gauge
        ``inference_pool_per_pod_queue_size`` is collected from the datastore at each scrape
        (pkg/epp/metrics/collectors/inference_pool.go), one series per endpoint, ``<pod>-rank-<i>``."""
        return {s.labels["model_server_pod"] for family in self._families()
                if family.name == "inference_pool_per_pod_queue_size" for s in family.samples}

    def samples(self) -> dict[str, float]:
        """The picker's own metrics as {sample name: value summed over label sets}."""
        out: dict[str, float] = {}
        for family in self._families():
            for sample in family.samples:
                out[sample.name] = out.get(sample.name, 0.0) + float(sample.value)
        return out

    def log_events(self, msg: str) -> list[dict[str, Any]]:
        """The picker's log lines (``--zap-encoder json``) whose message is ``msg``."""
        events = []
        for line in self.component.log.read_text(errors="replace").splitlines():
            if line.startswith("{") and f'"msg":"{msg}"' in line:
                events.append(json.loads(line))
        return events

    def ext_proc_serving(self) -> bool:
        """Whether the ext-proc port completes a TLS handshake (ALPN h2), as a gateway's connection must.

        The picker's health port answers SERVING and its metrics and datastore are up before this port listens:
        with ``--secure-serving`` and no ``--cert-path`` the ext-proc runnable first generates its self-signed
        certificate's 4096-bit RSA key (internal/tls CreateSelfSignedTLSCertificate), then listens; on a loaded
        2-core machine that took longer than the picker tests' set-up (issue 30: the first test, on the health
        port, passed; every request after it was reset by the bridge, whose connection to this port failed)."""
        ctx = ssl.create_default_context()
        ctx.check_hostname = False
        ctx.verify_mode = ssl.CERT_NONE
        ctx.set_alpn_protocols(["h2"])
        try:
            with socket.create_connection(("127.0.0.1", self.local_port("grpc")), timeout=30) as raw, \
                    ctx.wrap_socket(raw) as tls:
                return tls.selected_alpn_protocol() == "h2"
        except OSError:
            return False

    def wait_ext_proc(self, timeout: float = 600) -> float:
        """Until the ext-proc port serves (a ceiling against hangs, not a speed bar); the seconds it took."""
        started = time.monotonic()
        while not self.ext_proc_serving():
            if not self.component.running() or time.monotonic() - started > timeout:
                raise RuntimeError(f"the picker's ext-proc port {self.local_port('grpc')} did not serve TLS "
                                   f"({'exited' if not self.component.running() else f'{timeout:.0f} s'}); "
                                   f"its log:\n{self.component.tail(40)}")
            time.sleep(0.5)
        return time.monotonic() - started

    def probe(self, probe: dict[str, Any]) -> int:
        """What the kubelet's gRPC probe (``{"grpc": {"port", "service"}}``) would get: the status of
        grpc.health.v1.Health/Check, 1 for SERVING. The two protobuf messages are encoded by hand (one field
        each: the service name, a string; the status, an enum) to need no health stubs."""
        service = probe["grpc"].get("service", "").encode()
        assert len(service) < 128, service  # one-byte length
        with grpc.insecure_channel(f"127.0.0.1:{self.ports[probe['grpc']['port']]}") as channel:
            check = channel.unary_unary("/grpc.health.v1.Health/Check")
            reply: bytes = check(b"\x0a" + bytes([len(service)]) + service if service else b"", timeout=30)
        return reply[1] if reply[:1] == b"\x08" else 0  # field 1, varint; absent: UNKNOWN (0)

    def stop(self) -> None:
        self.component.stop()


def _container(deployment: dict[str, Any]) -> dict[str, Any]:
    containers = deployment["spec"]["template"]["spec"]["containers"]
    assert len(containers) == 1, [c["name"] for c in containers]
    return dict(containers[0])


def _config_files(deployment: dict[str, Any], config_map: dict[str, Any], container: dict[str, Any],
                  workdir: Path) -> dict[str, Path]:
    """Write the ConfigMap volume locally; mountPath -> local directory."""
    volumes = {v["name"]: v for v in deployment["spec"]["template"]["spec"]["volumes"]}
    mounts: dict[str, Path] = {}
    for mount in container.get("volumeMounts", []):
        source = volumes[mount["name"]].get("configMap")
        if source is None:
            raise ValueError(f"volume {mount['name']} is not a ConfigMap; the rule knows no stand-in for it")
        assert source["name"] == config_map["metadata"]["name"], (source, config_map["metadata"]["name"])
        folder = workdir / mount["name"]
        folder.mkdir(parents=True, exist_ok=True)
        for key, text in config_map["data"].items():
            (folder / key).write_text(text)
        mounts[mount["mountPath"]] = folder
    return mounts


def _env(container: dict[str, Any], namespace: str, pod_name: str) -> dict[str, str]:
    downward = {"metadata.namespace": namespace, "metadata.name": pod_name}
    env: dict[str, str] = {}
    for var in container.get("env", []):
        if "value" in var:
            env[var["name"]] = var["value"]
            continue
        path = var["valueFrom"]["fieldRef"]["fieldPath"]  # KeyError: a source the rule does not stand in for
        env[var["name"]] = downward[path]
    return env


def service_account_kubeconfig(cluster: LocalCluster, namespace: str, account: str, path: Path) -> Path:
    token = cluster.kubectl("create", "token", account, "-n", namespace, "--duration=1h").stdout.strip()
    write_kubeconfig(path, cluster.server, f"system:serviceaccount:{namespace}:{account}", token, namespace)
    return path


def start_picker(binary: Path, deployment: dict[str, Any], config_map: dict[str, Any], kubeconfig: Path,
                 workdir: Path) -> LocalPicker:
    container = _container(deployment)
    tag = container["image"].rsplit(":", 1)[-1]
    if tag != versions.GATEWAY_API_INFERENCE_EXTENSION:
        raise ValueError(f"the Deployment runs epp {tag}; the local binary is "
                         f"{versions.GATEWAY_API_INFERENCE_EXTENSION}")
    mounts = _config_files(deployment, config_map, container, workdir)
    container_ports = {p["name"]: int(p["containerPort"]) for p in container["ports"]}
    ports = {port: free_port() for port in container_ports.values()}
    args = [rewrite_mounts(a, mounts) for a in container["args"]]
    args = [str(ports[int(a)]) if a.isdigit() and int(a) in ports else a for a in args]
    namespace = deployment["metadata"]["namespace"]
    pod_name = f"{deployment['metadata']['name']}-7d4b9c8f6-x2x7q"  # <deployment>-<template hash>-<suffix>
    env = {"PATH": "/usr/bin:/bin", "HOME": str(workdir), "KUBECONFIG": str(kubeconfig),
           **_env(container, namespace, pod_name)}
    component = Component("epp", [str(binary), *args], workdir / "epp.log", env=env)
    component.start(tie_to_parent=True)
    return LocalPicker(component, container_ports, ports)
