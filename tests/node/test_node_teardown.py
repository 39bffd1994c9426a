"""A real node leaves nothing behind: not after a clean stop, not after a failing test, not after SIGKILL.

"Nothing" is checked from outside the code under test: /proc for processes naming the node's directory or
still inside the node's mount namespace (which holds every mount the node made: when its last process
goes, they go), /proc/self/mountinfo for mounts under the directory on the host, `ip` for the network
namespace, the veth pair and the host's routes.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
from pathlib import Path

import pytest

from qwen_fleet_dev.cluster import LocalCluster
from qwen_fleet_dev.processes import alive
from qwen_fleet_dev.realnode import sweep_stale_nodes
from tests.node.pods import apply, http_get, wait_ready, web_pod

pytestmark = pytest.mark.cluster
ROOT = Path(__file__).resolve().parents[2]


def _processes_naming(text: str) -> list[str]:
    found = []
    for entry in Path("/proc").iterdir():
        if entry.name.isdigit() and int(entry.name) != os.getpid():
            try:
                cmd = (entry / "cmdline").read_bytes().replace(b"\0", b" ").decode(errors="replace")
            except OSError:
                continue
            if text in cmd:
                found.append(f"{entry.name}: {cmd[:200]}")
    return found


def _mounts_under(path: str) -> list[str]:
    lines = Path("/proc/self/mountinfo").read_text().splitlines()
    return [line.split()[4] for line in lines if line.split()[4].startswith(path)]


def _in_mount_namespace(ns: str) -> list[int]:
    found = []
    for entry in Path("/proc").iterdir():
        if entry.name.isdigit():
            try:
                if os.readlink(entry / "ns" / "mnt") == ns:
                    found.append(int(entry.name))
            except OSError:
                continue
    return found


def _ip(*args: str) -> str:
    return subprocess.run(["ip", *args], capture_output=True, text=True).stdout


def assert_nothing_left(workdir: str, block: int, pids: list[int], mntns: str) -> None:
    assert mntns.startswith("mnt:[") and mntns != os.readlink("/proc/self/ns/mnt")
    # Shims and containers are not our children: give a SIGKILLed shim's exit a moment to show in /proc.
    deadline = time.monotonic() + 10
    while (_processes_naming(workdir) or _in_mount_namespace(mntns)) and time.monotonic() < deadline:
        time.sleep(0.2)
    assert [p for p in pids if alive(p)] == []
    assert _processes_naming(workdir) == []
    assert _in_mount_namespace(mntns) == []
    assert _mounts_under(workdir) == []
    assert f"qwen-fleet-{block}" not in _ip("netns", "list")
    assert f"qfh-{block}" not in _ip("-br", "link")
    assert f"10.{block}." not in _ip("route", "show", "table", "all")
    assert sorted(Path("/sys/fs/cgroup").glob(f"*/qwen-fleet-{block}")) == []
    assert not Path(f"/tmp/qwen-fleet-node-{block}").exists()  # containerd's sockets


def _machine_sysctls() -> dict[str, str]:
    names = ("vm/overcommit_memory", "vm/panic_on_oom", "kernel/panic", "kernel/panic_on_oops")
    return {name: Path(f"/proc/sys/{name}").read_text() for name in names}


def test_a_second_real_node_cluster_runs_beside_the_first_and_leaves_nothing(
        real_cluster: LocalCluster, tmp_path_factory: pytest.TempPathFactory) -> None:
    first = real_cluster.real_node
    assert first is not None and first.net is not None
    sysctls_before = _machine_sysctls()
    # A short directory: the kubelet's sockets go under it (realnode.UNIX_PATH_MAX), and under pytest-xdist a
    # test's tmp_path (popen-gwN/<test name>) leaves too little room for them.
    with LocalCluster(workdir=tmp_path_factory.mktemp("second"), node_pools=(), real_node=True) as second:
        node = second.real_node
        assert node is not None and node.net is not None
        assert node.net.block != first.net.block
        apply(second, "default", web_pod("side"))
        ip = wait_ready(second, "default", "side")["status"]["podIP"]
        assert http_get(f"http://{ip}:8080/index.html") == "hello from side\n"
        # The kubelet's sysctls are masked inside the node's mount namespace, not set on the machine.
        assert _machine_sysctls() == sysctls_before
        pod_cgroups = sorted(Path("/sys/fs/cgroup/memory").glob(f"qwen-fleet-{node.net.block}/kubepods/*/pod*"))
        assert len(pod_cgroups) == 1
        workdir, block, pids = str(second.workdir), node.net.block, list(second.pids().values())
        assert node.mntns is not None
        mntns = os.readlink(node.mntns)
        assert mntns != os.readlink(first.mntns or "/proc/self/ns/mnt")
    assert_nothing_left(workdir, block, pids, mntns)
    # The first cluster's node was not disturbed by the second's start and stop.
    assert first.net.exists()
    assert "real-node-0" in real_cluster.kubectl("get", "nodes", "-o", "name").stdout


INNER = """
import json, os, signal
from pathlib import Path
from qwen_fleet_dev.cluster import LocalCluster
from tests.node.pods import apply, wait_ready, web_pod

def _start(c):
    apply(c, "default", web_pod("doomed"))
    wait_ready(c, "default", "doomed")
    Path(os.environ["INFO_FILE"]).write_text(json.dumps(
        {"workdir": str(c.workdir), "block": c.real_node.net.block, "pids": list(c.pids().values()),
         "mntns": os.readlink(c.real_node.mntns)}))

