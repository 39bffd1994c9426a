"""The Deployment the operator renders really serves: its exact command, arguments and environment (mapped to
CPU by the rule in tests/support/cpu_rule.py) run the real vLLM engine on a tiny Qwen2 model; the probe paths
answer, the served model is listed, chat completions work, every metric the autoscaler and the operator's
alerts read exists, and a burst above maxNumSeqs makes the queue-depth signal rise."""

from __future__ import annotations

import re
from pathlib import Path
from typing import Any

import pytest

from qwen_fleet.render import metric_names as names
from tests.support.cpu_rule import local_process
from tests.support.queue_watch import peaks_under_load
from tests.support.serving import MAX_NUM_SEQS, NAME, RenderedServer, rendered_children

pytestmark = pytest.mark.vllm


@pytest.fixture(scope="module")
def rendered() -> dict[str, dict[str, Any]]:
    return rendered_children()


def test_the_rule_keeps_the_rendered_command_and_engine_arguments(rendered: dict[str, dict[str, Any]],
                                                                 vllm_python: str, tiny_qwen_dir: Path) -> None:
    container = rendered["Deployment"]["spec"]["template"]["spec"]["containers"][0]
    local = local_process(rendered["Deployment"], vllm_python, {"model": tiny_qwen_dir}, 12345)
    assert local.argv[1:3] == container["command"][1:3]
    args = container["args"]
    for flag in ("--max-num-seqs", "--max-num-batched-tokens", "--max-model-len", "--scheduling-policy",
                 "--shutdown-timeout", "--served-model-name", "--tensor-parallel-size"):
        assert local.argv[local.argv.index(flag) + 1] == args[args.index(flag) + 1]
    assert local.argv[local.argv.index("--model") + 1] == str(tiny_qwen_dir)
    assert local.argv[local.argv.index("--port") + 1] == "12345"
    assert local.env["TORCH_NCCL_ASYNC_ERROR_HANDLING"] == "1" and local.env["HF_HUB_OFFLINE"] == "1"
    # The pod's HOME is an emptyDir: here a fresh directory of its own, never the host's /home/vllm.
    home = Path(local.env["HOME"])
    assert home.is_dir() and not any(home.iterdir()) and str(home) != "/home/vllm"


def test_the_rule_refuses_what_a_cpu_cannot_do(rendered: dict[str, dict[str, Any]], vllm_python: str) -> None:
    dep = rendered["Deployment"]
    container = dep["spec"]["template"]["spec"]["containers"][0]
    container_fp8 = {**container, "args": [*container["args"], "--kv-cache-dtype", "fp8"]}
    dep_fp8 = {"spec": {"template": {"spec": {"containers": [container_fp8]}}}}
    with pytest.raises(ValueError, match="--kv-cache-dtype fp8 has no CPU equivalent"):
        local_process(dep_fp8, vllm_python, {}, 1)
    # Tensor parallelism is no longer refused: its ranks get a core each (tests/contract/test_cpu_parallel.py).


def test_probe_paths_models_and_chat(serving_vllm: RenderedServer, rendered: dict[str, dict[str, Any]]) -> None:
    container = rendered["Deployment"]["spec"]["template"]["spec"]["containers"][0]
    for probe in ("startupProbe", "readinessProbe", "livenessProbe"):
        status, _ = serving_vllm.get(container[probe]["httpGet"]["path"])
        assert status == 200, probe
    status, text = serving_vllm.get("/v1/models")
    assert status == 200 and f'"{NAME}"' in text
    status, body = serving_vllm.post_json("/v1/chat/completions", {
        "model": NAME, "messages": [{"role": "user", "content": "hello"}], "max_tokens": 8})
    assert status == 200, body
    assert body["choices"][0]["message"]["role"] == "assistant"
    assert body["usage"]["completion_tokens"] >= 1


def test_every_metric_the_autoscaler_and_alerts_read_exists(serving_vllm: RenderedServer,
                                                            rendered: dict[str, dict[str, Any]]) -> None:
    exported = set(serving_vllm.metrics())
    used = {names.QUEUE_SERIES, names.KV_CACHE_SERIES, names.RUNNING_SERIES}
    for rule in rendered["PrometheusRule"]["spec"]["groups"][0]["rules"]:
        used |= set(re.findall(r"vllm:[a-z_]+", rule["expr"]))
    assert used - exported == set()
    hpa_metrics = {m["pods"]["metric"]["name"] for m in rendered["HorizontalPodAutoscaler"]["spec"]["metrics"]}
    assert hpa_metrics == {names.QUEUE_METRIC, names.KV_CACHE_METRIC}


def test_a_burst_above_max_num_seqs_raises_the_queue_depth_signal(serving_vllm: RenderedServer) -> None:
    burst = 4 * MAX_NUM_SEQS
    # 900-token completions: the surplus waits for seconds, and the load stays on until the gauge was read with it
    peaks = peaks_under_load(serving_vllm, burst, 900, lambda p: p.waiting > 0, model=NAME)
    print(f"queue depth peak during a burst of {burst} clients at maxNumSeqs {MAX_NUM_SEQS}: {peaks}")
    assert peaks.failed == 0, peaks.errors
    assert peaks.waiting > 0
    assert peaks.running <= MAX_NUM_SEQS
