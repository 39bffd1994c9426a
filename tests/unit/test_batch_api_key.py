"""A QwenBatch and `qwen-fleet bench-serving` against a fleet that requires an API key (issue 31 item 4): the key
comes from the fleet's own Secret through a secretKeyRef, the runner sends it as Authorization: Bearer, a 401 stops
the run with what is wrong, and the key is in no record, log line or message. The real engine's side of this is
tests/contract/test_batch_api_key_vllm.py."""

from __future__ import annotations

import asyncio
import copy
import json
import logging
import os
import re
import threading
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any

import pytest
import yaml

from qwen_fleet.api import QwenInference
from qwen_fleet.api.batch import QwenBatch
from qwen_fleet.api.security import ApiKeySecretRef, fleet_api_key_ref
from qwen_fleet.batchrun.cli import batch_run_command
from qwen_fleet.batchrun.redact import RedactingFilter, redact_keys
from qwen_fleet.batchrun.runner import Settings
from qwen_fleet.cli import build_parser, dump_yaml
from qwen_fleet.config import OperatorConfig
from qwen_fleet.plan import make_plan
from qwen_fleet.reconcile.batch_controller import BatchController
from qwen_fleet.render import ALL_CAPABILITIES, render_children
from qwen_fleet.render.batch import render_batch_children, render_job
from qwen_fleet.servebench.client import Workload
from qwen_fleet.servebench.cluster import (
    KeySecretProblem,
    parse_key_secret,
    pick_key,
    render_bench_job,
    resolve_api_key,
)
from qwen_fleet_dev.cluster import free_port
from tests.invalid_batch_specs import BATCH_BASE
from tests.unit.test_batch_controller import KEY, RecordingKube

FIXTURES = Path(__file__).resolve().parent / "fixtures"
RUNNER, ENGINE = "ghcr.io/qwen-fleet/operator:9.9.9", "vllm/vllm-openai:v0.32.0"
KEY_VALUE = "sk-test-5f1d2c9a7b"  # what the fake fleet checks; the operator side never sees it
# The fleet as the API returns it: a key on vLLM (serving.apiKeySecretRef) and the batch's target.
KEYED_FLEET: dict[str, Any] = {
    "apiVersion": "qwenfleet.io/v1alpha1", "kind": "QwenInference",
    "metadata": {"name": "qwen", "namespace": "team", "uid": "f-1"},
    "spec": {"model": {"name": "Qwen/Qwen3-4B-Instruct-2507"}, "engine": {"schedulingPolicy": "priority"},
             "serving": {"apiKeySecretRef": {"name": "qwen-vllm-key", "key": "token"}}},
}


def _batch() -> QwenBatch:
    return QwenBatch.model_validate({"metadata": {"name": "sums", "namespace": "team", "uid": "u-1"},
                                     "spec": copy.deepcopy(BATCH_BASE)})


def _runner_env(job: dict[str, Any]) -> list[dict[str, Any]]:
    (runner,) = job["spec"]["template"]["spec"]["containers"]
    return list(runner["env"])


# --- the Job ---------------------------------------------------------------------------------------------------

def test_the_batch_job_of_a_keyed_fleet_renders_its_golden() -> None:
    """tests/unit/fixtures/batch-keyed-fleet.golden.yaml (UPDATE_GOLDEN=1 rewrites it, as test_render_golden.py's)."""
    text = dump_yaml(render_batch_children(_batch(), RUNNER, ENGINE, 8000, fleet_api_key_ref(KEYED_FLEET)))
    golden = FIXTURES / "batch-keyed-fleet.golden.yaml"
    if os.environ.get("UPDATE_GOLDEN"):
        golden.write_text(text)
    assert text == golden.read_text()


def test_the_runner_reads_the_same_secret_key_the_fleets_vllm_checks() -> None:
    # The oracle is the fleet's own Deployment, rendered by render/deployment.py: whatever key vLLM is given as
    # VLLM_API_KEY, the runner must be given as QWEN_FLEET_API_KEY, from the same Secret and key.
    cr = QwenInference.model_validate(KEYED_FLEET)
    deployment = next(c for c in render_children(cr, make_plan(cr, OperatorConfig()), ALL_CAPABILITIES)
                      if c["kind"] == "Deployment")
    server = next(c for c in deployment["spec"]["template"]["spec"]["containers"] if c["name"] == "vllm")
    vllm_ref = next(e for e in server["env"] if e["name"] == "VLLM_API_KEY")["valueFrom"]
    env = _runner_env(render_job(_batch(), RUNNER, ENGINE, api_key=fleet_api_key_ref(KEYED_FLEET)))
    assert {"name": "QWEN_FLEET_API_KEY", "valueFrom": vllm_ref} in env
    assert vllm_ref == {"secretKeyRef": {"name": "qwen-vllm-key", "key": "token"}}


