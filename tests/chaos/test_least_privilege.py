"""Least privilege, with the Helm chart's own RBAC (charts/qwen-fleet, rendered by `helm template`):
`kubectl auth can-i --list` for its ServiceAccount shows no wildcard and no Secret access; the operator runs
under exactly that identity; and the Hugging Face token is referenced, never copied: after a fleet with a
tokenSecretRef is Ready, the token value is nowhere in the operator's log, the Events, the resource or the
objects it rendered (the Deployment holds a secretKeyRef).
"""

from __future__ import annotations

import json
import subprocess
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import yaml

from qwen_fleet_dev import binaries
from qwen_fleet_dev.cluster import LocalCluster
from tests.chaos.helpers import QWI_PATH, admin, condition, get_or_none, qwi, record, small_spec
from tests.support.kube import wait_until
from tests.support.operator_process import OperatorProcess

pytestmark = [pytest.mark.cluster, pytest.mark.slow]

ROOT = Path(__file__).resolve().parents[2]
CHART = ROOT / "charts" / "qwen-fleet"
RBAC_KINDS = {"ServiceAccount", "ClusterRole", "ClusterRoleBinding", "Role", "RoleBinding"}


@pytest.fixture(scope="module")
def chart_identity(chaos_cluster: LocalCluster) -> Iterator[tuple[str, str]]:
    """The chart's ServiceAccount and RBAC objects, installed from `helm template`; (namespace, account)."""
    release, ns = f"qf-{uuid.uuid4().hex[:6]}", f"qf-system-{uuid.uuid4().hex[:6]}"
    helm = binaries.locate().helm
    rendered = subprocess.run([str(helm), "template", release, str(CHART), "--namespace", ns],
                              capture_output=True, text=True, check=False, timeout=120)
    assert rendered.returncode == 0, rendered.stderr
    docs = [d for d in yaml.safe_load_all(rendered.stdout) if d and d.get("kind") in RBAC_KINDS]
    accounts = [d["metadata"]["name"] for d in docs if d["kind"] == "ServiceAccount"]
    assert len(accounts) == 1, f"the chart renders {len(accounts)} ServiceAccounts"
    for doc in docs:  # `helm install` would put namespaced objects into the release namespace
        if doc["kind"] in ("ServiceAccount", "Role", "RoleBinding"):
            doc["metadata"].setdefault("namespace", ns)
    chaos_cluster.kubectl("create", "namespace", ns)
    chaos_cluster.kubectl("apply", "-f", "-", input=json.dumps({"apiVersion": "v1", "kind": "List", "items": docs}))
    try:
        yield ns, accounts[0]
    finally:
        chaos_cluster.kubectl("delete", "-f", "-", "--ignore-not-found", "--wait=false", check=False,
                              input=json.dumps({"apiVersion": "v1", "kind": "List", "items": docs}))
        chaos_cluster.kubectl("delete", "namespace", ns, "--wait=false", check=False)


def can_i_list(cluster: LocalCluster, user: str, ns: str) -> list[dict[str, str]]:
    """`kubectl auth can-i --list` as rows {resources, non_resource_urls, resource_names, verbs}."""
    lines = cluster.kubectl("auth", "can-i", "--list", f"--as={user}", "-n", ns).stdout.splitlines()
    header = lines[0]
    # A table with empty cells: cut each line at the columns' offsets in the header.
    starts = [header.index(title) for title in ("Resources", "Non-Resource URLs", "Resource Names", "Verbs")]
    keys = ("resources", "non_resource_urls", "resource_names", "verbs")
    rows = []
    for line in lines[1:]:
        cells = [line[a:b].strip() for a, b in zip(starts, [*starts[1:], len(line) + 1], strict=True)]
        rows.append(dict(zip(keys, cells, strict=True)))
    return rows


