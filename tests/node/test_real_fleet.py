"""A QwenInference served for real: the operator (its own process) reconciles a CPU fleet of the tiny Qwen2
into a pod on the real node, running the locally built vLLM CPU image with the model from a
PersistentVolumeClaim; its startup and readiness probes pass against the real server and a chat completion
answers through the Service's ClusterIP. A max length vLLM refuses ends Ready=False with vLLM's own error
line (the termination message) and an Event; a spec change rolls the fleet under steady load with no
failed request.

One engine for the module: starting vLLM costs minutes on a small machine. Nothing skips: a missing image
input (the engine venv, Debian's packages) fails the build fixture, and so every test here.
"""

from __future__ import annotations

import json
import time
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from qwen_fleet_dev.cluster import LocalCluster
from qwen_fleet_dev.engine_image import EngineImage, ensure_engine_image
from qwen_fleet_dev.local_fleet import apply, chat, cpu_fleet, model_volume, service_url, wait_for_answer
from qwen_fleet_dev.processes import wait_for
from qwen_fleet_dev.realnode import NODE_NAME
from tests.conftest import CRD_FILE
from tests.node.pods import get
from tests.support.operator_process import OperatorProcess
from tests.support.real_fleet import SteadyLoad

# Not in `make test` yet: in the stop that added it, a run on a fresh node hung connecting to the fleet's
# ClusterIP after the pod was Ready (the module passed in an earlier run: 5 passed, 816 s). `make test-real-fleet`.
pytestmark = [pytest.mark.cluster, pytest.mark.real_fleet]
FLEET = "tiny"


@pytest.fixture(scope="module")
def engine_image(real_cluster: LocalCluster) -> EngineImage:
    image = ensure_engine_image()
    assert real_cluster.real_node is not None
    real_cluster.real_node.import_archive_dir(image.archive)
    return image


@pytest.fixture(scope="module")
def fleet_operator(real_cluster: LocalCluster, tmp_path_factory: pytest.TempPathFactory
                   ) -> Iterator[OperatorProcess]:
    real_cluster.install_crd(CRD_FILE)
    proc = OperatorProcess(real_cluster, tmp_path_factory.mktemp("fleet-operator") / "operator.log",
                           env={"QWEN_FLEET_RESYNC_SECONDS": "10"})
    proc.start()
    try:
        yield proc
    finally:
        proc.stop()


@pytest.fixture(scope="module")
def fleet_ns(real_cluster: LocalCluster, engine_image: EngineImage, fleet_operator: OperatorProcess,
             tiny_qwen_dir: Path) -> Iterator[str]:
    """A namespace whose fleet has answered its first chat completion."""
    ns = f"f-{uuid.uuid4().hex[:8]}"
    real_cluster.kubectl("create", "namespace", ns)
    try:
        apply(real_cluster, ns, [*model_volume(ns, tiny_qwen_dir), cpu_fleet(FLEET, engine_image.tag)])
        wait_for_answer(real_cluster, ns, FLEET)
        yield ns
    finally:
        real_cluster.kubectl("delete", "namespace", ns, "--wait=false", check=False)
        real_cluster.kubectl("delete", "pv", f"{ns}-tiny-model", "--wait=false", check=False)


def _fleet_pods(cluster: LocalCluster, ns: str) -> list[dict[str, Any]]:
    out = cluster.kubectl("get", "-n", ns, "pods", "-l", f"qwenfleet.io/inference={FLEET}", "-o", "json").stdout
    return list(json.loads(out)["items"])


def test_the_fleet_pod_runs_the_local_engine_image_on_the_real_node(
        real_cluster: LocalCluster, fleet_ns: str, engine_image: EngineImage) -> None:
    pods = _fleet_pods(real_cluster, fleet_ns)
    assert len(pods) == 1
    pod = pods[0]
    assert pod["spec"]["nodeName"] == NODE_NAME
    status = pod["status"]["containerStatuses"][0]
    assert status["image"] == engine_image.tag
    # The startup probe passed (started), then the readiness probe (ready), without a restart.
    assert status["started"] is True and status["ready"] is True and status["restartCount"] == 0
    volumes = {v["name"]: v for v in pod["spec"]["volumes"]}
    assert volumes["model"]["persistentVolumeClaim"]["claimName"] == "tiny-model"
    assert get(real_cluster, fleet_ns, "pvc", "tiny-model")["status"]["phase"] == "Bound"


