"""GPU types as NVIDIA GPU feature discovery (GFD) labels them on Kubernetes nodes.

GFD writes `nvidia.com/gpu.product` as the NVML device name with spaces replaced by "-" (plus a
"-SHARED" suffix under time-slicing) and `nvidia.com/gpu.memory` as NVML total memory in MiB;
see `_GFD_LABELER`. `memory_mib` is that label value as observed on real nodes, `memory_gib` the same
number in GiB: the driver reserves some memory, so an "80GB" H100 reports 81559 MiB, not 81920.
Bandwidths are NVIDIA's nominal bidirectional figures per GPU.
"""

from __future__ import annotations

from qwen_fleet.catalog import mig
from qwen_fleet.catalog.mig import MigProfile
from qwen_fleet.catalog.types import GpuFacts

_GFD_LABELER = "https://github.com/NVIDIA/k8s-device-plugin/blob/main/internal/lm/resource.go"
# FP8 tensor-core math needs compute capability >= 8.9 (Ada, Hopper); Ampere runs FP8 weight-only.
_VLLM_FP8 = "https://docs.vllm.ai/en/v0.32.0/features/quantization/llm_compressor/fp8/"
_PCIE4_GB_S = 64.0  # PCIe Gen4 x16, bidirectional
_PCIE5_GB_S = 128.0  # PCIe Gen5 x16, bidirectional
_PCIE3_GB_S = 32.0  # PCIe Gen3 x16, bidirectional


def _mib_to_gib(mib: int) -> float:
    return mib / 1024


def _gpu(
    product: str,
    *,
    memory_mib: int,
    short_name: str,
    interconnect: str,
    interconnect_gb_s: float,
    nvlink: bool,
    compute_capability: tuple[int, int],
    fp8: bool,
    aliases: tuple[str, ...],
    sources: tuple[str, ...],
    mig_profiles: tuple[MigProfile, ...] = (),
) -> GpuFacts:
    return GpuFacts(
        product=product,
        memory_gib=_mib_to_gib(memory_mib),
        memory_mib=memory_mib,
        short_name=short_name,
        interconnect=interconnect,
        interconnect_gb_s=interconnect_gb_s,
        nvlink=nvlink,
        compute_capability=compute_capability,
        fp8=fp8,
        aliases=aliases,
        sources=(_GFD_LABELER, *sources, _VLLM_FP8,
                 *((mig.MIG_USER_GUIDE, mig.MIG_PARTED_CONFIG) if mig_profiles else ())),
        mig_profiles=mig_profiles,
    )