def test_chart_service_account_has_no_wildcards_and_no_secret_access(
        chaos_cluster: LocalCluster, chart_identity: tuple[str, str], chaos_namespace: str) -> None:
    ns, account = chart_identity
    user = f"system:serviceaccount:{ns}:{account}"
    # What every authenticated identity may do anyway (discovery, self reviews): the built-in roles grant
    # it, not the chart. A ServiceAccount without any binding shows exactly that.
    chaos_cluster.kubectl("create", "serviceaccount", "baseline", "-n", chaos_namespace)
    baseline = can_i_list(chaos_cluster, f"system:serviceaccount:{chaos_namespace}:baseline", chaos_namespace)
    listing = {where: can_i_list(chaos_cluster, user, where) for where in (ns, chaos_namespace)}
    granted = {where: [r for r in rows if r not in baseline] for where, rows in listing.items()}
    for where, rows in listing.items():
        for row in rows:
            assert "*" not in row["resources"] and "*" not in row["verbs"], (where, row)
            assert not row["resources"].startswith("secrets"), (where, row)
        for row in granted[where]:
            assert "*" not in json.dumps(row), (where, row)
    for verb in ("get", "list", "watch"):
        for where in (ns, chaos_namespace):
            answer = chaos_cluster.kubectl("auth", "can-i", verb, "secrets", f"--as={user}", "-n", where,
                                           check=False).stdout.strip()
            assert answer == "no", (verb, where, answer)
    record("least-privilege", {"service_account": user, "rules_granted_by_chart": [
        f"{r['resources']} {r['verbs']}" for r in granted[chaos_namespace]]})


def _kubeconfig(cluster: LocalCluster, ns: str, account: str, path: Path) -> Path:
    token = cluster.kubectl("create", "token", account, "-n", ns, "--duration=2h").stdout.strip()
    config = yaml.safe_load(cluster.kubeconfig.read_text())
    config["users"][0]["user"] = {"token": token}
    path.write_text(yaml.safe_dump(config))
    return path


def _all_text(rest: Any, ns: str, name: str) -> dict[str, str]:
    """Everything the operator produced for one fleet, as text to grep."""
    paths = {
        "QwenInference": f"{QWI_PATH.format(ns=ns)}/{name}",
        "Events": f"/api/v1/namespaces/{ns}/events",
        "Deployment": f"/apis/apps/v1/namespaces/{ns}/deployments/{name}",
        "ReplicaSets": f"/apis/apps/v1/namespaces/{ns}/replicasets",
        "Pods": f"/api/v1/namespaces/{ns}/pods",
        "Service": f"/api/v1/namespaces/{ns}/services/{name}",
        "ConfigMaps": f"/api/v1/namespaces/{ns}/configmaps",
    }
    return {what: json.dumps(rest.get(path)) for what, path in paths.items()}


def test_operator_under_chart_rbac_references_the_hf_token_and_never_copies_it(
        chaos_cluster: LocalCluster, chart_identity: tuple[str, str], chaos_operator: OperatorProcess,
        chaos_namespace: str, tmp_path: Path) -> None:
    ns, name = chaos_namespace, "gated"
    token = f"hf_{uuid.uuid4().hex}{uuid.uuid4().hex[:8]}"
    # Only the chart's identity runs an operator now: the fleet below is its work alone.
    chaos_operator.stop()
    least = OperatorProcess(chaos_cluster, tmp_path / "operator.log", env={"QWEN_FLEET_RESYNC_SECONDS": "10"},
                            kubeconfig=_kubeconfig(chaos_cluster, *chart_identity, tmp_path / "kubeconfig"))
    least.start()  # the start-up permission check passes: the chart grants what the operator needs
    try:
        rest = admin(chaos_cluster)
        rest.request("POST", f"/api/v1/namespaces/{ns}/secrets", {
            "apiVersion": "v1", "kind": "Secret", "metadata": {"name": "hf-token"}, "stringData": {"token": token}})
        spec = small_spec(64)
        spec["model"]["source"] = {"huggingFace": {"tokenSecretRef": {"name": "hf-token", "key": "token"}}}
        rest.request("POST", QWI_PATH.format(ns=ns), qwi(name, spec))
        wait_until("Ready under the chart's RBAC", lambda: condition(
            get_or_none(rest, f"{QWI_PATH.format(ns=ns)}/{name}"), "Ready").get("status") == "True", 120)
        texts = _all_text(rest, ns, name)
        texts["operator log"] = least.log.read_text(errors="replace")
        deployment = json.loads(texts["Deployment"])
    finally:
        least.stop()
    env = {e["name"]: e for e in deployment["spec"]["template"]["spec"]["containers"][0]["env"]}
    found = sorted(what for what, text in texts.items() if token in text)
    record("hf-token", {"searched": sorted(texts), "token_found_in": found,
                        "deployment_HF_TOKEN": env.get("HF_TOKEN"), "operator_log_lines": len(
                            texts["operator log"].splitlines())})
    assert env["HF_TOKEN"] == {"name": "HF_TOKEN", "valueFrom": {"secretKeyRef": {"name": "hf-token",
                                                                                  "key": "token"}}}
    assert found == [], f"the token value leaked into {found}"
    assert "Traceback" not in texts["operator log"]
