"""The few Kubernetes calls the batch runner makes, with the standard library and the pod's ServiceAccount.

The runner reports progress with server-side apply on the QwenBatch's status subresource under its own field
manager (``qwen-fleet-batch-runner``), so the operator, which writes the conditions, and the runner never
overwrite each other's fields; and, for a ConfigMap output, reads and applies the ConfigMap's two keys. Its
Role (made by the operator, render/batch.py) allows exactly that, on those objects by name.
"""

from __future__ import annotations

import contextlib
import json
import os
import ssl
import urllib.error
import urllib.request
from pathlib import Path
from typing import Any

from qwen_fleet.group import API_VERSION

RUNNER_FIELD_MANAGER = "qwen-fleet-batch-runner"
_SA = Path("/var/run/secrets/kubernetes.io/serviceaccount")


class KubeCallFailed(Exception):
    def __init__(self, status: int, message: str) -> None:
        super().__init__(f"{status}: {message}" if status else message)
        self.status = status


class KubeApi:
    def __init__(self, base_url: str, token: str = "", context: ssl.SSLContext | None = None,
                 timeout: float = 30.0) -> None:
        self.base_url = base_url.rstrip("/")
        self.token = token
        self.context = context
        self.timeout = timeout

    @classmethod
    def in_cluster(cls) -> KubeApi:
        host, port = os.environ.get("KUBERNETES_SERVICE_HOST"), os.environ.get("KUBERNETES_SERVICE_PORT", "443")
        if not host:
            raise KubeCallFailed(0, "not in a pod (KUBERNETES_SERVICE_HOST is unset); pass --kube-api")
        token = (_SA / "token").read_text().strip()
        context = ssl.create_default_context(cafile=str(_SA / "ca.crt"))
        host = f"[{host}]" if ":" in host else host
        return cls(f"https://{host}:{port}", token, context)

    def request(self, method: str, path: str, body: Any = None, content_type: str = "application/json",
                query: str = "") -> Any:
        data = json.dumps(body).encode() if body is not None else None
        req = urllib.request.Request(f"{self.base_url}{path}{'?' + query if query else ''}", data=data,
                                     method=method)
        req.add_header("Accept", "application/json")
        if data is not None:
            req.add_header("Content-Type", content_type)
        if self.token:
            req.add_header("Authorization", f"Bearer {self.token}")
        try:
            with urllib.request.urlopen(req, timeout=self.timeout, context=self.context) as resp:
                raw = resp.read()
        except urllib.error.HTTPError as err:
            text = err.read().decode(errors="replace")
            with contextlib.suppress(ValueError, AttributeError):
                text = str(json.loads(text).get("message", text))
            raise KubeCallFailed(err.code, text[:500]) from None
        except (OSError, ValueError) as err:
            raise KubeCallFailed(0, str(err)[:500]) from None
        return json.loads(raw) if raw else None

    def apply(self, path: str, obj: dict[str, Any]) -> Any:
        return self.request("PATCH", path, obj, "application/apply-patch+yaml",
                            f"fieldManager={RUNNER_FIELD_MANAGER}&force=true")


def batch_status_path(namespace: str, name: str) -> str:
    return f"/apis/{API_VERSION}/namespaces/{namespace}/qwenbatches/{name}/status"


def configmap_path(namespace: str, name: str) -> str:
    return f"/api/v1/namespaces/{namespace}/configmaps/{name}"


def report_status(api: KubeApi, namespace: str, name: str, status: dict[str, Any]) -> None:
    api.apply(batch_status_path(namespace, name), {
        "apiVersion": API_VERSION, "kind": "QwenBatch",
        "metadata": {"name": name, "namespace": namespace}, "status": status})
