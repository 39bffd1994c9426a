"""Drift detection: what counts as a difference worth a write, and what does not."""

from __future__ import annotations

import copy
import json
from typing import Any

from qwen_fleet.api import QwenInference
from qwen_fleet.config import OperatorConfig
from qwen_fleet.plan import make_plan
from qwen_fleet.reconcile.drift import drift
from qwen_fleet.render import Capabilities, render_children
from qwen_fleet.render.stamp import RENDERED_HASH_ANNOTATION, rendered_hash, stamp_of

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


# --- removals: the rendered-hash stamp (render/stamp.py) ---------------------------------------------------

def _rendered(**spec: Any) -> dict[str, dict[str, Any]]:
    doc = {"metadata": {"name": "q", "namespace": "ns", "uid": "u-1"},
           "spec": {"model": {"name": "Qwen/Qwen3-4B-Instruct-2507"}, "gpu": {"product": "NVIDIA-A10G"}, **spec}}
    cr = QwenInference.model_validate(doc)
    return {c["kind"]: c for c in render_children(cr, make_plan(cr, OperatorConfig()), Capabilities())}


def _as_stored(obj: dict[str, Any]) -> dict[str, Any]:
    """A rendered child as the apiserver returns it: defaults and server metadata added."""
    out = copy.deepcopy(obj)
    out["metadata"].update({"uid": "c-1", "resourceVersion": "9", "generation": 1})
    for c in out.get("spec", {}).get("template", {}).get("spec", {}).get("containers", []):
        c.setdefault("terminationMessagePath", "/dev/termination-log")
    return out


ENV = {"engine": {"env": [{"name": "EXTRA_FLAG", "value": "1"}, {"name": "KEEP", "value": "2"}]},
       "scheduling": {"nodeSelector": {"team": "infra", "zone": "a"}},
       "service": {"annotations": {"a.example/x": "1", "a.example/y": "2"}}}
FEWER = {"engine": {"env": [{"name": "KEEP", "value": "2"}]}, "scheduling": {"nodeSelector": {"zone": "a"}},
         "service": {"annotations": {"a.example/y": "2"}}}


def test_an_unchanged_child_is_no_drift() -> None:
    before = _rendered(**ENV)
    for kind, child in before.items():
        assert drift(_rendered(**ENV)[kind], _as_stored(child)) == [], kind


def test_a_removed_env_entry_selector_key_or_annotation_is_drift() -> None:
    """Containment alone cannot see a removal (the child still holds all we ask for); the stamp can."""
    stored, wanted = _rendered(**ENV), _rendered(**FEWER)
    for kind in ("Deployment", "Service"):
        unstamped = copy.deepcopy(wanted[kind])
        del unstamped["metadata"]["annotations"][RENDERED_HASH_ANNOTATION]
        assert drift(unstamped, _as_stored(stored[kind])) == [], kind  # the old blind spot
        assert drift(wanted[kind], _as_stored(stored[kind])) == [f".metadata.annotations.{RENDERED_HASH_ANNOTATION}"]


def test_removed_preflight_and_autoscaling_are_drift_of_the_deployment() -> None:
    tp2 = {"parallelism": {"tensor": 2}, "gpu": {"product": "NVIDIA-H100-80GB-HBM3"}}
    stored = _rendered(**tp2, nccl={"preflight": {"enabled": True}})
    assert drift(_rendered(**tp2)["Deployment"], _as_stored(stored["Deployment"]))
    stored = _rendered(autoscaling={"enabled": True, "minReplicas": 1, "maxReplicas": 3})
    assert drift(_rendered()["Deployment"], _as_stored(stored["Deployment"]))


def test_the_stamp_ignores_key_order_and_only_the_stamp_itself() -> None:
    child = _rendered(**ENV)["Service"]
    shuffled = json.loads(json.dumps(child, sort_keys=True))
    assert stamp_of(shuffled) == rendered_hash(shuffled) == stamp_of(child)
    other = copy.deepcopy(child)
    other["metadata"]["annotations"]["a.example/x"] = "changed"
    assert rendered_hash(other) != stamp_of(child)
