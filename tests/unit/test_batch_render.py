"""What a QwenBatch becomes: the Job (through a fleet, or vllm run-batch on its own GPUs) and the runner's
least RBAC."""

from __future__ import annotations

from typing import Any

from qwen_fleet.api.batch import QwenBatch
from qwen_fleet.cli import build_parser
from qwen_fleet.render.batch import KUEUE_QUEUE_LABEL, render_batch_children, render_job, render_runner_rbac
from tests.invalid_batch_specs import BATCH_BASE
from tests.invalid_specs import merged
from tests.support.pss import restricted_violations

RUNNER, ENGINE = "ghcr.io/qwen-fleet/operator:9.9.9", "vllm/vllm-openai:v0.32.0"


def _batch(patch: dict[str, Any] | None = None, uid: str | None = "u-1") -> QwenBatch:
    meta: dict[str, Any] = {"name": "sums", "namespace": "team"}
    if uid:
        meta["uid"] = uid
    return QwenBatch.model_validate({"metadata": meta, "spec": merged(patch or {}, BATCH_BASE)})


def _args(command: list[str]) -> Any:
    """The command as `qwen-fleet` itself parses it: the operator writes what the runner reads."""
    assert command[:2] == ["qwen-fleet", "batch-run"]
    return build_parser().parse_args(command[1:])


def test_fleet_job_runs_the_runner_against_the_fleet_service_with_the_specs_settings() -> None:
    job = render_job(_batch({"concurrency": 8, "priority": 20}), RUNNER, ENGINE, fleet_port=8080)
    pod = job["spec"]["template"]["spec"]
    (runner,) = pod["containers"]
    assert runner["image"] == RUNNER
    args = _args(runner["command"])  # the runner's own parser reads what the operator wrote
    assert args.endpoint == "http://qwen.team.svc:8080"
    assert (args.concurrency, args.priority, args.batch) == (8, 20, "team/sums")
    assert args.input == "/batch/input/input.jsonl" and args.output_dir == "/batch/output/run-1"
    assert pod["restartPolicy"] == "Never" and pod["serviceAccountName"] == "sums-batch-runner"
    assert job["spec"]["backoffLimit"] == 3 and "suspend" not in job["spec"]
    assert job["metadata"]["ownerReferences"][0]["kind"] == "QwenBatch"
    # The fleet's Service selects qwenfleet.io/inference: a batch pod must never carry it.
    assert "qwenfleet.io/inference" not in job["spec"]["template"]["metadata"]["labels"]


def test_input_and_output_on_the_same_claim_share_one_volume() -> None:
    batch = _batch({"input": {"configMap": None, "pvc": {"claimName": "results", "path": "in/x.jsonl"}}})
    pod = render_job(batch, RUNNER, ENGINE)["spec"]["template"]["spec"]
    claims = [v for v in pod["volumes"] if "persistentVolumeClaim" in v]
    assert len(claims) == 1
    mounts = {m["mountPath"]: m for m in pod["containers"][0]["volumeMounts"]}
    assert mounts["/batch/input"]["readOnly"] and not mounts["/batch/output"].get("readOnly")
    assert mounts["/batch/input"]["name"] == mounts["/batch/output"]["name"] == claims[0]["name"]


def test_url_input_and_configmap_output() -> None:
    batch = _batch({"input": {"configMap": None, "url": "https://h/x.jsonl", "maxBytes": 1_000_000, "maxLines": 900},
                    "output": {"pvc": None, "configMap": {"name": "out", "flushSeconds": 7}}})
    children = render_batch_children(batch, RUNNER, ENGINE)
    assert [c["kind"] for c in children] == ["ConfigMap", "ServiceAccount", "Role", "RoleBinding", "Job"]
    output = children[0]
    assert "ownerReferences" not in output["metadata"]  # results outlive the batch
    assert "data" not in output  # the runner owns the keys
    args = _args(children[-1]["spec"]["template"]["spec"]["containers"][0]["command"])
    assert args.input_url == "https://h/x.jsonl" and args.output_configmap == "out"
    assert (args.max_input_bytes, args.max_input_lines, args.flush_seconds) == (1_000_000, 900, 7.0)


