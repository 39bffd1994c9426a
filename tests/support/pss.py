"""The Pod Security Standard ``restricted`` profile as a checker of a pod spec, written from the Kubernetes
documentation (https://kubernetes.io/docs/concepts/security/pod-security-standards/, policy version latest),
not from our render code: ``restricted`` is every ``baseline`` control plus the restricted ones.

``restricted_violations(pod_spec)`` returns one line per violated control (empty: the pod passes). Windows-only
controls and the AppArmor annotations (gone from pod specs since 1.30) are left out: our pods are Linux pods.
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

# baseline: capabilities a container may add.
BASELINE_CAPABILITIES = frozenset({"AUDIT_WRITE", "CHOWN", "DAC_OVERRIDE", "FOWNER", "FSETID", "KILL", "MKNOD",
                                   "NET_BIND_SERVICE", "SETFCAP", "SETGID", "SETPCAP", "SETUID", "SYS_CHROOT"})
# baseline: the sysctls a pod may set.
SAFE_SYSCTLS = frozenset({
    "kernel.shm_rmid_forced", "net.ipv4.ip_local_port_range", "net.ipv4.ip_unprivileged_port_start",
    "net.ipv4.tcp_syncookies", "net.ipv4.ping_group_range", "net.ipv4.ip_local_reserved_ports",
    "net.ipv4.tcp_keepalive_time", "net.ipv4.tcp_fin_timeout", "net.ipv4.tcp_keepalive_intvl",
    "net.ipv4.tcp_keepalive_probes"})
SELINUX_TYPES = frozenset({"container_t", "container_init_t", "container_kvm_t", "container_engine_t"})
# restricted: the only volume types allowed.
RESTRICTED_VOLUMES = frozenset({"configMap", "csi", "downwardAPI", "emptyDir", "ephemeral", "persistentVolumeClaim",
                                "projected", "secret"})
SECCOMP_ALLOWED = frozenset({"RuntimeDefault", "Localhost"})


def _containers(pod: dict[str, Any]) -> Iterator[tuple[str, dict[str, Any]]]:
    for field in ("initContainers", "containers", "ephemeralContainers"):
        for container in pod.get(field) or []:
            yield f"{field[:-1]} {container.get('name', '?')}", container


def _baseline_pod(pod: dict[str, Any]) -> list[str]:
    out = [f"baseline: spec.{f} must not be true" for f in ("hostNetwork", "hostPID", "hostIPC") if pod.get(f)]
    ctx = pod.get("securityContext") or {}
    if (ctx.get("windowsOptions") or {}).get("hostProcess"):
        out.append("baseline: windowsOptions.hostProcess must not be true")
    out += [f"baseline: volume {v.get('name')} is a hostPath" for v in pod.get("volumes") or [] if "hostPath" in v]
    out += [f"baseline: sysctl {s.get('name')} is not a safe sysctl" for s in ctx.get("sysctls") or []
            if s.get("name") not in SAFE_SYSCTLS]
    return out + _shared_context("pod", ctx)


def _shared_context(where: str, ctx: dict[str, Any]) -> list[str]:
    """Controls that apply alike to the pod's and a container's securityContext (baseline)."""
    out = []
    if (ctx.get("seccompProfile") or {}).get("type") == "Unconfined":
        out.append(f"baseline: {where} seccompProfile.type must not be Unconfined")
    if (ctx.get("appArmorProfile") or {}).get("type") == "Unconfined":
        out.append(f"baseline: {where} appArmorProfile.type must not be Unconfined")
    selinux = ctx.get("seLinuxOptions") or {}
    if selinux.get("type") not in (None, "", *SELINUX_TYPES):
        out.append(f"baseline: {where} seLinuxOptions.type {selinux['type']} is not allowed")
    out += [f"baseline: {where} seLinuxOptions.{k} must not be set" for k in ("user", "role") if selinux.get(k)]
    return out


def _baseline_container(where: str, container: dict[str, Any]) -> list[str]:
    ctx = container.get("securityContext") or {}
    out = _shared_context(where, ctx)
    if ctx.get("privileged"):
        out.append(f"baseline: {where} must not be privileged")
    if (ctx.get("windowsOptions") or {}).get("hostProcess"):
        out.append(f"baseline: {where} windowsOptions.hostProcess must not be true")
    if ctx.get("procMount") not in (None, "Default"):
        out.append(f"baseline: {where} procMount must be Default")
    added = set((ctx.get("capabilities") or {}).get("add") or [])
    out += [f"baseline: {where} adds capability {c}" for c in sorted(added - BASELINE_CAPABILITIES)]
    out += [f"baseline: {where} uses hostPort {p['hostPort']}" for p in container.get("ports") or []
            if p.get("hostPort")]
    return out


def _restricted_container(where: str, container: dict[str, Any], pod_ctx: dict[str, Any]) -> list[str]:
    ctx = container.get("securityContext") or {}
    out = []
    if ctx.get("allowPrivilegeEscalation") is not False:
        out.append(f"restricted: {where} must set allowPrivilegeEscalation: false")
    caps = ctx.get("capabilities") or {}
    if "ALL" not in (caps.get("drop") or []):
        out.append(f"restricted: {where} must drop ALL capabilities")
    out += [f"restricted: {where} may add only NET_BIND_SERVICE, not {c}" for c in caps.get("add") or []
            if c != "NET_BIND_SERVICE"]
    non_root = ctx.get("runAsNonRoot")
    if non_root is False or (non_root is None and pod_ctx.get("runAsNonRoot") is not True):
        out.append(f"restricted: {where} must run with runAsNonRoot: true (pod or container)")
    if ctx.get("runAsUser") == 0:
        out.append(f"restricted: {where} must not set runAsUser 0")
    seccomp = (ctx.get("seccompProfile") or {}).get("type")
    if seccomp is None and (pod_ctx.get("seccompProfile") or {}).get("type") not in SECCOMP_ALLOWED:
        out.append(f"restricted: {where} needs seccompProfile RuntimeDefault or Localhost (pod or container)")
    elif seccomp is not None and seccomp not in SECCOMP_ALLOWED:
        out.append(f"restricted: {where} seccompProfile.type must be RuntimeDefault or Localhost")
    return out


def restricted_violations(pod_spec: dict[str, Any]) -> list[str]:
    """Every control of the ``restricted`` profile (baseline included) that ``pod_spec`` violates."""
    pod_ctx = pod_spec.get("securityContext") or {}
    out = _baseline_pod(pod_spec)
    if pod_ctx.get("runAsUser") == 0:
        out.append("restricted: pod must not set runAsUser 0")
    for volume in pod_spec.get("volumes") or []:
        kinds = set(volume) - {"name"}
        out += [f"restricted: volume {volume.get('name')} is of type {k}" for k in sorted(kinds - RESTRICTED_VOLUMES)]
    containers = list(_containers(pod_spec))
    if not containers:
        out.append("restricted: the pod has no container to check")
    for where, container in containers:
        out += _baseline_container(where, container)
        out += _restricted_container(where, container, pod_ctx)
    return out
