"""A QwenBatch through a fleet, for real: the chart's operator pod renders the batch's Job, the real Job controller
starts its pod on the real node, and the runner (the operator's image) sends 1,000 chat requests to the fleet's
vLLM CPU pod by the Service's cluster DNS name (`<fleet>.<namespace>.svc`, the node's CoreDNS). Midway the runner's
process is SIGKILLed: the Job's next pod reads what the first one wrote and sends only the rest. Every line is
answered exactly once (duplicates counted), the two malformed lines are counted failed with their reasons, and
the QwenBatch reports Complete through `kubectl wait`.

Dedicated: a QwenBatch with no fleet runs vLLM's own `run-batch` in its Job's pod (the engine image, the weights
from the model's claim, CPU), after the runner's init container staged the lines; 200 lines answered, the
malformed two counted failed, the pod's native sidecar reporting the counts.

The interactive time to first token beside such a batch is a figure, not an assertion: bench/batch_real_node.py
(`make bench-batch-node`) measures it on the same parts.
"""

from __future__ import annotations

import json
import os
import signal
import uuid
from collections.abc import Iterator
from pathlib import Path

import pytest

from qwen_fleet_dev import nodeclean
from qwen_fleet_dev.cluster import LocalCluster
from qwen_fleet_dev.engine_image import EngineImage
from qwen_fleet_dev.local_fleet import MODEL_CLAIM, apply, cpu_fleet, model_volume, wait_for_answer
from qwen_fleet_dev.realnode import NODE_LABEL, NODE_NAME
from tests.node.pods import engine_start_phases
from tests.support.operator_chart import OperatorRelease
from tests.support.real_batch import (
    DATA_CLAIM,
    MALFORMED,
    OUTPUT_PATH,
    Written,
    batch_status,
    count_lines,
    data_volume,
    fleet_batch,
    job_pods,
    output_dir,
    wait_for,
    write_input,
)

# The session's set-up (the engine image's import into the node's containerd: 551 s on a loaded 2-core machine,
# bench/results/engine-start.md) is charged to the first test that asks for it; pytest-timeout's 900 s then ended
# that test's set-up before its fleet answered. Each fixture bounds its own waits (the import 1800 s, the first
# answer 900 s, helm --wait), so the suite's timeout covers each test's own body here.
pytestmark = [pytest.mark.cluster, pytest.mark.real_fleet, pytest.mark.timeout(900, func_only=True)]
FLEET = "tiny"
REQUESTS = 1000
KILL_AFTER = 250  # answered lines before the runner is killed


def priority_fleet(image: str) -> dict[str, object]:
    """The suite's CPU fleet with vLLM's priority scheduling, so the batch's priority field is honoured."""
    fleet = cpu_fleet(FLEET, image)
    fleet["spec"]["engine"]["schedulingPolicy"] = "priority"  # type: ignore[index]
    return fleet


@pytest.fixture(scope="module")
def batch_env(real_cluster: LocalCluster, engine_image: EngineImage, fleet_operator: OperatorRelease,
              tiny_qwen_dir: Path, tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[str, Path]]:
    """A namespace that enforces the Pod Security Standard restricted profile (issue 32: the batch's runner, its
    dedicated engine and the fleet must all be admitted there), whose priority fleet has answered, with a data
    claim over a host directory."""
    ns = f"b-{uuid.uuid4().hex[:8]}"
    data = tmp_path_factory.mktemp("batch-data")
    data.chmod(0o777)  # written by the runner (uid 65532) and the dedicated engine (uid 1000), not root
    real_cluster.kubectl("create", "namespace", ns)
    real_cluster.kubectl("label", "namespace", ns, "pod-security.kubernetes.io/enforce=restricted",
                         "pod-security.kubernetes.io/enforce-version=latest")
    try:
        apply(real_cluster, ns, [*model_volume(ns, tiny_qwen_dir), *data_volume(ns, data),
                                 priority_fleet(engine_image.tag)])
        wait_for_answer(real_cluster, ns, FLEET)
        print(f"fleet engine start-up: {engine_start_phases(real_cluster, ns, f'qwenfleet.io/inference={FLEET}')}")
        yield ns, data
    finally:
        real_cluster.kubectl("delete", "namespace", ns, "--wait=false", check=False)
        for pv in ("tiny-model", "batch-data"):
            real_cluster.kubectl("delete", "pv", f"{ns}-{pv}", "--wait=false", check=False)


def _diagnose(cluster: LocalCluster, ns: str, name: str, release: OperatorRelease) -> str:
    pods = cluster.kubectl("get", "pods", "-n", ns, "-o", "wide", check=False).stdout
    logs = cluster.kubectl("logs", "-n", ns, "-l", f"qwenfleet.io/batch={name}", "--tail=20", "--prefix",
                           check=False)
    return (f"status: {json.dumps(batch_status(cluster, ns, name), indent=1)}\n{pods}\n{logs.stdout}{logs.stderr}\n"
            f"--- operator ---\n{release.logs(tail=30)}")