def test_runner_rbac_is_its_batch_status_and_its_output_only() -> None:
    sa, role, binding = render_runner_rbac(_batch({"output": {"pvc": None, "configMap": {"name": "out"}}}))
    assert role["rules"] == [
        {"apiGroups": ["qwenfleet.io"], "resources": ["qwenbatches/status"], "resourceNames": ["sums"],
         "verbs": ["patch"]},
        {"apiGroups": [""], "resources": ["configmaps"], "resourceNames": ["out"], "verbs": ["get", "patch"]},
    ]
    assert binding["subjects"] == [{"kind": "ServiceAccount", "name": sa["metadata"]["name"], "namespace": "team"}]
    _, pvc_role, _ = render_runner_rbac(_batch())
    assert [r["resources"] for r in pvc_role["rules"]] == [["qwenbatches/status"]]


def test_dedicated_job_stages_runs_vllm_run_batch_on_gpus_and_reports_from_a_sidecar() -> None:
    batch = _batch({"fleetRef": None, "dedicated": {"model": "Qwen/Qwen3-4B-Instruct-2507", "gpus": 2,
                                                    "maxModelLen": 4096, "gpuMemoryUtilization": 0.9}})
    pod = render_job(batch, RUNNER, ENGINE)["spec"]["template"]["spec"]
    stage, progress = pod["initContainers"]
    assert _args(stage["command"]).stage == "/batch/work/pending.jsonl"
    assert progress["restartPolicy"] == "Always" and _args(progress["command"]).follow
    (engine,) = pod["containers"]
    assert engine["image"] == ENGINE
    command = engine["command"]
    assert command[:2] == ["sh", "-c"]
    assert "python3 -m vllm.entrypoints.openai.run_batch -i /batch/work/pending.jsonl" in command[2]
    assert command[4:] == ["--model", "Qwen/Qwen3-4B-Instruct-2507", "--tensor-parallel-size", "2",
                           "--max-model-len", "4096", "--gpu-memory-utilization", "0.9"]
    assert engine["resources"]["limits"]["nvidia.com/gpu"] == 2
    assert pod["tolerations"][0]["key"] == "nvidia.com/gpu"
    # Two GPUs' workers exchange tensors through /dev/shm: 4Gi a GPU, as a fleet's pod gets.
    assert {"name": "dshm", "emptyDir": {"medium": "Memory", "sizeLimit": "8Gi"}} in pod["volumes"]


def test_dedicated_reads_the_weights_from_a_claim_under_the_specs_name_on_cpu() -> None:
    batch = _batch({"fleetRef": None, "dedicated": {
        "model": "tiny", "gpus": 0, "enforceEager": True, "modelClaim": {"claimName": "weights", "path": "/qwen/tiny/"},
        "env": [{"name": "VLLM_CPU_KVCACHE_SPACE", "value": "1"}, {"name": "HF_HOME", "value": "/elsewhere"}],
        "resources": {"cpu": "1", "memory": "5Gi"}}})
    pod = render_job(batch, RUNNER, ENGINE)["spec"]["template"]["spec"]
    (engine,) = pod["containers"]
    # The lines name "tiny"; the weights are the claim's directory, offline.
    assert engine["command"][4:] == ["--model", "/models/qwen/tiny", "--served-model-name", "tiny", "--enforce-eager"]
    assert {"name": "model", "mountPath": "/models", "readOnly": True} in engine["volumeMounts"]
    assert {"name": "model", "persistentVolumeClaim": {"claimName": "weights", "readOnly": True}} in pod["volumes"]
    # The spec's env replaces a default of the same name and adds the rest, once each.
    env = {e["name"]: e["value"] for e in engine["env"]}
    assert env == {"HF_HOME": "/elsewhere", "HF_HUB_DISABLE_TELEMETRY": "1", "HF_HUB_OFFLINE": "1",
                   "VLLM_CPU_KVCACHE_SPACE": "1", "HOME": "/home/vllm"}
    assert len(engine["env"]) == len(env)
    # No GPU: no GPU limit, no GPU toleration; CPU as asked, memory as asked plus the memory-backed /dev/shm
    # (1Gi for one device or none: vLLM's engine core needs more than a container's default 64 MiB).
    assert engine["resources"]["limits"] == {"cpu": "1", "memory": "6Gi"} and "tolerations" not in pod
    assert {"name": "dshm", "emptyDir": {"medium": "Memory", "sizeLimit": "1Gi"}} in pod["volumes"]
    assert {"name": "dshm", "mountPath": "/dev/shm"} in engine["volumeMounts"]
    # Only the engine mounts the weights: the runner's stage and progress containers never read them.
    assert all(m["name"] != "model" for c in pod["initContainers"] for m in c["volumeMounts"])


