"""A QwenBatch on the real node: its data claim, its input, its manifest, and reading what it wrote.

Shared by tests/node/test_real_batch.py (correctness: every line answered once, a killed runner resumed) and
bench/batch_real_node.py (interactive time to first token beside the batch). The claim is a hostPath
PersistentVolume over a directory of this machine, so the test reads the Job's output files directly.
"""

from __future__ import annotations

import json
import time
from collections import Counter
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from qwen_fleet_dev.cluster import LocalCluster
from qwen_fleet_dev.local_fleet import host_path_claim
from qwen_fleet_dev.realnode import NODE_LABEL

DATA_CLAIM = "batch-data"
INPUT_PATH = "in/input.jsonl"
OUTPUT_PATH = "out"
BATCH_MAX_TOKENS = 16
# Two lines the runner must refuse (counted failed with a reason), not send: not JSON, and a URL no fleet serves.
MALFORMED = ('{"custom_id": "broken-json", "method": "POST", "url": "/v1/chat/completions", "body": {',
             json.dumps({"custom_id": "unknown-url", "method": "POST", "url": "/v1/nothing-here", "body": {}}))


def data_volume(namespace: str, host_dir: Path) -> list[dict[str, Any]]:
    """A hostPath PersistentVolume over ``host_dir`` and the claim bound to it by name. The runner runs as the
    operator image's user (65532), so the directories are world-writable."""
    for sub in ("", "in", OUTPUT_PATH):
        output_dir(host_dir, sub)
    return host_path_claim(namespace, DATA_CLAIM, host_dir, "ReadWriteMany")


def output_dir(host_dir: Path, path: str) -> Path:
    """A directory on the claim the runner (user 65532) can write."""
    (host_dir / path).mkdir(parents=True, exist_ok=True)
    (host_dir / path).chmod(0o777)
    return host_dir / path


def write_input(host_dir: Path, model: str, requests: int, malformed: bool = True,
                path: str = INPUT_PATH) -> list[str]:
    """``requests`` chat lines (16 output tokens each), then the two malformed ones; returns the good ids."""
    text = "Quarterly report of the fleet: latency held, two nodes drained, one GPU replaced."
    ids = [f"doc-{i:05d}" for i in range(requests)]
    output_dir(host_dir, str(Path(path).parent))
    with (host_dir / path).open("w") as out:
        for i, custom_id in enumerate(ids):
            body = {"model": model, "max_tokens": BATCH_MAX_TOKENS, "ignore_eos": True, "temperature": 0,
                    "messages": [{"role": "user", "content": f"Summarize ({i}): {text}"}]}
            out.write(json.dumps({"custom_id": custom_id, "method": "POST", "url": "/v1/chat/completions",
                                  "body": body}) + "\n")
        for line in MALFORMED if malformed else ():
            out.write(line + "\n")
    return ids


def fleet_batch(name: str, fleet: str, concurrency: int = 4, priority: int | None = None,
                output_path: str = OUTPUT_PATH) -> dict[str, Any]:
    # The runner's pod on the real node: a kwok node would fake the Job's success without running anything.
    spec: dict[str, Any] = {"fleetRef": {"name": fleet}, "concurrency": concurrency,
                            "input": {"pvc": {"claimName": DATA_CLAIM, "path": INPUT_PATH}},
                            "output": {"pvc": {"claimName": DATA_CLAIM, "path": output_path}},
                            "scheduling": {"nodeSelector": {NODE_LABEL[0]: NODE_LABEL[1]}}}
    if priority is not None:
        spec["priority"] = priority
    return {"apiVersion": "qwenfleet.io/v1alpha1", "kind": "QwenBatch", "metadata": {"name": name}, "spec": spec}


def read_records(path: Path) -> list[dict[str, Any]]:
    """Every complete JSON line of an output file (a torn last line, if any, is not a record)."""
    if not path.exists():
        return []
    records = []
    for line in path.read_text().splitlines():
        try:
            records.append(json.loads(line))
        except ValueError:
            continue
    return records


def count_lines(path: Path) -> int:
    return len(path.read_text().splitlines()) if path.exists() else 0


@dataclass
class Written:
    """What a batch left in its output directory."""

    output: list[dict[str, Any]]
    errors: list[dict[str, Any]]

    @classmethod
    def read(cls, host_dir: Path, output_path: str = OUTPUT_PATH) -> Written:
        out = host_dir / output_path
        return cls(read_records(out / "output.jsonl"), read_records(out / "errors.jsonl"))

    def duplicates(self) -> dict[str, int]:
        """custom_ids written more than once, over both files, with their counts."""
        seen = Counter(str(r.get("custom_id")) for r in self.output + self.errors)
        return {cid: n for cid, n in seen.items() if n > 1}


def batch_status(cluster: LocalCluster, namespace: str, name: str) -> dict[str, Any]:
    out = cluster.kubectl("get", "-n", namespace, "qwenbatch", name, "-o", "json").stdout
    return dict(json.loads(out).get("status") or {})


def job_pods(cluster: LocalCluster, namespace: str, name: str) -> list[dict[str, Any]]:
    out = cluster.kubectl("get", "-n", namespace, "pods", "-l", f"qwenfleet.io/batch={name}", "-o", "json").stdout
    return list(json.loads(out)["items"])


def wait_for(what: str, check: Any, timeout: float, interval: float = 0.5) -> Any:
    deadline = time.monotonic() + timeout
    while True:
        value = check()
        if value:
            return value
        if time.monotonic() > deadline:
            raise TimeoutError(f"timed out after {timeout:.0f} s waiting for {what}")
        time.sleep(interval)
