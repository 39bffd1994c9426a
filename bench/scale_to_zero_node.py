"""Issue 18's cold start on the real node: a fleet whose pod is a real vLLM CPU container idles to zero pods;
requests sent through the KEDA HTTP add-on's interceptor are held while KEDA scales the Deployment from 0 to 1, the
scheduler places the pod on the real node, the kubelet starts the engine image and its probes see vLLM serve; then
every request is answered.

Nothing stands in for the pod: it is the fleet's Deployment's pod as the operator renders it (the locally built
engine image, the tiny Qwen2 on a hostPath PersistentVolume: devtools/qwen_fleet_dev/local_fleet.py), run by the
real node's kubelet and containerd, Ready on its own readiness probe; the EndpointSlice controller turns its
endpoint ready. The split of the cold start (scheduling, container start, engine start) is the pod's own
timestamps, as the kubelet and the scheduler wrote them.

What stands in for the cluster, and why: KEDA, the add-on's programs, Prometheus and the operator run as processes
on the host (bench/keda_vs_hpa.py ``services``); the interceptor dials the fleet's Service as
``<fleet>.<namespace>:<port>``, which its hosts file (cluster DNS, devtools/qwen_fleet_dev/hostsfile.py) maps to the
Service's ClusterIP. The host reaches ClusterIPs and pod IPs through the real node's network namespace
(devtools/qwen_fleet_dev/nodenet.py: the Service range is routed to the node, where kube-proxy translates it), as
test_real_fleet's clients do. Prometheus scrapes nothing here: the queue-depth and KV-cache triggers read no series
(0, inactive), so the add-on's push alone wakes the fleet and the idle period alone takes it back to zero.

``python -m bench.scale_to_zero_node`` writes bench/results/scale-to-zero-real-node.{json,md};
tests/node/test_scale_to_zero_node.py runs one cycle and checks it.
"""

from __future__ import annotations

import json
import tempfile
import threading
import time
from collections.abc import Callable
from dataclasses import asdict
from datetime import datetime
from pathlib import Path
from typing import Any, TypeVar

from bench.keda_vs_hpa import Env, services
from bench.scale_to_zero import Answer, send
from qwen_fleet import versions
from qwen_fleet.render.common import INSTANCE_LABEL
from qwen_fleet_dev.cluster import LocalCluster
from qwen_fleet_dev.local_fleet import apply, cpu_fleet, model_volume

ROOT = Path(__file__).resolve().parents[1]
FLEET = "zero"
IDLE_SECONDS = 60  # the API's minimum
HOLD_SECONDS = 600  # a vLLM CPU container start on a loaded 2-core machine takes 1-3 minutes
REQUESTS = 4  # sent together at zero: each must be held, then answered
T = TypeVar("T")


def fleet_manifest(env: Env, image: str) -> dict[str, Any]:
    """The real-node CPU fleet (local_fleet.cpu_fleet) with scale to zero instead of a fixed replica count."""
    assert env.add_on is not None
    fleet = cpu_fleet(FLEET, image)
    spec = fleet["spec"]
    del spec["replicas"]
    spec["autoscaling"] = {
        "enabled": True, "engine": "keda", "minReplicas": 0, "maxReplicas": 1,
        "keda": {"prometheusAddress": env.stack.prometheus_url},
        "scaleToZero": {"idleSeconds": IDLE_SECONDS, "holdTimeoutSeconds": HOLD_SECONDS,
                        # Where this environment runs the add-on's programs.
                        "httpAddOn": {"scalerPort": env.add_on.scaler_port,
                                      "interceptorPort": env.add_on.proxy_port}}}
    return fleet


def until(what: str, check: Callable[[], T | None], timeout: float, interval: float = 0.3) -> T:
    deadline = time.monotonic() + timeout
    last: Any = None
    while time.monotonic() < deadline:
        try:
            last = check()
        except Exception as err:  # not there yet (404, no field): look again
            last = err
        if last and not isinstance(last, Exception):
            return last  # type: ignore[no-any-return]
        time.sleep(interval)
    raise TimeoutError(f"timed out after {timeout:.0f}s waiting for {what} (last: {last!r})")


