"""Tearing down what a real node leaves behind when its programs stop, crash or are killed.

containerd starts one shim per pod in a session of its own (so pods survive a containerd restart); the
containers are the shim's children. Neither dies with containerd or with us. The kubelet and containerd
also mount things under their directories (projected volumes, rootfs overlays, /dev/shm, pod network
namespaces). So the teardown kills by what it can prove is ours: containers in our runc state directory,
processes whose command line names our containerd socket, mounts under our node directory.
"""

from __future__ import annotations

import contextlib
import os
import signal
import subprocess
import time
from pathlib import Path

from qwen_fleet_dev.processes import alive, cmdline


def delete_containers(runc_root: Path) -> list[str]:
    """Force-delete (SIGKILL + remove, cgroups included) every container runc knows under ``runc_root``.

    containerd's runc shim keeps one runc state directory per containerd namespace below its ``Root``."""
    deleted: list[str] = []
    if not runc_root.is_dir():
        return deleted
    for ns_root in sorted(p for p in runc_root.iterdir() if p.is_dir()):
        for state in sorted(p for p in ns_root.iterdir() if p.is_dir()):
            subprocess.run(["runc", "--root", str(ns_root), "delete", "--force", state.name],
                           capture_output=True, timeout=30)
            deleted.append(state.name)
    return deleted


def processes_naming(marker: str) -> list[int]:
    """PIDs whose command line contains ``marker`` (a path only our processes use)."""
    found = []
    for entry in Path("/proc").iterdir():
        pid = int(entry.name) if entry.name.isdigit() else 0
        if pid and pid != os.getpid() and any(marker in part for part in cmdline(pid)):
            found.append(pid)
    return found


def kill_all(pids: list[int], timeout: float = 5.0) -> None:
    for pid in pids:
        with contextlib.suppress(ProcessLookupError, PermissionError):
            os.kill(pid, signal.SIGKILL)
    deadline = time.monotonic() + timeout
    while any(alive(p) for p in pids) and time.monotonic() < deadline:
        time.sleep(0.05)


def mounts_under(root: Path) -> list[str]:
    """Mount points at or below ``root`` in our mount namespace, deepest first."""
    prefix = str(root.resolve())
    points = []
    with open("/proc/self/mountinfo") as f:
        for line in f:
            point = line.split()[4].replace("\\040", " ")
            if point == prefix or point.startswith(prefix + "/"):
                points.append(point)
    return sorted(set(points), key=lambda p: (-p.count("/"), p))


def unmount_under(root: Path) -> list[str]:
    """Unmount everything below ``root`` (lazily: a busy mount still leaves the tree now)."""
    points = mounts_under(root)
    for _ in range(3):  # a mount can be stacked on itself; repeat until none is left
        for point in points:
            subprocess.run(["umount", "-l", point], capture_output=True)
        points = mounts_under(root)
        if not points:
            break
    return points


CGROUP_MOUNT = Path("/sys/fs/cgroup")


def make_cgroups(cgroup_root: str) -> None:
    """The node's cgroup root in every hierarchy: the kubelet (cgroupsPerQOS) wants it to exist."""
    for hierarchy in sorted(CGROUP_MOUNT.iterdir()):
        (hierarchy / cgroup_root.strip("/")).mkdir(exist_ok=True)


def remove_cgroups(cgroup_root: str) -> list[str]:
    """Remove ``cgroup_root`` and what is below it in every hierarchy (v1 controllers and unified); returns
    the directories that could not be removed (a cgroup with a live process in it)."""
    left = []
    relative = cgroup_root.strip("/")
    for hierarchy in sorted(CGROUP_MOUNT.iterdir()) if CGROUP_MOUNT.is_dir() else []:
        top = hierarchy / relative
        if not top.is_dir():
            continue
        # Children before parents; only directories can be removed in a cgroup fs (the files are virtual).
        dirs = sorted((p for p in top.rglob("*") if p.is_dir()), key=lambda p: -len(p.parts))
        for directory in [*dirs, top]:
            try:
                directory.rmdir()
            except OSError:
                left.append(str(directory))
    return left
