"""Child processes that die with their parent and stop in order.

Each component of the local control plane is a plain OS process. When the cluster is tied to its parent
(tests, ``make run``), the kernel kills the children if the parent dies, even by SIGKILL, through
``PR_SET_PDEATHSIG``; so a crashed test session cannot leak an apiserver.
"""

from __future__ import annotations

import contextlib
import ctypes
import os
import signal
import subprocess
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path

_PR_SET_PDEATHSIG = 1


_CLONE_NEWNET = 0x40000000
_CLONE_NEWNS = 0x00020000


def _die_with_parent() -> None:  # runs in the child between fork and exec
    libc = ctypes.CDLL(None, use_errno=True)
    libc.prctl(_PR_SET_PDEATHSIG, signal.SIGKILL, 0, 0, 0)


def _join(path: Path, kind: int) -> None:
    libc = ctypes.CDLL(None, use_errno=True)
    fd = os.open(path, os.O_RDONLY)
    try:
        if libc.setns(fd, kind) != 0:
            raise OSError(ctypes.get_errno(), f"setns {path}")
    finally:
        os.close(fd)


def _child_setup(tie_to_parent: bool, netns: Path | None, mntns: Path | None) -> Callable[[], None] | None:
    """What the child does before exec: die with us, join a network and/or mount namespace (the real
    node's programs run in namespaces of their own)."""
    if not tie_to_parent and netns is None and mntns is None:
        return None

    def setup() -> None:
        if tie_to_parent:
            _die_with_parent()
        if netns is not None:
            _join(netns, _CLONE_NEWNET)
        if mntns is not None:
            _join(mntns, _CLONE_NEWNS)

    return setup


@dataclass
class Component:
    """One long-running program of the control plane."""

    name: str
    argv: list[str]
    log: Path
    env: dict[str, str] | None = None
    netns: Path | None = None  # a network namespace to run in (the real node's)
    mntns: Path | None = None  # a mount namespace to run in (the real node's)
    proc: subprocess.Popen[bytes] | None = field(default=None, repr=False)

    @property
    def pid(self) -> int | None:
        return self.proc.pid if self.proc else None

    def start(self, tie_to_parent: bool) -> None:
        self.log.parent.mkdir(parents=True, exist_ok=True)
        out = self.log.open("ab")
        try:
            self.proc = subprocess.Popen(
                self.argv,
                stdout=out,
                stderr=subprocess.STDOUT,
                stdin=subprocess.DEVNULL,
                env=self.env,
                start_new_session=True,  # Ctrl-C reaches us, and we stop the children in order
                preexec_fn=_child_setup(tie_to_parent, self.netns, self.mntns),
            )
        finally:
            out.close()

    def running(self) -> bool:
        return self.proc is not None and self.proc.poll() is None

    def stop(self, timeout: float = 10.0) -> None:
        if self.proc is None:
            return
        terminate(self.proc.pid, timeout)
        with contextlib.suppress(subprocess.TimeoutExpired):
            self.proc.wait(timeout=1)
        self.proc = None

    def tail(self, lines: int = 30) -> str:
        try:
            text = self.log.read_text(errors="replace")
        except FileNotFoundError:
            return ""
        return "\n".join(text.splitlines()[-lines:])


def terminate(pid: int, timeout: float = 10.0) -> None:
    """SIGTERM the process group, then SIGKILL it if it has not gone within ``timeout``."""
    for sig, wait in ((signal.SIGTERM, timeout), (signal.SIGKILL, 5.0)):
        try:
            os.killpg(pid, sig)
        except ProcessLookupError:
            return
        except PermissionError:
            os.kill(pid, sig)
        deadline = time.monotonic() + wait
        while time.monotonic() < deadline:
            if not alive(pid):
                return
            time.sleep(0.05)


def alive(pid: int) -> bool:
    with contextlib.suppress(ChildProcessError):
        os.waitpid(pid, os.WNOHANG)
    try:
        with open(f"/proc/{pid}/stat") as f:
            state = f.read().rsplit(")", 1)[1].split()[0]
    except (FileNotFoundError, ProcessLookupError, IndexError):
        return False
    return state != "Z"


def cmdline(pid: int) -> Sequence[str]:
    try:
        raw = Path(f"/proc/{pid}/cmdline").read_bytes()
    except (FileNotFoundError, PermissionError):
        return []
    return [part.decode(errors="replace") for part in raw.split(b"\0") if part]


def wait_for(what: str, check: Callable[[], bool], timeout: float, component: Component | None = None,
             interval: float = 0.2) -> None:
    """Poll ``check`` until it is true; fail with the component's log tail if it died or timed out."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if component is not None and not component.running():
            raise RuntimeError(f"{component.name} exited while waiting for {what}:\n{component.tail()}")
        try:
            if check():
                return
        except Exception:
            pass
        time.sleep(interval)
    tail = f"\n{component.tail()}" if component else ""
    raise TimeoutError(f"timed out after {timeout:.0f}s waiting for {what}{tail}")