def _ts(value: str) -> float:
    return datetime.fromisoformat(value.replace("Z", "+00:00")).timestamp()


def _get(cluster: LocalCluster, path: str) -> dict[str, Any]:
    return dict(cluster.rest().get(path))


def fleet_status(cluster: LocalCluster, ns: str) -> dict[str, Any]:
    return dict(_get(cluster, f"/apis/qwenfleet.io/v1alpha1/namespaces/{ns}/qweninferences/{FLEET}").get("status")
                or {})


def pods(cluster: LocalCluster, ns: str) -> list[dict[str, Any]]:
    selector = f"{INSTANCE_LABEL.replace('/', '%2F')}%3D{FLEET}"
    return list(_get(cluster, f"/api/v1/namespaces/{ns}/pods?labelSelector={selector}").get("items") or [])


def replicas(cluster: LocalCluster, ns: str) -> int:
    return int((_get(cluster, f"/apis/apps/v1/namespaces/{ns}/deployments/{FLEET}").get("spec") or {}).get(
        "replicas", 1))


def wait_at_zero(cluster: LocalCluster, ns: str) -> dict[str, Any]:
    """No pod left that runs or may (a terminating one counts; a finished one, e.g. evicted, does not), the
    Deployment at 0, the status says so: status.autoscaling then."""
    def at_zero() -> dict[str, Any] | None:
        auto = fleet_status(cluster, ns).get("autoscaling") or {}
        live = [p for p in pods(cluster, ns) if p["status"].get("phase") not in ("Failed", "Succeeded")]
        return auto if auto.get("scaledToZero") is True and replicas(cluster, ns) == 0 and not live else None
    # The idle period, KEDA's next poll (30 s), the pod's drain and shutdown.
    return until("the fleet at zero pods", at_zero, IDLE_SECONDS + 240, interval=1)


def pod_timeline(pod: dict[str, Any]) -> dict[str, Any]:
    """The pod's own start, as the API holds it (scheduler, kubelet): wall-clock seconds since the epoch."""
    conds = {c["type"]: c for c in pod["status"].get("conditions") or []}
    (state,) = [c for c in pod["status"]["containerStatuses"] if c["name"] == "vllm"]
    return {"pod": pod["metadata"]["name"], "node": pod["spec"].get("nodeName"),
            "created": _ts(pod["metadata"]["creationTimestamp"]),
            "scheduled": _ts(conds["PodScheduled"]["lastTransitionTime"]),
            "started": _ts(state["state"]["running"]["startedAt"]),
            "ready": _ts(conds["Ready"]["lastTransitionTime"]), "restarts": state["restartCount"]}


def setup(env: Env, ns: str, model_dir: Path, image: str) -> dict[str, Any]:
    """The fleet applied, the interceptor told where its Service is; back once it is at zero."""
    assert env.add_on is not None
    cluster = env.cluster
    cluster.kubectl("create", "namespace", ns)
    t0 = time.monotonic()
    apply(cluster, ns, [*model_volume(ns, model_dir), fleet_manifest(env, image)])
    svc = until("the fleet's Service", lambda: _get(cluster, f"/api/v1/namespaces/{ns}/services/{FLEET}"), 120)
    # Cluster DNS for the interceptor: <fleet>.<ns> is the Service's ClusterIP (kube-proxy on the node routes it).
    env.add_on.route(FLEET, ns, svc["spec"]["clusterIP"])
    first_zero = wait_at_zero(cluster, ns)
    return {"first_zero_s": round(time.monotonic() - t0, 2), "first_zero": first_zero,
            "cluster_ip": svc["spec"]["clusterIP"]}


