"""``make run``: the main job on an embedded cluster, end to end, with everything it started stopped on Ctrl-C.

1. a cluster: the one KUBECONFIG names if it answers, else the local control plane with fake GPU nodes;
2. the CRD and the operator's RBAC (ServiceAccount, ClusterRole, binding) from the Helm chart;
3. the operator, as its own process, with that ServiceAccount's token (the chart's least privilege, for real);
4. an example QwenInference, waited for until Ready; then its status and children. With ``--real-node``
   (``make run``), the cluster has a real node and the fleet is the tiny Qwen2 served for real by the vLLM CPU
   image (demo_serving.py): the demo ends with a chat completion the engine answered.
"""

from __future__ import annotations

import json
import os
import shutil
import signal
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

import yaml

from qwen_fleet_dev import binaries, demo_serving
from qwen_fleet_dev.cluster import LocalCluster, free_port
from qwen_fleet_dev.demo_text import DemoState, Node, closing_lines
from qwen_fleet_dev.processes import _die_with_parent, wait_for

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


def _wait_ready(bins: binaries.Binaries, kubeconfig: Path, name: str,
                timeout_s: int) -> subprocess.CompletedProcess[str]:
    return subprocess.run([str(bins.kubectl), f"--kubeconfig={kubeconfig}", "wait", "--for=condition=Ready",
                           f"qwi/{name}", "-n", "default", f"--timeout={timeout_s}s"], capture_output=True, text=True)


def _serve_example(kubectl: Kubectl, bins: binaries.Binaries, kubeconfig: Path, example: Path) -> str:
    """Apply the example (kwok's fake GPU nodes: Ready, nothing runs); returns its name."""
    name = str(yaml.safe_load(example.read_text())["metadata"]["name"])
    say(f"applying {example}")
    kubectl("apply", "-n", "default", "-f", str(example))
    result = _wait_ready(bins, kubeconfig, name, 180)
    if result.returncode != 0:
        _show(kubectl, name)
        raise DemoError(f"{name} did not become Ready: {result.stderr.strip()}")
    return name


def _serve_real(kubectl: Kubectl, bins: binaries.Binaries, cluster: LocalCluster, workdir: Path
                ) -> tuple[str, dict[str, Any]]:
    """The tiny model served for real on the real node; prints its first answer."""
    answer = demo_serving.serve_tiny_model(cluster, workdir)
    result = _wait_ready(bins, cluster.kubeconfig, demo_serving.NAME, 300)
    if result.returncode != 0:
        _show(kubectl, demo_serving.NAME)
        raise DemoError(f"{demo_serving.NAME} answered but is not Ready: {result.stderr.strip()}")
    _show(kubectl, demo_serving.NAME)
    say("a chat completion from the real vLLM engine, through the fleet's Service:")
    demo_serving.print_answer(answer)
    return demo_serving.NAME, answer


def _nodes(kubectl: Kubectl) -> tuple[Node, ...]:
    items = json.loads(kubectl("get", "nodes", "-o", "json"))["items"]
    out = []
    for node in items:
        labels = node["metadata"].get("labels") or {}
        gpus = (node.get("status", {}).get("capacity") or {}).get("nvidia.com/gpu", "")
        product = labels.get("nvidia.com/gpu.product", "")
        kind = "real" if labels.get("type") == "real" else "kwok"
        out.append(Node(node["metadata"]["name"], kind, f"{gpus}x {product}".strip() if gpus and gpus != "0" else ""))
    return tuple(out)


def _answer_text(answer: dict[str, Any] | None) -> str:
    try:
        return str(answer["choices"][0]["message"]["content"]) if answer else ""
    except (KeyError, IndexError, TypeError):
        return ""


def _demo_state(kubectl: Kubectl, kubeconfig: Path, operator: subprocess.Popen[bytes], log: Path, name: str,
                answer: dict[str, Any] | None, workdir: Path, own_cluster: bool) -> DemoState:
    """What runs where, read from the cluster, for the closing lines (demo_text.closing_lines)."""
    obj: dict[str, Any] = json.loads(kubectl("get", "qwi", name, "-n", "default", "-o", "json"))
    status = obj.get("status") or {}
    served = answer is not None
    return DemoState(
        kubeconfig=str(kubeconfig), kubectl=str(kubectl.kubectl),
        apiserver=str(yaml.safe_load(kubeconfig.read_text())["clusters"][0]["cluster"]["server"]),
        nodes=_nodes(kubectl), operator_pid=operator.pid, operator_identity=f"{NAMESPACE}/{SERVICE_ACCOUNT}",
        operator_log=str(log), namespace="default", fleet=name,
        ready_replicas=int(status.get("readyReplicas") or 0), replicas=int(status.get("replicas") or 0),
        service_url=demo_serving.service_url_of(kubectl("get", "service", name, "-n", "default", "-o", "json"))
        if served else "",
        served_model=str((answer or {}).get("model") or name), answer=_answer_text(answer), demo_pid=os.getpid(),
        logs_dir=str(workdir), own_cluster=own_cluster)


