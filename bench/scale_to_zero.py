"""Issue 18's cold start: a fleet idles to zero pods; requests sent through the KEDA HTTP add-on's interceptor are
held while KEDA starts a replica and a real vLLM engine starts behind it; every request is answered.

Real programs: the control plane (kube-apiserver, the controller manager with the HPA, EndpointSlice and
Deployment controllers, the scheduler), the operator, Prometheus, KEDA v2.21.0 (operator and metrics apiserver) and
the KEDA HTTP add-on v0.15.0 (interceptor, external scaler, operator), and one vLLM CPU engine (tiny random-weight
Qwen2, FACTS.md's recipe) started when the fleet's pod is made, as a container would be.

What stands in, and why: kwok pods run no containers. The fleet's pods carry a label kwok's pod-ready stage leaves
alone (``LocalCluster(held_pod_label=...)``), and :class:`EngineKubelet` does the kubelet's part for them: when
a pod is scheduled it starts the engine (the container starts: phase Running, ``startedAt``), and when the
engine's ``/health`` answers, which is the readiness probe the operator renders, it reports the pod Ready; when
the pod is deleted it stops the engine. So the pod turns Ready exactly when a real server serves, and the
cold start in the fleet's status is the engine's real start-up. The interceptor dials the fleet's Service as
``<fleet>.<namespace>:<port>``: its hosts file (cluster DNS, qwen_fleet_dev/hostsfile.py) maps that name to the
loopback address the engine listens on. Prometheus scrapes the engine for the pod (PodTarget, as in
bench/keda_vs_hpa.py), so KEDA's queue-depth and KV-cache triggers read the real engine.

``python -m bench.scale_to_zero`` writes bench/results/scale-to-zero.{json,md} (the real engine: its cold start is
the figure); tests/integration/test_keda_http.py runs one cycle and checks it with the llm-d inference simulator
as the engine (``simulate=True``): what it checks is the add-on holding requests, KEDA's wake and the operator's
status, not the engine, whose own scale to zero and cold start on a real pod are
tests/node/test_scale_to_zero_node.py's.
"""

from __future__ import annotations

import contextlib
import json
import random
import tempfile
import threading
import time
import urllib.error
import urllib.request
from collections.abc import Iterator
from dataclasses import asdict, dataclass, field
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from bench.autoscaling import ENGINE_ENV, EarlyVllmServer
from bench.keda_vs_hpa import Env, environment
from qwen_fleet import versions
from qwen_fleet.render.common import CONTAINER_NAME, INSTANCE_LABEL
from qwen_fleet_dev.cluster import LocalCluster, free_port
from qwen_fleet_dev.metrics_stack import PodTarget

ROOT = Path(__file__).resolve().parents[1]
FLEET = "zero"
IDLE_SECONDS = 60  # the API's minimum: the shortest wait for a fleet to go to zero
HOLD_SECONDS = 600  # an engine start on a loaded 2-core machine takes 1-3 minutes
REQUESTS = 4  # sent together at zero: each must be held, then answered
SERVED_MODEL = "qwen-tiny"
# No proxy from the environment: every address here is on this machine.
_DIRECT = urllib.request.build_opener(urllib.request.ProxyHandler({}))
# bench/autoscaling.py's engine recipe (eager: no torch.compile warm-up).
ENGINE_ARGS = ["--max-model-len", "1024", "--max-num-seqs", "4", "--dtype", "bfloat16", "--enforce-eager"]


def _now() -> str:
    return datetime.now(UTC).strftime("%Y-%m-%dT%H:%M:%SZ")


def fleet_manifest(env: Env, service_port: int, name: str = FLEET, hold_seconds: int = HOLD_SECONDS
                   ) -> dict[str, Any]:
    assert env.add_on is not None
    return {"apiVersion": "qwenfleet.io/v1alpha1", "kind": "QwenInference", "metadata": {"name": name},
            "spec": {"model": {"name": "Qwen/Qwen3-4B-Instruct-2507"}, "engine": {"maxModelLen": 1024},
                     "gpu": {"product": "NVIDIA-A10G"}, "service": {"port": service_port},
                     "autoscaling": {
                         "enabled": True, "engine": "keda", "minReplicas": 0, "maxReplicas": 1,
                         "keda": {"prometheusAddress": env.stack.prometheus_url},
                         "scaleToZero": {"idleSeconds": IDLE_SECONDS, "holdTimeoutSeconds": hold_seconds,
                                         # Where this environment runs the add-on's programs.
                                         "httpAddOn": {"scalerPort": env.add_on.scaler_port,
                                                       "interceptorPort": env.add_on.proxy_port}}}}}


