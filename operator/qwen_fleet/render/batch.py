"""A QwenBatch's children: the Job that does the work and, for the runner to report, its least RBAC. Pure.

Through a fleet, the Job runs ``qwen-fleet batch-run`` (the operator's own image) against the fleet's Service.
Dedicated, an init container of the same image stages the lines still to do, ``vllm run-batch`` answers them
on the pod's GPUs and appends its output, and a native sidecar reports the counts (docs/batch.md).

Names are fixed (``<batch>-batch``): a QwenBatch's spec is immutable (a CEL transition rule), so the Job never
needs replacing; a new batch is a new object, and a recreated one with the same output resumes it.
"""

from __future__ import annotations

import shlex
from typing import Any

from qwen_fleet.api import API_VERSION, GROUP
from qwen_fleet.api.batch import BATCH_KIND, BATCH_PLURAL, QwenBatch
from qwen_fleet.api.security import ApiKeySecretRef
from qwen_fleet.batchrun.runner import API_KEY_ENV
from qwen_fleet.config import MANAGED_BY
from qwen_fleet.plan import MODEL_MOUNT, default_shm_bytes
from qwen_fleet.plan import quantities as q
from qwen_fleet.render.common import MANAGED_BY_LABEL
from qwen_fleet.render.deployment import GPU_TOLERATION, env_var
from qwen_fleet.render.engine_args import EngineSettings
from qwen_fleet.render.security import HOME_DIR, TMP_DIR, restricted_container_context, restricted_pod_context

BATCH_LABEL = f"{GROUP}/batch"  # on the Job and its pods: how the operator finds a batch's Job
KUEUE_QUEUE_LABEL = "kueue.x-k8s.io/queue-name"
INPUT_MOUNT, OUTPUT_MOUNT, WORK_MOUNT = "/batch/input", "/batch/output", "/batch/work"
STAGED = f"{WORK_MOUNT}/pending.jsonl"
RESULT = f"{WORK_MOUNT}/result.jsonl"
# The users the pods run as (Pod Security Standard `restricted`: non-root, by number). Through a fleet the runner
# runs as the operator image's own user (images/operator/Dockerfile, 65532). Dedicated, every container runs as the
# engine image's user, 1000 (images/vllm: HOME, the HF cache and /tmp on emptyDirs), the runner's too: the stage
# container creates output.jsonl on the claim and the engine appends to it, so both must be one user.
RUNNER_UID = 65532
ENGINE_UID = 1000
HOME_MOUNT, TMP_MOUNT = HOME_DIR, TMP_DIR  # the engine image's, as a fleet's engine has them
# Appends argv[1] to argv[2] (what `cat a >> b` does), in one call.
APPEND = "import shutil, sys; shutil.copyfileobj(open(sys.argv[1], 'rb'), open(sys.argv[2], 'ab'))"


def job_name(batch: QwenBatch) -> str:
    return f"{batch.name}-batch"


def runner_name(batch: QwenBatch) -> str:
    return f"{batch.name}-batch-runner"


def batch_labels(batch: QwenBatch) -> dict[str, str]:
    # Not the fleet's instance label: the fleet's Service and pod watch must never take a batch pod for a server.
    return {"app.kubernetes.io/name": "qwen-batch", "app.kubernetes.io/instance": batch.name,
            "app.kubernetes.io/component": "batch", "app.kubernetes.io/part-of": "qwen-fleet",
            MANAGED_BY_LABEL: MANAGED_BY, BATCH_LABEL: batch.name}


def _meta(batch: QwenBatch, name: str, labels: dict[str, str] | None = None) -> dict[str, Any]:
    meta: dict[str, Any] = {"name": name, "namespace": batch.namespace, "labels": labels or batch_labels(batch)}
    uid = batch.metadata.get("uid")
    if uid:
        meta["ownerReferences"] = [{"apiVersion": API_VERSION, "kind": BATCH_KIND, "name": batch.name, "uid": uid,
                                    "controller": True, "blockOwnerDeletion": True}]
    return meta