def cold_start(env: Env, ns: str) -> dict[str, Any]:
    """From zero: REQUESTS requests at once through the interceptor; held, the fleet woken, every one answered."""
    assert env.add_on is not None
    cluster, add_on = env.cluster, env.add_on
    answers: list[Answer] = []
    sent_wall, sent = time.time(), time.monotonic()
    threads = [threading.Thread(target=send, args=(env, ns, i, answers, FLEET, FLEET), daemon=True)
               for i in range(REQUESTS)]
    for thread in threads:
        thread.start()
    route = f"{ns}/{FLEET}"
    until("the requests held by the interceptor",
          lambda: (add_on.counts().get(route) or {}).get("Concurrency") == REQUESTS, 30)
    held_at = time.monotonic()
    answered_while_held = sum(1 for a in answers if a.done is not None)
    until("KEDA's scale from zero", lambda: replicas(cluster, ns) >= 1, 60, interval=0.2)
    woken_at = time.monotonic()
    for thread in threads:
        thread.join(HOLD_SECONDS + 120)
    done_wall = time.time()
    (pod,) = until("the woken pod, Ready", lambda: [p for p in pods(cluster, ns) if any(
        c["type"] == "Ready" and c["status"] == "True" for c in p["status"].get("conditions") or [])], 60)
    timeline = pod_timeline(pod)
    status = until("status.autoscaling.lastColdStart of that pod", lambda: (
        fleet_status(cluster, ns).get("autoscaling") if ((fleet_status(cluster, ns).get("autoscaling") or {}).get(
            "lastColdStart") or {}).get("pod") == timeline["pod"] else None), 60)
    to_wall = sent_wall - sent  # monotonic -> wall clock
    return {
        "answered_when_held_seen": answered_while_held, "held_seen_s": round(held_at - sent, 2),
        "keda_scaled_s": round(woken_at - sent, 2),
        # The pod's own timestamps (whole seconds), relative to the moment the requests were sent.
        "pod": {k: (round(v - sent_wall, 2) if isinstance(v, float) else v) for k, v in timeline.items()},
        "pod_split_s": {"scheduling": timeline["scheduled"] - timeline["created"],
                        "container_start": timeline["started"] - timeline["scheduled"],
                        "engine_start": timeline["ready"] - timeline["started"],
                        "created_to_ready": timeline["ready"] - timeline["created"]},
        "answers": [{**asdict(a), "sent": round(a.sent - sent, 2),
                     "done": None if a.done is None else round(a.done - sent, 2),
                     "done_wall": None if a.done is None else round(a.done + to_wall, 2), "body": a.body[:300]}
                    for a in sorted(answers, key=lambda a: a.index)],
        "all_answered_s": round(done_wall - sent_wall, 2),
        "status": status,
    }


def scenario(env: Env, ns: str, model_dir: Path, image: str, cycles: int = 1) -> dict[str, Any]:
    out: dict[str, Any] = {**setup(env, ns, model_dir, image), "cycles": []}
    for _ in range(cycles):
        cycle = cold_start(env, ns)
        after = time.monotonic()
        cycle["status_at_zero"] = wait_at_zero(env.cluster, ns)
        cycle["back_at_zero_after_last_answer_s"] = round(time.monotonic() - after, 2)
        out["cycles"].append(cycle)
    out["setup"] = {"idle_seconds": IDLE_SECONDS, "hold_timeout_seconds": HOLD_SECONDS, "requests": REQUESTS,
                    "keda": versions.KEDA, "keda_http_add_on": versions.KEDA_HTTP_ADDON, "vllm": versions.VLLM,
                    "engine": f"vLLM CPU image {image}, tiny random-weight Qwen2 on a hostPath PV, 1 CPU, eager"}
    return out


