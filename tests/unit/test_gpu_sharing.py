"""GPU sharing: a MIG slice or a time-sliced share per engine, requested as its own resource and planned with
the memory the engine really gets."""

from __future__ import annotations

from typing import Any

import pytest
from pydantic import ValidationError

from qwen_fleet.api import QwenInference
from qwen_fleet.config import OperatorConfig
from qwen_fleet.plan import make_plan
from qwen_fleet.render.deployment import render_deployment


def cr_of(gpu: dict[str, Any], **spec: Any) -> QwenInference:
    return QwenInference.model_validate({"metadata": {"name": "q", "namespace": "ns"}, "spec": {
        "model": {"name": "Qwen/Qwen2.5-7B-Instruct-AWQ"}, "gpu": gpu, **spec}})


def limits(cr: QwenInference) -> dict[str, str]:
    deployment = render_deployment(cr, make_plan(cr, OperatorConfig()))
    out: dict[str, str] = deployment["spec"]["template"]["spec"]["containers"][0]["resources"]["limits"]
    return out


def test_a_mig_slice_is_requested_by_its_profile_and_planned_with_its_memory() -> None:
    cr = cr_of({"product": "NVIDIA-A100-SXM4-80GB", "sharing": {"mig": "2g.20gb"}},
               engine={"maxModelLen": 8192})
    assert limits(cr)["nvidia.com/mig-2g.20gb"] == "1"
    assert "nvidia.com/gpu" not in limits(cr)
    plan = make_plan(cr, OperatorConfig())
    assert plan.capacity is not None
    assert plan.capacity.gpu_memory_gi_b == round(20e9 / 1024**3, 2) == 18.63  # 20 GB, not the card's 80 GiB


def test_a_model_too_large_for_the_slice_is_refused() -> None:
    cr = QwenInference.model_validate({"metadata": {"name": "q", "namespace": "ns"}, "spec": {
        "model": {"name": "Qwen/Qwen2.5-14B-Instruct"},
        "gpu": {"product": "NVIDIA-H100-80GB-HBM3", "sharing": {"mig": "1g.10gb"}}}})
    assert [p.reason for p in make_plan(cr, OperatorConfig()).problems] == ["WeightsDoNotFit"]


def test_time_slices_request_the_shared_resource_and_split_the_memory() -> None:
    cr = cr_of({"product": "NVIDIA-A10G", "sharing": {"timeSlices": 3}},
               engine={"gpuMemoryUtilization": 0.3, "maxModelLen": 4096})
    assert limits(cr)["nvidia.com/gpu.shared"] == "1"
    assert make_plan(cr, OperatorConfig()).feasible
    overcommitted = make_plan(cr_of({"product": "NVIDIA-A10G", "sharing": {"timeSlices": 3}}), OperatorConfig())
    assert [p.reason for p in overcommitted.problems] == ["TimeSlicedMemoryOvercommitted"]
    assert "set engine.gpuMemoryUtilization to 0.33 or less" in overcommitted.problems[0].message


@pytest.mark.parametrize(("spec", "message"), [
    ({"gpu": {"sharing": {"mig": "3g.40gb"}}, "parallelism": {"tensor": 2}}, "parallelism.tensor, pipeline and data"),
    ({"gpu": {"sharing": {"mig": "3g.40gb", "timeSlices": 2}}}, "exactly one of mig"),
    ({"gpu": {"sharing": {"mig": "3g.40gb"}, "resourceName": "example.com/gpu"}}, "leave gpu.resourceName unset"),
    ({"gpu": {"sharing": {"mig": "40gb"}}}, "pattern"),
])
def test_bad_sharing_is_refused_at_apply(spec: dict[str, Any], message: str) -> None:
    with pytest.raises(ValidationError, match=message):
        QwenInference.model_validate({"metadata": {"name": "q", "namespace": "ns"},
                                      "spec": {"model": {"name": "Qwen/Qwen3-8B"}, **spec}})