@dataclass
class EngineKubelet:
    """The kubelet of the fleet's held pods: one real vLLM engine per pod, Ready when it serves."""

    env: Env
    namespace: str
    model_dir: Path
    python: str
    workdir: Path
    service_port: int
    address: str = field(default_factory=lambda: f"127.{random.randint(20, 250)}.{random.randint(0, 250)}.1")
    simulate: bool = False  # the llm-d inference simulator as the engine (tests/support/sim.py) instead of vLLM
    engines: dict[str, Any] = field(default_factory=dict)  # pod name -> VllmServer (or SimServer)
    marks: dict[str, float] = field(default_factory=dict)  # what happened when (time.monotonic())
    _ips: int = 0

    def __post_init__(self) -> None:
        assert self.env.add_on is not None
        self.env.add_on.route(FLEET, self.namespace, self.address)

    def pods(self) -> list[dict[str, Any]]:
        out = self.env.cluster.rest().get(f"/api/v1/namespaces/{self.namespace}/pods?labelSelector="
                                          f"{INSTANCE_LABEL.replace('/', '%2F')}%3D{FLEET}")
        return list(out.get("items") or [])

    def step(self, serve: bool = True) -> None:
        """One look at the pods: start an engine for a new scheduled pod (``serve``), report a started one Ready
        once it serves, stop the engine of a deleted one."""
        live = {}
        for pod in self.pods():
            name, deleting = pod["metadata"]["name"], pod["metadata"].get("deletionTimestamp")
            if not deleting:
                live[name] = pod
            if name not in self.engines and serve and not deleting and pod["spec"].get("nodeName"):
                self.marks.setdefault("pod_seen", time.monotonic())
                # Spawned from this thread, which outlives it (PR_SET_PDEATHSIG); its readiness is what this loop
                # watches, as the readiness probe would.
                self.engines[name] = self._engine(name)
                self.marks["engine_started"] = time.monotonic()
                self._report(pod, ready=False)
            elif name in self.engines and not self.engines[name].running():
                raise RuntimeError(f"the engine of pod {name} exited:\n{self.engines[name].tail()}")
            elif name in self.engines and not deleting and not _ready(pod) and _serves(self.engines[name]):
                self.marks["engine_healthy"] = time.monotonic()
                self.env.stack.set_pod_targets([PodTarget(f"{self.address}:{self.service_port}", self.namespace,
                                                          name, pod_labels=pod["metadata"]["labels"],
                                                          service=FLEET)])
                self._report(pod, ready=True)
                self.marks["pod_ready"] = time.monotonic()
        for name in [n for n in self.engines if n not in live]:
            self.env.stack.set_pod_targets([])
            self.engines.pop(name).stop()
            self.marks["engine_stopped"] = time.monotonic()

    def _engine(self, pod: str) -> Any:
        """The pod's engine, started (a simulator answers /health at once; vLLM's readiness is watched)."""
        if self.simulate:
            from tests.support.sim import SimServer

            # It listens on every IPv4 address, so on self.address too; a request of `send` in about 0.2 s.
            return SimServer(served_model_name=SERVED_MODEL, port=self.service_port, max_num_seqs=4,
                             max_model_len=1024, time_to_first_token=0.1, inter_token_latency=0.01,
                             log_path=self.workdir / f"sim-{pod}.log").start()
        return EarlyVllmServer(ENGINE_ARGS, ENGINE_ENV, self.model_dir, port=self.service_port, host=self.address,
                               served_model_name=SERVED_MODEL, python=self.python,
                               log_path=self.workdir / f"vllm-{pod}.log").begin()

    def stop(self) -> None:
        for server in self.engines.values():
            server.stop()
        self.engines.clear()

    def _report(self, pod: dict[str, Any], ready: bool) -> None:
        """The pod's status as a kubelet reports it: running since the engine started; Ready once it serves."""
        now, st = _now(), pod.get("status") or {}
        started = ((st.get("containerStatuses") or [{}])[0].get("state") or {}).get("running", {}).get(
            "startedAt") or now
        if not st.get("podIP"):
            self._ips += 1
        ip = st.get("podIP") or f"10.244.250.{self._ips}"
        scheduled = next((c for c in st.get("conditions") or [] if c.get("type") == "PodScheduled"), None)
        ready_state = "True" if ready else "False"
        conditions = [c for c in (scheduled,) if c] + [
            {"type": "Initialized", "status": "True", "lastTransitionTime": started},
            {"type": "ContainersReady", "status": ready_state, "lastTransitionTime": now},
            {"type": "Ready", "status": ready_state, "lastTransitionTime": now}]
        container = next(c for c in pod["spec"]["containers"] if c["name"] == CONTAINER_NAME)
        patch = {"status": {"phase": "Running", "podIP": ip, "podIPs": [{"ip": ip}], "startTime": started,
                            "conditions": conditions,
                            "containerStatuses": [{"name": container["name"], "image": container["image"],
                                                   "imageID": "", "ready": ready, "started": True,
                                                   "restartCount": 0, "state": {"running": {"startedAt": started}}}]}}
        done = self.env.cluster.kubectl("patch", "pod", pod["metadata"]["name"], "-n", self.namespace,
                                        "--subresource=status", "--type=merge", "-p", json.dumps(patch), check=False)
        if done.returncode != 0 and "NotFound" not in done.stderr:  # a pod deleted meanwhile is no failure
            raise RuntimeError(f"reporting pod {pod['metadata']['name']}'s status failed: {done.stderr}")


