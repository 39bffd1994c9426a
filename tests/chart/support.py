"""Helpers for the chart tests: helm, a control plane that audits the chart's identity, ServiceAccount tokens.

helm is the cached binary (hack/build-binaries.sh, `locate().helm`); every call runs with its own
HELM_CONFIG_HOME/HELM_CACHE_HOME/HELM_DATA_HOME under the test's temporary directory, so a user's helm
repositories and plugins never leak in.
"""

from __future__ import annotations

import functools
import json
import os
import subprocess
import tempfile
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import yaml

from qwen_fleet_dev.binaries import locate
from qwen_fleet_dev.cluster import LocalCluster

ROOT = Path(__file__).resolve().parents[2]
CHART = ROOT / "charts" / "qwen-fleet"
GENERATED_CRD = ROOT / "crds" / "qwenfleet.io_qweninferences.yaml"
CHART_CRD = CHART / "files" / "crds" / "qwenfleet.io_qweninferences.yaml"

# Every optional feature of the chart on.
ALL_FEATURES: dict[str, Any] = {
    "metrics": {"service": {"enabled": True}, "serviceMonitor": {"enabled": True, "labels": {"release": "prom"}},
                "adapterRules": {"enabled": True}},
    "grafanaDashboard": {"enabled": True, "annotations": {"grafana_folder": "LLM"}},
    "prometheusRule": {"enabled": True, "labels": {"release": "prom"}},
}

# Every values combination the chart tests render, by name: the dry-run on the real apiserver
# (test_chart_cluster.py) and the offline validator of `make lint` (hack/validate-manifests.py) check each.
VALUES_CASES: dict[str, dict[str, Any]] = {
    "defaults": {},
    "all-features": ALL_FEATURES,
    "namespaced": {**ALL_FEATURES, "watchNamespaces": ["dry-team-a", "dry-team-b"]},
    "webhook": {**ALL_FEATURES, "webhook": {"enabled": True}},
    "webhook-cert-manager": {**ALL_FEATURES, "webhook": {"enabled": True, "certManager": {"enabled": True}}},
    "webhook-cluster-issuer": {"webhook": {"enabled": True, "certManager": {"enabled": True, "issuerRef": {
        "name": "corp-ca", "kind": "ClusterIssuer", "group": "cert-manager.io"}}}},
    "no-leader-election": {"leaderElection": {"enabled": False}, "replicaCount": 1},
    "own-service-account": {"rbac": {"create": False}, "serviceAccount": {"create": False, "name": "mine"}},
    "dashboard-elsewhere": {"grafanaDashboard": {"enabled": True, "namespace": "dry-grafana"}},
    "crds-not-kept": {"crds": {"keep": False}},
    "no-crds": {"crds": {"install": False}},
}


# libyaml's loader when PyYAML has it: the rendered CRD alone is 48 kB.
_LOADER = getattr(yaml, "CSafeLoader", yaml.SafeLoader)


class HelmError(subprocess.CalledProcessError):
    def __str__(self) -> str:
        return f"helm {' '.join(map(str, self.cmd[1:]))} failed ({self.returncode}):\n{self.stderr}"


# Removed when the interpreter exits (TemporaryDirectory's finalizer).
_SCRATCH = tempfile.TemporaryDirectory(prefix="qf-chart-tests-")
_HELM_HOME = Path(_SCRATCH.name) / "helm"


def helm(*args: str | Path, kubeconfig: Path | None = None, check: bool = True,
         timeout: float = 180) -> subprocess.CompletedProcess[str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith("HELM_")}
    env |= {"HELM_CONFIG_HOME": str(_HELM_HOME / "config"), "HELM_CACHE_HOME": str(_HELM_HOME / "cache"),
            "HELM_DATA_HOME": str(_HELM_HOME / "data")}
    if kubeconfig is not None:
        env["KUBECONFIG"] = str(kubeconfig)
    argv = [str(locate().helm), *map(str, args)]
    result = subprocess.run(argv, check=False, capture_output=True, text=True, env=env, timeout=timeout)
    if check and result.returncode != 0:
        raise HelmError(result.returncode, argv, result.stdout, result.stderr)
    return result


def values_file(values: Mapping[str, Any]) -> Path:
    fd, name = tempfile.mkstemp(suffix=".yaml", prefix="values-", dir=_SCRATCH.name)
    with os.fdopen(fd, "w") as out:
        yaml.safe_dump(dict(values), out)
    return Path(name)


