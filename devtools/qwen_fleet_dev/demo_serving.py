"""``qwen-fleet run --real-node``: a fleet that really serves, on the local cluster's real node.

The vLLM CPU image is built locally (or taken from the cache) and imported into the node; a tiny random-weight
Qwen2 (``tests/support/tiny_qwen.py``, run under the engine venv) reaches the pod through a hostPath
PersistentVolume and the spec's ``model.source.pvc``; the demo waits for ``Ready`` and prints a chat completion
answered through the fleet's Service. The model talks nonsense: the point is that every layer is real.
"""

from __future__ import annotations

import json
import subprocess
import time
from pathlib import Path
from typing import Any

from qwen_fleet_dev import cachelock, engine_image
from qwen_fleet_dev.cluster import KubectlError, LocalCluster
from qwen_fleet_dev.local_fleet import apply, cpu_fleet, model_volume, service_url, wait_for_answer

NAME = "qwen-tiny"
NAMESPACE = "default"


def say(message: str) -> None:
    print(f"==> {message}", flush=True)


def write_tiny_model(directory: Path) -> Path:
    """The tiny Qwen2 of the test suite, written by the engine venv's python (it needs torch)."""
    python = engine_image.engine_venv() / "bin" / "python"
    script = engine_image.REPO_ROOT / "tests" / "support" / "tiny_qwen.py"
    done = subprocess.run([str(python), str(script), str(directory)], capture_output=True, text=True, check=False)
    if done.returncode != 0:
        raise RuntimeError(f"writing the tiny model failed: {done.stderr.strip()[-2000:]}")
    return directory


def serve_tiny_model(cluster: LocalCluster, workdir: Path) -> dict[str, Any]:
    """Image, model, fleet; returns the first chat completion answered through the Service."""
    assert cluster.real_node is not None
    say("the vLLM CPU engine image (built once into ~/.cache/qwen-fleet/images, minutes cold)")
    image = engine_image.ensure_engine_image()
    size = cachelock.size(cachelock.tree_bytes(image.archive))
    with cachelock.step("image-import", f"importing {image.tag} ({size}) into the real node's containerd",
                        "~2 min (126 s measured warm on 2 cores)", why="pods use imagePullPolicy: Never"):
        cluster.real_node.import_archive_dir(image.archive)
    model = write_tiny_model(workdir / "tiny-qwen2")
    say(f"applying QwenInference {NAME} (device: CPU, model from a PersistentVolumeClaim)")
    began = time.monotonic()
    apply(cluster, NAMESPACE, [*model_volume(NAMESPACE, model), cpu_fleet(NAME, image.tag)])
    with cachelock.step("first-answer", f"waiting for {NAME}'s first answer through its Service",
                        "~2 min (pod start, engine warm-up ~45 s)", why="the operator renders it, the node runs it",
                        now=lambda: pod_state(cluster, NAME)):
        answer = wait_for_answer(cluster, NAMESPACE, NAME)
    url = service_url(cluster, NAMESPACE, NAME)
    say(f"first answer {time.monotonic() - began:.0f}s after kubectl apply, through the Service at {url}")
    return answer


def service_url_of(service_json: str) -> str:
    """``http://<ClusterIP>:<port>`` of a Service (``kubectl get service -o json``), its port named http."""
    svc = json.loads(service_json)
    port = next(p["port"] for p in svc["spec"]["ports"] if p.get("name") == "http")
    return f"http://{svc['spec']['clusterIP']}:{port}"


def pod_state(cluster: LocalCluster, name: str) -> str:
    """The fleet's pods as a heartbeat shows them: ``<pod> Running ready=false``."""
    query = ("jsonpath={range .items[*]}{.metadata.name} {.status.phase} "
             "ready={.status.containerStatuses[0].ready}{','}{end}")
    try:
        out = cluster.kubectl("get", "pods", "-n", NAMESPACE, "-l", f"qwenfleet.io/inference={name}", "-o",
                              query).stdout
    except (KubectlError, subprocess.TimeoutExpired) as exc:
        return f"pods not readable: {str(exc)[:80]}"
    return out.strip(",") or "no pod yet"


def print_answer(answer: dict[str, Any]) -> None:
    print(json.dumps({"model": answer.get("model"), "choices": answer.get("choices"), "usage": answer.get("usage")},
                     indent=1))
