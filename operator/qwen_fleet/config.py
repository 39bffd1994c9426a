"""Operator configuration: environment variables, read once at startup (the chart sets them from values)."""

from __future__ import annotations

import os
from dataclasses import dataclass, field

from qwen_fleet import versions

FIELD_MANAGER = "qwen-fleet"
MANAGED_BY = "qwen-fleet"


def _int(name: str, default: int) -> int:
    raw = os.environ.get(name)
    if raw is None or raw == "":
        return default
    try:
        return int(raw)
    except ValueError:
        raise SystemExit(f"qwen-fleet: {name}={raw!r} is not an integer") from None


@dataclass(frozen=True)
class OperatorConfig:
    default_image: str = versions.VLLM_IMAGE
    namespaces: tuple[str, ...] = ()  # empty: all namespaces
    resync_seconds: int = 300  # level-based safety net on top of watch events
    workers: int = 16  # concurrent reconciles; the API client has twice as many threads and connections
    metrics_port: int = 8080
    liveness_port: int = 8081
    log_level: str = "INFO"
    extra_labels: dict[str, str] = field(default_factory=dict)

    @classmethod
    def from_env(cls) -> OperatorConfig:
        namespaces = tuple(n.strip() for n in os.environ.get("QWEN_FLEET_NAMESPACES", "").split(",") if n.strip())
        return cls(
            default_image=os.environ.get("QWEN_FLEET_DEFAULT_IMAGE") or versions.VLLM_IMAGE,
            namespaces=namespaces,
            resync_seconds=_int("QWEN_FLEET_RESYNC_SECONDS", 300),
            workers=max(1, _int("QWEN_FLEET_WORKERS", 16)),
            metrics_port=_int("QWEN_FLEET_METRICS_PORT", 8080),
            liveness_port=_int("QWEN_FLEET_LIVENESS_PORT", 8081),
            log_level=os.environ.get("QWEN_FLEET_LOG_LEVEL", "INFO").upper(),
        )