def template_text(values: Mapping[str, Any] | None = None, *extra: str, chart: Path = CHART,
                  release: str = "qf", namespace: str = "qwen-fleet-system") -> str:
    """`helm template` output; the same arguments render once per session (helm takes ~0.3 s a call)."""
    return _template_text(json.dumps(values or {}, sort_keys=True), extra, str(chart), release, namespace)


@functools.lru_cache(maxsize=64)
def _template_text(values_json: str, extra: tuple[str, ...], chart: str, release: str, namespace: str) -> str:
    args: list[str | Path] = ["template", release, chart, "--namespace", namespace, *extra]
    values = json.loads(values_json)
    if values:
        args += ["--values", values_file(values)]
    return helm(*args).stdout


def template(values: Mapping[str, Any] | None = None, *extra: str, chart: Path = CHART,
             release: str = "qf", namespace: str = "qwen-fleet-system") -> list[dict[str, Any]]:
    """`helm template` output as fresh objects (empty documents dropped)."""
    out = template_text(values, *extra, chart=chart, release=release, namespace=namespace)
    return [doc for doc in yaml.load_all(out, Loader=_LOADER) if doc]


def by_kind(docs: Iterable[dict[str, Any]], kind: str) -> list[dict[str, Any]]:
    return [d for d in docs if d.get("kind") == kind]


def one(docs: Iterable[dict[str, Any]], kind: str, name_suffix: str = "") -> dict[str, Any]:
    found = [d for d in by_kind(docs, kind) if d["metadata"]["name"].endswith(name_suffix)]
    assert len(found) == 1, f"expected one {kind}, got {[d['metadata']['name'] for d in found]}"
    return found[0]


# --- a control plane that records every request of ServiceAccounts -----------------------------------------

# Metadata of every request by any ServiceAccount (the controller-manager and scheduler run with the admin
# kubeconfig, so the only ServiceAccounts that talk are the ones a test starts), plus the suite's usual rule.
_AUDIT_ALL_SERVICE_ACCOUNTS = """\
apiVersion: audit.k8s.io/v1
kind: Policy
omitStages: [RequestReceived]
rules:
- level: Metadata
  userGroups: ["system:serviceaccounts"]
- level: None
"""


class AuditedCluster(LocalCluster):
    """A LocalCluster that audits every ServiceAccount request (reads included) and, like OpenShift, enforces
    owner-reference permissions (OwnerReferencesPermissionEnforcement): the chart's RBAC must hold there too."""

    def _prepare_files(self) -> None:
        super()._prepare_files()
        (self.workdir / "audit-policy.yaml").write_text(_AUDIT_ALL_SERVICE_ACCOUNTS)

    def _apiserver_argv(self) -> list[str]:
        return [*super()._apiserver_argv(), "--enable-admission-plugins=OwnerReferencesPermissionEnforcement"]


@dataclass(frozen=True, order=True)
class Request:
    verb: str
    group: str
    resource: str
    subresource: str
    namespace: str

    @property
    def namespaced(self) -> bool:
        return bool(self.namespace)

    def __str__(self) -> str:
        res = self.resource + (f"/{self.subresource}" if self.subresource else "")
        return f"{self.verb} {res}{'.' + self.group if self.group else ''}{'' if self.namespaced else ' (cluster)'}"


def _audit_entries(cluster: LocalCluster, username: str) -> list[dict[str, Any]]:
    out = []
    for line in cluster.audit_log.read_text().splitlines():
        try:
            entry = json.loads(line)
        except ValueError:
            continue
        if entry.get("user", {}).get("username") == username:
            out.append(entry)
    return out


def audited_requests(cluster: LocalCluster, username: str) -> list[Request]:
    """The resource requests ``username`` made (non-resource URLs such as discovery are left out)."""
    return [Request(e["verb"], ref.get("apiGroup", ""), ref.get("resource", ""), ref.get("subresource", ""),
                    ref.get("namespace", ""))
            for e in _audit_entries(cluster, username) if (ref := e.get("objectRef"))]


# OwnerReferencesPermissionEnforcement answers 403 while its REST mapper has not yet seen a kind created
# seconds before (the CRD, here): discovery lag, not a missing permission. The operator retries and succeeds.
_NOT_RBAC = "cannot set blockOwnerDeletion in this case because cannot find RESTMapping"


