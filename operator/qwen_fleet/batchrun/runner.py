"""Send a batch to a fleet: bounded concurrency, per-line retries, one verdict per line, progress reports.

Threads, not asyncio: the work is a few blocking HTTP calls at a time (``concurrency`` is at most 256), and
urllib is in the standard library; the operator image needs nothing more to run it.
"""

from __future__ import annotations

import json
import logging
import random
import threading
import time
import urllib.error
import urllib.request
from collections.abc import Callable, Iterable
from concurrent.futures import FIRST_COMPLETED, Future, ThreadPoolExecutor, wait
from dataclasses import dataclass, field
from datetime import UTC, datetime
from typing import Any

from qwen_fleet.batchrun.lines import Done, Line, answered, dumps, invalid, parse_lines, succeeded, unanswered
from qwen_fleet.batchrun.redact import REDACTED, redact_keys, redact_url
from qwen_fleet.batchrun.sinks import Sink

log = logging.getLogger("qwen_fleet.batchrun")
Report = Callable[[dict[str, Any]], None]
RETRIED_STATUSES = frozenset({408, 429, 500, 502, 503, 504})
# Where the runner finds the fleet's API key: its Job sets it from the Secret key the fleet's vLLM checks
# (serving.apiKeySecretRef, through secretKeyRef). An environment variable, never an argument: a pod's
# arguments are in its spec, which more people read than the Secret.
API_KEY_ENV = "QWEN_FLEET_API_KEY"


class Unauthorized(Exception):
    """The fleet answered 401: without the right key no line can succeed, so the run stops rather than write
    every line to errors.jsonl; the lines not yet answered are sent by the next run (with the key fixed)."""


@dataclass(frozen=True)
class Settings:
    endpoint: str  # http://<fleet>.<namespace>.svc:8000, no trailing slash
    api_key: str = field(default="", repr=False)  # sent as Authorization: Bearer; never printed
    concurrency: int = 4
    priority: int | None = 10
    max_retries: int = 3
    timeout: float = 600.0
    retry_base_seconds: float = 1.0
    report_seconds: float = 5.0


def now_rfc3339() -> str:
    return datetime.now(UTC).strftime("%Y-%m-%dT%H:%M:%SZ")


class Progress:
    """Counts of the whole batch (earlier runs included); the rate is this run's own."""

    def __init__(self, total: int, done: Done) -> None:
        self.total = total
        self.completed, self.failed = done.completed, done.failed
        self.prompt_tokens, self.completion_tokens = done.prompt_tokens, done.completion_tokens
        self.started = time.monotonic()
        self.lines_this_run = 0
        self.tokens_this_run = 0
        self.lock = threading.Lock()

    def add(self, record: dict[str, Any], sent: bool = True) -> None:
        with self.lock:
            self.lines_this_run += sent  # the rate (ETA) is of lines sent; malformed ones take no time
            if succeeded(record):
                self.completed += 1
                usage = (record["response"].get("body") or {}).get("usage") or {}
                if isinstance(usage, dict):
                    self.prompt_tokens += int(usage.get("prompt_tokens") or 0)
                    self.completion_tokens += int(usage.get("completion_tokens") or 0)
                    self.tokens_this_run += int(usage.get("completion_tokens") or 0)
            else:
                self.failed += 1

    def status(self) -> dict[str, Any]:
        with self.lock:
            elapsed = max(time.monotonic() - self.started, 1e-6)
            out: dict[str, Any] = {"total": self.total, "completed": self.completed, "failed": self.failed,
                                   "promptTokens": self.prompt_tokens, "completionTokens": self.completion_tokens,
                                   "tokensPerSecond": round(self.tokens_this_run / elapsed, 2),
                                   "progressTime": now_rfc3339()}
            left = self.total - self.completed - self.failed
            if left == 0:
                out["etaSeconds"] = 0
            elif self.lines_this_run:
                out["etaSeconds"] = int(left * elapsed / self.lines_this_run)
            return out


def _post(settings: Settings, line: Line) -> tuple[int, str, Any]:
    """(status, request id, parsed body) of one request; raises OSError on a connection failure."""
    body = dict(line.body or {})
    if settings.priority is not None:
        body["priority"] = settings.priority
    headers = {"Content-Type": "application/json", "X-Request-Id": str(line.custom_id)}
    if settings.api_key:
        headers["Authorization"] = f"Bearer {settings.api_key}"
    req = urllib.request.Request(settings.endpoint + line.url, data=json.dumps(body).encode(), method="POST",
                                 headers=headers)
    try:
        with urllib.request.urlopen(req, timeout=settings.timeout) as resp:
            status, answer, raw = resp.status, resp.headers, resp.read()
    except urllib.error.HTTPError as err:
        status, answer, raw = err.code, err.headers, err.read()
    if settings.api_key:  # a server that echoes the request (a debugging proxy) must not put the key in a record
        raw = raw.replace(settings.api_key.encode(), REDACTED.encode())
    try:
        parsed: Any = json.loads(raw) if raw else None
    except ValueError:
        parsed = raw.decode(errors="replace")[:2000]
    request_id = answer.get("X-Request-Id") or (parsed.get("id") if isinstance(parsed, dict) else None) or ""
    return status, redact_keys(str(request_id), settings.api_key), parsed


