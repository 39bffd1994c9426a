"""The cluster target: a QwenInference's ``spec.engine`` is patched per setting and vLLM's client runs in a Job.

Why a Job and not ``kubectl port-forward`` (docs/bench-serving.md): a port-forward reaches one pod through the
apiserver and the kubelet's stream, so a fleet of several replicas would be measured as one, and the tunnel's
own latency and throughput cap would be in every TTFT; and the client would need a local vLLM of the
server's version. The Job runs the fleet's own image (the same vLLM), sends through the fleet's Service as
in-cluster clients do, and reads the tokenizer where the server reads its model (the same volumes and env).

Pure: ``rollout_state`` (has the fleet rolled out the patched spec?) and ``render_bench_job``. I/O: the
``ClusterTarget`` executor, through the official client.
"""

from __future__ import annotations

import copy
import json
import time
from collections.abc import Mapping
from typing import Any, Literal

from qwen_fleet.api import GROUP, PLURAL, VERSION
from qwen_fleet.api.conditions import ConditionType, conditions_of, find_condition
from qwen_fleet.api.security import ApiKeySecretRef
from qwen_fleet.servebench.client import LAUNCHER, Workload, client_args, parse_result
from qwen_fleet.servebench.sweep import Row, Setting

RESULT_DIR = "/tmp/qwen-fleet-bench"
RESULT_FILE = "result.json"
RESULT_MARKER = "=== qwen-fleet bench-serving result ==="
MANAGED_BY = "qwen-fleet-bench-serving"
# vLLM 0.32's benchmark client sends $OPENAI_API_KEY as Authorization: Bearer on every request
# (vllm/benchmarks/lib/endpoint_request_func.py _get_headers).
CLIENT_API_KEY_ENV = "OPENAI_API_KEY"
State = Literal["ready", "waiting", "stalled"]


def _condition(obj: Mapping[str, Any], kind: str) -> dict[str, Any]:
    return dict(find_condition(conditions_of(obj), kind) or {})


def rollout_state(qwi: Mapping[str, Any], generation: int) -> tuple[State, str]:
    """Whether the fleet serves ``generation`` of its spec: the operator has observed it, is not Stalled on it,
    and reports Ready for it (the operator's Ready means every desired replica is updated and available)."""
    status = qwi.get("status") or {}
    if int(status.get("observedGeneration") or 0) < generation:
        return "waiting", f"the operator has not yet observed generation {generation}"
    stalled = _condition(qwi, ConditionType.STALLED)
    if stalled.get("status") == "True" and int(stalled.get("observedGeneration") or generation) >= generation:
        return "stalled", f"Stalled ({stalled.get('reason')}): {stalled.get('message')}"
    ready = _condition(qwi, ConditionType.READY)
    if ready.get("status") == "True" and int(ready.get("observedGeneration") or generation) >= generation:
        return "ready", ready.get("message") or "Ready"
    return "waiting", f"Ready={ready.get('status', 'Unknown')} ({ready.get('reason')}): {ready.get('message')}"


def _arg(args: list[str], flag: str) -> str | None:
    for i, arg in enumerate(args):
        if arg == flag and i + 1 < len(args):
            return args[i + 1]
        if arg.startswith(flag + "="):
            return arg.split("=", 1)[1]
    return None


