"""The operator's only writer to the Kubernetes API: server-side apply with one field manager, status patches,
deletes. Raw JSON over the official client's connection pool (no model (de)serialisation), in a thread pool
sized to the reconcile workers so the event loop never blocks.
"""

from __future__ import annotations

import asyncio
import json
import os
import re
import socket
import ssl
from collections import Counter
from collections.abc import Mapping
from concurrent.futures import ThreadPoolExecutor
from datetime import UTC, datetime
from typing import Any

import urllib3
from kubernetes import client as k8s_client
from kubernetes import config as k8s_config
from kubernetes.client.exceptions import ApiException
from urllib3.util.ssl_ import create_urllib3_context

from qwen_fleet import __version__
from qwen_fleet.api import API_VERSION, KIND, PLURAL
from qwen_fleet.api.batch import BATCH_KIND, BATCH_PLURAL
from qwen_fleet.config import FIELD_MANAGER
from qwen_fleet.reconcile.kinds import BATCH_CHILD_KINDS, CHILD_KINDS

# apiVersion/kind -> plural, for every kind the operator reads or writes: the children (kinds.py), its Events
# and the resources themselves.
PLURALS: dict[tuple[str, str], str] = {
    **{(child.api_version, child.kind): child.plural for child in CHILD_KINDS + BATCH_CHILD_KINDS},
    ("v1", "Event"): "events",
    ("v1", "Pod"): "pods",
    ("gateway.networking.k8s.io/v1", "Gateway"): "gateways",  # routing.gateway: looked up, never written
    ("v1", "Secret"): "secrets",  # routing.auth.apiKeys: their metadata looked up by name, never data or writes
    (API_VERSION, KIND): PLURAL,
    (API_VERSION, BATCH_KIND): BATCH_PLURAL,
}

# A GET answered with the object's metadata alone (the apiserver's PartialObjectMetadata), never its data.
METADATA_ONLY = "application/json;as=PartialObjectMetadata;g=meta.k8s.io;v=v1"

# JSON is YAML except in one respect: YAML has no surrogate-pair escapes. json.dumps writes a character beyond
# the BMP (an emoji in an annotation or an argument) as "\ud83e\udd99", which the apiserver's YAML decoder of
# an apply-patch+yaml body refuses; YAML's own escape for it is "\U0001f999".
_SURROGATE_PAIR = re.compile(r"(?<!\\)((?:\\\\)*)\\u(d[89ab][0-9a-f]{2})\\u(d[c-f][0-9a-f]{2})")


def apply_body(obj: Mapping[str, Any]) -> str:
    """An apply-patch+yaml body: JSON, with non-BMP characters escaped the YAML way."""
    def escape(m: re.Match[str]) -> str:
        code = 0x10000 + ((int(m[2], 16) - 0xD800) << 10) + (int(m[3], 16) - 0xDC00)
        return f"{m[1]}\\U{code:08x}"

    return _SURROGATE_PAIR.sub(escape, json.dumps(obj))


class KubeError(Exception):
    """An API call failed. ``transient`` errors are retried with backoff; others need a spec change."""

    def __init__(self, status: int, reason: str, message: str, causes: tuple[str, ...] = ()) -> None:
        super().__init__(f"{status} {reason}: {message}")
        self.status = status
        self.reason = reason
        self.message = message
        self.causes = causes  # the Status's details.causes[].reason, e.g. "NamespaceTerminating"

    @property
    def transient(self) -> bool:
        return self.status in (0, 408, 409, 429) or (self.status >= 500 and not self.refused)

    @property
    def refused(self) -> bool:
        """A 500 that is really a refusal of the body: server-side apply could not type a field (e.g. an
        unknown key inside a passed-through core type). Retrying the same body cannot help."""
        return self.status == 500 and "failed to create typed patch object" in self.message

    @property
    def namespace_terminating(self) -> bool:
        """The namespace is being deleted: creates are forbidden there, and everything in it is going away."""
        return self.status == 403 and "NamespaceTerminating" in self.causes


def _error(status: int, body: bytes | str | None) -> KubeError:
    text = body.decode(errors="replace") if isinstance(body, bytes) else (body or "")
    try:
        parsed = json.loads(text)
        details = parsed.get("details") or {}
        # A StatusCause's type is serialised as "reason".
        causes = tuple(str(c.get("reason", "")) for c in (details.get("causes") or []) if isinstance(c, dict))
        return KubeError(status, str(parsed.get("reason", "")), str(parsed.get("message", text)), causes)
    except (ValueError, AttributeError):
        return KubeError(status, "", text.strip()[:500])


def object_path(api_version: str, kind: str, namespace: str | None, name: str | None = None) -> str:
    plural = PLURALS[(api_version, kind)]
    base = f"/api/{api_version}" if "/" not in api_version else f"/apis/{api_version}"
    if namespace:
        base += f"/namespaces/{namespace}"
    base += f"/{plural}"
    return f"{base}/{name}" if name else base


