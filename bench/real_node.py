"""The real node's costs: cluster start with a real node, a pod from apply to Ready and to its first answer,
and the teardown. `python -m bench.real_node` writes bench/results/real-node.json.

What a test on real pods pays before its own work starts; the engine's start is measured elsewhere.
"""

from __future__ import annotations

import json
import statistics
import sys
import tempfile
import time
import urllib.request
from pathlib import Path

from qwen_fleet import versions
from qwen_fleet_dev import binaries
from qwen_fleet_dev.cluster import LocalCluster
from qwen_fleet_dev.images import BUSYBOX_IMAGE

RESULTS = Path(__file__).resolve().parent / "results"
_DIRECT = urllib.request.build_opener(urllib.request.ProxyHandler({}))
POD = {
    "apiVersion": "v1", "kind": "Pod", "metadata": {"name": "web"},
    "spec": {"nodeSelector": {"type": "real"}, "terminationGracePeriodSeconds": 1, "containers": [{
        "name": "web", "image": BUSYBOX_IMAGE, "imagePullPolicy": "Never",
        "command": ["sh", "-c", "mkdir -p /www && echo ok > /www/index.html && exec httpd -f -p 8080 -h /www"],
        "readinessProbe": {"httpGet": {"path": "/index.html", "port": 8080}, "periodSeconds": 1}}]},
}


def one_run(workdir: Path) -> dict[str, float]:
    cluster = LocalCluster(workdir=workdir, node_pools=(), real_node=True)
    try:
        cluster.start()
        began = time.monotonic()
        cluster.kubectl("apply", "-f", "-", input=json.dumps(POD))
        cluster.kubectl("wait", "--for=condition=Ready", "pod/web", "--timeout=120s", timeout=150)
        ready = time.monotonic() - began
        ip = cluster.kubectl("get", "pod", "web", "-o", "jsonpath={.status.podIP}").stdout
        with _DIRECT.open(f"http://{ip}:8080/index.html", timeout=5) as resp:
            assert resp.read() == b"ok\n"
        answered = time.monotonic() - began
    finally:
        stopping = time.monotonic()
        cluster.stop()
        stopped = time.monotonic() - stopping
    return {"startup_seconds": round(cluster.startup_seconds or 0, 2), "pod_ready_seconds": round(ready, 2),
            "pod_answered_seconds": round(answered, 2), "teardown_seconds": round(stopped, 2)}


def main(runs: int = 3) -> int:
    binaries.ensure(real_node=True)
    results = []
    for _ in range(runs):
        with tempfile.TemporaryDirectory() as tmp:
            results.append(one_run(Path(tmp) / "c"))
        print(json.dumps(results[-1]), flush=True)
    out = {"kubernetes": versions.KUBERNETES, "runs": results,
           "median": {key: statistics.median(r[key] for r in results) for key in results[0]},
           "what": "LocalCluster(real_node=True, no kwok nodes): etcd, apiserver, controller-manager, scheduler, "
                   "kwok, then containerd + kubelet + kube-proxy until the node is Ready; a busybox httpd pod "
                   "from kubectl apply to Ready (readiness probe every 1 s) and to its first answer on the pod IP "
                   "from the host; stop() until every trace is gone. Warm binaries."}
    RESULTS.mkdir(exist_ok=True)
    (RESULTS / "real-node.json").write_text(json.dumps(out, indent=1) + "\n")
    print(json.dumps(out["median"]))
    return 0


if __name__ == "__main__":
    sys.exit(main())
