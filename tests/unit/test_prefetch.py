"""Model sources and the prefetch Job (issue 19 item 8): the rendered Job and engine env, the gate in the change
plan, and the status the Job's state gives."""

from __future__ import annotations

import copy
from typing import Any

from qwen_fleet.api import QwenInference
from qwen_fleet.config import OperatorConfig
from qwen_fleet.plan import make_plan
from qwen_fleet.reconcile.changes import plan_changes
from qwen_fleet.reconcile.prefetch import Prefetch, job_state, prefetch_of
from qwen_fleet.reconcile.status import Observed, Outcome, compute_status
from qwen_fleet.render import Capabilities, render_children
from qwen_fleet.render.common import INSTANCE_LABEL

MODEL = "Qwen/Qwen3-4B-Instruct-2507"
CACHE = {"size": "20Gi", "prefetch": {"enabled": True}}
NOW = "2026-01-01T00:00:00Z"


def _cr(name: str = "q", **model: Any) -> QwenInference:
    spec = {"model": {"name": MODEL, **model}, "gpu": {"product": "NVIDIA-A10G"}}
    return QwenInference.model_validate({"metadata": {"name": name, "namespace": "ns", "uid": "u-1"}, "spec": spec})


def _children(cr: QwenInference) -> list[dict[str, Any]]:
    return render_children(cr, make_plan(cr, OperatorConfig()), Capabilities())


def _of(children: list[dict[str, Any]], kind: str) -> dict[str, Any]:
    (obj,) = [c for c in children if c["kind"] == kind]
    return obj


def _env(container: dict[str, Any]) -> dict[str, Any]:
    return {e["name"]: e.get("value", e.get("valueFrom")) for e in container["env"]}


def _engine_env(cr: QwenInference) -> dict[str, Any]:
    return _env(_of(_children(cr), "Deployment")["spec"]["template"]["spec"]["containers"][0])


# --- render ------------------------------------------------------------------------------------------------------

def test_prefetch_job_downloads_the_revision_into_the_cache_claim_with_the_engine_s_hub_env() -> None:
    cr = _cr(revision="v1", cache=CACHE, source={"huggingFace": {
        "tokenSecretRef": {"name": "hf", "key": "tok"}, "endpoint": "https://hf-mirror.com"}})
    children = _children(cr)
    assert [c["kind"] for c in children][:3] == ["PersistentVolumeClaim", "Job", "Deployment"]
    job = _of(children, "Job")
    pod = job["spec"]["template"]["spec"]
    (container,) = pod["containers"]
    assert container["command"] == ["hf", "download", MODEL, "--revision", "v1"]
    env = _env(container)
    assert env["HF_HOME"] == "/var/cache/huggingface"
    assert env["HF_TOKEN"] == {"secretKeyRef": {"name": "hf", "key": "tok"}}
    assert env["HF_ENDPOINT"] == "https://hf-mirror.com"
    assert pod["volumes"] == [{"name": "hf-cache", "persistentVolumeClaim": {"claimName": "q-model-cache"}},
                              {"name": "home", "emptyDir": {}}, {"name": "tmp", "emptyDir": {}}]
    assert container["volumeMounts"] == [{"name": "hf-cache", "mountPath": "/var/cache/huggingface"},
                                         {"name": "home", "mountPath": "/home/vllm"},
                                         {"name": "tmp", "mountPath": "/tmp"}]
    assert pod["restartPolicy"] == "Never" and job["spec"]["backoffLimit"] == 3
    assert "activeDeadlineSeconds" not in job["spec"] and "ttlSecondsAfterFinished" not in job["spec"]
    assert "nvidia.com/gpu" not in str(pod)  # a download needs no GPU
    # The Service selects the fleet by this label: the download pod must not carry it.
    assert INSTANCE_LABEL not in job["spec"]["template"]["metadata"]["labels"]
    assert job["metadata"]["ownerReferences"][0]["uid"] == "u-1"
    # ... and the engine reads the same cache, offline, with the same mirror and token.
    engine = _engine_env(cr)
    assert engine["HF_HUB_OFFLINE"] == "1"
    assert engine["HF_ENDPOINT"] == "https://hf-mirror.com" and engine["HF_TOKEN"] == env["HF_TOKEN"]


def test_job_name_is_stable_for_one_model_and_new_for_another() -> None:
    name = _of(_children(_cr(cache=CACHE)), "Job")["metadata"]["name"]
    assert name == _of(_children(_cr(cache=CACHE)), "Job")["metadata"]["name"]
    assert name.startswith("q-prefetch-")
    assert name != _of(_children(_cr(revision="v2", cache=CACHE)), "Job")["metadata"]["name"]
    deadline = {"size": "20Gi", "prefetch": {"enabled": True, "activeDeadlineSeconds": 600}}
    assert name != _of(_children(_cr(cache=deadline)), "Job")["metadata"]["name"]


