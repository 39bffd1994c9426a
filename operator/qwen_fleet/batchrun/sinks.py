"""Where verdicts go: output.jsonl (answered 2xx) and errors.jsonl, in a directory or a ConfigMap.

Each record is written, and flushed, before its line counts as done: a Job killed at any moment loses only
the requests in flight, which the next run sends again. A file write is one ``write`` of a whole line followed
by ``flush`` (to the kernel: a killed process loses nothing flushed; a node that loses power may lose the
page cache, and a torn last line is cut off on resume, lines.complete_lines). A ConfigMap is applied whole,
both keys, after every record: server-side apply drops a key its manager stops sending.
"""

from __future__ import annotations

import threading
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


class ConfigMapSink:
    def __init__(self, api: KubeApi, namespace: str, name: str) -> None:
        self.api, self.namespace, self.name = api, namespace, name
        data = (api.request("GET", configmap_path(namespace, name)) or {}).get("data") or {}
        self.data = {ok: "".join(f"{t}\n" for t in complete_lines(str(data.get(key) or ""))[0])
                     for ok, key in ((True, OUTPUT_KEY), (False, ERRORS_KEY))}
        self.lock = threading.Lock()

    def existing(self) -> tuple[str, str]:
        return self.data[True], self.data[False]

    def write(self, line: str, ok: bool) -> None:
        with self.lock:
            size = sum(len(t.encode("utf-8")) for t in self.data.values()) + len(line.encode("utf-8"))
            if size > CONFIGMAP_LIMIT:
                raise SinkFull(f"ConfigMap {self.name} would pass {CONFIGMAP_LIMIT} bytes; use output.pvc for "
                               "a batch this large")
            self.data[ok] += line
            self.api.apply(configmap_path(self.namespace, self.name), {
                "apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": self.name, "namespace": self.namespace},
                "data": {OUTPUT_KEY: self.data[True], ERRORS_KEY: self.data[False]}})

    def close(self) -> None:
        pass