def _volumes(batch: QwenBatch) -> tuple[list[dict[str, Any]], list[dict[str, Any]], list[str], list[str]]:
    """(volumes, mounts, input arguments, output arguments); one volume per claim, mounted once per use."""
    spec = batch.spec
    volumes: list[dict[str, Any]] = [{"name": "work", "emptyDir": {}}]
    mounts: list[dict[str, Any]] = [{"name": "work", "mountPath": WORK_MOUNT}]
    claims: dict[str, str] = {}

    def claim(name: str) -> str:
        if name not in claims:
            claims[name] = f"claim-{len(claims)}"
            volumes.append({"name": claims[name], "persistentVolumeClaim": {"claimName": name}})
        return claims[name]

    src, dst = spec.input, spec.output
    if src.config_map is not None:
        volumes.append({"name": "input", "configMap": {"name": src.config_map.name,
                                                       "items": [{"key": src.config_map.key, "path": "input.jsonl"}]}})
        mounts.append({"name": "input", "mountPath": INPUT_MOUNT, "readOnly": True})
        input_args = ["--input", f"{INPUT_MOUNT}/input.jsonl"]
    elif src.pvc is not None:
        mounts.append({"name": claim(src.pvc.claim_name), "mountPath": INPUT_MOUNT, "readOnly": True})
        input_args = ["--input", f"{INPUT_MOUNT}/{src.pvc.path}"]
    else:
        input_args = ["--input-url", str(src.url)]
    input_args += ["--max-input-bytes", str(src.max_bytes), "--max-input-lines", str(src.max_lines)]
    if dst.pvc is not None:
        mounts.append({"name": claim(dst.pvc.claim_name), "mountPath": OUTPUT_MOUNT})
        output_args = ["--output-dir", f"{OUTPUT_MOUNT}/{dst.pvc.path}"]
    else:
        assert dst.config_map is not None
        output_args = ["--output-configmap", dst.config_map.name, "--flush-seconds", str(dst.config_map.flush_seconds)]
    return volumes, mounts, input_args, output_args


def _runner(batch: QwenBatch, image: str, name: str, args: list[str], mounts: list[dict[str, Any]]) -> dict[str, Any]:
    return {"name": name, "image": image, "imagePullPolicy": "IfNotPresent",
            "command": ["qwen-fleet", "batch-run", *args, "--batch", f"{batch.namespace}/{batch.name}"],
            "volumeMounts": mounts, "securityContext": restricted_container_context(),
            "env": [{"name": "TMPDIR", "value": WORK_MOUNT}],  # a downloaded input lands on the emptyDir
            "resources": {"requests": {"cpu": "100m", "memory": "128Mi"}, "limits": {"memory": "1Gi"}},
            "terminationMessagePolicy": "FallbackToLogsOnError"}


def fleet_endpoint(batch: QwenBatch, port: int) -> str:
    assert batch.spec.fleet_ref is not None
    return f"http://{batch.spec.fleet_ref.name}.{batch.namespace}.svc:{port}"


def _fleet_pod(batch: QwenBatch, image: str, port: int, api_key: ApiKeySecretRef | None) -> dict[str, Any]:
    spec = batch.spec
    volumes, mounts, input_args, output_args = _volumes(batch)
    args = [*input_args, *output_args, "--endpoint", fleet_endpoint(batch, port),
            "--concurrency", str(spec.concurrency), "--priority", str(spec.priority),
            "--max-retries", str(spec.max_retries), "--timeout", str(spec.request_timeout_seconds)]
    runner = _runner(batch, image, "runner", args, mounts)
    if api_key is not None:
        # The fleet's own Secret key, resolved by the kubelet: the key is in no argument, object or log of ours.
        runner["env"].append({"name": API_KEY_ENV,
                              "valueFrom": {"secretKeyRef": {"name": api_key.name, "key": api_key.key}}})
    return {"containers": [runner], "volumes": volumes,
            "securityContext": restricted_pod_context(RUNNER_UID, RUNNER_UID)}


def model_claim_path(path: str) -> str:
    return f"{MODEL_MOUNT}/{path.strip('/')}".rstrip("/")


def run_batch_args(batch: QwenBatch) -> list[str]:
    """`vllm run-batch` arguments after -i/-o: the engine settings the spec names."""
    d = batch.spec.dedicated
    assert d is not None
    if d.model_claim is not None:
        # The weights from the claim; the lines keep naming the model as the spec does.
        args = ["--model", model_claim_path(d.model_claim.path), "--served-model-name", d.model]
    else:
        args = ["--model", d.model]
    if d.revision and d.model_claim is None:
        args += ["--revision", d.revision]
    if d.gpus > 1:
        args += ["--tensor-parallel-size", str(d.gpus)]
    # enforceEager false is vLLM's default and is not written out (a server's spec writes --no-enforce-eager).
    settings = EngineSettings(max_model_len=d.max_model_len, max_num_seqs=d.max_num_seqs,
                              gpu_memory_utilization=d.gpu_memory_utilization, dtype=d.dtype,
                              enforce_eager=True if d.enforce_eager else None)
    return args + settings.valued_args() + settings.switch_args()


