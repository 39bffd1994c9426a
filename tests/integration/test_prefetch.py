"""The model prefetch Job against the real control plane (issue 19 item 8): kube-controller-manager runs the real
Job and PersistentVolume controllers, kwok completes Job pods on its fake nodes (its pod-complete stage).

- A fleet whose cache claim is not bound yet: its Job is created, its pod waits, and the fleet is held (no
  Deployment, no Service; Ready False, ModelPrefetching). A volume for the claim appears: the Job succeeds, the
  Deployment is created with HF_HUB_OFFLINE=1 and the fleet becomes Ready. A change that leaves the Job as it
  is makes no new Job; a model change makes a new one, and the old one goes once the new one has succeeded.
- A fleet whose download never starts before activeDeadlineSeconds: the Job controller fails the Job
  (DeadlineExceeded); the fleet is Stalled with ModelPrefetchFailed and that reason, and has no Deployment or
  Service. It starts first (module fixture), so its minute of deadline runs beside the other test.
"""

from __future__ import annotations

import json
import uuid
from collections.abc import Iterator
from typing import Any

import pytest

from qwen_fleet_dev.cluster import LocalCluster
from tests.support.kube import apply, condition, events_for, get, wait_until
from tests.support.operator_process import OperatorProcess

pytestmark = pytest.mark.cluster
DEADLINE = 60  # the least the CRD takes
# A class with no StorageClass object and no provisioner: a claim of it binds only to a volume made for it.
STATIC_CLASS = "qf-prefetch-static"


def _fleet(name: str, **prefetch: Any) -> dict[str, Any]:
    return {"apiVersion": "qwenfleet.io/v1alpha1", "kind": "QwenInference", "metadata": {"name": name}, "spec": {
        "model": {"name": "Qwen/Qwen3-4B-Instruct-2507",
                  "cache": {"size": "1Gi", "storageClassName": STATIC_CLASS,
                            "prefetch": {"enabled": True, **prefetch}}},
        "engine": {"maxModelLen": 4096},
        "gpu": {"product": "NVIDIA-A10G"},
    }}


def _jobs(cluster: LocalCluster, ns: str, name: str) -> list[dict[str, Any]]:
    out = cluster.kubectl("get", "jobs", "-n", ns, "-l", f"app.kubernetes.io/instance={name}", "-o", "json")
    return list(json.loads(out.stdout)["items"])


def _status(cluster: LocalCluster, ns: str, name: str) -> dict[str, Any]:
    return dict(((get(cluster, "qwi", name, ns) or {}).get("status")) or {})


def _job_done(job: dict[str, Any]) -> bool:
    return any(c.get("type") == "Complete" and c.get("status") == "True"
               for c in (job.get("status") or {}).get("conditions") or [])


def _engine(cluster: LocalCluster, ns: str, name: str) -> dict[str, Any] | None:
    dep = get(cluster, "deployment", name, ns)
    return dep["spec"]["template"]["spec"]["containers"][0] if dep else None


@pytest.fixture(scope="module")
def failing(cluster: LocalCluster, operator: OperatorProcess) -> Iterator[str]:
    """A fleet whose claim never binds, with the shortest deadline: its namespace."""
    ns = f"t-{uuid.uuid4().hex[:8]}"
    cluster.kubectl("create", "namespace", ns)
    apply(cluster, ns, _fleet("never", activeDeadlineSeconds=DEADLINE, backoffLimit=0))
    try:
        yield ns
    finally:
        cluster.kubectl("delete", "namespace", ns, "--wait=false", check=False)


