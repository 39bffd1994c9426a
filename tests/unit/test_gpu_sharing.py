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


# --- MIG profiles per GPU (NVIDIA's lists, docs/catalog.md "MIG profiles") ----------------------------------
# Written out here from NVIDIA's MIG user guide and mig-parted config, not read from the catalog.
NVIDIA_MIG = {
    "NVIDIA-A100-SXM4-40GB": ["1g.5gb", "1g.10gb", "2g.10gb", "3g.20gb", "4g.20gb", "7g.40gb"],
    "NVIDIA-A100-SXM4-80GB": ["1g.10gb", "1g.20gb", "2g.20gb", "3g.40gb", "4g.40gb", "7g.80gb"],
    "NVIDIA-H100-80GB-HBM3": ["1g.10gb", "1g.20gb", "2g.20gb", "3g.40gb", "4g.40gb", "7g.80gb"],
    "NVIDIA-H100-PCIe": ["1g.10gb", "1g.20gb", "2g.20gb", "3g.40gb", "4g.40gb", "7g.80gb"],
    "NVIDIA-H100-NVL": ["1g.12gb", "1g.24gb", "2g.24gb", "3g.47gb", "4g.47gb", "7g.94gb"],
    "NVIDIA-H200": ["1g.18gb", "1g.35gb", "2g.35gb", "3g.71gb", "4g.71gb", "7g.141gb"],
    # NVIDIA's vGPU types reference, "MIG-Backed NVIDIA vGPU for Compute for NVIDIA H20 SXM5 96GB" (GPU instance
    # profile column), and the MIG user guide's "H100 96GB (H100 on GH200)" table.
    "NVIDIA-H20": ["1g.12gb", "1g.24gb", "2g.24gb", "3g.48gb", "4g.48gb", "7g.96gb"],
    "NVIDIA-B200": ["1g.23gb", "1g.45gb", "2g.45gb", "3g.90gb", "4g.90gb", "7g.180gb"],
}


def test_the_catalog_lists_nvidias_mig_profiles_per_gpu() -> None:
    from qwen_fleet.catalog import all_gpus

    listed = {g.product: [p.name for p in g.mig_profiles] for g in all_gpus() if g.mig_profiles}
    assert listed == NVIDIA_MIG


@pytest.mark.parametrize(("product", "mig", "gib"), [
    ("NVIDIA-H200", "1g.18gb", 16.76),  # 18e9 bytes
    ("NVIDIA-H200", "3g.71gb", 66.12),
    ("NVIDIA-B200", "7g.180gb", 167.64),
    ("NVIDIA-A100-SXM4-40GB", "1g.5gb", 4.66),
    ("NVIDIA-H100-NVL", "3g.47gb", 43.77),
    ("NVIDIA-H20", "7g.96gb", 89.41),  # 96e9 bytes
    ("NVIDIA-H20", "4g.48gb", 44.70),
])
def test_the_planner_uses_the_profiles_memory(product: str, mig: str, gib: float) -> None:
    cr = cr_of({"product": product, "sharing": {"mig": mig}}, engine={"maxModelLen": 2048})
    plan = make_plan(cr, OperatorConfig())
    assert plan.capacity is not None and plan.capacity.gpu_memory_gi_b == gib, plan.problems


def test_a_profile_the_gpu_cannot_make_is_refused_at_apply_with_the_valid_ones() -> None:
    with pytest.raises(ValidationError) as err:
        cr_of({"product": "NVIDIA-H200", "sharing": {"mig": "1g.10gb"}})
    assert ("gpu.sharing.mig 1g.10gb is not a MIG profile of NVIDIA-H200: use one of 1g.18gb, 1g.35gb, 2g.35gb, "
            "3g.71gb, 4g.71gb, 7g.141gb") in str(err.value)
    # A GPU outside the catalog, or no product at all: the profile is taken at its word.
    assert not make_plan(cr_of({"memoryGiB": 40, "sharing": {"mig": "3g.40gb"}}), OperatorConfig()).problems


@pytest.mark.parametrize(("product", "mig", "fix"), [
    ("H200", "2g.20gb", "use one of 1g.18gb, 1g.35gb, 2g.35gb, 3g.71gb, 4g.71gb, 7g.141gb"),  # an alias
    ("NVIDIA-L4", "1g.10gb", "remove gpu.sharing.mig, or use gpu.sharing.timeSlices"),  # no MIG at all
])
def test_other_spellings_and_gpus_without_mig_are_stalled(product: str, mig: str, fix: str) -> None:
    plan = make_plan(cr_of({"product": product, "sharing": {"mig": mig}}), OperatorConfig())
    assert [p.reason for p in plan.problems] == ["MigProfileUnsupported"]
    assert fix in plan.problems[0].message