ALL_GPUS: tuple[GpuFacts, ...] = (
    _gpu(
        "NVIDIA-A10G",
        memory_mib=23028,  # AWS g5 node label nvidia.com/gpu.memory=23028
        short_name="A10G",
        interconnect="PCIe 4.0 x16 (64 GB/s), no NVLink",
        interconnect_gb_s=_PCIE4_GB_S,
        nvlink=False,
        compute_capability=(8, 6),
        fp8=False,
        aliases=(),
        sources=(
            "https://aws.amazon.com/ec2/instance-types/g5/",
            "https://www.nvidia.com/en-us/data-center/products/a10-gpu/",
        ),
    ),
    _gpu(
        "NVIDIA-L4",
        memory_mib=23034,
        short_name="L4",
        interconnect="PCIe 4.0 x16 (64 GB/s), no NVLink",
        interconnect_gb_s=_PCIE4_GB_S,
        nvlink=False,
        compute_capability=(8, 9),
        fp8=True,
        aliases=(),
        sources=("https://www.nvidia.com/en-us/data-center/l4/",),
    ),
    _gpu(
        "NVIDIA-L40S",
        memory_mib=46068,
        short_name="L40S",
        interconnect="PCIe 4.0 x16 (64 GB/s), no NVLink",
        interconnect_gb_s=_PCIE4_GB_S,
        nvlink=False,
        compute_capability=(8, 9),
        fp8=True,
        aliases=(),
        sources=("https://www.nvidia.com/en-us/data-center/l40s/",),
    ),
    _gpu(
        "NVIDIA-A100-SXM4-40GB",
        mig_profiles=mig.A100_40GB,
        memory_mib=40960,
        short_name="A100-40GB",
        interconnect="NVLink 3 (600 GB/s)",
        interconnect_gb_s=600.0,
        nvlink=True,
        compute_capability=(8, 0),
        fp8=False,
        # No bare "A100" alias: it would have to pick 40 GB or 80 GB, and guessing wrong misplans.
        aliases=("A100-SXM4-40GB",),
        sources=("https://www.nvidia.com/en-us/data-center/a100/",),
    ),
    _gpu(
        "NVIDIA-A100-SXM4-80GB",
        mig_profiles=mig.A100_80GB,
        memory_mib=81920,
        short_name="A100-80GB",
        interconnect="NVLink 3 (600 GB/s)",
        interconnect_gb_s=600.0,
        nvlink=True,
        compute_capability=(8, 0),
        fp8=False,
        aliases=("A100-SXM4-80GB",),
        sources=("https://www.nvidia.com/en-us/data-center/a100/",),
    ),
    _gpu(
        "NVIDIA-H100-80GB-HBM3",
        mig_profiles=mig.H100_80GB,
        memory_mib=81559,
        short_name="H100-80GB",
        interconnect="NVLink 4 (900 GB/s)",
        interconnect_gb_s=900.0,
        nvlink=True,
        compute_capability=(9, 0),
        fp8=True,
        # Bare "H100" means the SXM part, the common one; PCIe and NVL have their own names.
        aliases=("H100", "H100-SXM", "H100-SXM5-80GB"),
        sources=("https://www.nvidia.com/en-us/data-center/h100/",),
    ),
    _gpu(
        "NVIDIA-H100-PCIe",
        mig_profiles=mig.H100_80GB,
        memory_mib=81559,
        short_name="H100-PCIe",
        interconnect="PCIe 5.0 x16 (128 GB/s); optional NVLink bridge between card pairs",
        interconnect_gb_s=_PCIE5_GB_S,
        nvlink=False,
        compute_capability=(9, 0),
        fp8=True,
        aliases=("H100-PCIe-80GB",),
        sources=("https://www.nvidia.com/en-us/data-center/h100/",),
    ),
    _gpu(
        "NVIDIA-H100-NVL",
        mig_profiles=mig.H100_NVL,
        memory_mib=95830,
        short_name="H100-NVL",
        interconnect="NVLink bridge between card pairs (600 GB/s), PCIe 5.0 x16 (128 GB/s)",
        interconnect_gb_s=600.0,
        nvlink=True,
        compute_capability=(9, 0),
        fp8=True,
        aliases=("H100-NVL-94GB",),
        sources=("https://www.nvidia.com/en-us/data-center/h100/",),
    ),
    _gpu(
        "NVIDIA-H200",
        mig_profiles=mig.H200,
        memory_mib=143771,  # nvidia-smi on an H200 (driver 580.159.04): "NVIDIA H200, 143771 MiB"
        short_name="H200",
        interconnect="NVLink 4 (900 GB/s)",
        interconnect_gb_s=900.0,
        nvlink=True,
        compute_capability=(9, 0),
        fp8=True,
        aliases=("H200-SXM", "H200-141GB"),
        sources=(
            "https://www.nvidia.com/en-us/data-center/h200/",
            "https://raw.githubusercontent.com/mlcommons/inference_results_v4.1/main/closed/NVIDIA/systems/"
            "H200-SXM-141GBx8_TRT_MaxQ.json",
        ),
    ),
    # Turing: no bfloat16 (compute capability < 8.0), so a bfloat16 spec is refused on it (plan/gpu_dtype.py).
    # NVML names it "Tesla T4"; a GFD node label dump on a VM: gpu.product=Tesla-T4, gpu.memory=15109,
    # gpu.compute.major=7, minor=5.
    _gpu(
        "Tesla-T4",
        memory_mib=15109,
        short_name="T4",
        interconnect="PCIe 3.0 x16 (32 GB/s), no NVLink",
        interconnect_gb_s=_PCIE3_GB_S,
        nvlink=False,
        compute_capability=(7, 5),
        fp8=False,
        aliases=("NVIDIA-T4", "Tesla-T4-16GB"),
        sources=("https://www.nvidia.com/en-us/data-center/tesla-t4/",),
    ),
    _gpu(
        "NVIDIA-GeForce-RTX-4090",
        memory_mib=24564,  # nvidia-smi: "NVIDIA GeForce RTX 4090, 24564 MiB"
        short_name="RTX-4090",
        interconnect="PCIe 4.0 x16 (64 GB/s), no NVLink",
        interconnect_gb_s=_PCIE4_GB_S,
        nvlink=False,
        compute_capability=(8, 9),
        fp8=True,
        aliases=("RTX-4090", "4090"),
        sources=("https://www.nvidia.com/en-us/geforce/graphics-cards/40-series/rtx-4090/",),
    ),
    _gpu(
        "NVIDIA-L20",
        memory_mib=46068,  # nvidia-smi: "NVIDIA L20, 46068 MiB" (48 GB GDDR6, as the L40S)
        short_name="L20",
        interconnect="PCIe 4.0 x16 (64 GB/s), no NVLink",
        interconnect_gb_s=_PCIE4_GB_S,
        nvlink=False,
        compute_capability=(8, 9),
        fp8=True,
        aliases=(),
        sources=("https://www.nvidia.com/en-us/data-center/l20/",),
    ),
    _gpu(
        "NVIDIA-H20",
        mig_profiles=mig.H20,
        memory_mib=97871,  # nvidia-smi: "NVIDIA H20, 97871 MiB" (96 GB HBM3)
        short_name="H20",
        interconnect="NVLink 4 (900 GB/s)",
        interconnect_gb_s=900.0,
        nvlink=True,
        compute_capability=(9, 0),
        fp8=True,
        aliases=(),
        sources=("https://www.nvidia.com/en-us/data-center/h20/", mig.VGPU_TYPES_HOPPER),
    ),
    _gpu(
        "NVIDIA-B200",
        mig_profiles=mig.B200,
        memory_mib=183359,  # nvidia-smi: "NVIDIA B200, 183359 MiB", compute capability 10.0
        short_name="B200",
        interconnect="NVLink 5 (1800 GB/s)",
        interconnect_gb_s=1800.0,
        nvlink=True,
        compute_capability=(10, 0),
        fp8=True,
        aliases=(),
        sources=("https://www.nvidia.com/en-us/data-center/dgx-b200/",),
    ),
)