def refused_requests(cluster: LocalCluster, username: str) -> list[str]:
    """Requests of ``username`` that RBAC refused (403 Forbidden), as "VERB URI: reason"."""
    out = []
    for entry in _audit_entries(cluster, username):
        status = entry.get("responseStatus") or {}
        if status.get("code") == 403 and _NOT_RBAC not in status.get("message", ""):
            out.append(f"{entry['verb']} {entry.get('requestURI')}: {status.get('message', '')}")
    return out


def service_account_kubeconfig(cluster: LocalCluster, namespace: str, name: str, path: Path,
                               duration: str = "2h") -> Path:
    """A kubeconfig that authenticates as the ServiceAccount (a bound token from the TokenRequest API)."""
    token = cluster.kubectl("create", "token", name, "-n", namespace, f"--duration={duration}").stdout.strip()
    config = yaml.safe_load(cluster.kubeconfig.read_text())
    user = f"system:serviceaccount:{namespace}:{name}"
    config["users"] = [{"name": user, "user": {"token": token}}]
    for ctx in config["contexts"]:
        ctx["context"]["user"] = user
    path.write_text(yaml.safe_dump(config, sort_keys=False))
    path.chmod(0o600)
    return path


def can_i(cluster: LocalCluster, user: str, *args: str) -> bool:
    result = cluster.kubectl("auth", "can-i", *args, f"--as={user}", check=False)
    answer = result.stdout.strip()
    if answer not in ("yes", "no"):
        raise AssertionError(f"kubectl auth can-i {' '.join(args)}: {result.stdout}{result.stderr}")
    return answer == "yes"


def rbac_rows(cluster: LocalCluster, user: str, namespace: str | None = None) -> list[tuple[str, str, str]]:
    """`kubectl auth can-i --list` as (resource, non-resource URL, verbs) rows."""
    args = ["auth", "can-i", "--list", f"--as={user}", "--no-headers"]
    args += ["-n", namespace] if namespace else []
    out = cluster.kubectl(*args).stdout
    rows = []
    for line in out.splitlines():
        # Columns: Resources, Non-Resource URLs, Resource Names, Verbs; empty lists print as [].
        parts = line.split()
        if not parts:
            continue
        if parts[0].startswith("["):  # a non-resource row: no resource column
            rows.append(("", parts[0], " ".join(parts[2:])))
        else:
            rows.append((parts[0], parts[1], " ".join(parts[3:])))
    return rows


def objects(cluster: LocalCluster, *args: str) -> list[dict[str, Any]]:
    return list(json.loads(cluster.kubectl("get", *args, "-o", "json").stdout)["items"])


def load_all(paths: Sequence[Path]) -> list[dict[str, Any]]:
    return [d for p in paths for d in yaml.safe_load_all(p.read_text()) if d]


# --- GitOps health: Argo CD's Lua check and kstatus ---------------------------------------------------------

ARGOCD_HEALTH_LUA = ROOT / "docs" / "argocd-health.lua"


def _to_lua(lua: Any, value: Any) -> Any:
    if isinstance(value, Mapping):
        return lua.table_from({k: _to_lua(lua, v) for k, v in value.items() if v is not None})
    if isinstance(value, list):
        return lua.table_from([_to_lua(lua, v) for v in value])
    return value


def argocd_health(obj: Mapping[str, Any]) -> dict[str, str]:
    """Run docs/argocd-health.lua as Argo CD does: Lua 5.1 (gopher-lua's dialect), the object as global `obj`."""
    from lupa import lua51

    lua = lua51.LuaRuntime(register_eval=False, register_builtins=False)
    lua.globals().obj = _to_lua(lua, obj)
    result = lua.execute(ARGOCD_HEALTH_LUA.read_text())
    return {"status": str(result["status"]), "message": str(result["message"])}


def kstatus(binary: Path, obj: Mapping[str, Any]) -> dict[str, str]:
    """sigs.k8s.io/cli-utils' kstatus verdict (Current, InProgress, Failed, ...) for one object."""
    out = subprocess.run([str(binary)], input=json.dumps(obj), capture_output=True, text=True, check=False,
                         timeout=30)
    if out.returncode != 0:
        raise RuntimeError(f"{binary} failed ({out.returncode}): {out.stderr.strip()}")
    return dict(json.loads(out.stdout))
