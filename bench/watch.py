"""Raw watch streams for the benchmark: record when each object first reaches a state, with monotonic times.

Plain JSON over the client's connection (no model deserialisation), so the benchmark's own cost stays small
and is the same for the operator run and the bare-client run.
"""

from __future__ import annotations

import json
import threading
import time
from collections.abc import Callable
from typing import Any

import urllib3
from kubernetes import client as k8s_client
from kubernetes import config as k8s_config

# The local cluster's kubeconfig skips TLS verification; urllib3 would warn on every request (and cost CPU).
urllib3.disable_warnings(urllib3.exceptions.InsecureRequestWarning)

Predicate = Callable[[dict[str, Any]], bool]


def api_client(kubeconfig: str, pool: int = 16) -> k8s_client.ApiClient:
    configuration = k8s_client.Configuration()
    k8s_config.load_kube_config(config_file=kubeconfig, client_configuration=configuration)
    configuration.connection_pool_maxsize = pool
    return k8s_client.ApiClient(configuration)


class Recorder:
    """Watch one collection; for each (namespace, name) note the first time each named predicate held."""

    def __init__(self, api: k8s_client.ApiClient, path: str, predicates: dict[str, Predicate]) -> None:
        self.api, self.path, self.predicates = api, path, predicates
        self.first: dict[str, dict[tuple[str, str], float]] = {k: {} for k in predicates}
        self.events = 0
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, daemon=True)

    def start(self) -> Recorder:
        self._thread.start()
        return self

    def stop(self) -> None:
        self._stop.set()

    def count(self, state: str) -> int:
        return len(self.first[state])

    def wait(self, state: str, n: int, timeout: float) -> bool:
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            if self.count(state) >= n:
                return True
            time.sleep(0.05)
        return False

    def _run(self) -> None:
        rv = ""
        while not self._stop.is_set():
            try:
                rv = self._stream(rv)
            except Exception:
                time.sleep(0.2)

    def _stream(self, rv: str) -> str:
        query = [("watch", "true"), ("allowWatchBookmarks", "true"), ("timeoutSeconds", "300")]
        if rv:
            query.append(("resourceVersion", rv))
        method, url, headers, _, _ = self.api.param_serialize(
            method="GET", resource_path=self.path, query_params=query, header_params={"Accept": "application/json"},
            auth_settings=["BearerToken"])
        resp = self.api.rest_client.pool_manager.request(method, url, headers=headers, preload_content=False,
                                                         timeout=None)
        buf = b""
        for chunk in resp.stream(65536):
            if self._stop.is_set():
                break
            buf += chunk
            *lines, buf = buf.split(b"\n")
            now = time.monotonic()
            for line in lines:
                if line.strip():
                    rv = self._handle(json.loads(line), now) or rv
        resp.release_conn()
        return rv

    def _handle(self, event: dict[str, Any], now: float) -> str | None:
        obj = event.get("object") or {}
        meta = obj.get("metadata") or {}
        if event.get("type") == "ERROR":
            return ""  # expired resourceVersion: start over
        if event.get("type") == "BOOKMARK":
            # Only a resourceVersion (allowWatchBookmarks): no name, and not an object to judge. Counted as one, the
            # bookmark became a 21st "available" Deployment of 20 (key ('', '')), and wait() could return one early.
            return str(meta.get("resourceVersion") or "") or None
        self.events += 1
        key = (str(meta.get("namespace", "")), str(meta.get("name", "")))
        if event.get("type") != "DELETED":
            for state, pred in self.predicates.items():
                if key not in self.first[state] and pred(obj):
                    self.first[state][key] = now
        return str(meta.get("resourceVersion") or "") or None


def exists(_: dict[str, Any]) -> bool:
    return True


def qwi_ready(obj: dict[str, Any]) -> bool:
    return any(c.get("type") == "Ready" and c.get("status") == "True"
               for c in (obj.get("status") or {}).get("conditions") or [])


def deployment_available(obj: dict[str, Any]) -> bool:
    spec, st = obj.get("spec") or {}, obj.get("status") or {}
    want = int(spec.get("replicas", 1))
    return (int(st.get("observedGeneration") or 0) >= int((obj.get("metadata") or {}).get("generation") or 0)
            and int(st.get("updatedReplicas") or 0) >= want and int(st.get("availableReplicas") or 0) >= want
            and int(st.get("replicas") or 0) == want)


def has_arg(value: str) -> Predicate:
    def check(obj: dict[str, Any]) -> bool:
        containers = (((obj.get("spec") or {}).get("template") or {}).get("spec") or {}).get("containers") or []
        return any(value in (c.get("args") or []) for c in containers)

    return check