def _serves(server: Any) -> bool:
    """The readiness probe the operator renders: GET /health answers 200."""
    try:
        return bool(server.get("/health", timeout=2)[0] == 200)
    except OSError:
        return False


def _ready(pod: dict[str, Any]) -> bool:
    return any(c.get("type") == "Ready" and c.get("status") == "True" for c in (pod.get("status") or {}).get(
        "conditions") or [])


@dataclass
class Answer:
    index: int
    sent: float  # time.monotonic()
    done: float | None = None
    status: int | None = None
    body: str = ""
    cold_start_header: str | None = None  # the interceptor's X-KEDA-HTTP-Cold-Start
    choices: int | None = None  # of a 200 answer's JSON: the completions the engine returned
    completion_tokens: int | None = None


def send(env: Env, namespace: str, index: int, out: list[Answer], fleet: str = FLEET,
         model: str = SERVED_MODEL) -> None:
    """One completion through the interceptor, as a client of ``<fleet>-proxy.<namespace>`` sends it."""
    assert env.add_on is not None
    answer = Answer(index, time.monotonic())
    out.append(answer)
    body = json.dumps({"model": model, "prompt": f"Request {index}:", "max_tokens": 8}).encode()
    req = urllib.request.Request(env.add_on.proxy_url + "/v1/completions", data=body, method="POST",
                                 headers={"Content-Type": "application/json", "Host": f"{fleet}-proxy.{namespace}"})
    try:
        with _DIRECT.open(req, timeout=HOLD_SECONDS + 120) as resp:
            answer.status, answer.body = int(resp.status), resp.read().decode()
            answer.cold_start_header = resp.headers.get("X-KEDA-HTTP-Cold-Start")
        with contextlib.suppress(ValueError, KeyError, TypeError):
            parsed = json.loads(answer.body)
            answer.choices = len(parsed["choices"])
            answer.completion_tokens = int(parsed["usage"]["completion_tokens"])
    except urllib.error.HTTPError as err:
        answer.status, answer.body = err.code, err.read().decode(errors="replace")
    except OSError as err:
        answer.body = f"{type(err).__name__}: {err}"
    answer.done = time.monotonic()


def _autoscaling(env: Env, namespace: str) -> dict[str, Any]:
    qwi = env.cluster.rest().get(f"/apis/qwenfleet.io/v1alpha1/namespaces/{namespace}/qweninferences/{FLEET}")
    return dict((qwi.get("status") or {}).get("autoscaling") or {})


def _replicas(cluster: LocalCluster, namespace: str) -> int:
    dep = cluster.rest().get(f"/apis/apps/v1/namespaces/{namespace}/deployments/{FLEET}")
    return int((dep.get("spec") or {}).get("replicas", 1))


