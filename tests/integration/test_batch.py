"""QwenBatch against the real control plane: the CRD's refusals at apply, the operator's Job and runner RBAC,
the real Job controller (kwok completes or never schedules the pods), status from two writers.

- Bad specs are refused at apply with the table's words (tests/invalid_batch_specs.py); the spec is immutable.
- A batch whose fleet does not exist is Stalled (FleetNotFound, a Warning Event) with no Job; once the fleet is
  there the Job appears, with the runner's ServiceAccount, Role and RoleBinding and the output ConfigMap. The
  runner (run here, in this process, against a loopback fleet, with a token of that ServiceAccount) writes the
  ConfigMap and applies its counts to the status through the real RBAC, and may touch nothing else; kwok
  completes the Job's pod and `kubectl wait --for=condition=Complete` returns, the counts kept beside the
  operator's conditions.
- A dedicated batch whose output claim never binds fails by its activeDeadlineSeconds: Failed (and Stalled)
  with the Job's reason. A dedicated batch with a Kueue queue is created suspended and labelled: Queued.
- A batch whose pod no node takes (a nodeSelector none has) is Pending with the real scheduler's words and a
  Warning Event, where the Job alone reads "active".
"""

from __future__ import annotations

import json
import ssl
from pathlib import Path
from typing import Any

import pytest

from qwen_fleet.api.batch import IMMUTABLE_SPEC_MESSAGE, QwenBatch
from qwen_fleet.batchrun.kube import KubeApi, KubeCallFailed, report_status
from qwen_fleet.batchrun.lines import read_done
from qwen_fleet.batchrun.runner import Settings, run_batch
from qwen_fleet.batchrun.sinks import ConfigMapSink
from qwen_fleet.render.batch import render_job
from qwen_fleet_dev.cluster import LocalCluster
from tests.invalid_batch_specs import BATCH_BASE, BATCH_CASES
from tests.invalid_specs import Case
from tests.support.kube import apply, condition, events_for, get, wait_until
from tests.support.operator_process import OperatorProcess
from tests.unit.test_batch_runner import FakeFleet

pytestmark = pytest.mark.cluster
LINES = 12


def _batch(name: str, spec: dict[str, Any]) -> dict[str, Any]:
    return {"apiVersion": "qwenfleet.io/v1alpha1", "kind": "QwenBatch", "metadata": {"name": name}, "spec": spec}


def _status(cluster: LocalCluster, ns: str, name: str) -> dict[str, Any]:
    return dict(((get(cluster, "qwb", name, ns) or {}).get("status")) or {})


def _reason(cluster: LocalCluster, ns: str, name: str, type_: str) -> str | None:
    cond = condition({"status": _status(cluster, ns, name)}, type_) or {}
    return str(cond.get("reason")) if cond.get("status") == "True" else None


@pytest.mark.parametrize("case", BATCH_CASES, ids=lambda c: c.id)
def test_invalid_batch_is_refused_at_apply_with_a_clear_message(cluster: LocalCluster, crd: Path, namespace: str,
                                                                 case: Case) -> None:
    result = cluster.kubectl("create", "--dry-run=server", "-n", namespace, "-f", "-", check=False,
                             input=json.dumps(_batch("bad", case.spec)))
    assert result.returncode != 0, f"{case.id} was accepted"
    assert case.apiserver in result.stderr, result.stderr


def test_the_spec_is_immutable(cluster: LocalCluster, crd: Path, namespace: str) -> None:
    apply(cluster, namespace, _batch("fixed", {**BATCH_BASE, "fleetRef": {"name": "nowhere"}}))
    result = cluster.kubectl("patch", "qwb", "fixed", "-n", namespace, "--type=merge", "-p",
                             '{"spec": {"concurrency": 9}}', check=False)
    assert result.returncode != 0 and IMMUTABLE_SPEC_MESSAGE in result.stderr, result.stderr


def _runner_api(cluster: LocalCluster, ns: str, account: str) -> KubeApi:
    token = cluster.kubectl("create", "token", account, "-n", ns, "--duration=1h").stdout.strip()
    context = ssl.create_default_context()
    context.check_hostname, context.verify_mode = False, ssl.CERT_NONE  # the loopback apiserver's own cert
    return KubeApi(cluster.server, token, context)