def _dedicated_pod(batch: QwenBatch, runner_image: str, engine_image: str) -> dict[str, Any]:
    d = batch.spec.dedicated
    assert d is not None and batch.spec.output.pvc is not None
    volumes, mounts, input_args, output_args = _volumes(batch)
    out_dir = f"{OUTPUT_MOUNT}/{batch.spec.output.pvc.path}"
    # vLLM's run-batch writes its output file once, after the last answer: appended to output.jsonl only when the
    # run succeeded, so a killed run leaves no partial file behind and the next one stages the same lines. It
    # starts as a module, as the server does: the CPU build's `vllm` script cannot find its own metadata. The append
    # is Python's too: an engine image is sure to have python3 and a shell, not coreutils (the local CPU image has
    # no `cat`).
    script = (f'set -e\nif [ -s {STAGED} ]; then\n'
              f'  python3 -m vllm.entrypoints.openai.run_batch -i {STAGED} -o {RESULT} "$@"\n'
              f'  python3 -c {shlex.quote(APPEND)} {RESULT} {shlex.quote(out_dir)}/output.jsonl\nfi\n')
    limits: dict[str, Any] = {}
    requests: dict[str, Any] = {}
    # vLLM's processes exchange tensors through /dev/shm (the engine core's broadcast queue alone takes 160 MiB
    # on CPU), and a container's default is 64 MiB: a memory-backed one sized as a fleet's is, counted in the
    # memory limit as a fleet's is.
    shm = default_shm_bytes(d.gpus)
    if d.resources.cpu is not None:
        limits["cpu"] = requests["cpu"] = d.resources.cpu
    if d.resources.memory is not None:
        limits["memory"] = requests["memory"] = q.format_bytes(q.parse(d.resources.memory) + shm)
    volumes.append({"name": "dshm", "emptyDir": {"medium": "Memory", "sizeLimit": q.format_bytes(shm)}})
    if d.gpus:
        limits[d.gpu_resource_name] = d.gpus
    # A non-root user cannot write the image's /root: HOME (vLLM's compile caches) and /tmp on emptyDirs, the HF
    # cache on the work emptyDir.
    volumes += [{"name": "home", "emptyDir": {}}, {"name": "tmp", "emptyDir": {}}]
    env = [{"name": "HF_HOME", "value": f"{WORK_MOUNT}/hf"}, {"name": "HF_HUB_DISABLE_TELEMETRY", "value": "1"},
           {"name": "HOME", "value": HOME_MOUNT}]
    if d.model_claim is not None:
        env.append({"name": "HF_HUB_OFFLINE", "value": "1"})  # nothing to download: the weights are on the claim
        volumes.append({"name": "model", "persistentVolumeClaim": {"claimName": d.model_claim.claim_name,
                                                                    "readOnly": d.model_claim.read_only}})
        engine_mounts = [*mounts, {"name": "model", "mountPath": MODEL_MOUNT, "readOnly": d.model_claim.read_only}]
    else:
        engine_mounts = list(mounts)
    engine_mounts += [{"name": "dshm", "mountPath": "/dev/shm"}, {"name": "home", "mountPath": HOME_MOUNT},
                      {"name": "tmp", "mountPath": TMP_MOUNT}]
    mine = {v.name for v in d.env}
    env = [e for e in env if e["name"] not in mine] + [env_var(v) for v in d.env]
    engine: dict[str, Any] = {
        "name": "vllm", "image": d.image or engine_image, "imagePullPolicy": "IfNotPresent",
        "command": ["sh", "-c", script, "run-batch", *run_batch_args(batch)],
        "env": env,
        "volumeMounts": engine_mounts, "resources": {"limits": limits, "requests": requests},
        "securityContext": restricted_container_context(), "terminationMessagePolicy": "FallbackToLogsOnError",
    }
    stage = _runner(batch, runner_image, "stage", [*input_args, *output_args, "--stage", STAGED], mounts)
    follow = _runner(batch, runner_image, "progress", [*input_args, "--output-dir", out_dir, "--follow", STAGED],
                     mounts)
    follow["restartPolicy"] = "Always"  # a native sidecar: stopped (SIGTERM, a last report) once vllm ends
    return {"initContainers": [stage, follow], "containers": [engine], "volumes": volumes,
            "securityContext": restricted_pod_context(ENGINE_UID, ENGINE_UID)}


