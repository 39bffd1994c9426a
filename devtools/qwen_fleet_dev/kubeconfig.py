"""Kubeconfig files for the local cluster's users: a bearer token, and the apiserver's self-signed
certificate accepted as is (it is made fresh by each apiserver)."""

from __future__ import annotations

from pathlib import Path

import yaml


def write_kubeconfig(path: Path, server: str, user: str, token: str, namespace: str | None = None) -> None:
    context: dict[str, str] = {"cluster": "qwen-fleet-local", "user": user}
    if namespace:
        context["namespace"] = namespace
    config = {
        "apiVersion": "v1",
        "kind": "Config",
        "clusters": [{"name": "qwen-fleet-local", "cluster": {"server": server, "insecure-skip-tls-verify": True}}],
        "users": [{"name": user, "user": {"token": token}}],
        "contexts": [{"name": "qwen-fleet-local", "context": context}],
        "current-context": "qwen-fleet-local",
    }
    path.write_text(yaml.safe_dump(config, sort_keys=False))
    path.chmod(0o600)
