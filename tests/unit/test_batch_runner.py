"""The batch runner against a loopback OpenAI-style server written here: one verdict per line, resume without
duplicates, malformed lines counted with their reason, retries, bounded concurrency, the Kubernetes calls."""

from __future__ import annotations

import json
import threading
from collections import Counter
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any

import pytest

from qwen_fleet.batchrun.cli import batch_run_command, follow_output
from qwen_fleet.batchrun.lines import read_done
from qwen_fleet.batchrun.runner import Settings, run_batch
from qwen_fleet.batchrun.sinks import DirectorySink
from qwen_fleet.cli import build_parser
from qwen_fleet_dev.cluster import free_port


class FakeFleet:
    """Answers /v1/chat/completions like vLLM: 200 with usage; custom_ids starting with "bad" get 400, "flaky"
    a 503 first, "down" always 503. With ``hold`` set, requests wait until that many have once been in flight
    together."""

    def __init__(self, hold: int = 0) -> None:
        self.seen: Counter[str] = Counter()
        self.bodies: dict[str, dict[str, Any]] = {}
        self.in_flight = self.max_in_flight = 0
        self.hold = hold
        self.cond = threading.Condition()
        fleet = self

        class Handler(BaseHTTPRequestHandler):
            def log_message(self, *_: Any) -> None:
                pass

            def do_POST(self) -> None:
                body = json.loads(self.rfile.read(int(self.headers["Content-Length"])))
                cid = self.headers["X-Request-Id"]
                status = fleet.answer(cid, body)
                out = {"id": f"chatcmpl-{cid}", "usage": {"prompt_tokens": 5, "completion_tokens": 7}} \
                    if status == 200 else {"error": {"message": f"refused {cid}", "code": status}}
                raw = json.dumps(out).encode()
                self.send_response(status)
                self.send_header("Content-Type", "application/json")
                self.send_header("Content-Length", str(len(raw)))
                self.end_headers()
                self.wfile.write(raw)

        self.server = ThreadingHTTPServer(("127.0.0.1", free_port()), Handler)
        self.thread = threading.Thread(target=self.server.serve_forever, daemon=True)

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.server.server_address[1]}"

    def answer(self, cid: str, body: dict[str, Any]) -> int:
        with self.cond:
            self.seen[cid] += 1
            self.bodies[cid] = body
            self.in_flight += 1
            self.max_in_flight = max(self.max_in_flight, self.in_flight)
            self.cond.notify_all()
            if self.hold:
                self.cond.wait_for(lambda: self.max_in_flight >= self.hold, timeout=10)
            self.in_flight -= 1
        if cid.startswith("bad"):
            return 400
        if cid.startswith("down") or (cid.startswith("flaky") and self.seen[cid] == 1):
            return 503
        return 200


@pytest.fixture
def fleet() -> Iterator[FakeFleet]:
    f = FakeFleet()
    f.thread.start()
    yield f
    f.server.shutdown()


def _line(cid: str, url: str = "/v1/chat/completions") -> str:
    return json.dumps({"custom_id": cid, "method": "POST", "url": url,
                       "body": {"model": "m", "messages": [{"role": "user", "content": cid}]}})


def _records(path: Path) -> list[dict[str, Any]]:
    return [json.loads(x) for x in path.read_text().splitlines()] if path.exists() else []


def _run(fleet: FakeFleet, lines: list[str], out: Path, **kw: Any) -> Any:
    settings = Settings(endpoint=fleet.url, retry_base_seconds=0.0, **kw)
    sink = DirectorySink(out)
    try:
        return run_batch(settings, lambda: lines, sink, read_done(*sink.existing()))
    finally:
        sink.close()


