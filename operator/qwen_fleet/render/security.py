"""What every fleet pod sets to pass the Pod Security Standard ``restricted`` profile, and where a non-root
engine writes.

restricted asks, per pod: seccomp RuntimeDefault (or Localhost), runAsNonRoot with no runAsUser 0, and per
container: allowPrivilegeEscalation false, capabilities dropped to ALL (only NET_BIND_SERVICE may be added back),
no privileged, host namespaces, hostPath or host ports. The engine then runs as spec.security.runAsUser (1000 by
default) and writes only to volumes: HOME (vLLM's config and compile caches, ~/.cache/vllm, Triton's and
torch's caches under it), /tmp, /dev/shm and the Hugging Face cache (HF_HOME). fsGroup makes the model cache
claim and the emptyDirs writable to the engine's group; OnRootMismatch changes a claim's ownership once (a
claim first filled by a root engine), not on every start.
"""

from __future__ import annotations

from typing import Any

from qwen_fleet.api import QwenInference

HOME_DIR = "/home/vllm"
TMP_DIR = "/tmp"
USER_NAME = "vllm"  # Python's getpass.getuser() (vLLM's compile cache path) reads $USER before /etc/passwd
HOME_VOLUME = "home"
TMP_VOLUME = "tmp"


def restricted_pod_context(uid: int, gid: int) -> dict[str, Any]:
    """Any pod we render (a fleet's, a batch's): non-root by number (a name cannot be checked before the image
    runs), the runtime's default seccomp profile, fsGroup so a claim that supports ownership is writable."""
    return {"runAsNonRoot": True, "runAsUser": uid, "runAsGroup": gid, "fsGroup": gid,
            "fsGroupChangePolicy": "OnRootMismatch", "seccompProfile": {"type": "RuntimeDefault"}}


def restricted_container_context(*, ipc_lock: bool = False) -> dict[str, Any]:
    """No escalation, no capability; IPC_LOCK (RDMA registers pinned memory) only when asked."""
    capabilities: dict[str, Any] = {"drop": ["ALL"]}
    if ipc_lock:
        capabilities["add"] = ["IPC_LOCK"]
    return {"allowPrivilegeEscalation": False, "capabilities": capabilities}


def pod_security_context(cr: QwenInference) -> dict[str, Any]:
    return restricted_pod_context(cr.spec.security.run_as_user, cr.spec.security.run_as_group)


def container_security_context(cr: QwenInference, *, engine: bool) -> dict[str, Any]:
    """IPC_LOCK only for the engine and its NCCL preflight, only when spec.security.ipcLock asks."""
    return restricted_container_context(ipc_lock=engine and cr.spec.security.ipc_lock)


def writable_volumes() -> list[dict[str, Any]]:
    return [{"name": HOME_VOLUME, "emptyDir": {}}, {"name": TMP_VOLUME, "emptyDir": {}}]


def writable_mounts() -> list[dict[str, Any]]:
    return [{"name": HOME_VOLUME, "mountPath": HOME_DIR}, {"name": TMP_VOLUME, "mountPath": TMP_DIR}]


def user_env() -> list[dict[str, Any]]:
    return [{"name": "HOME", "value": HOME_DIR}, {"name": "USER", "value": USER_NAME}]