def test_the_fleet_waits_for_the_job_then_starts_offline_and_a_model_change_makes_a_new_job(
        cluster: LocalCluster, operator: OperatorProcess, failing: str, namespace: str) -> None:
    ns, name = namespace, "fetched"
    apply(cluster, ns, _fleet(name))
    def prefetching() -> dict[str, Any] | None:
        st = _status(cluster, ns, name)
        ready = condition({"status": st}, "Ready") or {}
        return st if st.get("prefetch") and ready.get("reason") == "ModelPrefetching" else None

    held = wait_until("the fleet held for its prefetch", prefetching, 60)
    (job,) = _jobs(cluster, ns, name)
    assert held["prefetch"]["job"] == job["metadata"]["name"]
    assert held["prefetch"]["state"] in ("Pending", "Running")
    assert get(cluster, "deployment", name, ns) is None and get(cluster, "service", name, ns) is None
    assert get(cluster, "pvc", f"{name}-model-cache", ns) is not None
    wait_until("the ModelPrefetching Event", lambda: "ModelPrefetching" in {
        e["reason"] for e in events_for(cluster, ns, name)}, 30)

    # A volume for the claim: the Job's pod schedules, kwok completes it, the Job controller marks it Complete.
    pv = f"qf-prefetch-{ns}"
    apply(cluster, "", {"apiVersion": "v1", "kind": "PersistentVolume", "metadata": {"name": pv}, "spec": {
        "capacity": {"storage": "1Gi"}, "accessModes": ["ReadWriteMany"], "storageClassName": STATIC_CLASS,
        "persistentVolumeReclaimPolicy": "Retain", "hostPath": {"path": f"/tmp/{pv}"},
        "claimRef": {"namespace": ns, "name": f"{name}-model-cache"}}})
    try:
        wait_until("the Job complete", lambda: all(_job_done(j) for j in _jobs(cluster, ns, name)), 90)
        container = wait_until("the Deployment", lambda: _engine(cluster, ns, name), 60)
        env = {e["name"]: e.get("value") for e in container["env"]}
        assert env["HF_HUB_OFFLINE"] == "1"
        result = cluster.kubectl("wait", "--for=condition=Ready", f"qwi/{name}", "-n", ns, "--timeout=120s",
                                 check=False, timeout=150)
        assert result.returncode == 0, json.dumps(_status(cluster, ns, name), indent=1)
        assert _status(cluster, ns, name)["prefetch"]["state"] == "Succeeded"
        assert get(cluster, "service", name, ns) is not None

        # A change that does not touch the Job: the Deployment follows, the complete Job stays the only one.
        patch = {"spec": {"engine": {"env": [{"name": "EXTRA", "value": "1"}]}}}
        cluster.kubectl("patch", "qwi", name, "-n", ns, "--type=merge", "-p", json.dumps(patch))
        wait_until("the Deployment with EXTRA", lambda: any(
            e["name"] == "EXTRA" for e in (_engine(cluster, ns, name) or {}).get("env", [])), 60)
        assert [j["metadata"]["uid"] for j in _jobs(cluster, ns, name)] == [job["metadata"]["uid"]]

        # A model change: a new Job; the Deployment gets the new revision once it has succeeded; the old Job goes.
        patch = {"spec": {"model": {"revision": "main"}}}
        cluster.kubectl("patch", "qwi", name, "-n", ns, "--type=merge", "-p", json.dumps(patch))

        def switched() -> list[dict[str, Any]] | None:
            jobs = _jobs(cluster, ns, name)
            args = (_engine(cluster, ns, name) or {}).get("args", [])
            moved = "--revision" in args and len(jobs) == 1 and jobs[0]["metadata"]["uid"] != job["metadata"]["uid"]
            return jobs if moved else None

        (new_job,) = wait_until("the new Job and the Deployment on the new revision", switched, 90)
        assert _job_done(new_job)
        assert new_job["spec"]["template"]["spec"]["containers"][0]["command"][-2:] == ["--revision", "main"]
    finally:
        cluster.kubectl("delete", "qwi", name, "-n", ns, "--wait=true", check=False)
        cluster.kubectl("delete", "pv", pv, "--wait=false", check=False)


def test_a_failed_prefetch_stalls_the_fleet_with_the_job_s_reason_and_makes_nothing_else(
        cluster: LocalCluster, failing: str) -> None:
    ns, name = failing, "never"

    def stalled() -> dict[str, Any] | None:
        st = _status(cluster, ns, name)
        cond = condition({"status": st}, "Stalled") or {}
        return st if cond.get("status") == "True" and cond.get("reason") == "ModelPrefetchFailed" else None

    st = wait_until("the fleet Stalled by its failed Job", stalled, DEADLINE + 90)
    assert st["prefetch"]["state"] == "Failed" and st["prefetch"]["reason"] == "DeadlineExceeded"
    assert "DeadlineExceeded" in (condition({"status": st}, "Ready") or {})["message"]
    (job,) = _jobs(cluster, ns, name)
    assert any(c["type"] == "Failed" and c["reason"] == "DeadlineExceeded" for c in job["status"]["conditions"])
    assert get(cluster, "deployment", name, ns) is None and get(cluster, "service", name, ns) is None
    warnings = wait_until("the ModelPrefetchFailed Event", lambda: [
        e for e in events_for(cluster, ns, name) if e["reason"] == "ModelPrefetchFailed"], 30)
    assert warnings[0]["type"] == "Warning"
