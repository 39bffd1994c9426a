"""Cluster DNS for programs of the local control plane that dial Services by name: a hosts file of their own.

In a cluster, the KEDA HTTP add-on's interceptor dials a route's target as ``<service>.<namespace>:<port>`` and
KEDA dials the add-on's scaler as ``<service>.<namespace>:<port>``; cluster DNS answers those names. The local
control plane has no cluster DNS (kwok pods have no network), so these programs run in a mount namespace of their
own (``unshare --mount``, as root) where this file is bind-mounted over ``/etc/hosts``: the names resolve to the
loopback address of the program that stands behind the Service. Nothing outside those processes sees the file.

Go rereads /etc/hosts when its modification time or size changes (net/hosts.go, at most every 5 s), so names
added after the programs started resolve too: the file is rewritten in place (same inode, which the bind mount
holds), never replaced.
"""

from __future__ import annotations

import shutil
import threading
from pathlib import Path

# unshare(1) runs the shell in a new mount namespace (no fork: the pid is the program's after the two execs); the
# shell bind-mounts the file and execs the program, so stopping the component stops the program itself.
_WRAPPER = 'mount --bind "$0" /etc/hosts && exec "$@"'


class HostsFile:
    """The machine's /etc/hosts plus names added with :meth:`add`; :meth:`wrap` runs a program with it."""

    def __init__(self, path: Path) -> None:
        if shutil.which("unshare") is None:
            raise RuntimeError("unshare (util-linux) is needed to give the add-on's programs their own /etc/hosts")
        self.path = path
        self.path.parent.mkdir(parents=True, exist_ok=True)
        self._base = Path("/etc/hosts").read_text()
        self._names: dict[str, str] = {}
        self._lock = threading.Lock()
        self._write()

    def add(self, name: str, address: str) -> None:
        with self._lock:
            self._names[name] = address
            self._write()

    def remove(self, name: str) -> None:
        with self._lock:
            self._names.pop(name, None)
            self._write()

    def wrap(self, argv: list[str]) -> list[str]:
        return ["unshare", "--mount", "--propagation", "private", "sh", "-c", _WRAPPER, str(self.path), *argv]

    def _write(self) -> None:
        lines = [self._base.rstrip("\n"), "# qwen-fleet local control plane: Service names"]
        lines += [f"{address}\t{name}" for name, address in sorted(self._names.items())]
        with self.path.open("a+") as out:  # in place: the bind mount holds this inode
            out.seek(0)
            out.truncate()
            out.write("\n".join(lines) + "\n")