def tls_context(configuration: k8s_client.Configuration) -> ssl.SSLContext:
    """The SSL context of every connection to the API, built once: what urllib3 builds for each new connection
    from the same settings (`create_urllib3_context`, then the CA file or data, else the system CA bundle, then
    the client certificate), except that nothing is loaded that verification would not use."""
    verify = bool(configuration.verify_ssl)
    context = create_urllib3_context(cert_reqs=ssl.CERT_REQUIRED if verify else ssl.CERT_NONE)
    if verify and (configuration.ssl_ca_cert or configuration.ca_cert_data):
        context.load_verify_locations(cafile=configuration.ssl_ca_cert, cadata=configuration.ca_cert_data)
    elif verify:
        context.load_default_certs()
    if configuration.cert_file:
        context.load_cert_chain(configuration.cert_file, configuration.key_file)
    return context


def share_tls_context(api: k8s_client.ApiClient) -> None:
    """Hand the client's connection pool one SSL context for all its connections.

    The kubernetes client gives urllib3 file names (CA, client certificate) and no SSL context, so urllib3 builds a
    context for every new connection and reads those files into it again; with no CA (the system's CAs, or
    insecure-skip-tls-verify) it loads the whole system CA bundle, about 60 ms of CPU each time here, and 5.7 % of
    the operator's CPU in a burst of 1000 creates (docs/fleet-scale.md). Given a context and no file names,
    urllib3 uses it as is (it only sets the verify mode and ALPN the same way on each connection)."""
    pools = api.rest_client.pool_manager
    if type(pools) is not urllib3.PoolManager:
        return  # through a proxy, urllib3 also verifies the proxy with the CA file given: keep its way there
    kw = pools.connection_pool_kw
    kw["ssl_context"] = tls_context(api.configuration)
    for loaded in ("ca_certs", "ca_cert_data", "cert_file", "key_file"):
        kw.pop(loaded, None)
    pools.clear()  # no pool was made with the old settings; if one was, it goes