def test_a_batch_waits_for_its_fleet_then_its_job_runs_and_completes(
        cluster: LocalCluster, operator: OperatorProcess, namespace: str) -> None:
    ns, name = namespace, "sums"
    lines = [json.dumps({"custom_id": f"q{i}", "method": "POST", "url": "/v1/chat/completions",
                         "body": {"model": "m", "messages": [{"role": "user", "content": str(i)}]}})
             for i in range(LINES)] + ["{not json"]
    apply(cluster, ns, {"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": "prompts"},
                        "data": {"input.jsonl": "\n".join(lines) + "\n"}})
    apply(cluster, ns, _batch(name, {"fleetRef": {"name": "qwen"}, "input": {"configMap": {"name": "prompts"}},
                                     "output": {"configMap": {"name": "answers"}}}))

    wait_until("Stalled FleetNotFound", lambda: _reason(cluster, ns, name, "Stalled") == "FleetNotFound", 60)
    wait_until("the FleetNotFound Event", lambda: [e for e in events_for(cluster, ns, name)
                                                   if e["reason"] == "FleetNotFound" and e["type"] == "Warning"], 30)
    assert get(cluster, "job", f"{name}-batch", ns) is None

    apply(cluster, ns, {"apiVersion": "qwenfleet.io/v1alpha1", "kind": "QwenInference", "metadata": {"name": "qwen"},
                        "spec": {"model": {"name": "Qwen/Qwen3-4B-Instruct-2507"}, "engine": {"maxModelLen": 4096},
                                 "gpu": {"product": "NVIDIA-A10G"}}})
    job = wait_until("the batch's Job", lambda: get(cluster, "job", f"{name}-batch", ns), 60)
    command = job["spec"]["template"]["spec"]["containers"][0]["command"]
    assert command[command.index("--endpoint") + 1] == f"http://qwen.{ns}.svc:8000"
    assert job["spec"]["podReplacementPolicy"] == "Failed"  # kept by the apiserver: one writer at a time
    role = get(cluster, "role", f"{name}-batch-runner", ns)
    assert role is not None and {r["resources"][0] for r in role["rules"]} == {"qwenbatches/status", "configmaps"}
    assert get(cluster, "configmap", "answers", ns) is not None

    # The runner, as its pod would run it, with its ServiceAccount's token: output and progress through RBAC.
    api = _runner_api(cluster, ns, f"{name}-batch-runner")
    fleet = FakeFleet()
    fleet.thread.start()
    try:
        sink = ConfigMapSink(api, ns, "answers")
        try:
            run_batch(Settings(endpoint=fleet.url, retry_base_seconds=0.0, report_seconds=3600), lambda: lines,
                      sink, read_done(*sink.existing()), report=lambda st: report_status(api, ns, name, st))
        finally:
            sink.close()  # the last write, as batch-run does on its way out
    finally:
        fleet.server.shutdown()
    data = (get(cluster, "configmap", "answers", ns) or {})["data"]
    assert len(data["output.jsonl"].splitlines()) == LINES and len(data["errors.jsonl"].splitlines()) == 1
    with pytest.raises(KubeCallFailed) as refused:  # least privilege: another batch's status is not its to write
        report_status(api, ns, "other", {"total": 1})
    assert refused.value.status == 403

    result = cluster.kubectl("wait", "--for=condition=Complete", f"qwb/{name}", "-n", ns, "--timeout=120s",
                             check=False, timeout=150)
    assert result.returncode == 0, json.dumps(_status(cluster, ns, name), indent=1)
    st = _status(cluster, ns, name)
    assert (st["total"], st["completed"], st["failed"], st["state"]) == (LINES + 1, LINES, 1, "Complete")
    assert st["job"] == f"{name}-batch" and st.get("completionTime")
    table = cluster.kubectl("get", "qwb", name, "-n", ns).stdout.split()
    assert table[:6] == ["NAME", "STATUS", "COMPLETED", "TOTAL", "FAILED", "TOK/S"]
    assert table[table.index(name) + 1: table.index(name) + 5] == ["Complete", str(LINES), str(LINES + 1), "1"]
    assert [e for e in events_for(cluster, ns, name) if e["reason"] == "Complete" and e["type"] == "Normal"]


def test_a_dedicated_batch_that_cannot_start_fails_and_one_with_a_kueue_queue_waits_suspended(
        cluster: LocalCluster, operator: OperatorProcess, namespace: str) -> None:
    ns = namespace
    dedicated = {"dedicated": {"model": "Qwen/Qwen3-0.6B"}, "input": {"url": "https://example.invalid/in.jsonl"},
                 "output": {"pvc": {"claimName": "never-made", "path": "out"}}}
    apply(cluster, ns, _batch("doomed", {**dedicated, "activeDeadlineSeconds": 5, "backoffLimit": 0}))
    apply(cluster, ns, _batch("queued", {**dedicated, "dedicated": {"model": "Qwen/Qwen3-0.6B",
                                                                    "queueName": "gpu-batch"}}))

    queued = wait_until("the queued Job", lambda: get(cluster, "job", "queued-batch", ns), 60)
    assert queued["spec"]["suspend"] is True
    assert queued["metadata"]["labels"]["kueue.x-k8s.io/queue-name"] == "gpu-batch"
    wait_until("Queued", lambda: _reason(cluster, ns, "queued", "Reconciling") == "Queued", 60)

    result = cluster.kubectl("wait", "--for=condition=Failed", "qwb/doomed", "-n", ns, "--timeout=120s",
                             check=False, timeout=150)
    assert result.returncode == 0, json.dumps(_status(cluster, ns, "doomed"), indent=1)
    assert _reason(cluster, ns, "doomed", "Failed") == "DeadlineExceeded"
    assert _reason(cluster, ns, "doomed", "Stalled") == "DeadlineExceeded"
    assert _status(cluster, ns, "doomed")["state"] == "Failed"


