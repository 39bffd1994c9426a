"""A tiny JSON client for bootstrapping the local cluster (before any real client library is needed)."""

from __future__ import annotations

import json
import ssl
import urllib.error
import urllib.request
from typing import Any


class RestError(RuntimeError):
    def __init__(self, status: int, body: str) -> None:
        super().__init__(f"HTTP {status}: {body[:500]}")
        self.status = status
        self.body = body


class Rest:
    def __init__(self, server: str, token: str, timeout: float = 10.0) -> None:
        self.server = server.rstrip("/")
        self.token = token
        self.timeout = timeout
        self._tls = ssl.create_default_context()
        self._tls.check_hostname = False
        self._tls.verify_mode = ssl.CERT_NONE  # the apiserver's self-signed serving certificate

    def request(self, method: str, path: str, body: Any = None,
                content_type: str = "application/json") -> Any:
        data = None if body is None else json.dumps(body).encode()
        req = urllib.request.Request(self.server + path, data=data, method=method)
        req.add_header("Authorization", f"Bearer {self.token}")
        req.add_header("Accept", "application/json")
        if data is not None:
            req.add_header("Content-Type", content_type)
        try:
            with urllib.request.urlopen(req, timeout=self.timeout, context=self._tls) as resp:
                raw = resp.read()
        except urllib.error.HTTPError as err:
            raise RestError(err.code, err.read().decode(errors="replace")) from None
        if not raw:
            return None
        try:
            return json.loads(raw)
        except ValueError:
            return raw.decode(errors="replace")

    def get(self, path: str) -> Any:
        return self.request("GET", path)

    def create(self, path: str, body: Any) -> Any:
        try:
            return self.request("POST", path, body)
        except RestError as err:
            if err.status == 409:  # already there: creation is idempotent for bootstrap objects
                return None
            raise
