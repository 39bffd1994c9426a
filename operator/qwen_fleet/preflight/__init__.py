"""NCCL preflight: an all-reduce check a multi-GPU pod runs before vLLM starts (docs/nccl-preflight.md).

``nccl_preflight.py`` is the standalone script that runs in the pod (stdlib + torch, never imports this
package); ``report`` is what the operator uses: the command line, and the report read back into status.
"""

from qwen_fleet.preflight.report import (
    SCRIPT_MOUNT_PATH,
    SCRIPT_NAME,
    PreflightReport,
    bus_bandwidth_gbps,
    judge,
    parse_report,
    preflight_command,
    script_source,
    to_status,
)

__all__ = [
    "SCRIPT_MOUNT_PATH",
    "SCRIPT_NAME",
    "PreflightReport",
    "bus_bandwidth_gbps",
    "judge",
    "parse_report",
    "preflight_command",
    "script_source",
    "to_status",
]