def test_a_fleet_without_a_key_gives_the_runner_none() -> None:
    fleet = copy.deepcopy(KEYED_FLEET)
    del fleet["spec"]["serving"]
    assert fleet_api_key_ref(fleet) is None
    assert _runner_env(render_job(_batch(), RUNNER, ENGINE, api_key=None)) == [{"name": "TMPDIR",
                                                                                "value": "/batch/work"}]


def test_the_key_name_defaults_as_the_crd_does() -> None:
    fleet = {"spec": {"serving": {"apiKeySecretRef": {"name": "k"}}}}
    assert fleet_api_key_ref(fleet) == ApiKeySecretRef(name="k", key="api-key")


def test_the_controller_gives_the_batch_job_its_fleets_key() -> None:
    kube = RecordingKube()
    controller = BatchController(kube, OperatorConfig(), {("team", "qwen"): KEYED_FLEET}.get,  # type: ignore[arg-type]
                                 emit=lambda *_: None)
    controller.batches[KEY] = {"apiVersion": "qwenfleet.io/v1alpha1", "kind": "QwenBatch",
                               "metadata": {"name": "sums", "namespace": "team", "uid": "u1", "generation": 1},
                               "spec": copy.deepcopy(BATCH_BASE)}
    asyncio.run(controller.reconcile(KEY))
    job = next(o for o in kube.applied if o["kind"] == "Job")
    assert {"name": "QWEN_FLEET_API_KEY",
            "valueFrom": {"secretKeyRef": {"name": "qwen-vllm-key", "key": "token"}}} in _runner_env(job)
    assert "sk-" not in json.dumps(kube.applied) + json.dumps(kube.patched)


# --- the runner ------------------------------------------------------------------------------------------------

class KeyedFleet:
    """Answers like vLLM with VLLM_API_KEY set: 401 {"error": "Unauthorized"} unless Authorization is
    ``Bearer KEY_VALUE``. A custom_id starting with "echo" gets a 500 whose body repeats the request's headers,
    as a debugging proxy would."""

    def __init__(self) -> None:
        self.authorizations: list[str | None] = []
        fleet = self

        class Handler(BaseHTTPRequestHandler):
            def log_message(self, *_: Any) -> None:
                pass

            def do_POST(self) -> None:
                self.rfile.read(int(self.headers["Content-Length"]))
                auth = self.headers.get("Authorization")
                fleet.authorizations.append(auth)
                cid = self.headers["X-Request-Id"]
                if auth != f"Bearer {KEY_VALUE}":
                    status, out = 401, {"error": "Unauthorized"}
                elif cid.startswith("echo"):
                    status, out = 500, {"error": {"message": f"upstream saw {dict(self.headers)}"}}
                else:
                    status, out = 200, {"id": f"c-{cid}", "usage": {"prompt_tokens": 3, "completion_tokens": 2}}
                raw = json.dumps(out).encode()
                self.send_response(status)
                self.send_header("Content-Type", "application/json")
                self.send_header("Content-Length", str(len(raw)))
                self.end_headers()
                self.wfile.write(raw)

        self.server = ThreadingHTTPServer(("127.0.0.1", free_port()), Handler)
        threading.Thread(target=self.server.serve_forever, daemon=True).start()

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.server.server_address[1]}"


@pytest.fixture
def keyed() -> Iterator[KeyedFleet]:
    fleet = KeyedFleet()
    yield fleet
    fleet.server.shutdown()


def _input(path: Path, ids: list[str]) -> Path:
    path.write_text("".join(json.dumps({"custom_id": cid, "method": "POST", "url": "/v1/chat/completions",
                                        "body": {"model": "m", "messages": [{"role": "user", "content": cid}]}})
                            + "\n" for cid in ids))
    return path


def _run(fleet: KeyedFleet, tmp_path: Path, ids: list[str], key: str | None, monkeypatch: Any) -> int:
    if key is None:
        monkeypatch.delenv("QWEN_FLEET_API_KEY", raising=False)
    else:
        monkeypatch.setenv("QWEN_FLEET_API_KEY", key)
    argv = ["batch-run", "--input", str(_input(tmp_path / "in.jsonl", ids)), "--output-dir", str(tmp_path / "out"),
            "--endpoint", fleet.url, "--concurrency", "2", "--max-retries", "1", "--retry-base-seconds", "0"]
    return batch_run_command(build_parser().parse_args(argv))


