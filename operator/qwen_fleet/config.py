"""Operator configuration: environment variables, read once at startup (the chart sets them from values)."""

from __future__ import annotations

import json
import os
import socket
from dataclasses import dataclass, field
from typing import Any

from qwen_fleet import __version__, versions

FIELD_MANAGER = "qwen-fleet"
MANAGED_BY = "qwen-fleet"
RUNNER_IMAGE = f"ghcr.io/qwen-fleet/operator:{__version__}"


def _float(name: str, default: float) -> float:
    raw = os.environ.get(name)
    if raw is None or raw == "":
        return default
    try:
        return float(raw)
    except ValueError:
        raise SystemExit(f"qwen-fleet: {name}={raw!r} is not a number") from None


def _int(name: str, default: int) -> int:
    raw = os.environ.get(name)
    if raw is None or raw == "":
        return default
    try:
        return int(raw)
    except ValueError:
        raise SystemExit(f"qwen-fleet: {name}={raw!r} is not an integer") from None


@dataclass(frozen=True)
class Guardrails:
    """What a spec may ask for (the chart's values ``guardrails``; enforced by qwen_fleet.admission.guardrails).
    An empty tuple allows anything. The defaults, for an operator started without the chart, allow everything."""

    image_prefixes: tuple[str, ...] = ()
    priority_class_names: tuple[str, ...] = ()
    runtime_class_names: tuple[str, ...] = ()
    service_types: tuple[str, ...] = ()
    secret_names: tuple[str, ...] = ()
    secret_name_prefixes: tuple[str, ...] = ()
    any_secret: bool = True

    @classmethod
    def from_json(cls, raw: str) -> Guardrails:
        """QWEN_FLEET_GUARDRAILS: the values' ``guardrails`` object as JSON; empty: no guardrails."""
        if not raw.strip():
            return cls()
        try:
            data = json.loads(raw)
        except ValueError as err:
            raise SystemExit(f"qwen-fleet: QWEN_FLEET_GUARDRAILS is not JSON: {err}") from None
        if not isinstance(data, dict):
            raise SystemExit("qwen-fleet: QWEN_FLEET_GUARDRAILS must be a JSON object")
        lists = {"imagePrefixes": "image_prefixes", "priorityClassNames": "priority_class_names",
                 "runtimeClassNames": "runtime_class_names", "serviceTypes": "service_types",
                 "secretNames": "secret_names", "secretNamePrefixes": "secret_name_prefixes"}
        unknown = sorted(set(data) - set(lists) - {"anySecret"})
        if unknown:
            raise SystemExit(f"qwen-fleet: QWEN_FLEET_GUARDRAILS has unknown keys: {', '.join(unknown)}")
        fields: dict[str, Any] = {}
        for key, attr in lists.items():
            value = data.get(key) or []
            if not isinstance(value, list) or not all(isinstance(v, str) for v in value):
                raise SystemExit(f"qwen-fleet: QWEN_FLEET_GUARDRAILS {key} must be a list of strings")
            fields[attr] = tuple(value)
        any_secret = data.get("anySecret", True)
        if not isinstance(any_secret, bool):
            raise SystemExit("qwen-fleet: QWEN_FLEET_GUARDRAILS anySecret must be true or false")
        return cls(**fields, any_secret=any_secret)


@dataclass(frozen=True)
class OperatorConfig:
    default_image: str = versions.VLLM_IMAGE
    # The image QwenBatch Jobs run `qwen-fleet batch-run` from: the operator's own (the chart sets it).
    runner_image: str = RUNNER_IMAGE
    namespaces: tuple[str, ...] = ()  # empty: all namespaces
    resync_seconds: int = 300  # level-based safety net on top of watch events
    workers: int = 16  # concurrent reconciles; the API client has twice as many threads and connections
    metrics_port: int = 8080
    liveness_port: int = 8081
    log_level: str = "INFO"
    # The admission webhook (qwen_fleet.admission): 0 leaves it off; the chart turns it on with a certificate
    # mounted at webhook_cert_dir (tls.crt, tls.key: the layout of a kubernetes.io/tls Secret).
    webhook_port: int = 0
    webhook_cert_dir: str = "/etc/qwen-fleet/webhook"
    extra_labels: dict[str, str] = field(default_factory=dict)
    guardrails: Guardrails = field(default_factory=Guardrails)
    # Leader election (reconcile/leader.py): on when a namespace for the Lease is given (the chart gives its
    # own). Without it the process reconciles at once, as one replica must.
    lease_namespace: str = ""
    lease_name: str = "qwen-fleet-operator"
    identity: str = field(default_factory=lambda: f"{socket.gethostname()}_{os.getpid()}")
    lease_duration_seconds: float = 15.0
    lease_renew_deadline_seconds: float = 10.0
    lease_retry_seconds: float = 2.0

    @classmethod
    def from_env(cls) -> OperatorConfig:
        namespaces = tuple(n.strip() for n in os.environ.get("QWEN_FLEET_NAMESPACES", "").split(",") if n.strip())
        return cls(
            default_image=os.environ.get("QWEN_FLEET_DEFAULT_IMAGE") or versions.VLLM_IMAGE,
            runner_image=os.environ.get("QWEN_FLEET_RUNNER_IMAGE") or RUNNER_IMAGE,
            namespaces=namespaces,
            resync_seconds=_int("QWEN_FLEET_RESYNC_SECONDS", 300),
            workers=max(1, _int("QWEN_FLEET_WORKERS", 16)),
            metrics_port=_int("QWEN_FLEET_METRICS_PORT", 8080),
            liveness_port=_int("QWEN_FLEET_LIVENESS_PORT", 8081),
            log_level=os.environ.get("QWEN_FLEET_LOG_LEVEL", "INFO").upper(),
            lease_namespace=os.environ.get("QWEN_FLEET_LEASE_NAMESPACE", "").strip(),
            lease_name=os.environ.get("QWEN_FLEET_LEASE_NAME") or "qwen-fleet-operator",
            identity=os.environ.get("QWEN_FLEET_IDENTITY") or f"{socket.gethostname()}_{os.getpid()}",
            lease_duration_seconds=_float("QWEN_FLEET_LEASE_DURATION_SECONDS", 15.0),
            lease_renew_deadline_seconds=_float("QWEN_FLEET_LEASE_RENEW_DEADLINE_SECONDS", 10.0),
            lease_retry_seconds=_float("QWEN_FLEET_LEASE_RETRY_SECONDS", 2.0),
            webhook_port=_int("QWEN_FLEET_WEBHOOK_PORT", 0),
            webhook_cert_dir=os.environ.get("QWEN_FLEET_WEBHOOK_CERT_DIR", "/etc/qwen-fleet/webhook"),
            guardrails=Guardrails.from_json(os.environ.get("QWEN_FLEET_GUARDRAILS", "")),
        )

    @property
    def leader_election(self) -> bool:
        return bool(self.lease_namespace)