def test_a_thousand_requests_through_the_fleet_complete_once_each_across_a_killed_runner(
        real_cluster: LocalCluster, batch_env: tuple[str, Path], fleet_operator: OperatorRelease) -> None:
    ns, data = batch_env
    name = "summaries"
    ids = write_input(data, FLEET, REQUESTS)
    output = data / OUTPUT_PATH / "output.jsonl"
    apply(real_cluster, ns, fleet_batch(name, FLEET))
    try:
        wait_for(f"{KILL_AFTER} answered lines", lambda: count_lines(output) >= KILL_AFTER, 600)
    except TimeoutError:
        raise AssertionError(_diagnose(real_cluster, ns, name, fleet_operator)) from None
    # The runner's process, by the batch it names on its command line (`--batch <ns>/<name>`), from the host.
    runners = nodeclean.processes_naming(f"{ns}/{name}")
    assert runners, "the runner's process should be visible from the host"
    for pid in runners:
        os.kill(pid, signal.SIGKILL)
    at_kill = count_lines(output)
    print(f"runner SIGKILLed with {at_kill} of {REQUESTS} lines answered")
    assert at_kill < REQUESTS, "the batch finished before the kill: nothing to resume"

    done = real_cluster.kubectl("wait", "-n", ns, "--for=condition=Complete", f"qwenbatch/{name}",
                                "--timeout=900s", check=False, timeout=960)
    assert done.returncode == 0, _diagnose(real_cluster, ns, name, fleet_operator)

    written = Written.read(data)
    dupes = written.duplicates()
    answered = {r["custom_id"] for r in written.output}
    print(f"output.jsonl {len(written.output)} records, errors.jsonl {len(written.errors)}, duplicates {len(dupes)}")
    assert dupes == {}
    assert answered == set(ids) and len(written.output) == REQUESTS
    for record in written.output:
        response = record["response"]
        assert record["error"] is None and response["status_code"] == 200, record
        assert response["body"]["usage"]["completion_tokens"] == 16, record
    # The two malformed lines: counted failed with their reason, once each, never sent.
    reasons = sorted(r["error"]["message"] for r in written.errors)
    assert len(reasons) == len(MALFORMED), reasons
    assert "not JSON" in reasons[0] and "'/v1/nothing-here' is not served" in reasons[1], reasons

    status = batch_status(real_cluster, ns, name)
    assert (status["state"], status["total"], status["completed"], status["failed"]) == \
        ("Complete", REQUESTS + len(MALFORMED), REQUESTS, len(MALFORMED)), status
    assert status["completionTokens"] == 16 * REQUESTS, status
    # Two pods of the one Job on the real node: the killed one (Failed, exit 137) and the one that finished.
    pods = job_pods(real_cluster, ns, name)
    assert {p["spec"]["nodeName"] for p in pods} == {NODE_NAME}
    phases = sorted(p["status"]["phase"] for p in pods)
    assert phases == ["Failed", "Succeeded"], phases
    (killed,) = [p for p in pods if p["status"]["phase"] == "Failed"]
    assert killed["status"]["containerStatuses"][0]["state"]["terminated"]["exitCode"] == 137
    job = json.loads(real_cluster.kubectl("get", "-n", ns, "job", f"{name}-batch", "-o", "json").stdout)
    assert (job["status"].get("failed"), job["status"].get("succeeded")) == (1, 1), job["status"]


def test_a_dedicated_run_batch_job_answers_200_lines_on_the_real_node(
        real_cluster: LocalCluster, batch_env: tuple[str, Path], engine_image: EngineImage,
        fleet_operator: OperatorRelease) -> None:
    ns, data = batch_env
    name = "dedicated"
    ids = write_input(data, FLEET, 200, path="ded/in/input.jsonl")
    output_dir(data, "ded/out")
    apply(real_cluster, ns, {
        "apiVersion": "qwenfleet.io/v1alpha1", "kind": "QwenBatch", "metadata": {"name": name},
        "spec": {"input": {"pvc": {"claimName": DATA_CLAIM, "path": "ded/in/input.jsonl"}},
                 "output": {"pvc": {"claimName": DATA_CLAIM, "path": "ded/out"}},
                 "dedicated": {"model": FLEET, "modelClaim": {"claimName": MODEL_CLAIM}, "gpus": 0,
                               "image": engine_image.tag, "enforceEager": True, "maxModelLen": 1024,
                               "maxNumSeqs": 8, "env": [{"name": "VLLM_CPU_KVCACHE_SPACE", "value": "1"}],
                               # The fleet's pod holds 1 of the node's 2 CPUs; the pod's sidecar asks 100m more.
                               "resources": {"cpu": "800m", "memory": "5Gi"},
                               "nodeSelector": {NODE_LABEL[0]: NODE_LABEL[1]}}},
    })
    done = real_cluster.kubectl("wait", "-n", ns, "--for=condition=Complete", f"qwenbatch/{name}",
                                "--timeout=900s", check=False, timeout=960)
    assert done.returncode == 0, _diagnose(real_cluster, ns, name, fleet_operator)
    written = Written.read(data, "ded/out")
    assert written.duplicates() == {}
    assert {r["custom_id"] for r in written.output} == set(ids) and len(written.output) == 200
    for record in written.output:
        assert record["error"] is None and record["response"]["status_code"] == 200, record
    assert len(written.errors) == len(MALFORMED), written.errors
    status = batch_status(real_cluster, ns, name)
    assert (status["state"], status["total"], status["completed"], status["failed"]) == \
        ("Complete", 200 + len(MALFORMED), 200, len(MALFORMED)), status
    (pod,) = job_pods(real_cluster, ns, name)
    assert pod["spec"]["nodeName"] == NODE_NAME and pod["status"]["phase"] == "Succeeded"
    (engine,) = pod["status"]["containerStatuses"]
    assert engine["state"]["terminated"]["exitCode"] == 0
    phases = engine_start_phases(real_cluster, ns, f"qwenfleet.io/batch={name}", engine["name"])
    print(f"dedicated pod start-up: {phases}")
    print(f"dedicated: {len(written.output)} answered, {len(written.errors)} failed (malformed)")