def markdown(results: dict[str, Any]) -> str:
    setup_ = results["setup"]
    lines = ["# Scale to zero on the real node: cold starts of a real vLLM pod", "",
             "Generated by `python -m bench.scale_to_zero_node` (module docstring: what is real, what stands in), or "
             "from tests/node/test_scale_to_zero_node.py's figures. "
             f"KEDA {setup_['keda']}, KEDA HTTP add-on {setup_['keda_http_add_on']}, vLLM {setup_['vllm']} "
             f"({setup_['engine']}). Idle period {setup_['idle_seconds']} s, hold timeout "
             f"{setup_['hold_timeout_seconds']} s, {setup_['requests']} requests sent together at zero.", "",
             *([f"This run: {results['source']}.", ""] if results.get("source") else []),
             f"New fleet applied -> at zero: {results['first_zero_s']} s.", "",
             "Seconds after the requests were sent (pod times are the API's, whole seconds):", "",
             "| cycle | held (interceptor count) | KEDA 0 -> 1 | pod created | scheduled | container running | "
             "pod Ready | answers (first / last) | HTTP statuses | lastColdStart (s) | split sched / container / "
             "engine (s) | back at zero after last answer |",
             "| --- | --- | --- | --- | --- | --- | --- | --- | --- | --- | --- | --- |"]
    for i, c in enumerate(results["cycles"], 1):
        done = [a["done"] for a in c["answers"] if a["done"] is not None]
        cold = c["status"].get("lastColdStart") or {}
        split = " / ".join(str(cold.get(k, "-")) for k in ("schedulingSeconds", "containerStartSeconds",
                                                             "engineStartSeconds"))
        pod = c["pod"]
        lines.append(f"| {i} | {c['held_seen_s']} | {c['keda_scaled_s']} | {pod['created']} | {pod['scheduled']} | "
                     f"{pod['started']} | {pod['ready']} | {min(done)} / {max(done)} | "
                     f"{sorted({a['status'] for a in c['answers']})} | {cold.get('seconds')} | {split} | "
                     f"{c['back_at_zero_after_last_answer_s']} |")
    answers = [a for c in results["cycles"] for a in c["answers"]]
    lines += ["", f"Requests: {len(answers)} sent at zero, {sum(a['status'] == 200 for a in answers)} answered 200, "
              f"{sum(a['cold_start_header'] == 'true' for a in answers)} marked `X-KEDA-HTTP-Cold-Start: true` by "
              "the interceptor. The engine image was already in the node's containerd (imported once, as a "
              "registry pull would leave it cached), so the container start is the runtime's, not a pull. "
              "Timings are from the project's 2-core machine, shared with other work.", ""]
    return "\n".join(lines)


def run(results_dir: Path, cycles: int = 2) -> dict[str, Any]:
    from tests.support.tiny_qwen import TinyQwen, make_tiny_model, vllm_python

    from qwen_fleet_dev import binaries
    from qwen_fleet_dev.engine_image import ensure_engine_image

    binaries.ensure(real_node=True)
    with tempfile.TemporaryDirectory(prefix="qwen-fleet-bench-zero-node-") as tmp:
        work = Path(tmp)
        model = make_tiny_model(work / "model", TinyQwen(), python=vllm_python())
        image = ensure_engine_image()
        cluster = LocalCluster(workdir=work / "cluster", real_node=True)
        cluster.start()
        try:
            assert cluster.real_node is not None
            cluster.real_node.import_archive_dir(image.archive)
            with services(cluster, work, http_add_on=True) as env:
                out = scenario(env, "zero", model, image.tag, cycles)
        finally:
            cluster.stop()
    results_dir.mkdir(parents=True, exist_ok=True)
    write(results_dir, out)
    return out


def write(results_dir: Path, out: dict[str, Any]) -> None:
    (results_dir / "scale-to-zero-real-node.json").write_text(json.dumps(out, indent=1))
    (results_dir / "scale-to-zero-real-node.md").write_text(markdown(out))


if __name__ == "__main__":
    print(markdown(run(ROOT / "bench" / "results")))
