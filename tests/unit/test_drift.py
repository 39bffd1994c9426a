"""Drift detection: what counts as a difference worth a write, and what does not."""

from __future__ import annotations

import copy

from qwen_fleet.reconcile.drift import drift

DESIRED = {
    "apiVersion": "apps/v1", "kind": "Deployment",
    "metadata": {"name": "q", "labels": {"a": "1"}},
    "spec": {"replicas": 2, "template": {"spec": {
        "containers": [{"name": "vllm", "args": ["--max-num-seqs", "64"],
                        "env": [{"name": "NCCL_DEBUG", "value": "WARN"}],
                        "resources": {"limits": {"cpu": "500m", "memory": "4Gi", "nvidia.com/gpu": "1"}}}],
        "volumes": [{"name": "dshm", "emptyDir": {"medium": "Memory", "sizeLimit": "1Gi"}}],
        "nodeSelector": {},
    }}},
}


def _observed() -> dict:
    obs = copy.deepcopy(DESIRED)
    obs["metadata"].update({"uid": "u", "resourceVersion": "7", "annotations": {"other": "x"}})
    c = obs["spec"]["template"]["spec"]["containers"][0]
    c["imagePullPolicy"] = "IfNotPresent"  # apiserver default
    c["env"].append({"name": "INJECTED", "value": "by-webhook"})
    obs["spec"]["template"]["spec"]["containers"].append({"name": "sidecar"})
    obs["spec"]["template"]["spec"].pop("nodeSelector")  # empty map is dropped by the apiserver
    obs["status"] = {"readyReplicas": 2}
    return obs


def test_defaults_and_foreign_fields_are_not_drift() -> None:
    assert drift(DESIRED, _observed()) == []


def test_changed_args_are_drift() -> None:
    obs = _observed()
    obs["spec"]["template"]["spec"]["containers"][0]["args"] = ["--max-num-seqs", "65"]
    assert drift(DESIRED, obs) == [".spec.template.spec.containers[vllm].args[1]"]


def test_reordered_or_extra_args_are_drift() -> None:
    obs = _observed()
    obs["spec"]["template"]["spec"]["containers"][0]["args"].append("--enforce-eager")
    assert drift(DESIRED, obs) == [".spec.template.spec.containers[vllm].args"]


def test_missing_env_var_and_removed_label_are_drift() -> None:
    obs = _observed()
    obs["spec"]["template"]["spec"]["containers"][0]["env"] = [{"name": "INJECTED", "value": "x"}]
    del obs["metadata"]["labels"]["a"]
    assert sorted(drift(DESIRED, obs)) == [".metadata.labels.a",
                                           ".spec.template.spec.containers[vllm].env[NCCL_DEBUG]"]


def test_quantities_compare_by_value() -> None:
    obs = _observed()
    limits = obs["spec"]["template"]["spec"]["containers"][0]["resources"]["limits"]
    limits.update({"cpu": "0.5", "memory": "4096Mi"})
    obs["spec"]["template"]["spec"]["volumes"][0]["emptyDir"]["sizeLimit"] = "1024Mi"
    assert drift(DESIRED, obs) == []
    limits["memory"] = "5Gi"
    assert drift(DESIRED, obs) == [".spec.template.spec.containers[vllm].resources.limits.memory"]


def test_replicas_changed_by_someone_else_is_drift_only_when_we_own_it() -> None:
    obs = _observed()
    obs["spec"]["replicas"] = 5
    assert drift(DESIRED, obs) == [".spec.replicas"]
    autoscaled = copy.deepcopy(DESIRED)
    del autoscaled["spec"]["replicas"]  # under autoscaling the operator never sends replicas
    assert drift(autoscaled, obs) == []


def test_deleted_volume_is_drift() -> None:
    obs = _observed()
    obs["spec"]["template"]["spec"]["volumes"] = []
    assert drift(DESIRED, obs) == [".spec.template.spec.volumes"]
