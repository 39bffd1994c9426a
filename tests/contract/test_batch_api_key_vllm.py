"""A fleet that requires an API key (serving.apiKeySecretRef), against the real vLLM CPU engine: the engine runs from
the Deployment the operator renders, its VLLM_API_KEY resolved from a Secret as the kubelet would; the batch runner
and vLLM's own benchmark client run with the environment of the Jobs the operator and bench-serving render, their
secretKeyRefs resolved from the same Secret. Without the key the engine refuses the runner (401: exit 4, the key
named missing, no line written off); with it every line is answered. The key is never in what the runner prints.

The runner runs as its own process, as in its Job: `python -m qwen_fleet.cli batch-run ...`.
"""

from __future__ import annotations

import copy
import json
import os
import subprocess
import sys
import urllib.error
import urllib.request
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from qwen_fleet.api.batch import QwenBatch
from qwen_fleet.api.security import fleet_api_key_ref
from qwen_fleet.render.batch import render_job
from qwen_fleet.servebench.client import LAUNCHER, Workload, client_args
from qwen_fleet.servebench.cluster import render_bench_job
from tests.support.cpu_rule import local_process
from tests.support.serving import KV_SPACE_GIB, NAME, SPEC, RenderedServer, rendered_children
from tests.support.vllm_server import free_port

pytestmark = [pytest.mark.vllm, pytest.mark.slow]
# The Secret of the fleet's namespace, as the kubelet reads it for a secretKeyRef: (name, key) -> value.
SECRET = {("qwen-vllm-key", "token"): "sk-contract-8d41e0b7c2"}
KEY_REF = {"name": "qwen-vllm-key", "key": "token"}
LINES = 12


def _resolve(env: list[dict[str, Any]]) -> dict[str, str]:
    """What the kubelet makes of a container's env: a secretKeyRef becomes the Secret's value (a missing one
    would keep the pod from starting: KeyError here)."""
    out: dict[str, str] = {}
    for var in env:
        if "valueFrom" in var:
            ref = var["valueFrom"]["secretKeyRef"]
            out[var["name"]] = SECRET[(ref["name"], ref["key"])]
        else:
            out[var["name"]] = var["value"]
    return out


def _keyed_spec() -> dict[str, Any]:
    spec = copy.deepcopy(SPEC)
    spec["serving"] = {"apiKeySecretRef": dict(KEY_REF)}
    return spec


@pytest.fixture(scope="module")
def keyed_vllm(vllm_python: str, tiny_qwen_dir: Path, tmp_path_factory: pytest.TempPathFactory
               ) -> Iterator[RenderedServer]:
    deployment = rendered_children(_keyed_spec())["Deployment"]
    server = next(c for c in deployment["spec"]["template"]["spec"]["containers"] if c["name"] == "vllm")
    key_vars = [e for e in server["env"] if "valueFrom" in e]
    assert key_vars == [{"name": "VLLM_API_KEY", "valueFrom": {"secretKeyRef": KEY_REF}}]
    server["env"] = [e for e in server["env"] if "valueFrom" not in e]  # the cpu rule takes literal values only
    port = free_port()
    local = local_process(deployment, vllm_python, {"model": tiny_qwen_dir}, port)
    env = {**local.env, **_resolve(key_vars), "VLLM_CPU_KVCACHE_SPACE": str(KV_SPACE_GIB)}
    engine = RenderedServer(local.argv, env, port=port, served_model_name=NAME, python=vllm_python,
                            log_path=tmp_path_factory.mktemp("keyed-vllm") / "vllm.log")
    with engine:
        yield engine


def _post(url: str, headers: dict[str, str]) -> int:
    body = json.dumps({"model": NAME, "max_tokens": 2, "messages": [{"role": "user", "content": "hi"}]}).encode()
    req = urllib.request.Request(url + "/v1/chat/completions", data=body, method="POST",
                                 headers={"Content-Type": "application/json", **headers})
    try:
        with urllib.request.urlopen(req, timeout=120) as resp:
            return int(resp.status)
    except urllib.error.HTTPError as err:
        return err.code


def _batch_env(fleet_spec: dict[str, Any]) -> dict[str, str]:
    """The runner container's environment in the Job the operator renders for a batch on this fleet."""
    batch = QwenBatch.model_validate({
        "metadata": {"name": "keyed", "namespace": "llm"},
        "spec": {"fleetRef": {"name": NAME}, "input": {"configMap": {"name": "in"}},
                 "output": {"configMap": {"name": "out"}}}})
    fleet = {"metadata": {"name": NAME, "namespace": "llm"}, "spec": fleet_spec}
    job = render_job(batch, "runner:test", "engine:test", api_key=fleet_api_key_ref(fleet))
    (runner,) = job["spec"]["template"]["spec"]["containers"]
    return {k: v for k, v in _resolve(runner["env"]).items() if k != "TMPDIR"}