def test_job_name_fits_a_label_value_for_the_longest_resource_name() -> None:
    long = "a" * 52
    name = _of(_children(_cr(name=long, cache=CACHE)), "Job")["metadata"]["name"]
    assert len(name) <= 63 and name.startswith("a" * 40) and "-prefetch-" in name


def test_job_follows_the_fleet_s_node_selector_and_tolerations() -> None:
    spec = {"model": {"name": MODEL, "cache": CACHE}, "gpu": {"product": "NVIDIA-A10G"},
            "scheduling": {"nodeSelector": {"zone": "a"},
                           "tolerations": [{"key": "team", "operator": "Exists"}]}}
    cr = QwenInference.model_validate({"metadata": {"name": "q", "namespace": "ns"}, "spec": spec})
    pod = _of(_children(cr), "Job")["spec"]["template"]["spec"]
    assert pod["nodeSelector"] == {"zone": "a"}  # not the GPU product: the download runs anywhere in the zone
    assert pod["tolerations"] == [{"key": "team", "operator": "Exists"}]


def test_modelscope_source_sets_vllm_s_switch_and_keeps_its_cache_on_the_cache_volume() -> None:
    cr = _cr(cache=CACHE, source={"modelScope": {"domain": "www.modelscope.ai",
                                                 "tokenSecretRef": {"name": "ms"}}})
    engine = _engine_env(cr)
    # vLLM 0.32 envs.py reads VLLM_USE_MODELSCOPE as .strip().lower() in ("1", "true").
    assert engine["VLLM_USE_MODELSCOPE"].strip().lower() in ("1", "true")
    assert engine["MODELSCOPE_CACHE"].startswith("/var/cache/huggingface/")
    assert engine["MODELSCOPE_DOMAIN"] == "www.modelscope.ai"
    assert engine["MODELSCOPE_API_TOKEN"] == {"secretKeyRef": {"name": "ms", "key": "token"}}
    assert engine["HF_HUB_OFFLINE"] == "1" and "HF_TOKEN" not in engine
    job = _of(_children(cr), "Job")
    (container,) = job["spec"]["template"]["spec"]["containers"]
    assert container["command"][:2] == ["sh", "-c"] and "modelscope login" in container["command"][2]
    assert container["command"][4:] == ["modelscope", "download", "--model", MODEL]
    assert _env(container)["MODELSCOPE_CACHE"] == engine["MODELSCOPE_CACHE"]


def test_modelscope_without_a_token_runs_the_download_alone() -> None:
    cr = _cr(revision="master", cache=CACHE, source={"modelScope": {}})
    (container,) = _of(_children(cr), "Job")["spec"]["template"]["spec"]["containers"]
    assert container["command"] == ["modelscope", "download", "--model", MODEL, "--revision", "master"]


def test_no_prefetch_no_job_and_the_engine_downloads_online() -> None:
    for cr in (_cr(), _cr(cache={"size": "20Gi"})):
        children = _children(cr)
        assert "Job" not in [c["kind"] for c in children]
        assert "HF_HUB_OFFLINE" not in _engine_env(cr)


# --- the gate in the change plan -----------------------------------------------------------------------------------

def _stored(children: list[dict[str, Any]]) -> dict[tuple[str, str], dict[str, Any]]:
    return {(c["kind"], c["metadata"]["name"]): copy.deepcopy(c) for c in children}


def _finished(observed: dict[tuple[str, str], dict[str, Any]], condition: str, reason: str = "",
              message: str = "") -> dict[tuple[str, str], dict[str, Any]]:
    out = copy.deepcopy(observed)
    for (kind, _), obj in out.items():
        if kind == "Job":
            obj["status"] = {"conditions": [{"type": condition, "status": "True", "reason": reason,
                                             "message": message}]}
    return out


def _kinds(children: list[dict[str, Any]]) -> set[str]:
    return {c["kind"] for c in children}


def test_a_new_fleet_gets_only_the_claim_and_the_job_until_the_job_succeeded() -> None:
    desired = _children(_cr(cache=CACHE))
    first = plan_changes(desired, {})
    assert {a.key[0] for a in first.applies} == {"PersistentVolumeClaim", "Job"}
    made = {k: v for k, v in _stored(desired).items() if k[0] in ("PersistentVolumeClaim", "Job")}
    assert not plan_changes(desired, made)  # running: nothing more
    assert not plan_changes(desired, _finished(made, "Failed", "BackoffLimitExceeded"))  # failed: nothing more
    done = plan_changes(desired, _finished(made, "Complete"))
    assert {a.key[0] for a in done.applies} == _kinds(desired) - {"PersistentVolumeClaim", "Job"}
    assert done.prune == ()