def test_the_pod_goes_where_spec_scheduling_says_in_both_modes() -> None:
    placement = {"nodeSelector": {"type": "real"}, "priorityClassName": "batch-low",
                 "tolerations": [{"key": "team", "operator": "Equal", "value": "a", "effect": "NoSchedule"}]}
    pod = render_job(_batch({"scheduling": placement}), RUNNER, ENGINE)["spec"]["template"]["spec"]
    assert pod["nodeSelector"] == {"type": "real"} and pod["priorityClassName"] == "batch-low"
    assert pod["tolerations"] == [{"key": "team", "operator": "Equal", "value": "a", "effect": "NoSchedule"}]
    # Dedicated: its own nodeSelector entries are added (and win on a shared key), the GPU toleration too.
    dedicated = {"fleetRef": None, "scheduling": placement,
                 "dedicated": {"model": "m", "gpus": 1, "nodeSelector": {"type": "gpu", "zone": "b"}}}
    pod = render_job(_batch(dedicated), RUNNER, ENGINE)["spec"]["template"]["spec"]
    assert pod["nodeSelector"] == {"type": "gpu", "zone": "b"}
    assert [t["key"] for t in pod["tolerations"]] == ["team", "nvidia.com/gpu"]
    # No placement: nothing is added (the scheduler's choice), and a CPU dedicated pod tolerates no GPU taint.
    plain = render_job(_batch(), RUNNER, ENGINE)["spec"]["template"]["spec"]
    assert not {"nodeSelector", "tolerations", "priorityClassName"} & plain.keys()


def test_dedicated_with_a_kueue_queue_is_created_suspended_and_labelled() -> None:
    batch = _batch({"fleetRef": None, "dedicated": {"model": "m", "queueName": "gpu-batch"}})
    job = render_job(batch, RUNNER, ENGINE)
    assert job["metadata"]["labels"][KUEUE_QUEUE_LABEL] == "gpu-batch"
    assert job["spec"]["suspend"] is True
    plain = render_job(_batch({"fleetRef": None, "dedicated": {"model": "m"}}), RUNNER, ENGINE)
    assert KUEUE_QUEUE_LABEL not in plain["metadata"]["labels"] and "suspend" not in plain["spec"]


def test_offline_render_has_no_owner() -> None:
    assert "ownerReferences" not in render_job(_batch(uid=None), RUNNER, ENGINE)["metadata"]


def test_the_job_replaces_a_pod_only_once_it_has_stopped_one_writer_at_a_time() -> None:
    for batch in (_batch(), _batch({"fleetRef": None, "dedicated": {"model": "Qwen/Qwen3-0.6B"}})):
        assert render_job(batch, RUNNER, ENGINE)["spec"]["podReplacementPolicy"] == "Failed"


def test_default_input_bounds_reach_the_runner() -> None:
    args = _args(render_job(_batch(), RUNNER, ENGINE)["spec"]["template"]["spec"]["containers"][0]["command"])
    assert (args.max_input_bytes, args.max_input_lines) == (1 << 30, 1_000_000)


def test_batch_pods_pass_the_restricted_pod_security_standard() -> None:
    fleet = render_job(_batch(), RUNNER, ENGINE)["spec"]["template"]["spec"]
    dedicated = render_job(_batch({"fleetRef": None, "dedicated": {"model": "Qwen/Qwen3-0.6B",
                                                                   "modelClaim": {"claimName": "w", "path": "/m"}}}),
                           RUNNER, ENGINE)["spec"]["template"]["spec"]
    assert restricted_violations(fleet) == [] and restricted_violations(dedicated) == []
    # The users are the images' own (numeric; the operator image's 65532, the engine's 1000), and one user for
    # the whole dedicated pod: its stage container creates output.jsonl, which the engine appends to.
    assert fleet["securityContext"]["runAsUser"] == 65532 and dedicated["securityContext"]["runAsUser"] == 1000
    assert not any("runAsUser" in (c.get("securityContext") or {})
                   for c in [*dedicated["initContainers"], *dedicated["containers"]])
    (engine,) = dedicated["containers"]
    mounts = {m["mountPath"]: m["name"] for m in engine["volumeMounts"]}
    volumes = {v["name"]: v for v in dedicated["volumes"]}
    env = {e["name"]: e["value"] for e in engine["env"]}
    for path in (env["HOME"], "/tmp"):  # a non-root user writes HOME (vLLM's caches) and /tmp on emptyDirs
        assert "emptyDir" in volumes[mounts[path]], path
    assert env["HF_HOME"].startswith("/batch/work/") and "emptyDir" in volumes[mounts["/batch/work"]]
