"""Where verdicts go: output.jsonl (answered 2xx) and errors.jsonl, in a directory or a ConfigMap.

Each record is written, and flushed, before its line counts as done: a Job killed at any moment loses only
the requests in flight, which the next run sends again. A file write is one ``write`` of a whole line followed
by ``flush`` (to the kernel: a killed process loses nothing flushed; a node that loses power may lose the
page cache, and a torn last line is cut off on resume, lines.complete_lines).

A ConfigMap is applied whole, both keys (server-side apply drops a key its manager stops sending), so writing it
after every record would cost the apiserver and etcd the square of the output: 1,500 records were
368 MB of etcd storage. It is written instead when ``FlushPolicy.due`` says so: at most every ``seconds``, only
once the records waiting add at least ``growth`` of what is already written (so each write is at least
``1 + growth`` times the last, and all writes together at most ``(1 + growth) / growth`` times the final size,
plus the last write), at most ``max_writes`` times a run, and always at the end (``close``). The resume contract
is unchanged: only what was written counts as done, so a run killed before a write loses no answer and
duplicates none; the lines whose records were waiting are sent again by the next run.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Protocol

from qwen_fleet.batchrun.kube import KubeApi, configmap_path
from qwen_fleet.batchrun.lines import complete_lines

OUTPUT_KEY = "output.jsonl"
ERRORS_KEY = "errors.jsonl"
# A ConfigMap is at most 1 MiB (keys, values and metadata together): stop short of it with a clear error.
CONFIGMAP_LIMIT = 1_000_000


class SinkFull(Exception):
    """The output cannot take another record (a ConfigMap near its 1 MiB limit)."""


class Sink(Protocol):
    def existing(self) -> tuple[str, str]: ...
    def write(self, line: str, ok: bool) -> None: ...
    def close(self) -> None: ...


class DirectorySink:
    def __init__(self, directory: Path) -> None:
        directory.mkdir(parents=True, exist_ok=True)
        self.paths = {True: directory / OUTPUT_KEY, False: directory / ERRORS_KEY}
        self.texts: dict[bool, str] = {}
        for ok, path in self.paths.items():
            raw = path.read_bytes() if path.exists() else b""
            end = raw.rfind(b"\n") + 1
            if end != len(raw):
                with path.open("r+b") as f:  # cut a torn last line off before appending after it
                    f.truncate(end)
            self.texts[ok] = raw[:end].decode("utf-8", errors="replace")
        self.files = {ok: path.open("a", encoding="utf-8") for ok, path in self.paths.items()}
        self.lock = threading.Lock()

    def existing(self) -> tuple[str, str]:
        return self.texts[True], self.texts[False]

    def write(self, line: str, ok: bool) -> None:
        with self.lock:
            f = self.files[ok]
            f.write(line)
            f.flush()

    def close(self) -> None:
        for f in self.files.values():
            f.close()


@dataclass(frozen=True)
class FlushPolicy:
    """When a ConfigMap output is written. Pure."""

    seconds: float = 5.0  # at most one write per this many seconds (the last write excepted)
    growth: float = 0.25  # a write waits until the records waiting are this fraction of what is written
    max_writes: int = 100  # writes of one run, the last included

    def due(self, since_last: float, waiting: int, written: int, writes: int) -> bool:
        """Whether to write now: ``waiting`` bytes not yet written, ``written`` bytes already in the ConfigMap,
        ``writes`` writes so far this run, the last ``since_last`` seconds ago. The last write (``close``)
        does not ask: one write is always left for it."""
        return (waiting > 0 and writes < self.max_writes - 1 and since_last >= self.seconds
                and waiting >= self.growth * written)


class ConfigMapSink:
    def __init__(self, api: KubeApi, namespace: str, name: str, policy: FlushPolicy | None = None,
                 clock: Callable[[], float] = time.monotonic) -> None:
        self.api, self.namespace, self.name = api, namespace, name
        self.policy, self.clock = policy or FlushPolicy(), clock
        data = (api.request("GET", configmap_path(namespace, name)) or {}).get("data") or {}
        self.data = {ok: "".join(f"{t}\n" for t in complete_lines(str(data.get(key) or ""))[0])
                     for ok, key in ((True, OUTPUT_KEY), (False, ERRORS_KEY))}
        self.written = self._size()  # bytes of data the ConfigMap holds
        self.waiting = 0  # bytes of records not written yet
        self.writes = 0
        self.last = clock()
        self.lock = threading.Lock()

    def _size(self) -> int:
        return sum(len(t.encode("utf-8")) for t in self.data.values())

    def existing(self) -> tuple[str, str]:
        return self.data[True], self.data[False]

    def write(self, line: str, ok: bool) -> None:
        with self.lock:
            size = len(line.encode("utf-8"))
            if self.written + self.waiting + size > CONFIGMAP_LIMIT:
                self._flush()  # what fits is kept: the next run (with a claim) need not send it again
                raise SinkFull(f"ConfigMap {self.name} would pass {CONFIGMAP_LIMIT} bytes; use output.pvc for "
                               "a batch this large")
            self.data[ok] += line
            self.waiting += size
            if self.policy.due(self.clock() - self.last, self.waiting, self.written, self.writes):
                self._flush()

    def _flush(self) -> None:
        if not self.waiting:
            return
        self.api.apply(configmap_path(self.namespace, self.name), {
            "apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": self.name, "namespace": self.namespace},
            "data": {OUTPUT_KEY: self.data[True], ERRORS_KEY: self.data[False]}})
        self.written, self.waiting = self.written + self.waiting, 0
        self.writes += 1
        self.last = self.clock()

    def close(self) -> None:
        """The last write: every record not written yet."""
        with self.lock:
            self._flush()
