"""A ConfigMap output is written at a bounded rate and size (batchrun/sinks.py FlushPolicy), and a resumed run
neither loses nor duplicates an answer whatever was left unwritten; the input is bounded (batchrun/cli.py)."""

from __future__ import annotations

import functools
import json
import tempfile
import threading
from http.server import SimpleHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any

import pytest

from qwen_fleet.batchrun.cli import batch_run_command
from qwen_fleet.batchrun.kube import KubeApi
from qwen_fleet.batchrun.lines import read_done
from qwen_fleet.batchrun.redact import redact_url, redact_urls
from qwen_fleet.batchrun.sinks import CONFIGMAP_LIMIT, ConfigMapSink, FlushPolicy, SinkFull
from qwen_fleet.cli import build_parser
from qwen_fleet_dev.cluster import free_port


class RecordingApi(KubeApi):
    """The ConfigMap as the apiserver would keep it, and every write's body size, in bytes."""

    def __init__(self, data: dict[str, str] | None = None) -> None:
        super().__init__("http://unused")
        self.data = dict(data or {})
        self.bodies: list[int] = []

    def request(self, method: str, path: str, body: Any = None, content_type: str = "application/json",
                query: str = "") -> Any:
        assert method == "GET" and path == "/api/v1/namespaces/ns/configmaps/out"
        return {"data": dict(self.data)}

    def apply(self, path: str, obj: dict[str, Any]) -> Any:
        self.bodies.append(len(json.dumps(obj).encode()))
        self.data = dict(obj["data"])
        return obj


class Clock:
    def __init__(self) -> None:
        self.now = 0.0

    def __call__(self) -> float:
        return self.now


def _record(i: int, size: int = 100) -> str:
    return json.dumps({"custom_id": f"r{i}", "response": {"status_code": 200, "body": {"x": "y" * size}},
                       "error": None}) + "\n"


@pytest.mark.parametrize(("since", "waiting", "written", "writes", "due"), [
    (5.0, 1, 0, 0, True),  # the first record after the interval: nothing written yet
    (4.9, 1000, 0, 0, False),  # too soon
    (5.0, 0, 0, 0, False),  # nothing to write
    (60.0, 249, 1000, 3, False),  # less than a quarter of what is written: wait
    (60.0, 250, 1000, 3, True),
    (60.0, 10_000, 1000, 98, True),
    (60.0, 10_000, 1000, 99, False),  # the 100th write is the last one's (close)
])
def test_flush_policy(since: float, waiting: int, written: int, writes: int, due: bool) -> None:
    assert FlushPolicy().due(since, waiting, written, writes) is due


def test_records_arriving_fast_are_written_in_few_writes_whose_total_is_linear_in_the_output() -> None:
    api, clock = RecordingApi(), Clock()
    sink = ConfigMapSink(api, "ns", "out", FlushPolicy(seconds=5.0), clock)
    for i in range(3000):  # one record every 0.125 s: 375 s of answers, ~570 KB
        clock.now += 0.125
        sink.write(_record(i), ok=True)
    sink.close()
    final = len(api.data["output.jsonl"].encode())
    assert len(api.data["output.jsonl"].splitlines()) == 3000 and api.data["errors.jsonl"] == ""
    # One write per record was 3000 writes and ~860 MB. The policy: each write's data >= 1.25x the last one's, so
    # all but the last add up to <= 5x the last of them, and the last (close) is the final size: <= 6x the last body.
    assert final > 500_000 and len(api.bodies) <= 20
    assert sum(api.bodies) <= 6 * api.bodies[-1]


def test_the_interval_bounds_the_rate_of_small_outputs() -> None:
    api, clock = RecordingApi(), Clock()
    sink = ConfigMapSink(api, "ns", "out", FlushPolicy(seconds=5.0), clock)
    for i in range(100):  # 100 records in 12.5 s
        clock.now += 0.125
        sink.write(_record(i, size=10), ok=False)
    assert len(api.bodies) == 2  # at 5 s and at 10 s
    sink.close()
    assert len(api.bodies) == 3 and len(api.data["errors.jsonl"].splitlines()) == 100


