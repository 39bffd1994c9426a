"""Bad start-up conditions, through the real CLI against the real cluster: the operator says what is wrong in
one line on stderr and exits 2, without a traceback. Malformed or unusable kubeconfigs, an unreachable
apiserver, the CRD not installed, RBAC permissions missing, the metrics port taken (it was a start-up step inside
kopf that failed, was retried 60 s later and failed for good on a collector registered twice).
"""

from __future__ import annotations

import json
import socket
from pathlib import Path

import pytest
import yaml

from qwen_fleet.reconcile.run import REQUIRED
from qwen_fleet_dev.cluster import LocalCluster, free_port
from tests.chaos.helpers import TRACEBACK, CliRun, record, run_operator_cli

pytestmark = pytest.mark.cluster


def assert_one_line(run: CliRun, *words: str) -> None:
    """Exit 2, exactly one non-empty stderr line, prefixed, naming the problem; nothing else printed."""
    shown = f"exit {run.returncode}\nstderr:\n{run.stderr}\nstdout:\n{run.stdout}"
    assert run.returncode == 2, shown
    assert TRACEBACK not in run.stderr + run.stdout, shown
    assert len(run.lines) == 1, shown
    assert run.lines[0].startswith("qwen-fleet: "), shown
    for word in words:
        assert word in run.lines[0], shown
    assert run.stdout.strip() == "", shown


def _kubeconfig_for(cluster: LocalCluster, token: str, path: Path, server: str | None = None) -> Path:
    config = yaml.safe_load(cluster.kubeconfig.read_text())
    config["users"][0]["user"] = {"token": token}
    if server:
        config["clusters"][0]["cluster"]["server"] = server
    path.write_text(yaml.safe_dump(config))
    return path


BROKEN_KUBECONFIGS = {
    # (file content or None for "no such file", words the one line must carry)
    "not-yaml": ("apiVersion: v1\nclusters: [unclosed\n  - {{{\n", ["cannot load Kubernetes credentials"]),
    "wrong-shape": ("apiVersion: v1\nkind: Config\nclusters: 7\ncontexts: nope\n",
                    ["cannot load Kubernetes credentials"]),
    "no-current-context": ("apiVersion: v1\nkind: Config\nclusters: []\ncontexts: []\nusers: []\n",
                           ["cannot load Kubernetes credentials"]),
    "empty-file": ("", ["cannot load Kubernetes credentials"]),
    "missing-file": (None, ["cannot load Kubernetes credentials"]),
}


@pytest.mark.parametrize("case", sorted(BROKEN_KUBECONFIGS))
def test_malformed_kubeconfig_is_one_line(tmp_path: Path, case: str) -> None:
    content, words = BROKEN_KUBECONFIGS[case]
    path = tmp_path / "kubeconfig"
    if content is not None:
        path.write_text(content)
    run = run_operator_cli(path)
    assert_one_line(run, *words, str(path))
    record(f"startup-{case}", {"line": run.lines[0], "exit": run.returncode})


def test_unreachable_apiserver_is_one_line(chaos_cluster: LocalCluster, tmp_path: Path) -> None:
    port = free_port()  # nothing listens there
    path = _kubeconfig_for(chaos_cluster, chaos_cluster.admin_token, tmp_path / "kubeconfig",
                           server=f"https://127.0.0.1:{port}")
    run = run_operator_cli(path)
    assert_one_line(run, "cannot reach the Kubernetes API", f"127.0.0.1:{port}")
    record("startup-unreachable", {"line": run.lines[0], "seconds": round(run.seconds, 1)})


def test_wrong_token_is_one_line(chaos_cluster: LocalCluster, tmp_path: Path) -> None:
    run = run_operator_cli(_kubeconfig_for(chaos_cluster, "not-a-token", tmp_path / "kubeconfig"))
    assert_one_line(run, "refused the credentials", "401")
    record("startup-wrong-token", {"line": run.lines[0]})


def test_missing_crd_is_one_line(missing_crd_run: CliRun) -> None:
    """Taken by the fixture against the fresh cluster, before the CRD was installed (see conftest)."""
    assert_one_line(missing_crd_run, "QwenInference CRD", "not installed", "kubectl apply -f")
    record("startup-missing-crd", {"line": missing_crd_run.lines[0]})


def _service_account_kubeconfig(cluster: LocalCluster, ns: str, sa: str, path: Path) -> Path:
    cluster.kubectl("create", "serviceaccount", sa, "-n", ns)
    token = cluster.kubectl("create", "token", sa, "-n", ns, "--duration=1h").stdout.strip()
    return _kubeconfig_for(cluster, token, path)


def _cluster_role(name: str, grants: list[tuple[str, str, str, str]]) -> dict[str, object]:
    rules = [{"apiGroups": [group], "resources": [f"{resource}/{sub}" if sub else resource], "verbs": [verb]}
             for verb, group, resource, sub in grants]
    return {"apiVersion": "rbac.authorization.k8s.io/v1", "kind": "ClusterRole", "metadata": {"name": name},
            "rules": rules}


def test_missing_rbac_permission_is_named_in_one_line(chaos_cluster: LocalCluster, chaos_namespace: str,
                                                      tmp_path: Path) -> None:
    # Everything the operator needs except two permissions: the line must name exactly those two.
    withheld = [("create", "", "events", ""), ("patch", "qwenfleet.io", "qweninferences", "status")]
    grants = [g for g in REQUIRED if g not in withheld]
    assert len(grants) == len(REQUIRED) - 2
    role = f"{chaos_namespace}-almost"
    chaos_cluster.kubectl("apply", "-f", "-", input=json.dumps(_cluster_role(role, grants)))
    try:
        path = _service_account_kubeconfig(chaos_cluster, chaos_namespace, "almost", tmp_path / "kubeconfig")
        chaos_cluster.kubectl("create", "clusterrolebinding", role, f"--clusterrole={role}",
                              f"--serviceaccount={chaos_namespace}:almost")
        run = run_operator_cli(path)
        assert_one_line(run, "missing RBAC permissions: ", "create events", "patch qweninferences/status")
        listed = run.lines[0].split("missing RBAC permissions: ", 1)[1].split(" (", 1)[0].split(", ")
        assert sorted(listed) == ["create events", "patch qweninferences/status.qwenfleet.io"], run.lines[0]

        # No permission at all: still one line, every requirement named.
        bare = _service_account_kubeconfig(chaos_cluster, chaos_namespace, "nothing", tmp_path / "bare")
        run_bare = run_operator_cli(bare)
        assert_one_line(run_bare, "missing RBAC permissions: ")
        assert run_bare.lines[0].count(", ") == len(REQUIRED) - 1, run_bare.lines[0]
    finally:
        chaos_cluster.kubectl("delete", "clusterrolebinding,clusterrole", role, "--ignore-not-found",
                              check=False)
    record("startup-missing-rbac", {"line": run.lines[0], "no_rbac_line_chars": len(run_bare.lines[0])})


def test_taken_metrics_port_is_one_line(chaos_cluster: LocalCluster) -> None:
    with socket.socket() as holder:
        holder.bind(("0.0.0.0", 0))
        holder.listen()
        port = holder.getsockname()[1]
        run = run_operator_cli(chaos_cluster.kubeconfig, env={"QWEN_FLEET_METRICS_PORT": str(port)})
    assert_one_line(run, f"cannot serve metrics on port {port}", "Address already in use")
    record("startup-metrics-port-taken", {"line": run.lines[0], "seconds": round(run.seconds, 1)})