class DemoError(RuntimeError):
    pass


def _stop_on_signal(signum: int, frame: object) -> None:
    raise KeyboardInterrupt(signal.Signals(signum).name)


def run_demo(example: Path, keep: bool = True, real_node: bool = False) -> int:
    # Ctrl-C (SIGINT) and SIGTERM stop everything this run started. Said explicitly: a shell script that starts a
    # command in the background (`cmd &`, as CI runners and nohup wrappers do) starts it with SIGINT ignored,
    # and Python then installs no KeyboardInterrupt handler, so Ctrl-C or `kill -INT` would do nothing (two cold
    # runs of `make test` started that way hung here).
    signal.signal(signal.SIGINT, _stop_on_signal)
    signal.signal(signal.SIGTERM, _stop_on_signal)
    if not real_node and not example.exists():
        print(f"qwen-fleet: example {example} not found", file=sys.stderr)
        return 1
    bins = binaries.ensure(real_node=real_node)
    workdir = Path(tempfile.mkdtemp(prefix="qwen-fleet-run-"))
    cluster: LocalCluster | None = None
    operator: subprocess.Popen[bytes] | None = None
    began = time.monotonic()
    ok = False
    try:
        kubeconfig = None if real_node else _existing_cluster()  # a real node needs a cluster of our own
        if kubeconfig is None:
            say("starting the local control plane (etcd, kube-apiserver, controller-manager, scheduler, kwok"
                + (", a real node: containerd, kubelet, kube-proxy)" if real_node else ")"))
            cluster = LocalCluster(workdir=workdir / "cluster", real_node=real_node).start()
            kubeconfig = cluster.kubeconfig
            say(f"cluster up in {cluster.startup_seconds:.1f}s; export KUBECONFIG={kubeconfig}")
        kubectl = Kubectl(bins.kubectl, kubeconfig)
        print(kubectl("get", "nodes", "-L", "nvidia.com/gpu.product,nvidia.com/gpu.count"))
        log = workdir / "operator.log"
        operator = _install_and_start_operator(kubectl, bins, kubeconfig, workdir, log)
        answer: dict[str, Any] | None = None
        if cluster is not None and real_node:
            name, answer = _serve_real(kubectl, bins, cluster, workdir)
        else:
            name = _serve_example(kubectl, bins, kubeconfig, example)
            _show(kubectl, name)
        if operator.poll() is not None:
            print(log.read_text()[-3000:], file=sys.stderr)
            print("qwen-fleet: the operator exited", file=sys.stderr)
            return 1
        say(f"{name} is Ready ({time.monotonic() - began:.1f}s since start)")
        if keep:
            for line in closing_lines(_demo_state(kubectl, kubeconfig, operator, log, name, answer, workdir,
                                                   own_cluster=cluster is not None)):
                print(line, flush=True)
            # Not signal.pause(): a signal that lands after Python's last check for signals and before the
            # pause(2) call is handled only by the next one. A short sleep in a loop never misses it.
            while True:
                time.sleep(0.5)
        ok = True
        return 0
    except DemoError as exc:
        print(f"qwen-fleet: {exc}", file=sys.stderr)
        return 1
    except KeyboardInterrupt:
        ok = True
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
        if ok:
            shutil.rmtree(workdir, ignore_errors=True)
            say("stopped everything this run started")
        else:  # the logs (operator, apiserver, kubelet) are what a failed run leaves to read
            say(f"stopped everything this run started; its logs are in {workdir}")


def _install_and_start_operator(kubectl: Kubectl, bins: binaries.Binaries, kubeconfig: Path, workdir: Path,
                                log: Path) -> subprocess.Popen[bytes]:
    say("installing the QwenInference CRD and the operator's RBAC (from the Helm chart)")
    kubectl("apply", "--server-side", "-f", str(CRD))
    query = "jsonpath={.status.conditions[?(@.type=='Established')].status}"
    wait_for("the CRD Established", lambda: kubectl("get", "crd/qweninferences.qwenfleet.io", "-o", query,
                                                    check=False) == "True", 60)
    kubectl("create", "namespace", NAMESPACE, check=False)
    kubectl("apply", "-f", "-", input=_rbac_manifests(bins.helm))
    op_kubeconfig = _operator_kubeconfig(kubectl, kubeconfig, workdir)
    say(f"starting the operator as ServiceAccount {NAMESPACE}/{SERVICE_ACCOUNT} (log: {log})")
    return _start_operator(op_kubeconfig, log)