def _lines(path: Path) -> list[dict[str, Any]]:
    return [json.loads(x) for x in path.read_text().splitlines()] if path.exists() else []


def test_the_runner_sends_the_key_as_a_bearer_token(keyed: KeyedFleet, tmp_path: Path, monkeypatch: Any) -> None:
    assert _run(keyed, tmp_path, ["a", "b", "c"], KEY_VALUE, monkeypatch) == 0
    assert keyed.authorizations == [f"Bearer {KEY_VALUE}"] * 3
    assert sorted(r["custom_id"] for r in _lines(tmp_path / "out" / "output.jsonl")) == ["a", "b", "c"]


def test_no_key_stops_the_run_with_exit_4_saying_the_key_is_missing(keyed: KeyedFleet, tmp_path: Path,
                                                                     monkeypatch: Any, capsys: Any) -> None:
    assert _run(keyed, tmp_path, [f"l{i}" for i in range(20)], None, monkeypatch) == 4
    err = capsys.readouterr().err
    assert f"{keyed.url} answered 401 Unauthorized (Unauthorized): the API key is missing" in err
    assert "QWEN_FLEET_API_KEY is unset" in err and "Traceback" not in err
    assert set(keyed.authorizations) == {None}
    assert len(keyed.authorizations) <= 2 + 1  # stopped at once: at most the lines in flight, not all 20
    # No line is written off for a missing key: once the key is fixed, the next run sends them all.
    assert _lines(tmp_path / "out" / "errors.jsonl") == [] and _lines(tmp_path / "out" / "output.jsonl") == []
    assert _run(keyed, tmp_path, [f"l{i}" for i in range(20)], KEY_VALUE, monkeypatch) == 0
    assert len(_lines(tmp_path / "out" / "output.jsonl")) == 20


def test_a_wrong_key_says_so_and_never_shows_the_key(keyed: KeyedFleet, tmp_path: Path, monkeypatch: Any,
                                                     capsys: Any, caplog: Any) -> None:
    wrong = "sk-wrong-0c7e11aa"
    with caplog.at_level(logging.INFO):
        assert _run(keyed, tmp_path, ["a", "b"], wrong, monkeypatch) == 4
    err = capsys.readouterr().err
    assert "the API key is wrong: the fleet refused the key in $QWEN_FLEET_API_KEY" in err
    assert wrong not in err + caplog.text
    assert keyed.authorizations and set(keyed.authorizations) == {f"Bearer {wrong}"}  # it was sent, though


def test_an_answer_that_echoes_the_key_is_recorded_without_it(keyed: KeyedFleet, tmp_path: Path,
                                                              monkeypatch: Any) -> None:
    assert _run(keyed, tmp_path, ["echo-1", "ok-1"], KEY_VALUE, monkeypatch) == 0
    errors = (tmp_path / "out" / "errors.jsonl").read_text()
    assert "Bearer ***" in errors and "upstream saw" in errors
    assert KEY_VALUE not in errors + (tmp_path / "out" / "output.jsonl").read_text()


def test_the_settings_never_print_the_key() -> None:
    assert KEY_VALUE not in repr(Settings(endpoint="http://x", api_key=KEY_VALUE))


# --- redaction -------------------------------------------------------------------------------------------------

def test_redact_keys_hides_the_key_and_any_bearer_credential() -> None:
    said = f"refused {KEY_VALUE}; headers: Authorization: Bearer other-token, next"
    assert redact_keys(said, KEY_VALUE) == "refused ***; headers: Authorization: Bearer ***, next"
    assert redact_keys("nothing secret", "") == "nothing secret"  # no key set: nothing to replace


def test_the_log_filter_redacts_arguments_urls_and_tracebacks() -> None:
    record = logging.LogRecord("qwen_fleet.batchrun", logging.WARNING, __file__, 1, "failed %s at %s",
                               (KEY_VALUE, "https://h/in.jsonl?X-Amz-Signature=abc"), None)
    try:
        raise RuntimeError(f"boom {KEY_VALUE}")
    except RuntimeError:
        import sys
        record.exc_info = sys.exc_info()
    assert RedactingFilter(KEY_VALUE).filter(record)
    assert record.getMessage() == "failed *** at https://h/in.jsonl?..."
    assert record.exc_text is not None and "boom ***" in record.exc_text and KEY_VALUE not in record.exc_text