def until(what: str, check: Any, timeout: float, kubelet: EngineKubelet, serve: bool = True) -> Any:
    """Poll ``check`` while playing the kubelet; its first truthy value."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        kubelet.step(serve)
        with contextlib.suppress(Exception):
            got = check()
            if got:
                return got
        time.sleep(0.3)
    raise TimeoutError(f"timed out after {timeout:.0f}s waiting for {what}")


def wait_at_zero(env: Env, namespace: str, kubelet: EngineKubelet, serve: bool = True) -> dict[str, Any]:
    """The fleet idled to zero: no pod, the status says so. Its status.autoscaling then."""
    # The idle period, then KEDA's next look (pollingInterval 30 s), then the pods' deletion.
    return dict(until("the fleet at zero pods, status.autoscaling.scaledToZero", lambda: (
        _autoscaling(env, namespace) if _autoscaling(env, namespace).get("scaledToZero") is True
        and _replicas(env.cluster, namespace) == 0 and not kubelet.pods() else None), IDLE_SECONDS + 180, kubelet,
        serve))


def cold_start(env: Env, namespace: str, kubelet: EngineKubelet, t0: float) -> dict[str, Any]:
    """From zero: send REQUESTS requests at once, see them held, the fleet woken, every one answered."""
    assert env.add_on is not None
    kubelet.marks.clear()
    answers: list[Answer] = []
    sent = time.monotonic()
    threads = [threading.Thread(target=send, args=(env, namespace, i, answers), daemon=True) for i in range(REQUESTS)]
    for thread in threads:
        thread.start()
    route = f"{namespace}/{FLEET}"
    until("the requests held by the interceptor", lambda: (env.add_on.counts().get(route) or {}).get(
        "Concurrency") == REQUESTS, 30, kubelet)
    held_at = time.monotonic()
    answered_while_held = sum(1 for a in answers if a.done is not None)
    until("KEDA's scale from zero", lambda: _replicas(env.cluster, namespace) >= 1, 60, kubelet)
    woken_at = time.monotonic()
    until("every request answered", lambda: all(a.done for a in answers) and len(answers) == REQUESTS,
          HOLD_SECONDS + 120, kubelet)
    status = until("status.autoscaling.lastColdStart after the wake", lambda: _autoscaling(env, namespace) if (
        _autoscaling(env, namespace).get("lastColdStart") or {}).get("pod") in kubelet.engines else None, 60, kubelet)
    marks = {k: round(v - sent, 2) for k, v in kubelet.marks.items()}
    return {"t": round(sent - t0, 2), "answered_when_held_seen": answered_while_held,
            "held_seen_s": round(held_at - sent, 2),
            "keda_scaled_s": round(woken_at - sent, 2), **{f"{k}_s": v for k, v in marks.items()},
            "answers": [{**asdict(a), "sent": round(a.sent - sent, 2),
                         "done": None if a.done is None else round(a.done - sent, 2), "body": a.body[:300]}
                        for a in sorted(answers, key=lambda a: a.index)],
            "status": status}


@contextlib.contextmanager
def scale_to_zero_environment(workdir: Path, simulate: bool = False) -> Iterator[tuple[Env, str, str]]:
    """The KEDA environment with the add-on, fleet pods held for EngineKubelet; the engine's model and python
    (none with ``simulate``: the simulator needs neither)."""
    from tests.support.tiny_qwen import TinyQwen, make_tiny_model, vllm_python

    model, python = "", ""
    if not simulate:
        python = vllm_python()
        model = str(make_tiny_model(workdir / "model", TinyQwen(), python=python))
    with environment(workdir, http_add_on=True, held_pod_label=INSTANCE_LABEL) as env:
        yield env, model, python


def scenario(env: Env, namespace: str, model: str, python: str, workdir: Path, cycles: int,
             simulate: bool = False) -> dict[str, Any]:
    env.cluster.kubectl("create", "namespace", namespace)
    kubelet = EngineKubelet(env, namespace, Path(model), python, workdir, free_port(), simulate=simulate)
    t0 = time.monotonic()
    out: dict[str, Any] = {"cycles": []}
    try:
        env.cluster.kubectl("apply", "-n", namespace, "-f", "-", input=json.dumps(fleet_manifest(env,
                                                                                                 kubelet.service_port)))
        # The new fleet's first pod is left loading (no engine): it goes at the end of the idle period.
        out["first_zero"] = wait_at_zero(env, namespace, kubelet, serve=False)
        out["first_zero_s"] = round(time.monotonic() - t0, 2)
        for _ in range(cycles):
            cycle = cold_start(env, namespace, kubelet, t0)
            last = max(a["done"] or 0 for a in cycle["answers"])
            at_zero = wait_at_zero(env, namespace, kubelet)
            cycle["back_at_zero_after_last_answer_s"] = round(time.monotonic() - t0 - cycle["t"] - last, 2)
            cycle["status_at_zero"] = at_zero
            out["cycles"].append(cycle)
    finally:
        kubelet.stop()
    out["setup"] = {"idle_seconds": IDLE_SECONDS, "hold_timeout_seconds": HOLD_SECONDS, "requests": REQUESTS,
                    "keda": versions.KEDA, "keda_http_add_on": versions.KEDA_HTTP_ADDON, "vllm": versions.VLLM,
                    "engine": (f"llm-d inference simulator {versions.LLM_D_INFERENCE_SIM}" if simulate else
                               "vLLM CPU, tiny random-weight Qwen2 (FACTS.md), " + " ".join(ENGINE_ARGS))}
    return out


def markdown(results: dict[str, Any]) -> str:
    setup = results["setup"]
    lines = ["# Scale to zero: cold starts through the KEDA HTTP add-on", "",
             "Generated by `python -m bench.scale_to_zero` (module docstring: what is real, what stands in). "
             f"KEDA {setup['keda']}, KEDA HTTP add-on {setup['keda_http_add_on']}, vLLM {setup['vllm']} on CPU "
             f"({setup['engine']}). Idle period {setup['idle_seconds']} s, hold timeout "
             f"{setup['hold_timeout_seconds']} s, {setup['requests']} requests sent together at zero.", "",
             f"New fleet applied -> at zero (status.autoscaling.scaledToZero): {results['first_zero_s']} s.", "",
             "Seconds after the requests were sent:", "",
             "| cycle | held (interceptor count) | KEDA 0 -> 1 | engine started | engine /health | pod Ready "
             "| answers (first / last) | HTTP statuses | status lastColdStart (s) | split (sched / container / "
             "engine) | back at zero after last answer |",
             "| --- | --- | --- | --- | --- | --- | --- | --- | --- | --- | --- |"]
    for i, c in enumerate(results["cycles"], 1):
        done = [a["done"] for a in c["answers"] if a["done"] is not None]
        cold = c["status"].get("lastColdStart") or {}
        split = " / ".join(str(cold.get(k, "-")) for k in ("schedulingSeconds", "containerStartSeconds",
                                                             "engineStartSeconds"))
        lines.append(f"| {i} | {c['held_seen_s']} | {c['keda_scaled_s']} | {c.get('engine_started_s')} | "
                     f"{c.get('engine_healthy_s')} | {c.get('pod_ready_s')} | {min(done)} / {max(done)} | "
                     f"{sorted({a['status'] for a in c['answers']})} | {cold.get('seconds')} | {split} | "
                     f"{c['back_at_zero_after_last_answer_s']} |")
    answers = [a for c in results["cycles"] for a in c["answers"]]
    early = sum(1 for c in results["cycles"] for a in c["answers"] if (a["done"] or 0) < c["pod_ready_s"])
    lines += ["", f"Requests: {len(answers)} sent at zero, {sum(a['status'] == 200 for a in answers)} answered 200 "
              f"(each with its completion), {sum(a['cold_start_header'] == 'true' for a in answers)} marked "
              f"`X-KEDA-HTTP-Cold-Start: true` by the interceptor, {early} answered before its pod was Ready. "
              "Times are when the bench (polling every 0.3 s) saw each step: the engine can be seen starting "
              "before the Deployment's new count."]
    lines += ["", "The requests are held by the interceptor from the first moment (its count per route is what the "
              "add-on's scaler pushes to KEDA), KEDA scales the Deployment from 0 to 1 at once (a push, not its "
              "30 s polling), and the answers come once the pod is Ready. `lastColdStart` is the operator's own "
              "figure from the pod's timestamps (creation to Ready), whole seconds; the engine start dominates. "
              "This engine is a tiny model on CPU: a GPU replica adds image pull and weight loading (minutes, "
              "docs/autoscaling.md). Timings are from the project's 2-core machine, shared with other work.", ""]
    return "\n".join(lines)


def run(results_dir: Path, cycles: int = 2) -> dict[str, Any]:
    results_dir.mkdir(parents=True, exist_ok=True)
    with tempfile.TemporaryDirectory(prefix="qwen-fleet-bench-zero-") as tmp, \
            scale_to_zero_environment(Path(tmp)) as (env, model, python):
        out = scenario(env, "zero", model, python, Path(tmp), cycles)
    (results_dir / "scale-to-zero.json").write_text(json.dumps(out, indent=1))
    (results_dir / "scale-to-zero.md").write_text(markdown(out))
    return out


if __name__ == "__main__":
    figures = run(ROOT / "bench" / "results")
    print(markdown(figures))