class KubeClient:
    def __init__(self, api: k8s_client.ApiClient, workers: int = 8, timeout: float = 30.0) -> None:
        self.api = api
        self.timeout = timeout
        self.pool = ThreadPoolExecutor(max_workers=workers, thread_name_prefix="qwen-fleet-api")
        self.writes: Counter[str] = Counter()  # verb -> count, for metrics and the zero-writes proof

    @classmethod
    def from_environment(cls, workers: int = 8, kubeconfig: str | None = None, identity: str = "") -> KubeClient:
        """In-cluster credentials in a pod; otherwise the kubeconfig (argument, $KUBECONFIG, ~/.kube/config).
        ``identity`` goes into the User-Agent, so the audit log tells the replicas of the operator apart."""
        configuration = k8s_client.Configuration()
        path = kubeconfig or os.environ.get("KUBECONFIG")
        try:
            if path:
                raise k8s_config.ConfigException("a kubeconfig was named")
            k8s_config.load_incluster_config(client_configuration=configuration)
        except k8s_config.ConfigException:
            k8s_config.load_kube_config(config_file=path, client_configuration=configuration)
        configuration.connection_pool_maxsize = max(workers, 4)
        api = k8s_client.ApiClient(configuration)
        api.user_agent = f"qwen-fleet/{__version__}" + (f" ({identity})" if identity else "")
        share_tls_context(api)
        return cls(api, workers=workers)

    def close(self) -> None:
        self.pool.shutdown(wait=False, cancel_futures=True)
        self.api.close()

    # --- raw requests ---------------------------------------------------------------------------------

    def _request_sync(self, method: str, path: str, query: Mapping[str, str] | None = None, body: Any = None,
                      content_type: str | None = None, accept: str = "application/json") -> Any:
        headers = {"Accept": accept}
        if content_type:
            headers["Content-Type"] = content_type
        try:
            m, url, hdrs, data, _ = self.api.param_serialize(
                method=method, resource_path=path, query_params=list((query or {}).items()),
                header_params=headers, body=body, auth_settings=["BearerToken"])
            resp = self.api.call_api(m, url, header_params=hdrs, body=data, _request_timeout=self.timeout)
            raw = resp.read()
        except ApiException as exc:
            raise _error(exc.status or 0, exc.body) from None
        except (OSError, ValueError) as exc:  # connection refused/reset, TLS, timeouts (urllib3 errors)
            raise KubeError(0, "ConnectionError", str(exc).splitlines()[0][:300]) from None
        except Exception as exc:  # urllib3's MaxRetryError and friends derive from Exception
            raise KubeError(0, type(exc).__name__, str(exc).splitlines()[0][:300] if str(exc) else "") from None
        if resp.status >= 400:
            raise _error(resp.status, raw)
        return json.loads(raw) if raw else None

    async def request(self, method: str, path: str, query: Mapping[str, str] | None = None, body: Any = None,
                      content_type: str | None = None, accept: str = "application/json") -> Any:
        if method != "GET":
            self.writes[method] += 1
        loop = asyncio.get_running_loop()
        return await loop.run_in_executor(self.pool, lambda: self._request_sync(method, path, query, body,
                                                                                  content_type, accept))

    # --- verbs ----------------------------------------------------------------------------------------

    async def apply(self, obj: Mapping[str, Any], dry_run: bool = False,
                    field_manager: str = FIELD_MANAGER) -> dict[str, Any]:
        """Server-side apply: we own exactly the fields we send; force takes back fields others changed.
        ``dry_run`` runs admission and validation without storing anything."""
        meta = obj["metadata"]
        path = object_path(obj["apiVersion"], obj["kind"], meta.get("namespace"), meta["name"])
        query = {"fieldManager": field_manager, "force": "true"}
        if dry_run:
            query["dryRun"] = "All"
        result: dict[str, Any] = await self.request("PATCH", path, query, body=apply_body(obj),
                                                    content_type="application/apply-patch+yaml")
        return result

    async def patch_status(self, api_version: str, kind: str, namespace: str, name: str,
                           status: Mapping[str, Any]) -> dict[str, Any]:
        path = object_path(api_version, kind, namespace, name) + "/status"
        result: dict[str, Any] = await self.request("PATCH", path, body={"status": dict(status)},
                                                    content_type="application/merge-patch+json")
        return result

    async def delete(self, api_version: str, kind: str, namespace: str, name: str, uid: str | None) -> None:
        body: dict[str, Any] = {"kind": "DeleteOptions", "apiVersion": "v1", "propagationPolicy": "Background"}
        if uid:  # never delete a newer object that took the same name
            body["preconditions"] = {"uid": uid}
        try:
            await self.request("DELETE", object_path(api_version, kind, namespace, name), body=body)
        except KubeError as err:
            if err.status != 404:
                raise

    async def post_event(self, obj: Mapping[str, Any], type_: str, reason: str, message: str) -> None:
        """A core/v1 Event about ``obj`` (what `kubectl describe` and `kubectl get events` show)."""
        meta = obj.get("metadata") or {}
        now = datetime.now(UTC).strftime("%Y-%m-%dT%H:%M:%SZ")
        event = {
            "apiVersion": "v1", "kind": "Event",
            "metadata": {"generateName": f"{meta.get('name')}.", "namespace": meta.get("namespace")},
            "involvedObject": {"apiVersion": obj.get("apiVersion"), "kind": obj.get("kind"),
                               "name": meta.get("name"), "namespace": meta.get("namespace"),
                               "uid": meta.get("uid")},
            "type": type_, "reason": reason, "message": message[:1024],
            "firstTimestamp": now, "lastTimestamp": now, "count": 1,
            "source": {"component": FIELD_MANAGER}, "reportingComponent": FIELD_MANAGER,
            "reportingInstance": socket.gethostname()[:128],
        }
        await self.request("POST", object_path("v1", "Event", meta.get("namespace")), body=event)

    async def get(self, path: str) -> Any:
        return await self.request("GET", path)

    async def find(self, api_version: str, kind: str, namespace: str, name: str) -> dict[str, Any] | None:
        """The object of that name, or None: a list by name, as the operator holds `list` (not `get`) on every
        kind it makes; the apiserver serves a list by metadata.name as a read of one key."""
        found = await self.request("GET", object_path(api_version, kind, namespace),
                                   {"fieldSelector": f"metadata.name={name}"})
        items = (found or {}).get("items") or []
        return {**items[0], "apiVersion": api_version, "kind": kind} if items else None

    async def metadata_of(self, api_version: str, kind: str, namespace: str, name: str) -> dict[str, Any] | None:
        """The object's metadata only (a PartialObjectMetadata GET), or None when it does not exist: for Secrets,
        whose data the operator must never hold (routing.auth.apiKeys: it checks that the key Secrets exist)."""
        try:
            found = await self.request("GET", object_path(api_version, kind, namespace, name), accept=METADATA_ONLY)
        except KubeError as err:
            if err.status == 404:
                return None
            raise
        return dict((found or {}).get("metadata") or {})

    async def api_exists(self, group_version: str, plural: str) -> bool:
        """Whether the cluster serves a resource (optional CRDs such as ServiceMonitor)."""
        try:
            found = await self.get(f"/apis/{group_version}")
        except KubeError as err:
            if err.status in (403, 404, 503):
                return False
            raise
        return any(r.get("name") == plural for r in (found or {}).get("resources", []))
