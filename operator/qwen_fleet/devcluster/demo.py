"""``make run``: the main job on an embedded cluster, end to end, with everything it started stopped on Ctrl-C.

1. a cluster: the one KUBECONFIG names if it answers, else the local control plane with fake GPU nodes;
2. the CRD and the operator's RBAC (ServiceAccount, ClusterRole, binding) from the Helm chart;
3. the operator, as its own process, with that ServiceAccount's token (the chart's least privilege, for real);
4. an example QwenInference, waited for until Ready; then its status and children.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

import yaml

from qwen_fleet.devcluster import binaries
from qwen_fleet.devcluster.cluster import LocalCluster, free_port
from qwen_fleet.devcluster.processes import _die_with_parent, wait_for

ROOT = binaries.repo_root() or Path.cwd()
CRD = ROOT / "crds" / "qwenfleet.io_qweninferences.yaml"
CHART = ROOT / "charts" / "qwen-fleet"
NAMESPACE = "qwen-fleet-system"
SERVICE_ACCOUNT = "qwen-fleet"


def say(message: str) -> None:
    print(f"==> {message}", flush=True)


class Kubectl:
    def __init__(self, kubectl: Path, kubeconfig: Path) -> None:
        self.kubectl, self.kubeconfig = kubectl, kubeconfig

    def __call__(self, *args: str, input: str | None = None, check: bool = True) -> str:
        result = subprocess.run([str(self.kubectl), f"--kubeconfig={self.kubeconfig}", *args], input=input,
                                capture_output=True, text=True, timeout=300)
        if check and result.returncode != 0:
            raise RuntimeError(f"kubectl {' '.join(args)}: {result.stderr.strip()}")
        return result.stdout


def _rbac_manifests(helm: Path) -> str:
    """The chart's ServiceAccount and RBAC only (the operator runs here as a local process, not a pod)."""
    out = subprocess.run([str(helm), "template", "qwen-fleet", str(CHART), "--namespace", NAMESPACE,
                          "--set", "crds.install=false"], capture_output=True, text=True, check=True).stdout
    keep = {"ServiceAccount", "ClusterRole", "ClusterRoleBinding", "Role", "RoleBinding"}
    docs = [d for d in yaml.safe_load_all(out) if d and d.get("kind") in keep]
    return yaml.safe_dump_all(docs)


def _operator_kubeconfig(kubectl: Kubectl, admin: Path, directory: Path) -> Path:
    token = kubectl("create", "token", SERVICE_ACCOUNT, "-n", NAMESPACE, "--duration=24h").strip()
    config = yaml.safe_load(admin.read_text())
    config["users"] = [{"name": "qwen-fleet-operator", "user": {"token": token}}]
    for ctx in config["contexts"]:
        ctx["context"]["user"] = "qwen-fleet-operator"
    path = directory / "operator-sa.kubeconfig"
    path.write_text(yaml.safe_dump(config))
    path.chmod(0o600)
    return path


def _start_operator(kubeconfig: Path, log: Path) -> subprocess.Popen[bytes]:
    env = {**os.environ, "KUBECONFIG": str(kubeconfig), "PYTHONUNBUFFERED": "1",
           "QWEN_FLEET_METRICS_PORT": str(free_port()), "QWEN_FLEET_LIVENESS_PORT": str(free_port())}
    with log.open("ab") as out:
        return subprocess.Popen([sys.executable, "-m", "qwen_fleet.cli", "operator"], env=env, stdout=out,
                                stderr=subprocess.STDOUT, preexec_fn=_die_with_parent)


def _existing_cluster() -> Path | None:
    path = os.environ.get("KUBECONFIG")
    if not path or not Path(path).exists():
        return None
    return Path(path)