def test_fails_with_a_running_pod(tmp_path):
    with LocalCluster(workdir=tmp_path / "c", node_pools=(), real_node=True) as c:
        _start(c)
        assert False, "deliberate failure"

def test_killed_with_a_running_pod(tmp_path):
    _start(LocalCluster(workdir=tmp_path / "c", node_pools=(), real_node=True).start())
    os.kill(os.getpid(), signal.SIGKILL)
"""


def _run_inner(tmp_path: Path, test: str) -> tuple[subprocess.CompletedProcess[str], dict[str, object]]:
    (tmp_path / "test_inner.py").write_text(INNER)
    info = tmp_path / "info.json"
    env = {**os.environ, "INFO_FILE": str(info), "PYTHONPATH": str(ROOT)}
    result = subprocess.run([sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", "--rootdir",
                             str(tmp_path), f"{tmp_path / 'test_inner.py'}::{test}"],
                            capture_output=True, text=True, env=env, timeout=600, cwd=tmp_path)
    assert info.exists(), result.stdout[-3000:] + result.stderr[-3000:]
    return result, json.loads(info.read_text())


def test_a_failing_test_with_a_running_pod_leaves_nothing(real_cluster: LocalCluster, tmp_path: Path) -> None:
    result, info = _run_inner(tmp_path, "test_fails_with_a_running_pod")
    assert result.returncode == 1 and "deliberate failure" in result.stdout, result.stdout[-3000:]
    assert_nothing_left(str(info["workdir"]), int(str(info["block"])), list(info["pids"]),  # type: ignore[arg-type]
                        str(info["mntns"]))


def test_a_sigkilled_session_is_cleaned_up_by_the_next_start(real_cluster: LocalCluster, tmp_path: Path) -> None:
    result, info = _run_inner(tmp_path, "test_killed_with_a_running_pod")
    assert result.returncode == -9, result.stdout[-3000:]
    block = int(str(info["block"]))
    # What the kernel cannot stop for us is still there: the pod's network namespace and its container.
    assert f"qwen-fleet-{block}" in _ip("netns", "list")
    # The next start of any real node (here called directly) finds the dead session's node and removes it;
    # the running session cluster's node is not touched.
    live = real_cluster.real_node
    assert live is not None and live.net is not None
    deadline = time.monotonic() + 15
    swept: list[int] = []
    while block not in swept and time.monotonic() < deadline:  # the killed kubelet may take a moment to go
        swept += sweep_stale_nodes()
        time.sleep(0.5)
    assert block in swept and live.net.block not in swept
    assert_nothing_left(str(info["workdir"]), block, list(info["pids"]), str(info["mntns"]))  # type: ignore[arg-type]
    assert live.net.exists()


def test_dev_up_real_node_outlives_its_command_and_dev_down_removes_it(
        tmp_path_factory: pytest.TempPathFactory) -> None:
    workdir = tmp_path_factory.mktemp("dev")  # short: the kubelet's sockets go under it
    cli = [sys.executable, "-m", "qwen_fleet.cli", "dev"]
    up = subprocess.run([*cli, "up", "--real-node", "--dir", str(workdir)], capture_output=True, text=True,
                        timeout=300)
    assert up.returncode == 0, up.stdout + up.stderr
    state = json.loads((workdir / "cluster.json").read_text())
    block, pids = int(state["real_node"]["block"]), list(state["pids"].values())
    try:
        mntns = os.readlink(f"/proc/{state['pids']['kubelet']}/ns/mnt")
        kubectl = [state["binaries"]["kube-apiserver"].replace("kube-apiserver", "kubectl"),
                   f"--kubeconfig={workdir / 'kubeconfig'}"]
        ready = subprocess.run([*kubectl, "wait", "--for=condition=Ready", "node/real-node-0", "--timeout=60s"],
                               capture_output=True, text=True, timeout=90)
        assert ready.returncode == 0, ready.stderr
    finally:
        down = subprocess.run([*cli, "down", "--dir", str(workdir)], capture_output=True, text=True, timeout=120)
    assert down.returncode == 0, down.stdout + down.stderr
    assert "real node" in down.stdout
    assert_nothing_left(str(workdir), block, pids, mntns)


def test_a_node_whose_kubelet_fails_to_start_fails_the_start_and_leaves_nothing(
        tmp_path_factory: pytest.TempPathFactory, monkeypatch: pytest.MonkeyPatch) -> None:
    from qwen_fleet_dev.realnode import RealNode

    broken = RealNode._kubelet_argv
    monkeypatch.setattr(RealNode, "_kubelet_argv", lambda self: [*broken(self), "--no-such-flag"])
    cluster = LocalCluster(workdir=tmp_path_factory.mktemp("broken"), node_pools=(), real_node=True)
    seen: dict[str, object] = {}
    real_start = RealNode._start_containerd

    def start_containerd(self: RealNode) -> None:  # note the node's traces once they exist
        real_start(self)
        assert self.net is not None and self.mntns is not None
        seen.update(block=self.net.block, mntns=os.readlink(self.mntns))

    monkeypatch.setattr(RealNode, "_start_containerd", start_containerd)
    with pytest.raises(RuntimeError, match="kubelet exited"):
        cluster.start()
    assert_nothing_left(str(cluster.workdir), int(str(seen["block"])), [], str(seen["mntns"]))