def test_a_cap_on_writes_leaves_the_last_write_for_the_end() -> None:
    api, clock = RecordingApi(), Clock()
    sink = ConfigMapSink(api, "ns", "out", FlushPolicy(seconds=0.0, growth=0.0, max_writes=3), clock)
    for i in range(50):
        sink.write(_record(i), ok=True)
    assert len(api.bodies) == 2
    sink.close()
    assert len(api.bodies) == 3 and len(api.data["output.jsonl"].splitlines()) == 50


def test_a_run_killed_before_a_write_loses_nothing_and_duplicates_nothing_when_resumed() -> None:
    api, clock = RecordingApi(), Clock()
    sink = ConfigMapSink(api, "ns", "out", FlushPolicy(seconds=5.0), clock)
    for i in range(43):
        clock.now += 1.0
        sink.write(_record(i), ok=True)
    written = read_done(api.data.get("output.jsonl", ""))  # a SIGKILL here: no close, what waits is gone
    assert len(written.custom_ids) == 40  # written at 40 s; 3 wait
    resumed = ConfigMapSink(api, "ns", "out", FlushPolicy(seconds=5.0), clock)
    done = read_done(*resumed.existing())
    assert done.custom_ids == written.custom_ids
    for i in range(43):
        if f"r{i}" not in done.custom_ids:  # what the resumed run sends again
            resumed.write(_record(i), ok=True)
    resumed.close()
    ids = [json.loads(x)["custom_id"] for x in api.data["output.jsonl"].splitlines()]
    assert sorted(ids) == sorted(f"r{i}" for i in range(43))


def test_an_output_that_would_pass_the_limit_keeps_what_fits_and_stops_with_a_clear_error() -> None:
    api, clock = RecordingApi(), Clock()
    sink = ConfigMapSink(api, "ns", "out", FlushPolicy(seconds=3600.0), clock)
    big = _record(0, size=200_000)
    fits = CONFIGMAP_LIMIT // len(big.encode())
    for _ in range(fits):
        sink.write(big, ok=True)
    with pytest.raises(SinkFull, match=r"use output\.pvc"):
        sink.write(big, ok=True)
    kept = api.data["output.jsonl"]
    assert len(kept.encode()) <= CONFIGMAP_LIMIT and len(kept.splitlines()) == fits


def _cli(*argv: str) -> int:
    return batch_run_command(build_parser().parse_args(["batch-run", *argv]))


def _line(cid: str) -> str:
    return json.dumps({"custom_id": cid, "method": "POST", "url": "/v1/chat/completions",
                       "body": {"model": "m", "messages": [{"role": "user", "content": cid}]}}) + "\n"


def test_an_input_over_its_bounds_is_refused_with_the_reason_before_any_line_is_sent(
        tmp_path: Path, capsys: Any) -> None:
    src = tmp_path / "in.jsonl"
    src.write_text("".join(_line(f"q{i}") for i in range(10)))
    out = tmp_path / "out"
    closed = f"http://127.0.0.1:{free_port()}"  # nothing listens: a line sent would fail, not hang
    assert _cli("--input", str(src), "--output-dir", str(out), "--endpoint", closed, "--max-input-lines", "9") == 2
    assert "has more than 9 lines (spec.input.maxLines)" in capsys.readouterr().err
    size = src.stat().st_size
    assert _cli("--input", str(src), "--output-dir", str(out), "--endpoint", closed,
                "--max-input-bytes", str(size - 1)) == 2
    assert f"larger than {size - 1} bytes (spec.input.maxBytes)" in capsys.readouterr().err
    assert not (out / "errors.jsonl").exists() or not (out / "errors.jsonl").read_text()
    assert _cli("--input", str(src), "--output-dir", str(out), "--endpoint", closed, "--max-retries", "0",
                "--max-input-bytes", str(size), "--max-input-lines", "10") == 0  # at the bounds: accepted