def _show(kubectl: Kubectl, name: str) -> None:
    print(kubectl("get", "qwi", name, "-n", "default"))
    print(kubectl("get", "deployments,services,hpa,pdb,pods", "-n", "default", "-l",
                  f"qwenfleet.io/inference={name}", "-o", "wide"))
    obj: dict[str, Any] = json.loads(kubectl("get", "qwi", name, "-n", "default", "-o", "json"))
    for cond in obj.get("status", {}).get("conditions", []):
        print(f"  {cond['type']:<14} {cond['status']:<6} {cond['reason']}: {cond['message']}")
    status = obj.get("status", {})
    print(f"  endpoint: {status.get('endpoint')}")
    cap = status.get("capacity") or {}
    if cap.get("kvCacheTokens") is not None:
        print(f"  capacity per replica: {cap['weightsGiBPerGpu']} GiB weights and {cap['kvCacheGiBPerGpu']} GiB KV "
              f"cache per GPU = {cap['kvCacheTokens']:,} tokens, {cap['maxConcurrentSequences']} sequences of "
              f"{cap['maxModelLen']:,} tokens at once")
    for warning in cap.get("warnings", []):
        print(f"  planner: {warning}")


def run_demo(example: Path, keep: bool = True) -> int:
    if not example.exists():
        print(f"qwen-fleet: example {example} not found", file=sys.stderr)
        return 1
    bins = binaries.ensure()
    workdir = Path(tempfile.mkdtemp(prefix="qwen-fleet-run-"))
    cluster: LocalCluster | None = None
    operator: subprocess.Popen[bytes] | None = None
    began = time.monotonic()
    try:
        kubeconfig = _existing_cluster()
        if kubeconfig is None:
            say("starting the local control plane (etcd, kube-apiserver, controller-manager, scheduler, kwok)")
            cluster = LocalCluster(workdir=workdir / "cluster").start()
            kubeconfig = cluster.kubeconfig
            say(f"cluster up in {cluster.startup_seconds:.1f}s; export KUBECONFIG={kubeconfig}")
        kubectl = Kubectl(bins.kubectl, kubeconfig)
        print(kubectl("get", "nodes", "-L", "nvidia.com/gpu.product,nvidia.com/gpu.count"))
        say("installing the QwenInference CRD and the operator's RBAC (from the Helm chart)")
        kubectl("apply", "--server-side", "-f", str(CRD))
        query = "jsonpath={.status.conditions[?(@.type=='Established')].status}"
        wait_for("the CRD Established", lambda: kubectl("get", "crd/qweninferences.qwenfleet.io", "-o", query,
                                                        check=False) == "True", 60)
        kubectl("create", "namespace", NAMESPACE, check=False)
        kubectl("apply", "-f", "-", input=_rbac_manifests(bins.helm))
        op_kubeconfig = _operator_kubeconfig(kubectl, kubeconfig, workdir)
        log = workdir / "operator.log"
        say(f"starting the operator as ServiceAccount {NAMESPACE}/{SERVICE_ACCOUNT} (log: {log})")
        operator = _start_operator(op_kubeconfig, log)
        doc = yaml.safe_load(example.read_text())
        name = doc["metadata"]["name"]
        say(f"applying {example}")
        kubectl("apply", "-n", "default", "-f", str(example))
        result = subprocess.run([str(bins.kubectl), f"--kubeconfig={kubeconfig}", "wait", "--for=condition=Ready",
                                 f"qwi/{name}", "-n", "default", "--timeout=180s"], capture_output=True, text=True)
        if operator.poll() is not None:
            print(log.read_text()[-3000:], file=sys.stderr)
            print("qwen-fleet: the operator exited", file=sys.stderr)
            return 1
        if result.returncode != 0:
            _show(kubectl, name)
            print(f"qwen-fleet: {name} did not become Ready: {result.stderr.strip()}", file=sys.stderr)
            return 1
        say(f"{name} is Ready ({time.monotonic() - began:.1f}s since start)")
        _show(kubectl, name)
        if keep:
            say(f"running; try: KUBECONFIG={kubeconfig} kubectl get qwi -A. Ctrl-C stops everything.")
            signal.pause()
        return 0
    except KeyboardInterrupt:
        return 0
    finally:
        if operator is not None and operator.poll() is None:
            operator.terminate()
            try:
                operator.wait(timeout=15)
            except subprocess.TimeoutExpired:
                operator.kill()
        if cluster is not None:
            cluster.stop()
        say("stopped everything this run started")