def _error_message(body: Any) -> str:
    """vLLM answers {"error": {"message": ...}} (or the older {"object": "error", "message": ...})."""
    if isinstance(body, dict):
        error = body.get("error")
        return str(error.get("message") if isinstance(error, dict) else body.get("message") or error or "")
    return str(body or "")


def unauthorized_message(settings: Settings, said: str) -> str:
    """What a 401 means, for the pod's last words (the batch's Failed condition): which key, and the fix."""
    where = redact_url(settings.endpoint)
    if not settings.api_key:
        why = (f"the API key is missing: the fleet requires one and the runner sent none (${API_KEY_ENV} is unset). "
               "The operator sets it from the fleet's serving.apiKeySecretRef when it creates the batch's Job; a "
               "batch created before the fleet required a key has none: delete the QwenBatch and create it again "
               "(with the same output it resumes)")
    else:
        why = (f"the API key is wrong: the fleet refused the key in ${API_KEY_ENV}, read from the Secret key its "
               "serving.apiKeySecretRef names. Check that the fleet's pods were restarted after the Secret changed "
               "(vLLM reads VLLM_API_KEY at start), then delete the QwenBatch and create it again (it resumes)")
    return redact_keys(f"{where} answered 401 Unauthorized ({said or 'no message'}): {why}", settings.api_key)


def send_one(settings: Settings, line: Line, sleep: Callable[[float], None] = time.sleep) -> dict[str, Any]:
    """The line's verdict after up to ``max_retries`` retries of connection errors, timeouts, 408/429/5xx.
    Raises Unauthorized on a 401: no retry, and no other line, can succeed with that key."""
    attempt = 0
    while True:
        try:
            status, request_id, body = _post(settings, line)
        except (OSError, ValueError) as err:  # refused, reset, timed out, DNS
            problem: tuple[str, str] | None = ("connection_error",
                                               redact_keys(f"{type(err).__name__}: {err}", settings.api_key))
        else:
            if 200 <= status < 300:
                return answered(line, status, request_id, body, None)
            message = redact_keys(_error_message(body), settings.api_key)
            if status == 401:
                raise Unauthorized(unauthorized_message(settings, message[:500]))
            error = {"code": str(status), "message": str(message or "")[:2000]}
            if status not in RETRIED_STATUSES or attempt >= settings.max_retries:
                return answered(line, status, request_id, body, error)
            problem = None
        if attempt >= settings.max_retries and problem is not None:
            return unanswered(line, problem[0], f"after {attempt + 1} attempts: {problem[1]}")
        attempt += 1
        sleep(min(settings.retry_base_seconds * 2 ** (attempt - 1), 30.0) * random.uniform(0.5, 1.0))


class _Reporter:
    """Reports progress every ``seconds`` from its own thread, and once more at the end."""

    def __init__(self, report: Report | None, progress: Progress, seconds: float) -> None:
        self.report, self.progress, self.seconds = report, progress, seconds
        self.stop_flag = threading.Event()
        self.thread = threading.Thread(target=self._run, name="batch-report", daemon=True)

    def send(self) -> None:
        if self.report is None:
            return
        try:
            self.report(self.progress.status())
        except Exception as err:  # progress is for people; the output is the record
            log.warning("could not report progress: %s", err)

    def _run(self) -> None:
        while not self.stop_flag.wait(self.seconds):
            self.send()

    def __enter__(self) -> _Reporter:
        self.send()
        self.thread.start()
        return self

    def __exit__(self, *_: object) -> None:
        self.stop_flag.set()
        self.thread.join()
        self.send()


def run_batch(settings: Settings, read_input: Callable[[], Iterable[str]], sink: Sink, done: Done,
              report: Report | None = None) -> Progress:
    """Every line of the input gets exactly one record in the sink, over all runs together.

    The input is read twice, streaming (``read_input`` opens it anew): once to count it, once to send it, so a
    large batch costs the memory of its custom_ids, not of its bodies."""
    total = left = 0
    for line in parse_lines(read_input()):
        total += 1
        left += not done.has(line)
    progress = Progress(total, done)
    pending = (line for line in parse_lines(read_input()) if not done.has(line))
    log.info("%d lines, %d already done, %d to go", total, total - left, left)

    def finish(record: dict[str, Any], sent: bool = True) -> None:
        sink.write(dumps(record), succeeded(record))
        progress.add(record, sent)

    with _Reporter(report, progress, settings.report_seconds), \
            ThreadPoolExecutor(max_workers=settings.concurrency, thread_name_prefix="batch-send") as pool:
        in_flight: set[Future[dict[str, Any]]] = set()
        for line in pending:
            if not line.valid:
                finish(invalid(line), sent=False)
                continue
            if len(in_flight) >= settings.concurrency:
                finished, in_flight = wait(in_flight, return_when=FIRST_COMPLETED)
                for future in finished:
                    finish(future.result())
            in_flight.add(pool.submit(send_one, settings, line))
        for future in in_flight:
            finish(future.result())
    return progress
