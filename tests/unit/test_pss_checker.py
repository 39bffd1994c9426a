"""The restricted-profile checker (tests/support/pss.py) itself: each rule of the Pod Security Standards page
catches the pod that breaks it, and a pod written by hand to the page's rules passes."""

from __future__ import annotations

import copy
from typing import Any

import pytest

from tests.support.pss import restricted_violations

COMPLIANT: dict[str, Any] = {
    "securityContext": {"runAsNonRoot": True, "runAsUser": 1000, "seccompProfile": {"type": "RuntimeDefault"}},
    "initContainers": [{"name": "init", "securityContext": {"allowPrivilegeEscalation": False,
                                                            "capabilities": {"drop": ["ALL"]}}}],
    "containers": [{"name": "app", "securityContext": {
        "allowPrivilegeEscalation": False, "capabilities": {"drop": ["ALL"], "add": ["NET_BIND_SERVICE"]}}}],
    "volumes": [{"name": "w", "emptyDir": {}}, {"name": "c", "persistentVolumeClaim": {"claimName": "x"}}],
}


def _with(path: str, value: Any) -> dict[str, Any]:
    pod = copy.deepcopy(COMPLIANT)
    cur: Any = pod
    keys = path.split(".")
    for key in keys[:-1]:
        cur = cur[int(key)] if key.isdigit() else cur.setdefault(key, {})
    if value is None:
        cur.pop(keys[-1], None)
    else:
        cur[keys[-1]] = value
    return pod


def test_a_pod_written_to_the_rules_passes() -> None:
    assert restricted_violations(COMPLIANT) == []


@pytest.mark.parametrize(("path", "value", "said"), [
    ("hostNetwork", True, "hostNetwork is true"),
    ("volumes", [{"name": "h", "hostPath": {"path": "/"}}], "is a hostPath"),
    ("volumes", [{"name": "n", "nfs": {"server": "s", "path": "/"}}], "restricted does not allow"),
    ("containers.0.securityContext.privileged", True, "is privileged"),
    ("containers.0.securityContext.allowPrivilegeEscalation", None, "allowPrivilegeEscalation: false"),
    ("initContainers.0.securityContext.allowPrivilegeEscalation", True, "initContainers[init] does not set"),
    ("securityContext.runAsNonRoot", None, "may run as root"),
    ("containers.0.securityContext.runAsNonRoot", False, "containers[app] may run as root"),
    ("securityContext.runAsUser", 0, "runAsUser is 0"),
    ("securityContext.seccompProfile", None, "no RuntimeDefault or Localhost seccomp"),
    ("containers.0.securityContext.seccompProfile", {"type": "Unconfined"}, "Unconfined"),
    ("containers.0.securityContext.capabilities", {"drop": ["NET_RAW"]}, "does not drop ALL"),
    ("containers.0.securityContext.capabilities.add", ["SYS_ADMIN"], "adds capability SYS_ADMIN"),
    ("containers.0.securityContext.capabilities.add", ["CHOWN"], "restricted allows only NET_BIND_SERVICE"),
    ("containers.0.ports", [{"containerPort": 80, "hostPort": 80}], "hostPort 80"),
    ("securityContext.sysctls", [{"name": "kernel.msgmax", "value": "1"}], "not a safe sysctl"),
    ("containers.0.securityContext.seLinuxOptions", {"type": "spc_t"}, "seLinuxOptions"),
    ("containers.0.securityContext.procMount", "Unmasked", "procMount is Unmasked"),
])
def test_each_rule_catches_its_breach(path: str, value: Any, said: str) -> None:
    found = restricted_violations(_with(path, value))
    assert any(said in v for v in found), found