def test_a_download_stops_at_the_bound_and_the_error_names_the_url_without_its_secrets(
        tmp_path: Path, capsys: Any, monkeypatch: Any) -> None:
    served = tmp_path / "served"
    served.mkdir()
    (served / "in.jsonl").write_text("".join(_line(f"q{i}") for i in range(2000)))
    handler = functools.partial(SimpleHTTPRequestHandler, directory=str(served))
    handler.log_message = lambda *_: None  # type: ignore[attr-defined]
    files = ThreadingHTTPServer(("127.0.0.1", free_port()), handler)
    threading.Thread(target=files.serve_forever, daemon=True).start()
    monkeypatch.setattr(tempfile, "tempdir", str(tmp_path))  # where the runner downloads to ($TMPDIR in the Job)
    port = files.server_address[1]
    secret = "X-Amz-Signature=deadbeefcafe&X-Amz-Credential=AKIAEXAMPLE"
    try:
        assert _cli("--input-url", f"http://127.0.0.1:{port}/in.jsonl?{secret}", "--output-dir",
                    str(tmp_path / "out"), "--endpoint", "http://127.0.0.1:1", "--max-input-bytes", "65536") == 2
    finally:
        files.shutdown()
    err = capsys.readouterr().err
    assert f"the input http://127.0.0.1:{port}/in.jsonl?... is refused: it is larger than 65536 bytes" in err
    assert not list(tmp_path.glob("input-*"))  # the partial download is removed
    closed = free_port()
    assert _cli("--input-url", f"http://user:hunter2@127.0.0.1:{closed}/x.jsonl?{secret}", "--output-dir",
                str(tmp_path / "out"), "--endpoint", "http://127.0.0.1:1") == 2
    err = capsys.readouterr().err
    assert f"cannot read the input http://***@127.0.0.1:{closed}/x.jsonl?..." in err, err
    assert "hunter2" not in err and "deadbeef" not in err and "AKIA" not in err


@pytest.mark.parametrize(("url", "said"), [
    ("https://bucket.s3.amazonaws.com/in.jsonl?X-Amz-Signature=abc&X-Amz-Credential=k",
     "https://bucket.s3.amazonaws.com/in.jsonl?..."),
    ("https://alice:pw@example.com:8443/a/b.jsonl", "https://***@example.com:8443/a/b.jsonl"),
    ("https://token@example.com/x#frag", "https://***@example.com/x#..."),
    ("http://example.com/plain.jsonl", "http://example.com/plain.jsonl"),
])
def test_redact_url(url: str, said: str) -> None:
    assert redact_url(url) == said


def test_redact_urls_in_free_text() -> None:
    text = ("qwen-fleet batch-run: cannot read the input https://u:p@h.example/in.jsonl?sig=SECRET: HTTP Error 403 "
            "(see http://docs.example/x)")
    assert redact_urls(text) == ("qwen-fleet batch-run: cannot read the input https://***@h.example/in.jsonl?...: "
                                 "HTTP Error 403 (see http://docs.example/x)")


def test_sigterm_writes_the_waiting_records_before_the_runner_exits(tmp_path: Path) -> None:
    import signal
    import subprocess
    import sys
    import time

    from tests.unit.test_batch_runner import FakeFleet, FakeKube

    fleet, kube = FakeFleet(hold=100), FakeKube()  # the fleet holds every request (up to 10 s): a pod mid-batch
    fleet.thread.start()
    src = tmp_path / "in.jsonl"
    src.write_text("".join(f"not json {i}\n" for i in range(5)) + _line("q1"))
    proc = subprocess.Popen([sys.executable, "-m", "qwen_fleet.cli", "batch-run", "--input", str(src),
                             "--output-configmap", "out", "--batch", "ns/b", "--kube-api", kube.url,
                             "--endpoint", fleet.url, "--flush-seconds", "3600", "--report-seconds", "3600"],
                            stderr=subprocess.PIPE, text=True)
    try:
        deadline = time.monotonic() + 60
        while not fleet.seen and time.monotonic() < deadline:  # the 5 malformed lines' records now wait
            time.sleep(0.05)
        assert fleet.seen, "the runner never sent its line"
        assert "errors.jsonl" not in kube.configmap["data"]  # nothing written yet (flush-seconds 3600)
        proc.send_signal(signal.SIGTERM)
        code = proc.wait(30)
    finally:
        proc.kill()
        fleet.server.shutdown()
        kube.server.shutdown()
    assert code == 143, proc.stderr.read() if proc.stderr else ""
    assert [json.loads(x)["line"] for x in kube.configmap["data"]["errors.jsonl"].splitlines()] == [1, 2, 3, 4, 5]
    assert kube.configmap["data"]["output.jsonl"] == ""  # the line in flight is sent again by the next pod
