"""The cluster target's pure parts: when a patched fleet counts as rolled out, and the client Job built from the
Deployment the operator renders (rendered here by the operator's own renderer, not written by hand)."""

from __future__ import annotations

import copy
import json
from pathlib import Path
from typing import Any

import pytest
import yaml

from qwen_fleet.api import QwenInference
from qwen_fleet.config import OperatorConfig
from qwen_fleet.plan import make_plan
from qwen_fleet.render import ALL_CAPABILITIES, render_children
from qwen_fleet.servebench.client import LAUNCHER, Workload
from qwen_fleet.servebench.cluster import RESULT_MARKER, render_bench_job, result_from_log, rollout_state

ROOT = Path(__file__).resolve().parents[2]


def qwi(observed: int, ready: str = "True", ready_gen: int | None = None, stalled: str = "False") -> dict[str, Any]:
    ready_cond = {"type": "Ready", "status": ready, "reason": "RollingOut" if ready != "True" else "Ready",
                  "message": "1/2 replicas updated"}
    if ready_gen is not None:
        ready_cond["observedGeneration"] = ready_gen
    return {"metadata": {"generation": 5}, "status": {"observedGeneration": observed, "conditions": [
        ready_cond, {"type": "Stalled", "status": stalled, "reason": "DoesNotFit", "message": "weights > GPU",
                     "observedGeneration": observed}]}}


@pytest.mark.parametrize(("obj", "state"), [
    (qwi(observed=4), "waiting"),  # Ready, but for the old spec
    (qwi(observed=5, ready="False"), "waiting"),  # the new spec is rolling out
    (qwi(observed=5, ready="True", ready_gen=4), "waiting"),  # a Ready condition left from the old generation
    (qwi(observed=5, ready="True", ready_gen=5), "ready"),
    (qwi(observed=5, ready="True"), "ready"),
    (qwi(observed=5, ready="False", stalled="True"), "stalled"),
    ({"metadata": {"generation": 5}}, "waiting"),  # no status yet
])
def test_rollout_state(obj: dict[str, Any], state: str) -> None:
    assert rollout_state(obj, 5)[0] == state


def test_a_stalled_setting_says_why() -> None:
    assert rollout_state(qwi(observed=5, ready="False", stalled="True"), 5)[1] == \
        "Stalled (DoesNotFit): weights > GPU"


def deployment(doc: dict[str, Any]) -> dict[str, Any]:
    cr = QwenInference.model_validate(doc)
    children = render_children(cr, make_plan(cr, OperatorConfig()), ALL_CAPABILITIES)
    return json.loads(json.dumps(next(c for c in children if c["kind"] == "Deployment")))


def example(name: str) -> dict[str, Any]:
    doc = yaml.safe_load((ROOT / "examples" / name).read_text())
    doc["metadata"]["namespace"] = "llm"
    return dict(doc)


def test_job_for_a_model_on_a_claim_reads_the_tokenizer_where_the_server_reads_the_model() -> None:
    doc = example("qwen3-4b-instruct-a10g.yaml")
    doc["spec"]["model"]["source"] = {"pvc": {"claimName": "models", "path": "/qwen3-4b"}}
    dep = deployment(doc)
    server = dep["spec"]["template"]["spec"]["containers"][0]
    job = render_bench_job(dep, "http://qwen3-4b.llm.svc:8000/v1", Workload(num_prompts=7), "j", 600)
    pod = job["spec"]["template"]["spec"]
    container = pod["containers"][0]
    assert container["image"] == server["image"]
    assert container["command"][:2] == ["sh", "-c"]
    assert container["command"][3] == LAUNCHER
    args = container["command"][4:]
    model_arg = server["args"][server["args"].index("--model") + 1]
    assert model_arg.startswith("/")  # a path under the claim's mount
    assert args[args.index("--tokenizer") + 1] == model_arg
    assert args[args.index("--model") + 1] == server["args"][server["args"].index("--served-model-name") + 1]
    assert args[args.index("--base-url") + 1] == "http://qwen3-4b.llm.svc:8000"
    assert args[args.index("--num-prompts") + 1] == "7"
    claim = next(v for v in pod["volumes"] if "persistentVolumeClaim" in v)
    assert claim["persistentVolumeClaim"] == {"claimName": "models", "readOnly": True}
    mount = next(m for m in container["volumeMounts"] if m["name"] == claim["name"])
    assert model_arg.startswith(mount["mountPath"]) and mount["readOnly"] is True
    assert all(m["mountPath"] != "/dev/shm" for m in container["volumeMounts"])
    assert "nvidia.com/gpu" not in json.dumps(container["resources"])  # the client needs no GPU
    assert job["spec"]["backoffLimit"] == 0 and job["spec"]["activeDeadlineSeconds"] == 600
    assert pod["restartPolicy"] == "Never"


def test_job_for_a_hugging_face_model_keeps_the_servers_environment() -> None:
    dep = deployment(example("qwen3-4b-instruct-a10g.yaml"))
    server = dep["spec"]["template"]["spec"]["containers"][0]
    job = render_bench_job(dep, "http://qwen3-4b.llm.svc:8000", Workload(), "j", 600)
    container = job["spec"]["template"]["spec"]["containers"][0]
    assert container["env"] == server["env"]  # HF_HOME, a token from its Secret, offline switches
    args = container["command"][4:]
    assert args[args.index("--tokenizer") + 1] == "Qwen/Qwen3-4B-Instruct-2507"


def test_job_refuses_a_server_without_model() -> None:
    dep = deployment(example("qwen3-4b-instruct-a10g.yaml"))
    broken = copy.deepcopy(dep)
    container = broken["spec"]["template"]["spec"]["containers"][0]
    i = container["args"].index("--model")
    del container["args"][i:i + 2]
    with pytest.raises(ValueError, match="no --model"):
        render_bench_job(broken, "http://x:8000", Workload(), "j", 600)


def test_result_from_log() -> None:
    log = f"Starting main benchmark run...\n{RESULT_MARKER}\n" + json.dumps({"completed": 3})
    assert result_from_log(log) == {"completed": 3}
    with pytest.raises(ValueError, match="printed no result"):
        result_from_log("Traceback ...\nValueError: Initial test run failed")