def _runner(src: Path, out: Path, endpoint: str, env: dict[str, str]) -> subprocess.CompletedProcess[str]:
    base = {k: v for k, v in os.environ.items() if k != "QWEN_FLEET_API_KEY"}
    return subprocess.run([sys.executable, "-m", "qwen_fleet.cli", "batch-run", "--input", str(src),
                           "--output-dir", str(out), "--endpoint", endpoint, "--concurrency", "4",
                           "--max-retries", "1", "--retry-base-seconds", "0"],
                          env={**base, **env}, capture_output=True, text=True, timeout=900)


def test_the_runner_is_refused_without_the_key_and_served_with_it(keyed_vllm: RenderedServer,
                                                                  tmp_path: Path) -> None:
    key = SECRET[("qwen-vllm-key", "token")]
    # The engine itself: /v1 wants the key, /health stays open (it answered the readiness wait).
    assert _post(keyed_vllm.base_url, {}) == 401
    assert _post(keyed_vllm.base_url, {"Authorization": "Bearer sk-not-it"}) == 401
    assert _post(keyed_vllm.base_url, {"Authorization": f"Bearer {key}"}) == 200

    src, out = tmp_path / "input.jsonl", tmp_path / "out"
    src.write_text("".join(json.dumps({"custom_id": f"k-{i}", "method": "POST", "url": "/v1/chat/completions",
                                       "body": {"model": NAME, "max_tokens": 4, "temperature": 0,
                                                "messages": [{"role": "user", "content": f"Say {i}."}]}}) + "\n"
                           for i in range(LINES)))

    # A fleet without the key in its spec: the runner gets no key, and the keyed engine refuses it.
    no_key_env = _batch_env(SPEC)
    assert no_key_env == {}
    refused = _runner(src, out, keyed_vllm.base_url, no_key_env)
    print("without the key:", refused.returncode, refused.stderr.strip().splitlines()[-1])
    assert refused.returncode == 4, refused.stderr[-3000:]
    assert "answered 401 Unauthorized" in refused.stderr and "the API key is missing" in refused.stderr
    assert "Traceback" not in refused.stderr
    assert not (out / "errors.jsonl").exists() or (out / "errors.jsonl").read_text() == ""

    wrong = _runner(src, out, keyed_vllm.base_url, {"QWEN_FLEET_API_KEY": "sk-wrong-31a9"})
    assert wrong.returncode == 4 and "the API key is wrong" in wrong.stderr
    assert "sk-wrong-31a9" not in wrong.stdout + wrong.stderr

    # The fleet's spec as it is: the Job's env, resolved from the Secret, carries the key.
    served = _runner(src, out, keyed_vllm.base_url, _batch_env(_keyed_spec()))
    assert served.returncode == 0, served.stderr[-3000:]
    assert key not in served.stdout + served.stderr
    records = [json.loads(x) for x in (out / "output.jsonl").read_text().splitlines()]
    assert sorted(r["custom_id"] for r in records) == sorted(f"k-{i}" for i in range(LINES))
    assert all(r["response"]["status_code"] == 200 and r["error"] is None for r in records)
    assert not (out / "errors.jsonl").exists() or (out / "errors.jsonl").read_text() == ""


def _bench(engine: RenderedServer, model_dir: Path, vllm_python: str, env: dict[str, str], out: Path
           ) -> tuple[int, dict[str, Any] | None, str]:
    workload = Workload(input_len=16, output_len=4, num_prompts=4, seed=1)
    args = client_args(workload, engine.base_url, NAME, str(model_dir), str(out), "r.json")
    base = {k: v for k, v in os.environ.items() if k not in ("OPENAI_API_KEY", "VIRTUAL_ENV", "PYTHONPATH")}
    done = subprocess.run([vllm_python, "-c", LAUNCHER, *args], env={**base, **env, "HF_HUB_OFFLINE": "1"},
                          capture_output=True, text=True, timeout=900)
    result = json.loads((out / "r.json").read_text()) if (out / "r.json").exists() else None
    return done.returncode, result, done.stdout + done.stderr


def test_the_bench_serving_client_sends_the_fleets_key(keyed_vllm: RenderedServer, tiny_qwen_dir: Path,
                                                       vllm_python: str, tmp_path: Path) -> None:
    deployment = rendered_children(_keyed_spec())["Deployment"]
    job = render_bench_job(deployment, keyed_vllm.base_url, Workload(), "bench-1", 600,
                           fleet_api_key_ref({"spec": _keyed_spec()}))
    (client,) = job["spec"]["template"]["spec"]["containers"]
    env = {"OPENAI_API_KEY": _resolve([e for e in client["env"] if e["name"] == "OPENAI_API_KEY"])["OPENAI_API_KEY"]}

    code, result, log = _bench(keyed_vllm, tiny_qwen_dir, vllm_python, env, tmp_path / "with")
    assert code == 0 and result is not None, log[-3000:]
    assert (result["completed"], result["failed"]) == (4, 0)

    code, result, log = _bench(keyed_vllm, tiny_qwen_dir, vllm_python, {}, tmp_path / "without")
    print("bench client without the key:", code, None if result is None else (result["completed"], result["failed"]))
    # vLLM 0.32's client counts a refused request as failed and still saves the result.
    assert code == 0 and result is not None, log[-3000:]
    assert (result["completed"], result["failed"]) == (0, 4)
