"""Every pod the operator renders passes the Pod Security Standard ``restricted`` profile, judged by an
independent checker (tests/support/pss.py, written from the Kubernetes rules), over every example, every golden
file and the pods no example makes (prefetch, CPU preflight, ipcLock)."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import yaml

from qwen_fleet.api import QwenInference
from qwen_fleet.config import OperatorConfig
from qwen_fleet.plan import make_plan
from qwen_fleet.render import ALL_CAPABILITIES, render_children
from tests.support.pss import restricted_violations

ROOT = Path(__file__).resolve().parents[2]
EXAMPLES = sorted((ROOT / "examples").glob("*.yaml"))
GOLDEN = sorted((ROOT / "tests" / "golden").glob("*.yaml"))


def pod_specs(objects: list[dict[str, Any]]) -> Iterator[tuple[str, dict[str, Any]]]:
    """(where, pod spec) of every pod template among rendered objects."""
    for obj in objects:
        where = f"{obj['kind']} {obj['metadata']['name']}"
        if obj["kind"] in ("Deployment", "Job", "StatefulSet", "DaemonSet"):
            yield where, obj["spec"]["template"]["spec"]
        elif obj["kind"] == "LeaderWorkerSet":
            lwt = obj["spec"]["leaderWorkerTemplate"]
            yield f"{where} leader", lwt["leaderTemplate"]["spec"]
            yield f"{where} worker", lwt["workerTemplate"]["spec"]
        elif obj["kind"] == "Pod":
            yield where, obj["spec"]


def _children(doc: dict[str, Any]) -> list[dict[str, Any]]:
    doc = {**doc, "metadata": {**doc.get("metadata", {}), "namespace": "llm", "uid": "u"}}
    cr = QwenInference.model_validate(doc)
    return render_children(cr, make_plan(cr, OperatorConfig()), ALL_CAPABILITIES)


def _violations(objects: list[dict[str, Any]]) -> dict[str, list[str]]:
    pods = list(pod_specs(objects))
    assert pods, "no pod template among the objects"
    return {where: bad for where, pod in pods if (bad := restricted_violations(pod))}


@pytest.mark.parametrize("path", EXAMPLES, ids=[p.stem for p in EXAMPLES])
def test_every_example_renders_restricted_pods(path: Path) -> None:
    assert _violations(_children(yaml.safe_load(path.read_text()))) == {}


@pytest.mark.parametrize("path", GOLDEN, ids=[p.stem for p in GOLDEN])
def test_every_golden_pod_is_restricted(path: Path) -> None:
    assert _violations(list(yaml.safe_load_all(path.read_text()))) == {}


CPU = {"device": "CPU", "engine": {"image": "local/vllm-cpu:1"}}
EXTRA_CASES: dict[str, dict[str, Any]] = {
    "prefetch-modelscope-token": {"model": {"name": "Qwen/Qwen3-4B", "source": {"modelScope": {
        "tokenSecretRef": {"name": "ms"}}}, "cache": {"size": "20Gi", "prefetch": {"enabled": True}}}},
    "cpu-preflight": {**CPU, "model": {"name": "Qwen/Qwen3-0.6B"}, "nccl": {"preflight": {"enabled": True}}},
    "routing-picker": {"model": {"name": "Qwen/Qwen3-8B"}, "routing": {}},
    "multi-node-preflight": {"model": {"name": "Qwen/Qwen3-235B-A22B-FP8"}, "gpu": {"product": "NVIDIA-H100-80GB-HBM3"},
                             "parallelism": {"tensor": 8, "nodes": 2}, "nccl": {"preflight": {"enabled": True}}},
}


@pytest.mark.parametrize("spec", EXTRA_CASES.values(), ids=list(EXTRA_CASES))
def test_pods_no_example_makes_are_restricted(spec: dict[str, Any]) -> None:
    children = _children({"metadata": {"name": "f"}, "spec": spec})
    assert _violations(children) == {}


def _engine_pod(spec: dict[str, Any]) -> dict[str, Any]:
    children = _children({"metadata": {"name": "f"}, "spec": spec})
    return next(c for c in children if c["kind"] == "Deployment")["spec"]["template"]["spec"]


def test_the_engine_runs_as_the_spec_user_with_its_writable_places_on_volumes() -> None:
    pod = _engine_pod({"model": {"name": "Qwen/Qwen3-4B"}, "security": {"runAsUser": 2000, "runAsGroup": 3000}})
    assert pod["securityContext"] == {"runAsNonRoot": True, "runAsUser": 2000, "runAsGroup": 3000, "fsGroup": 3000,
                                      "fsGroupChangePolicy": "OnRootMismatch",
                                      "seccompProfile": {"type": "RuntimeDefault"}}
    engine = pod["containers"][0]
    env = {v["name"]: v.get("value") for v in engine["env"]}
    mounts = {m["mountPath"]: m["name"] for m in engine["volumeMounts"]}
    volumes = {v["name"]: v for v in pod["volumes"]}
    for path in (env["HOME"], env["HF_HOME"], "/tmp", "/dev/shm"):
        assert path in mounts, f"{path} is not on a volume"
        assert set(volumes[mounts[path]]) & {"emptyDir", "persistentVolumeClaim"}, path
    assert env["USER"]  # getpass.getuser() without a passwd entry for the uid
    assert not env["HF_HOME"].startswith(env["HOME"] + "/")  # a mount point inside HOME would be root's


def test_ipc_lock_is_an_opt_in_that_leaves_restricted() -> None:
    plain = _engine_pod({"model": {"name": "Qwen/Qwen3-4B"}})
    assert "add" not in plain["containers"][0]["securityContext"]["capabilities"]
    locked = _engine_pod({"model": {"name": "Qwen/Qwen3-4B"}, "security": {"ipcLock": True}})
    assert locked["containers"][0]["securityContext"]["capabilities"] == {"drop": ["ALL"], "add": ["IPC_LOCK"]}
    assert [v for v in restricted_violations(locked) if "IPC_LOCK" in v] == [
        "baseline: container vllm adds capability IPC_LOCK",
        "restricted: container vllm may add only NET_BIND_SERVICE, not IPC_LOCK"]


def test_api_key_comes_from_the_secret_by_reference() -> None:
    pod = _engine_pod({"model": {"name": "Qwen/Qwen3-4B"}, "serving": {"apiKeySecretRef": {"name": "keys"}}})
    env = {v["name"]: v for v in pod["containers"][0]["env"]}
    assert env["VLLM_API_KEY"] == {"name": "VLLM_API_KEY",
                                   "valueFrom": {"secretKeyRef": {"name": "keys", "key": "api-key"}}}


# The checker itself: each control it knows must be able to fail.
COMPLIANT: dict[str, Any] = {
    "securityContext": {"runAsNonRoot": True, "seccompProfile": {"type": "RuntimeDefault"}},
    "containers": [{"name": "c", "securityContext": {"allowPrivilegeEscalation": False,
                                                      "capabilities": {"drop": ["ALL"]}}}],
}


def _patched(pod: dict[str, Any] | None = None, **container_ctx: Any) -> dict[str, Any]:
    out = yaml.safe_load(yaml.safe_dump(COMPLIANT))
    out.update(pod or {})
    out["containers"][0]["securityContext"].update(container_ctx)
    return out


BAD_PODS: dict[str, tuple[dict[str, Any], str]] = {
    "escalation": (_patched(allowPrivilegeEscalation=True), "allowPrivilegeEscalation"),
    "no-drop-all": (_patched(capabilities={"drop": ["NET_RAW"]}), "must drop ALL"),
    "adds-sys-admin": (_patched(capabilities={"drop": ["ALL"], "add": ["SYS_ADMIN"]}), "SYS_ADMIN"),
    "privileged": (_patched(privileged=True), "privileged"),
    "root-user": (_patched(runAsUser=0), "runAsUser 0"),
    "container-may-be-root": (_patched(runAsNonRoot=False), "runAsNonRoot"),
    "no-seccomp": (_patched({"securityContext": {"runAsNonRoot": True}}), "seccompProfile"),
    "unconfined": (_patched(seccompProfile={"type": "Unconfined"}), "Unconfined"),
    "host-network": (_patched({"hostNetwork": True}), "hostNetwork"),
    "host-path": (_patched({"volumes": [{"name": "h", "hostPath": {"path": "/"}}]}), "hostPath"),
    "host-port": (_patched({"containers": [{**COMPLIANT["containers"][0], "ports": [{"containerPort": 80,
                                                                                     "hostPort": 80}]}]}),
                  "hostPort"),
    "init-container-unchecked": (_patched({"initContainers": [{"name": "i"}]}), "initContainer i"),
}


@pytest.mark.parametrize("case", BAD_PODS.values(), ids=list(BAD_PODS))
def test_the_checker_catches_each_control(case: tuple[dict[str, Any], str]) -> None:
    pod, expected = case
    assert restricted_violations(COMPLIANT) == []
    assert any(expected in v for v in restricted_violations(pod)), restricted_violations(pod)


def test_docs_list_every_reserved_variable() -> None:
    from qwen_fleet.api.security import RESERVED_ENV

    text = (ROOT / "docs" / "security.md").read_text()
    assert [name for name in RESERVED_ENV if f"`{name}`" not in text] == []