def render_bench_job(deployment: Mapping[str, Any], endpoint: str, workload: Workload, job_name: str,
                     deadline_s: int, api_key: ApiKeySecretRef | None = None) -> dict[str, Any]:
    """A Job that runs ``vllm bench serve`` once against ``endpoint`` (the fleet's Service URL, ``/v1`` or not)
    with the image, environment and model volumes of the fleet's server container, and prints the result.
    ``api_key``: the Secret key the client sends (as $OPENAI_API_KEY, from a secretKeyRef: never in the Job)."""
    pod = deployment["spec"]["template"]["spec"]
    server = next(c for c in pod["containers"] if c["name"] == "vllm")
    args = list(server.get("args", []))
    model = _arg(args, "--model")
    if model is None:
        raise ValueError(f"the server container of {deployment['metadata']['name']} has no --model argument")
    tokenizer = _arg(args, "--tokenizer") or model
    served = _arg(args, "--served-model-name") or model
    mounts = [dict(m, readOnly=True) for m in server.get("volumeMounts", []) if m["mountPath"] != "/dev/shm"]
    names = {m["name"] for m in mounts}
    volumes = [copy.deepcopy(v) for v in pod.get("volumes", []) if v["name"] in names]
    for volume in volumes:
        if "persistentVolumeClaim" in volume:
            volume["persistentVolumeClaim"]["readOnly"] = True
    base_url = endpoint.rstrip("/").removesuffix("/v1")
    bench = client_args(workload, base_url, served, tokenizer, RESULT_DIR, RESULT_FILE)
    script = f'python3 -c "$0" "$@" && echo "{RESULT_MARKER}" && cat {RESULT_DIR}/{RESULT_FILE}'
    labels = {"app.kubernetes.io/managed-by": MANAGED_BY,
              "app.kubernetes.io/instance": deployment["metadata"]["name"]}
    env = [e for e in copy.deepcopy(server.get("env", [])) if api_key is None or e["name"] != CLIENT_API_KEY_ENV]
    if api_key is not None:
        env.append({"name": CLIENT_API_KEY_ENV,
                    "valueFrom": {"secretKeyRef": {"name": api_key.name, "key": api_key.key}}})
    container = {
        "name": "bench",
        "image": server["image"],
        "imagePullPolicy": server.get("imagePullPolicy", "IfNotPresent"),
        "command": ["sh", "-c", script, LAUNCHER, *bench],
        "env": env,
        "volumeMounts": mounts,
        # The client is one asyncio process; it must not be CPU-starved, or its own delays enter the figures.
        "resources": {"requests": {"cpu": "1", "memory": "2Gi"}, "limits": {"memory": "4Gi"}},
        "securityContext": {"allowPrivilegeEscalation": False},
    }
    return {
        "apiVersion": "batch/v1",
        "kind": "Job",
        "metadata": {"name": job_name, "namespace": deployment["metadata"]["namespace"], "labels": labels},
        "spec": {
            "backoffLimit": 0,  # a failed run is a finding, not something to retry
            "activeDeadlineSeconds": deadline_s,
            "ttlSecondsAfterFinished": 3600,
            "template": {
                "metadata": {"labels": labels},
                "spec": {"restartPolicy": "Never", "enableServiceLinks": False,
                         "automountServiceAccountToken": False, "containers": [container], "volumes": volumes},
            },
        },
    }


def result_from_log(log: str) -> dict[str, Any]:
    """The result JSON the Job printed after :data:`RESULT_MARKER`."""
    lines = log.splitlines()
    if RESULT_MARKER not in lines:
        raise ValueError("the benchmark Job printed no result:\n" + "\n".join(lines[-20:]))
    rest = "\n".join(lines[lines.index(RESULT_MARKER) + 1:])
    return dict(json.loads(rest))


class ClusterTarget:
    """Measures a setting on a running fleet: merge-patch ``spec.engine``, wait for Ready on the new generation,
    run the client Job, read its result. Needs get/patch on qweninferences, get on deployments, create/get/
    delete on jobs, list pods and get pods/log in the namespace."""

    def __init__(self, api_client: Any, namespace: str, name: str, workload: Workload,
                 ready_timeout_s: float = 1800, job_timeout_s: int = 3600, poll_s: float = 5,
                 api_key: ApiKeySecretRef | None = None) -> None:
        from kubernetes import client

        # Any: the client's generated types mark every field Optional and return plain objects for custom
        # resources; the dicts and models this code reads are checked where they are used.
        self.custom: Any = client.CustomObjectsApi(api_client)
        self.apps: Any = client.AppsV1Api(api_client)
        self.batch: Any = client.BatchV1Api(api_client)
        self.core: Any = client.CoreV1Api(api_client)
        self.namespace, self.name, self.workload = namespace, name, workload
        self.ready_timeout_s, self.job_timeout_s, self.poll_s = ready_timeout_s, job_timeout_s, poll_s
        self.runs = 0
        self.api_key = api_key  # the Secret key the client Job sends (resolve_api_key)

    def get(self) -> dict[str, Any]:
        return dict(self.custom.get_namespaced_custom_object(GROUP, VERSION, self.namespace, PLURAL, self.name))

    def patch_engine(self, engine: Mapping[str, Any]) -> int:
        """Merge-patch ``spec.engine`` (a None value removes the field); returns the new generation."""
        body = {"spec": {"engine": dict(engine)}}
        out = self.custom.patch_namespaced_custom_object(GROUP, VERSION, self.namespace, PLURAL, self.name, body)
        return int(out["metadata"]["generation"])

    def wait_ready(self, generation: int) -> tuple[State, str]:
        deadline = time.monotonic() + self.ready_timeout_s
        state, message = rollout_state(self.get(), generation)
        while state == "waiting" and time.monotonic() < deadline:
            time.sleep(self.poll_s)
            state, message = rollout_state(self.get(), generation)
        return state, message

    def measure(self, setting: Setting) -> Row:
        from kubernetes.client.exceptions import ApiException

        try:
            generation = self.patch_engine(setting.engine_patch())
        except ApiException as err:
            if err.status in (400, 422):  # the CRD's schema or CEL rules refused the setting
                return Row(setting, error=f"refused: {_api_message(err)}")
            raise
        state, message = self.wait_ready(generation)
        if state != "ready":
            return Row(setting, error=message if state == "stalled" else f"not Ready in time: {message}")
        endpoint = self.get().get("status", {}).get("endpoint")
        if not endpoint:
            return Row(setting, error="the fleet reports no status.endpoint")
        deployment = self.apps.read_namespaced_deployment(self.name, self.namespace)
        deployment = self.apps.api_client.sanitize_for_serialization(deployment)
        self.runs += 1
        job_name = f"{self.name[:40]}-bench-{int(time.time())}-{self.runs}"
        job = render_bench_job(deployment, endpoint, self.workload, job_name, self.job_timeout_s, self.api_key)
        self.batch.create_namespaced_job(self.namespace, job)
        try:
            return self._job_row(setting, job_name)
        finally:
            self.batch.delete_namespaced_job(job_name, self.namespace, propagation_policy="Background")

    def _job_row(self, setting: Setting, job_name: str) -> Row:
        deadline = time.monotonic() + self.job_timeout_s + 60
        while time.monotonic() < deadline:
            status = self.batch.read_namespaced_job_status(job_name, self.namespace).status
            if status.succeeded or status.failed:
                break
            time.sleep(self.poll_s)
        else:
            return Row(setting, error=f"benchmark Job {job_name} did not finish")
        pods = self.core.list_namespaced_pod(self.namespace, label_selector=f"job-name={job_name}").items
        if not pods:
            return Row(setting, error=f"benchmark Job {job_name} left no pod")
        log = self.core.read_namespaced_pod_log(pods[0].metadata.name, self.namespace)
        try:
            return Row(setting, parse_result(result_from_log(log)))
        except ValueError as err:
            return Row(setting, error=f"benchmark Job {job_name}: {err}")