def test_a_batch_whose_pod_no_node_takes_is_pending_with_the_scheduler_s_words(
        cluster: LocalCluster, operator: OperatorProcess, namespace: str) -> None:
    ns, name = namespace, "nowhere"
    apply(cluster, ns, {"apiVersion": "qwenfleet.io/v1alpha1", "kind": "QwenInference", "metadata": {"name": "qwen"},
                        "spec": {"model": {"name": "Qwen/Qwen3-4B-Instruct-2507"}, "engine": {"maxModelLen": 4096},
                                 "gpu": {"product": "NVIDIA-A10G"}}})
    apply(cluster, ns, _batch(name, {"fleetRef": {"name": "qwen"},
                                     "input": {"url": "https://example.invalid/a.jsonl", "maxBytes": 1_000_000},
                                     "output": {"configMap": {"name": "answers"}},
                                     "scheduling": {"nodeSelector": {"qwenfleet.io/pool": "none-has-this"}}}))

    # The real scheduler marks the runner's pod Unschedulable; the Job only counts it active.
    wait_until("Reconciling Unschedulable", lambda: _reason(cluster, ns, name, "Reconciling") == "Unschedulable", 90)
    job = get(cluster, "job", f"{name}-batch", ns)
    assert job is not None and int(job["status"].get("active") or 0) == 1
    st = _status(cluster, ns, name)
    assert st["state"] == "Pending"
    message = (condition({"status": st}, "Reconciling") or {})["message"]
    assert message.startswith(f"Job {name}-batch is waiting for its pod: pod {name}-batch-"), message
    assert "cannot be scheduled: 0/" in message and "didn't match Pod's node affinity/selector" in message, message
    assert _reason(cluster, ns, name, "Stalled") is None  # a node may yet come (an autoscaler): not Stalled
    event = wait_until("the Unschedulable Event", lambda: [e for e in events_for(cluster, ns, name)
                                                           if e["reason"] == "Unschedulable"], 30)
    assert event[0]["type"] == "Warning" and "didn't match" in event[0]["message"]
    table = cluster.kubectl("get", "qwb", name, "-n", ns).stdout.split()
    assert table[table.index(name) + 1] == "Pending"


def test_both_batch_pods_are_admitted_by_pod_security_restricted(cluster: LocalCluster, namespace: str) -> None:
    """The apiserver's own PodSecurity admission, the oracle: the rendered pods, created (dry-run) in a namespace
    that enforces restricted, are admitted; the same pod without its securityContext is refused."""
    ns = namespace
    cluster.kubectl("label", "namespace", ns, "pod-security.kubernetes.io/enforce=restricted")
    specs = {"fleet": {"fleetRef": {"name": "qwen"}, "input": {"configMap": {"name": "p"}},
                       "output": {"configMap": {"name": "a"}}},
             "dedicated": {"dedicated": {"model": "Qwen/Qwen3-0.6B", "modelClaim": {"claimName": "w"}},
                           "input": {"url": "https://example.invalid/in.jsonl"},
                           "output": {"pvc": {"claimName": "d", "path": "out"}}}}
    for mode, spec in specs.items():
        batch = QwenBatch.model_validate({"metadata": {"name": mode, "namespace": ns}, "spec": spec})
        pod_spec = render_job(batch, "runner:test", "engine:test")["spec"]["template"]["spec"]
        pod_spec.pop("serviceAccountName")  # made by the operator with the Job; not what is under test here
        pod = {"apiVersion": "v1", "kind": "Pod", "metadata": {"name": mode}, "spec": pod_spec}
        admitted = cluster.kubectl("create", "--dry-run=server", "-n", ns, "-f", "-", check=False,
                                   input=json.dumps(pod))
        assert admitted.returncode == 0 and "Warning" not in admitted.stderr, (mode, admitted.stderr)
        bare = json.loads(json.dumps(pod))
        bare["spec"].pop("securityContext")
        for c in [*bare["spec"].get("initContainers", []), *bare["spec"]["containers"]]:
            c.pop("securityContext")
        refused = cluster.kubectl("create", "--dry-run=server", "-n", ns, "-f", "-", check=False,
                                  input=json.dumps(bare))
        assert refused.returncode != 0 and 'violates PodSecurity "restricted' in refused.stderr, refused.stderr