def _placement(batch: QwenBatch) -> dict[str, Any]:
    """spec.scheduling, with a dedicated pod's own nodeSelector (its entries win) and GPU toleration added."""
    sched, d = batch.spec.scheduling, batch.spec.dedicated
    out: dict[str, Any] = {}
    node_selector = {**sched.node_selector, **(d.node_selector if d is not None else {})}
    if node_selector:
        out["nodeSelector"] = node_selector
    tolerations = [t.model_dump(by_alias=True, exclude_none=True) for t in sched.tolerations]
    if d is not None and d.gpus:
        tolerations.append(dict(GPU_TOLERATION))
    if tolerations:
        out["tolerations"] = tolerations
    if sched.priority_class_name:
        out["priorityClassName"] = sched.priority_class_name
    return out


def render_job(batch: QwenBatch, runner_image: str, engine_image: str, fleet_port: int = 8000,
               api_key: ApiKeySecretRef | None = None) -> dict[str, Any]:
    """The batch's Job. Through a fleet, ``api_key`` is the fleet's ``serving.apiKeySecretRef`` (api/security.py
    ``fleet_api_key_ref``): the runner sends that key, read from the same Secret."""
    spec = batch.spec
    labels = batch_labels(batch)
    pod = _fleet_pod(batch, runner_image, fleet_port, api_key) if spec.fleet_ref is not None \
        else _dedicated_pod(batch, runner_image, engine_image)
    pod.update(_placement(batch))
    pod.update({"restartPolicy": "Never", "serviceAccountName": runner_name(batch), "enableServiceLinks": False})
    # podReplacementPolicy Failed: the Job starts a replacement pod only once the old one has really stopped
    # (phase Failed), not while it is still terminating: one writer of the output at a time.
    job_spec: dict[str, Any] = {"backoffLimit": spec.backoff_limit, "podReplacementPolicy": "Failed",
                                "template": {"metadata": {"labels": dict(labels)}, "spec": pod}}
    if spec.active_deadline_seconds is not None:
        job_spec["activeDeadlineSeconds"] = spec.active_deadline_seconds
    job_labels = dict(labels)
    if spec.dedicated is not None and spec.dedicated.queue_name:
        # Kueue admits a suspended Job that names its LocalQueue, and unsuspends it when the quota is free.
        job_labels[KUEUE_QUEUE_LABEL] = spec.dedicated.queue_name
        job_spec["suspend"] = True
    return {"apiVersion": "batch/v1", "kind": "Job", "metadata": _meta(batch, job_name(batch), job_labels),
            "spec": job_spec}


def render_runner_rbac(batch: QwenBatch) -> list[dict[str, Any]]:
    """ServiceAccount, Role, RoleBinding: the runner may apply its batch's status and, for a ConfigMap output,
    read and apply that ConfigMap; nothing else, and those objects only by name."""
    name = runner_name(batch)
    rules: list[dict[str, Any]] = [{"apiGroups": [GROUP], "resources": [f"{BATCH_PLURAL}/status"],
                                    "resourceNames": [batch.name], "verbs": ["patch"]}]
    if batch.spec.output.config_map is not None:
        rules.append({"apiGroups": [""], "resources": ["configmaps"],
                      "resourceNames": [batch.spec.output.config_map.name], "verbs": ["get", "patch"]})
    return [
        {"apiVersion": "v1", "kind": "ServiceAccount", "metadata": _meta(batch, name)},
        {"apiVersion": "rbac.authorization.k8s.io/v1", "kind": "Role", "metadata": _meta(batch, name),
         "rules": rules},
        {"apiVersion": "rbac.authorization.k8s.io/v1", "kind": "RoleBinding", "metadata": _meta(batch, name),
         "roleRef": {"apiGroup": "rbac.authorization.k8s.io", "kind": "Role", "name": name},
         "subjects": [{"kind": "ServiceAccount", "name": name, "namespace": batch.namespace}]},
    ]


def render_output_configmap(batch: QwenBatch) -> dict[str, Any] | None:
    """The output ConfigMap, so the runner's Role can name it (create cannot be limited to a name). No owner:
    the results outlive the QwenBatch. Applied without data: the runner owns the two keys."""
    sink = batch.spec.output.config_map
    if sink is None:
        return None
    return {"apiVersion": "v1", "kind": "ConfigMap",
            "metadata": {"name": sink.name, "namespace": batch.namespace, "labels": {BATCH_LABEL: batch.name}}}


def render_batch_children(batch: QwenBatch, runner_image: str, engine_image: str, fleet_port: int = 8000,
                          api_key: ApiKeySecretRef | None = None) -> list[dict[str, Any]]:
    """Everything, in the order it is applied: the output first, the Job last (its pod needs the rest)."""
    out = [c for c in (render_output_configmap(batch),) if c is not None]
    return [*out, *render_runner_rbac(batch), render_job(batch, runner_image, engine_image, fleet_port, api_key)]