def test_every_line_gets_one_verdict_and_malformed_lines_their_reason(fleet: FakeFleet, tmp_path: Path) -> None:
    lines = [_line("a"), "{not json", json.dumps({"method": "POST", "url": "/v1/chat/completions", "body": {}}),
             _line("b", url="/v1/unknown"), _line("a"), "", _line("bad-1"), _line("c")]
    progress = _run(fleet, lines, tmp_path)
    output, errors = _records(tmp_path / "output.jsonl"), _records(tmp_path / "errors.jsonl")
    assert sorted(r["custom_id"] for r in output) == ["a", "c"]
    assert output[0]["response"]["status_code"] == 200 and output[0]["error"] is None
    assert output[0]["response"]["body"]["usage"]["completion_tokens"] == 7
    reasons = {r.get("line"): r["error"]["message"] for r in errors}
    assert "not JSON" in reasons[2]
    assert "custom_id must be a non-empty string" in reasons[3]
    assert "'/v1/unknown' is not served" in reasons[4]
    assert "repeats line 1" in reasons[5]
    (refused,) = [r for r in errors if r["custom_id"] == "bad-1"]
    assert refused["response"]["status_code"] == 400 and refused["error"]["code"] == "400"
    assert fleet.seen == Counter({"a": 1, "c": 1, "bad-1": 1})  # a 400 is not retried; nothing sent twice
    assert (progress.total, progress.completed, progress.failed) == (7, 2, 5)
    assert progress.completion_tokens == 14


def test_the_priority_goes_into_every_body(fleet: FakeFleet, tmp_path: Path) -> None:
    _run(fleet, [_line("a"), _line("b")], tmp_path, priority=10)
    assert {cid: body["priority"] for cid, body in fleet.bodies.items()} == {"a": 10, "b": 10}
    assert fleet.bodies["a"]["messages"][0]["content"] == "a"


def test_a_run_killed_midway_resumes_without_duplicates(fleet: FakeFleet, tmp_path: Path) -> None:
    lines = [_line(f"r{i}") for i in range(40)] + ["{broken"]
    _run(fleet, lines, tmp_path)
    # What a SIGKILL leaves: the first 15 verdicts and a torn 16th line; the malformed line's verdict stays.
    out = tmp_path / "output.jsonl"
    kept = out.read_text().splitlines(keepends=True)[:15]
    out.write_text("".join(kept) + kept[0][:30])
    fleet.seen.clear()
    progress = _run(fleet, lines, tmp_path)
    ids = [r["custom_id"] for r in _records(out)]
    assert len(ids) == 40 and len(set(ids)) == 40
    assert sum(fleet.seen.values()) == 25 and max(fleet.seen.values()) == 1  # only the missing ones, once
    assert len(_records(tmp_path / "errors.jsonl")) == 1  # the malformed line is not written again
    assert (progress.completed, progress.failed, progress.total) == (40, 1, 41)


def test_retries_then_gives_up_with_the_reason(fleet: FakeFleet, tmp_path: Path) -> None:
    _run(fleet, [_line("flaky-1"), _line("down-1")], tmp_path, max_retries=2)
    assert [r["custom_id"] for r in _records(tmp_path / "output.jsonl")] == ["flaky-1"]
    (down,) = _records(tmp_path / "errors.jsonl")
    assert down["custom_id"] == "down-1" and down["response"]["status_code"] == 503
    assert fleet.seen == Counter({"flaky-1": 2, "down-1": 3})


def test_an_unreachable_fleet_fails_each_line_after_its_retries(tmp_path: Path) -> None:
    settings = Settings(endpoint=f"http://127.0.0.1:{free_port()}", retry_base_seconds=0.0, max_retries=1)
    sink = DirectorySink(tmp_path)
    run_batch(settings, lambda: [_line("x")], sink, read_done(*sink.existing()))
    sink.close()
    (err,) = _records(tmp_path / "errors.jsonl")
    assert err["error"]["code"] == "connection_error" and "after 2 attempts" in err["error"]["message"]


def test_concurrency_is_bounded(tmp_path: Path) -> None:
    fleet = FakeFleet(hold=3)  # each request waits until 3 are in flight: fewer would time out, more shows
    fleet.thread.start()
    try:
        _run(fleet, [_line(f"c{i}") for i in range(9)], tmp_path, concurrency=3)
    finally:
        fleet.server.shutdown()
    assert fleet.max_in_flight == 3
    assert len(_records(tmp_path / "output.jsonl")) == 9


def _cli(*argv: str) -> int:
    return batch_run_command(build_parser().parse_args(["batch-run", *argv]))