def test_a_chat_completion_answers_through_the_service_cluster_ip(real_cluster: LocalCluster, fleet_ns: str) -> None:
    url = service_url(real_cluster, fleet_ns, FLEET)
    answer = chat(url, FLEET, "Say something", max_tokens=5)
    assert answer["model"] == FLEET
    assert answer["choices"][0]["message"]["role"] == "assistant"
    assert answer["usage"]["completion_tokens"] >= 1


def test_kubectl_wait_for_the_fleet_ready_returns(real_cluster: LocalCluster, fleet_ns: str) -> None:
    done = real_cluster.kubectl("wait", "-n", fleet_ns, "--for=condition=Ready", f"qwi/{FLEET}", "--timeout=120s",
                                check=False, timeout=150)
    assert done.returncode == 0, (done.stderr, get(real_cluster, fleet_ns, "qwi", FLEET).get("status"))


def _ready_condition(cluster: LocalCluster, ns: str, name: str) -> dict[str, Any]:
    status = get(cluster, ns, "qwi", name).get("status") or {}
    return next((c for c in status.get("conditions") or [] if c["type"] == "Ready"), {})


def test_a_max_model_len_vllm_refuses_ends_not_ready_with_vllm_s_own_error(
        real_cluster: LocalCluster, fleet_ns: str, engine_image: EngineImage) -> None:
    # The tiny model allows 4096 positions; the spec asks for 65536, which only vLLM itself can know to refuse.
    apply(real_cluster, fleet_ns, cpu_fleet("too-long", engine_image.tag, max_model_len=65536, cpu="500m"))
    try:
        wait_for("the Ready condition to carry vLLM's error",
                 lambda: _ready_condition(real_cluster, fleet_ns, "too-long").get("reason") == "EngineFailed", 600,
                 interval=2)
        ready = _ready_condition(real_cluster, fleet_ns, "too-long")
        assert ready["status"] == "False"
        assert "vLLM exited with code 1" in ready["message"]
        # vLLM's own words, not ours:
        assert "User-specified max_model_len (65536) is greater than the derived max_model_len" in ready["message"]
        events = json.loads(real_cluster.kubectl(
            "get", "events", "-n", fleet_ns, "--field-selector",
            "involvedObject.kind=QwenInference,involvedObject.name=too-long,reason=EngineFailed", "-o", "json").stdout)
        assert events["items"], "no EngineFailed Event"
        assert events["items"][0]["type"] == "Warning"
        assert "is greater than the derived max_model_len" in events["items"][0]["message"]
    finally:
        real_cluster.kubectl("delete", "-n", fleet_ns, "qwi", "too-long", "--wait=true", check=False, timeout=120)


def test_a_spec_change_rolls_the_fleet_without_a_failed_request(real_cluster: LocalCluster, fleet_ns: str) -> None:
    """The real kubelet replaces the pod: the new one must pass its probes before the old one gets its preStop
    sleep (endpoints drop it first), then SIGTERM, and vLLM drains within --shutdown-timeout."""
    before = {p["metadata"]["name"] for p in _fleet_pods(real_cluster, fleet_ns)}
    generation = get(real_cluster, fleet_ns, "qwi", FLEET)["metadata"]["generation"]
    with SteadyLoad(service_url(real_cluster, fleet_ns, FLEET), FLEET) as load:
        time.sleep(3)
        real_cluster.kubectl("patch", "-n", fleet_ns, "qwi", FLEET, "--type=merge",
                             "-p", json.dumps({"spec": {"engine": {"maxNumSeqs": 6}}}))

        def rolled() -> bool:
            pods = _fleet_pods(real_cluster, fleet_ns)
            names = {p["metadata"]["name"] for p in pods}
            ready = _ready_condition(real_cluster, fleet_ns, FLEET)
            return (len(pods) == 1 and not names & before and ready.get("status") == "True"
                    and ready.get("observedGeneration", 0) > generation)

        wait_for("the rollout to finish", rolled, 840, interval=2)
        served_before_the_end = load.ok
        time.sleep(3)
    assert load.failures == [], load.failures[:10]
    assert load.ok > served_before_the_end > 0
    pod = _fleet_pods(real_cluster, fleet_ns)[0]
    args = pod["spec"]["containers"][0]["args"]
    assert args[args.index("--max-num-seqs") + 1] == "6"
    print(f"rollout under load: {load.ok} answered, {len(load.failures)} failed")