class KeySecretProblem(Exception):
    """--api-key-secret names a Secret or key that is not there: said before the fleet is touched."""


def parse_key_secret(text: str) -> tuple[str, str | None]:
    """``NAME[:KEY]`` of --api-key-secret."""
    name, _, key = text.partition(":")
    if not name or (":" in text and not key):
        raise ValueError(f"--api-key-secret must be NAME or NAME:KEY, not {text!r}")
    return name, key or None


def pick_key(secret_name: str, keys: list[str], wanted: str | None) -> str:
    """The data key of the Secret the client sends: ``wanted``, or the first in sorted order (a gateway key
    Secret holds one client per data key: the first client's key is as good as any for a benchmark)."""
    if wanted is not None:
        if wanted not in keys:
            raise KeySecretProblem(f"Secret {secret_name} has no key {wanted!r} (it has: {', '.join(sorted(keys))})")
        return wanted
    if not keys:
        raise KeySecretProblem(f"Secret {secret_name} holds no keys")
    return sorted(keys)[0]


def resolve_api_key(core: Any, namespace: str, fleet: Mapping[str, Any],
                    option: str | None) -> tuple[ApiKeySecretRef | None, str]:
    """(the Secret key the client Job sends, a line saying which) from --api-key-secret NAME[:KEY], else from the
    fleet's serving.apiKeySecretRef (the key its vLLM checks), else none. With the option, the Secret is read to
    check that it and its key exist (and to find the first key); only its key names are used, never a value."""
    from qwen_fleet.api.security import fleet_api_key_ref

    if option is None:
        ref = fleet_api_key_ref(fleet)
        if ref is None:
            return None, "no API key sent (the fleet has no serving.apiKeySecretRef)"
        return ref, f"sending the key of Secret {ref.name}, key {ref.key} (the fleet's serving.apiKeySecretRef)"
    from kubernetes.client.exceptions import ApiException

    name, wanted = parse_key_secret(option)
    try:
        secret = core.read_namespaced_secret(name, namespace)
    except ApiException as err:
        what = "does not exist" if err.status == 404 else f"cannot be read: {err.status} {err.reason}"
        raise KeySecretProblem(f"Secret {namespace}/{name} (--api-key-secret) {what}") from None
    key = pick_key(f"{namespace}/{name}", list((secret.data or {}).keys()), wanted)
    return ApiKeySecretRef(name=name, key=key), f"sending the key of Secret {name}, key {key} (--api-key-secret)"


def _api_message(err: Any) -> str:
    try:
        return str(json.loads(err.body).get("message", err.reason))
    except (TypeError, ValueError):
        return str(err.reason)
