"""The Pod Security Standards' ``restricted`` profile (which includes ``baseline``) as a checker of a pod spec.

Written from the rules table of kubernetes.io/docs/concepts/security/pod-security-standards/ (the policy the
apiserver's PodSecurity admission enforces), not from our renderers: each rule below names the fields it
reads and the values it allows. A pod passes when ``restricted_violations`` returns nothing. Self-contained:
it reads a plain dict and imports nothing of the project.
"""

from __future__ import annotations

from typing import Any

# baseline: capabilities a container may add; restricted narrows that to NET_BIND_SERVICE.
BASELINE_CAPABILITIES = frozenset({"AUDIT_WRITE", "CHOWN", "DAC_OVERRIDE", "FOWNER", "FSETID", "KILL", "MKNOD",
                                   "NET_BIND_SERVICE", "SETFCAP", "SETGID", "SETPCAP", "SETUID", "SYS_CHROOT"})
RESTRICTED_CAPABILITIES = frozenset({"NET_BIND_SERVICE"})
SAFE_SYSCTLS = frozenset({"kernel.shm_rmid_forced", "net.ipv4.ip_local_port_range",
                          "net.ipv4.ip_unprivileged_port_start", "net.ipv4.tcp_syncookies", "net.ipv4.ping_group_range",
                          "net.ipv4.ip_local_reserved_ports", "net.ipv4.tcp_keepalive_time", "net.ipv4.tcp_fin_timeout",
                          "net.ipv4.tcp_keepalive_intvl", "net.ipv4.tcp_keepalive_probes"})
RESTRICTED_VOLUMES = frozenset({"configMap", "csi", "downwardAPI", "emptyDir", "ephemeral", "persistentVolumeClaim",
                                "projected", "secret"})
SELINUX_TYPES = frozenset({"", "container_t", "container_init_t", "container_kvm_t", "container_engine_t"})
SECCOMP_ALLOWED = frozenset({"RuntimeDefault", "Localhost"})


def _containers(pod: dict[str, Any]) -> list[tuple[str, dict[str, Any]]]:
    return [(f"{kind}[{c.get('name', i)}]", c) for kind in ("initContainers", "containers", "ephemeralContainers")
            for i, c in enumerate(pod.get(kind) or [])]


def _baseline(pod: dict[str, Any], psc: dict[str, Any]) -> list[str]:
    out = [f"{field} is true (host namespaces)" for field in ("hostNetwork", "hostPID", "hostIPC") if pod.get(field)]
    if (psc.get("windowsOptions") or {}).get("hostProcess"):
        out.append("securityContext.windowsOptions.hostProcess is true")
    out += [f"volume {v.get('name')} is a hostPath" for v in pod.get("volumes") or [] if "hostPath" in v]
    out += [f"sysctl {s.get('name')} is not a safe sysctl" for s in psc.get("sysctls") or []
            if s.get("name") not in SAFE_SYSCTLS]
    for where, sc in [("securityContext", psc), *((f"{n}.securityContext", c.get("securityContext") or {})
                                                    for n, c in _containers(pod))]:
        if (sc.get("appArmorProfile") or {}).get("type") not in (None, "RuntimeDefault", "Localhost"):
            out.append(f"{where}.appArmorProfile.type is {sc['appArmorProfile']['type']}")
        se = sc.get("seLinuxOptions") or {}
        if se.get("type", "") not in SELINUX_TYPES or se.get("user") or se.get("role"):
            out.append(f"{where}.seLinuxOptions {se} is not allowed")
        if (sc.get("seccompProfile") or {}).get("type") == "Unconfined":
            out.append(f"{where}.seccompProfile.type is Unconfined")
    for name, c in _containers(pod):
        sc = c.get("securityContext") or {}
        if sc.get("privileged"):
            out.append(f"{name} is privileged")
        if (sc.get("windowsOptions") or {}).get("hostProcess"):
            out.append(f"{name} is a hostProcess container")
        out += [f"{name} adds capability {cap} (not in baseline)" for cap in (sc.get("capabilities") or {}).get("add")
                or [] if cap not in BASELINE_CAPABILITIES]
        out += [f"{name} uses hostPort {p['hostPort']}" for p in c.get("ports") or [] if p.get("hostPort")]
        if sc.get("procMount") not in (None, "Default"):
            out.append(f"{name} procMount is {sc['procMount']}")
    return out


def _restricted(pod: dict[str, Any], psc: dict[str, Any]) -> list[str]:
    out = [f"volume {v.get('name')} is of a type restricted does not allow: "
           f"{sorted(k for k in v if k != 'name')}" for v in pod.get("volumes") or []
           if not set(v) - {"name"} <= RESTRICTED_VOLUMES]
    pod_non_root = psc.get("runAsNonRoot") is True
    pod_seccomp = (psc.get("seccompProfile") or {}).get("type") in SECCOMP_ALLOWED
    if psc.get("runAsUser") == 0:
        out.append("securityContext.runAsUser is 0")
    for name, c in _containers(pod):
        sc = c.get("securityContext") or {}
        if sc.get("allowPrivilegeEscalation") is not False:
            out.append(f"{name} does not set allowPrivilegeEscalation: false")
        non_root = sc.get("runAsNonRoot")
        if non_root is False or (non_root is None and not pod_non_root):
            out.append(f"{name} may run as root (runAsNonRoot is not true on the pod or the container)")
        if sc.get("runAsUser") == 0:
            out.append(f"{name} runAsUser is 0")
        seccomp = (sc.get("seccompProfile") or {}).get("type")
        if seccomp not in SECCOMP_ALLOWED and not (seccomp is None and pod_seccomp):
            out.append(f"{name} has no RuntimeDefault or Localhost seccomp profile (pod or container)")
        caps = sc.get("capabilities") or {}
        if "ALL" not in (caps.get("drop") or []):
            out.append(f"{name} does not drop ALL capabilities")
        out += [f"{name} adds capability {cap} (restricted allows only NET_BIND_SERVICE)"
                for cap in caps.get("add") or [] if cap not in RESTRICTED_CAPABILITIES]
    return out


def restricted_violations(pod_spec: dict[str, Any]) -> list[str]:
    """Every way ``pod_spec`` (a PodSpec, as in a Job's template.spec) breaks the restricted profile."""
    psc = pod_spec.get("securityContext") or {}
    return _baseline(pod_spec, psc) + _restricted(pod_spec, psc)