def test_an_input_that_cannot_be_read_exits_2_with_the_reason(tmp_path: Path, capsys: Any) -> None:
    assert _cli("--input", str(tmp_path / "missing.jsonl"), "--output-dir", str(tmp_path), "--endpoint",
                "http://127.0.0.1:1") == 2
    assert "cannot read the input" in capsys.readouterr().err
    assert _cli("--input-url", f"http://127.0.0.1:{free_port()}/x", "--output-dir", str(tmp_path),
                "--endpoint", "http://127.0.0.1:1") == 2


def test_stage_writes_the_lines_still_to_do_and_the_malformed_ones(tmp_path: Path) -> None:
    src = tmp_path / "in.jsonl"
    src.write_text("\n".join([_line("a"), _line("b"), "nope", _line("c")]) + "\n")
    out = tmp_path / "out"
    out.mkdir()
    (out / "output.jsonl").write_text(json.dumps({"id": "1", "custom_id": "b", "error": None,
                                                  "response": {"status_code": 200, "body": {}}}) + "\n")
    staged = tmp_path / "work" / "pending.jsonl"
    staged.parent.mkdir()
    assert _cli("--input", str(src), "--output-dir", str(out), "--stage", str(staged)) == 0
    assert [json.loads(x)["custom_id"] for x in staged.read_text().splitlines()] == ["a", "c"]
    assert [r["line"] for r in _records(out / "errors.jsonl")] == [3]
    assert json.loads((staged.parent / "stage.json").read_text()) == {"total": 4, "completed": 1, "failed": 1}
    assert _cli("--input", str(src), "--output-dir", str(out), "--stage", str(staged)) == 0  # again: idempotent
    assert len(_records(out / "errors.jsonl")) == 1


class FakeKube:
    """The two API paths the runner uses, recorded: status apply and the output ConfigMap."""

    def __init__(self) -> None:
        self.calls: list[tuple[str, str, str, Any]] = []
        self.configmap: dict[str, Any] = {"data": {}}
        kube = self

        class Handler(BaseHTTPRequestHandler):
            def log_message(self, *_: Any) -> None:
                pass

            def _reply(self, obj: Any) -> None:
                raw = json.dumps(obj).encode()
                self.send_response(200)
                self.send_header("Content-Length", str(len(raw)))
                self.end_headers()
                self.wfile.write(raw)

            def do_GET(self) -> None:
                self._reply(kube.configmap)

            def do_PATCH(self) -> None:
                body = json.loads(self.rfile.read(int(self.headers["Content-Length"])))
                kube.calls.append((self.path, self.headers["Content-Type"], "", body))
                if body.get("kind") == "ConfigMap":
                    kube.configmap = body
                self._reply(body)

        self.server = ThreadingHTTPServer(("127.0.0.1", free_port()), Handler)
        threading.Thread(target=self.server.serve_forever, daemon=True).start()

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.server.server_address[1]}"


def test_configmap_output_and_status_reports_are_server_side_applies(fleet: FakeFleet, tmp_path: Path) -> None:
    kube = FakeKube()
    kube.configmap = {"data": {"output.jsonl": json.dumps({"custom_id": "a", "error": None,
                                                            "response": {"status_code": 200, "body": {}}}) + "\n"}}
    src = tmp_path / "in.jsonl"
    src.write_text(_line("a") + "\n" + _line("b") + "\n" + "x\n")
    try:
        assert _cli("--input", str(src), "--output-configmap", "out", "--endpoint", fleet.url, "--batch", "ns/b1",
                    "--kube-api", kube.url, "--report-seconds", "3600") == 0
    finally:
        kube.server.shutdown()
    assert fleet.seen == Counter({"b": 1})  # "a" was already in the ConfigMap
    data = kube.configmap["data"]
    assert [json.loads(x)["custom_id"] for x in data["output.jsonl"].splitlines()] == ["a", "b"]
    assert len(data["errors.jsonl"].splitlines()) == 1
    statuses = [body for path, _, _, body in kube.calls if path.endswith("/qwenbatches/b1/status?"
                                                                          "fieldManager=qwen-fleet-batch-runner&force=true")]
    assert all(ctype == "application/apply-patch+yaml" for _, ctype, _, _ in kube.calls)
    final = statuses[-1]["status"]
    assert (final["total"], final["completed"], final["failed"], final["etaSeconds"]) == (3, 2, 1, 0)
    assert statuses[-1]["kind"] == "QwenBatch" and statuses[-1]["metadata"] == {"name": "b1", "namespace": "ns"}


