"""MIG profiles per GPU: the slices NVIDIA lets each GPU be partitioned into, and each slice's memory. Data.

A profile is named `<compute slices>g.<memory>gb`; the device plugin's mixed strategy advertises it as the
resource `nvidia.com/mig-<profile>`. The lists are NVIDIA's: the MIG user guide's "Supported MIG Profiles"
tables and NVIDIA mig-parted's default configuration, which names the profiles it creates on each GPU
(docs/catalog.md, "MIG profiles"). Media-extension variants (`+me`) are left out: the device plugin
advertises them under their own names, and an inference engine gains nothing from them.

A slice's memory is the figure in its name, in GB (10^9 bytes), which is at or below what NVML reports for it
(NVIDIA rounds the instance's memory to a whole GB in the name): the planner plans with that.
"""

from __future__ import annotations

from dataclasses import dataclass

MIG_USER_GUIDE = "https://docs.nvidia.com/datacenter/tesla/mig-user-guide/supported-mig-profiles.html"
MIG_PARTED_CONFIG = "https://github.com/NVIDIA/mig-parted/blob/main/deployments/systemd/config-default.yaml"
VGPU_TYPES_HOPPER = "https://docs.nvidia.com/ai-enterprise/release-7/latest/infra-software/vgpu/reference/hopper.html"


@dataclass(frozen=True)
class MigProfile:
    """One GPU-instance profile, e.g. 1g.10gb: one of seven compute slices and 10 GB of memory."""

    name: str
    memory_gb: int  # the name's figure, GB (10^9 bytes)

    @property
    def memory_gib(self) -> float:
        return self.memory_gb * 1e9 / 1024**3


def _profiles(*names: str) -> tuple[MigProfile, ...]:
    return tuple(MigProfile(name, int(name.split(".")[1].removesuffix("gb"))) for name in names)


# mig-parted's config and the user guide (A100-SXM4-40GB table).
A100_40GB = _profiles("1g.5gb", "1g.10gb", "2g.10gb", "3g.20gb", "4g.20gb", "7g.40gb")
# The guide: "For A100-SXM4-80GB, the profile names ... 1g.10gb, 1g.10gb+me, 1g.20gb, 2g.20gb, 3g.40gb, 4g.40gb,
# 7g.80gb"; mig-parted gives H100-80GB (SXM5 and PCIe) the same set.
A100_80GB = H100_80GB = _profiles("1g.10gb", "1g.20gb", "2g.20gb", "3g.40gb", "4g.40gb", "7g.80gb")
# mig-parted: "H100 NVL, H800 NVL" (94 GB).
H100_NVL = _profiles("1g.12gb", "1g.24gb", "2g.24gb", "3g.47gb", "4g.47gb", "7g.94gb")
# mig-parted: "H200-141GB" (and H200 NVL).
H200 = _profiles("1g.18gb", "1g.35gb", "2g.35gb", "3g.71gb", "4g.71gb", "7g.141gb")
# NVIDIA's vGPU types reference (NVIDIA AI Enterprise, Hopper page), table "MIG-Backed NVIDIA vGPU for Compute for
# NVIDIA H20 SXM5 96GB": its "Corresponding GPU Instance Profile" column names 7g.96gb, 4g.48gb, 3g.48gb, 2g.24gb,
# 1g.24gb, 1g.12gb (and 1g.12gb+me). The MIG user guide has no H20 table of its own; its "H100 96GB (H100 on
# GH200)" table lists the same six, and mig-parted's all-balanced layout names the H20 (device 0x2329) beside the
# H100-96GB and GH200 (1g.12gb, 2g.24gb, 3g.48gb).
H20 = _profiles("1g.12gb", "1g.24gb", "2g.24gb", "3g.48gb", "4g.48gb", "7g.96gb")
# mig-parted: "B200" for 1g.23gb (all-1g.23gb) and the balanced 1g.23gb / 2g.45gb / 3g.90gb layout; 1g.45gb,
# 4g.90gb and 7g.180gb are the sizes of a 180 GB GPU in its list, which among the supported GPUs (180 GB: B200)
# only the B200 is.
B200 = _profiles("1g.23gb", "1g.45gb", "2g.45gb", "3g.90gb", "4g.90gb", "7g.180gb")