# --- bench-serving ---------------------------------------------------------------------------------------------

def _deployment() -> dict[str, Any]:
    cr = QwenInference.model_validate(KEYED_FLEET)
    return next(c for c in render_children(cr, make_plan(cr, OperatorConfig()), ALL_CAPABILITIES)
                if c["kind"] == "Deployment")


def test_the_bench_client_job_sends_the_key_from_a_secret_key_ref() -> None:
    job = render_bench_job(_deployment(), "http://qwen.team.svc:8000", Workload(), "b-1", 600,
                           ApiKeySecretRef(name="qwen-vllm-key", key="token"))
    (bench,) = job["spec"]["template"]["spec"]["containers"]
    # vLLM's benchmark client sends $OPENAI_API_KEY as a Bearer token (vllm/benchmarks/lib/endpoint_request_func.py).
    assert [e for e in bench["env"] if e["name"] == "OPENAI_API_KEY"] == [
        {"name": "OPENAI_API_KEY", "valueFrom": {"secretKeyRef": {"name": "qwen-vllm-key", "key": "token"}}}]
    assert not any("OPENAI_API_KEY" in e["name"] for e in render_bench_job(
        _deployment(), "http://qwen.team.svc:8000", Workload(), "b-1", 600)["spec"]["template"]["spec"]
        ["containers"][0]["env"])


class FakeSecrets:
    """CoreV1Api.read_namespaced_secret over a dict; records what was read."""

    def __init__(self, secrets: dict[str, dict[str, str]]) -> None:
        self.secrets, self.read = secrets, []

    def read_namespaced_secret(self, name: str, namespace: str) -> Any:
        from kubernetes.client.exceptions import ApiException

        self.read.append((namespace, name))
        if name not in self.secrets:
            raise ApiException(status=404, reason="Not Found")
        return type("Secret", (), {"data": self.secrets[name]})()


def test_bench_serving_takes_the_fleets_key_by_default_and_reads_no_secret() -> None:
    core = FakeSecrets({})
    ref, said = resolve_api_key(core, "team", KEYED_FLEET, None)
    assert ref == ApiKeySecretRef(name="qwen-vllm-key", key="token") and core.read == []
    assert "serving.apiKeySecretRef" in said
    assert resolve_api_key(core, "team", {"spec": {}}, None)[0] is None


def test_bench_serving_api_key_secret_picks_the_named_or_the_first_key() -> None:
    core = FakeSecrets({"qwen-keys": {"team-b": "c2stYg==", "team-a": "c2stYQ=="}})
    ref, said = resolve_api_key(core, "team", KEYED_FLEET, "qwen-keys")
    assert ref == ApiKeySecretRef(name="qwen-keys", key="team-a")  # the first in sorted order
    assert "c2st" not in said
    assert resolve_api_key(core, "team", KEYED_FLEET, "qwen-keys:team-b")[0] == ApiKeySecretRef(name="qwen-keys",
                                                                                                key="team-b")
    with pytest.raises(KeySecretProblem, match=re.escape("Secret team/nope (--api-key-secret) does not exist")):
        resolve_api_key(core, "team", KEYED_FLEET, "nope")
    with pytest.raises(KeySecretProblem, match=re.escape("has no key 'team-c' (it has: team-a, team-b)")):
        resolve_api_key(core, "team", KEYED_FLEET, "qwen-keys:team-c")
    with pytest.raises(KeySecretProblem, match="holds no keys"):
        pick_key("team/empty", [], None)
    for bad in ("", ":x", "name:"):
        with pytest.raises(ValueError, match="NAME or NAME:KEY"):
            parse_key_secret(bad)


def test_the_golden_names_the_secret_and_holds_no_key() -> None:
    docs = list(yaml.safe_load_all((FIXTURES / "batch-keyed-fleet.golden.yaml").read_text()))
    text = json.dumps(docs)
    assert "qwen-vllm-key" in text and "sk-" not in text


def test_url_redaction_said_twice_says_the_same() -> None:
    # Messages are redacted where a URL is said and again by the log filter: "?..." must survive the second pass.
    from qwen_fleet.batchrun.redact import redact_urls

    once = redact_urls("cannot read the input https://u:p@h/in.jsonl?X-Amz-Signature=s: 404.")
    assert once == "cannot read the input https://***@h/in.jsonl?...: 404."
    assert redact_urls(once) == once