def test_a_model_change_holds_the_running_fleet_until_the_new_job_succeeded_then_prunes_the_old_job() -> None:
    old = _finished(_stored(_children(_cr(cache=CACHE))), "Complete")
    desired = _children(_cr(revision="v2", cache=CACHE))
    new_job = _of(desired, "Job")["metadata"]["name"]
    held = plan_changes(desired, old)
    assert [a.key for a in held.applies] == [("Job", new_job)]  # the Deployment keeps the old model meanwhile
    assert held.prune == ()
    running = {**old, **{k: v for k, v in _stored(desired).items() if k == ("Job", new_job)}}
    assert not plan_changes(desired, running)
    done = plan_changes(desired, _finished(running, "Complete"))
    assert ("Deployment", "q") in [a.key for a in done.applies]
    old_job = next(name for kind, name in old if kind == "Job")
    assert [(p.kind, p.name) for p in done.prune] == [("Job", old_job)]


def test_an_unchanged_fleet_with_a_complete_job_changes_nothing() -> None:
    desired = _children(_cr(cache=CACHE))
    assert not plan_changes(desired, _finished(_stored(desired), "Complete"))


# --- Job state and status -----------------------------------------------------------------------------------------

def test_job_state_reads_the_job_controller_s_terminal_conditions() -> None:
    assert job_state("j", None).state == "Pending"
    assert job_state("j", {"status": {}}).state == "Pending"
    assert job_state("j", {"status": {"active": 1}}).state == "Running"
    assert "attempt 3" in job_state("j", {"status": {"active": 1, "failed": 2}}).message
    interim = {"status": {"conditions": [{"type": "FailureTarget", "status": "True"}], "active": 1}}
    assert job_state("j", interim).state == "Running"  # failing, pods still terminating
    failed = {"status": {"conditions": [{"type": "Failed", "status": "True", "reason": "DeadlineExceeded",
                                         "message": "Job was active longer than specified deadline"}]}}
    assert job_state("j", failed) == Prefetch("j", "Failed", "DeadlineExceeded",
                                              "Job was active longer than specified deadline")
    assert job_state("j", {"status": {"conditions": [{"type": "Complete", "status": "True"}]}}).done


def test_prefetch_of_is_none_without_a_job_in_the_spec() -> None:
    assert prefetch_of(_children(_cr()), {}) is None
    assert prefetch_of(None, {}) is None


def _status(prefetch: Prefetch, deployment: dict[str, Any] | None = None) -> dict[str, Any]:
    cr = _cr(cache=CACHE)
    return compute_status({}, 3, Outcome.applied(), make_plan(cr, OperatorConfig()),
                          Observed(deployment=deployment, prefetch=prefetch), NOW)


def _conds(status: dict[str, Any]) -> dict[str, dict[str, Any]]:
    return {c["type"]: c for c in status["conditions"]}


def test_prefetching_is_reconciling_not_ready_and_in_status() -> None:
    status = _status(Prefetch("q-prefetch-1", "Running", "Downloading", "Job q-prefetch-1 is downloading"))
    conds = _conds(status)
    assert (conds["Ready"]["status"], conds["Ready"]["reason"]) == ("False", "ModelPrefetching")
    assert "downloading" in conds["Ready"]["message"]
    assert (conds["Reconciling"]["status"], conds["Stalled"]["status"]) == ("True", "False")
    assert status["prefetch"] == {"job": "q-prefetch-1", "state": "Running", "reason": "Downloading",
                                  "message": "Job q-prefetch-1 is downloading"}
    assert status["observedGeneration"] == 3


def test_a_running_fleet_waiting_for_a_new_model_is_not_ready() -> None:
    dep = {"metadata": {"generation": 1}, "spec": {"replicas": 1},
           "status": {"observedGeneration": 1, "replicas": 1, "readyReplicas": 1, "updatedReplicas": 1,
                      "availableReplicas": 1}}
    conds = _conds(_status(Prefetch("j", "Pending", "Pending", "Job j is waiting for its pod"), dep))
    assert conds["Ready"]["status"] == "False" and conds["Ready"]["reason"] == "ModelPrefetching"


def test_a_failed_prefetch_is_stalled_with_the_job_s_reason() -> None:
    status = _status(Prefetch("q-prefetch-1", "Failed", "BackoffLimitExceeded",
                              "Job has reached the specified backoff limit"))
    conds = _conds(status)
    assert (conds["Stalled"]["status"], conds["Stalled"]["reason"]) == ("True", "ModelPrefetchFailed")
    assert "BackoffLimitExceeded" in conds["Stalled"]["message"] and MODEL in conds["Stalled"]["message"]
    assert "delete the Job to retry" in conds["Ready"]["message"]
    assert conds["Reconciling"]["status"] == "False"
    assert status["prefetch"]["state"] == "Failed" and status["prefetch"]["reason"] == "BackoffLimitExceeded"


def test_a_succeeded_prefetch_leaves_the_rollout_to_speak() -> None:
    status = _status(Prefetch("j", "Succeeded", "Complete", "Job j downloaded the model"))
    assert _conds(status)["Ready"]["reason"] == "Creating"
    assert status["prefetch"]["state"] == "Succeeded"