def test_follow_reports_the_outputs_counts_and_the_staged_total_when_stopped(tmp_path: Path) -> None:
    out, work = tmp_path / "out", tmp_path / "work"
    out.mkdir()
    work.mkdir()
    usage = {"prompt_tokens": 3, "completion_tokens": 4}
    ok = {"custom_id": "a", "error": None, "response": {"status_code": 200, "body": {"usage": usage}}}
    # vLLM's run-batch writes a refused request into the same file, with its error: it counts as failed.
    refused = {"custom_id": "b", "error": {"message": "bad"}, "response": {"status_code": 400, "body": None}}
    (out / "output.jsonl").write_text(json.dumps(ok) + "\n" + json.dumps(refused) + "\n")
    (out / "errors.jsonl").write_text(json.dumps({"custom_id": None, "line": 3, "error": {}}) + "\n")
    (work / "stage.json").write_text(json.dumps({"total": 5, "completed": 0, "failed": 1}))
    reports: list[dict[str, Any]] = []
    stop = threading.Event()
    stop.set()  # as SIGTERM at the pod's end: one last report, then exit
    args = build_parser().parse_args(["batch-run", "--input", "x", "--output-dir", str(out), "--follow",
                                      str(work / "pending.jsonl"), "--report-seconds", "0"])
    follow_output(args, reports.append, stop)
    assert len(reports) == 1
    assert {k: reports[0][k] for k in ("total", "completed", "failed", "promptTokens", "completionTokens")} == \
        {"total": 5, "completed": 1, "failed": 2, "promptTokens": 3, "completionTokens": 4}


def test_an_input_url_is_downloaded_then_sent(fleet: FakeFleet, tmp_path: Path, monkeypatch: Any) -> None:
    import functools
    from http.server import SimpleHTTPRequestHandler

    served = tmp_path / "served"
    served.mkdir()
    (served / "in.jsonl").write_text(_line("u1") + "\n" + _line("u2") + "\n")
    (served / "latin1.jsonl").write_bytes(b'{"custom_id": "caf\xe9"}\n')
    handler = functools.partial(SimpleHTTPRequestHandler, directory=str(served))
    handler.log_message = lambda *_: None  # type: ignore[attr-defined]
    files = ThreadingHTTPServer(("127.0.0.1", free_port()), handler)
    threading.Thread(target=files.serve_forever, daemon=True).start()
    monkeypatch.setenv("TMPDIR", str(tmp_path))  # where the Job's runner downloads to (its emptyDir)
    base = f"http://127.0.0.1:{files.server_address[1]}"
    try:
        assert _cli("--input-url", f"{base}/in.jsonl", "--output-dir", str(tmp_path / "out"), "--endpoint",
                    fleet.url) == 0
        assert _cli("--input-url", f"{base}/latin1.jsonl", "--output-dir", str(tmp_path / "out2"), "--endpoint",
                    fleet.url) == 2
    finally:
        files.shutdown()
    assert sorted(r["custom_id"] for r in _records(tmp_path / "out" / "output.jsonl")) == ["u1", "u2"]
    assert not (tmp_path / "out2" / "output.jsonl").read_text()


def test_batch_run_loads_neither_the_controller_nor_kopf() -> None:
    import subprocess
    import sys

    code = ("import sys\nfrom qwen_fleet.cli import build_parser\n"
            "args = build_parser().parse_args(['batch-run', '--input', 'x', '--output-dir', 'y', '--endpoint', 'z'])\n"
            "import qwen_fleet.batchrun.cli\n"
            "print(sorted(m for m in sys.modules if m.startswith(('kopf', 'kubernetes', 'qwen_fleet.reconcile', "
            "'qwen_fleet.render', 'qwen_fleet.api', 'pydantic'))))")
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=60, check=False)
    assert done.returncode == 0, done.stderr
    assert done.stdout.strip() == "[]"
