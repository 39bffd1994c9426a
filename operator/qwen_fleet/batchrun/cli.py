"""``qwen-fleet batch-run``: what a QwenBatch's Job runs (render/batch.py writes its arguments).

Three ways, one per place in the Job:
- default (through a fleet): send every line not yet in the output to ``--endpoint``;
- ``--stage FILE`` (dedicated, an init container): check every line, write the malformed ones to errors.jsonl
  and the ones still to do to FILE, for ``vllm run-batch`` (which stops at the first malformed line);
- ``--follow`` (dedicated, a sidecar): report the output's counts until the pod ends.
Exit status: 0 when every line has its verdict; 2 when the input cannot be read or the arguments are wrong;
3 when the output cannot be written; 4 when the fleet answers 401 (its API key is missing or wrong: the key is
read from ``$QWEN_FLEET_API_KEY``, which the Job sets from the fleet's Secret). Nothing here imports the
operator's controller.
"""

from __future__ import annotations

import argparse
import json
import logging
import os
import signal
import sys
import tempfile
import threading
import time
import urllib.request
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

from qwen_fleet.batchrun.kube import KubeApi, KubeCallFailed, report_status
from qwen_fleet.batchrun.lines import dumps, invalid, parse_lines, read_done
from qwen_fleet.batchrun.redact import RedactingFilter, redact_keys, redact_url, redact_urls
from qwen_fleet.batchrun.runner import API_KEY_ENV, Report, Settings, Unauthorized, run_batch
from qwen_fleet.batchrun.sinks import ConfigMapSink, DirectorySink, FlushPolicy, Sink, SinkFull

log = logging.getLogger("qwen_fleet.batchrun")
STAGE_SUMMARY = "stage.json"
# The spec's defaults (api/batch.py BatchInput.maxBytes / maxLines): the runner keeps every custom_id in memory.
DEFAULT_MAX_INPUT_BYTES = 1 << 30
DEFAULT_MAX_INPUT_LINES = 1_000_000


def add_arguments(p: argparse.ArgumentParser) -> None:
    src = p.add_mutually_exclusive_group(required=True)
    src.add_argument("--input", help="OpenAI batch JSONL file")
    src.add_argument("--input-url", help="http(s) URL of the JSONL")
    dst = p.add_mutually_exclusive_group(required=True)
    dst.add_argument("--output-dir", help="directory for output.jsonl and errors.jsonl")
    dst.add_argument("--output-configmap", help="ConfigMap (in the batch's namespace) for the two keys")
    p.add_argument("--endpoint", help="the fleet's OpenAI server, e.g. http://my-fleet.default.svc:8000")
    p.add_argument("--concurrency", type=int, default=4)
    p.add_argument("--priority", type=int, default=10, help="vLLM request priority added to every body")
    p.add_argument("--max-retries", type=int, default=3)
    p.add_argument("--timeout", type=float, default=600.0, help="seconds per request")
    p.add_argument("--retry-base-seconds", type=float, default=1.0)
    p.add_argument("--report-seconds", type=float, default=5.0)
    p.add_argument("--batch", help="NAMESPACE/NAME of the QwenBatch whose status gets the progress")
    p.add_argument("--kube-api", help="API server URL (default: the pod's in-cluster API)")
    p.add_argument("--flush-seconds", type=float, default=FlushPolicy.seconds,
                   help="ConfigMap output: at most one write per this many seconds, and one at the end")
    p.add_argument("--max-writes", type=int, default=FlushPolicy.max_writes,
                   help="ConfigMap output: at most this many writes a run, the last included")
    p.add_argument("--max-input-bytes", type=int, default=DEFAULT_MAX_INPUT_BYTES,
                   help="refuse (exit 2) an input larger than this")
    p.add_argument("--max-input-lines", type=int, default=DEFAULT_MAX_INPUT_LINES,
                   help="refuse (exit 2) an input of more lines than this")
    mode = p.add_mutually_exclusive_group()
    mode.add_argument("--stage", help="dedicated mode: write the lines still to do to this file and stop")
    mode.add_argument("--follow", metavar="STAGED", help="dedicated mode: report the output's counts until "
                      "SIGTERM (the total from the summary --stage wrote beside STAGED)")


class Usage(Exception):
    """Arguments or input that no retry can fix: exit 2."""


class InputTooLarge(Exception):
    """The input passes --max-input-bytes or --max-input-lines."""


def _copy_bounded(src: Any, dst: Any, limit: int) -> None:
    copied = 0
    while chunk := src.read(1 << 16):
        copied += len(chunk)
        if copied > limit:
            raise InputTooLarge(f"it is larger than {limit} bytes (spec.input.maxBytes)")
        dst.write(chunk)


def _input_file(args: argparse.Namespace) -> Path:
    """The input as a local file: a URL is downloaded first (to $TMPDIR; the Job points it at its emptyDir), never
    past --max-input-bytes. Errors name the URL without its query string or credentials (a presigned URL's)."""
    where = redact_url(args.input_url) if args.input_url else args.input
    try:
        if args.input_url:
            fd, name = tempfile.mkstemp(prefix="input-", suffix=".jsonl")
            path = Path(name)
            try:
                with urllib.request.urlopen(args.input_url, timeout=300) as resp, os.fdopen(fd, "wb") as out:
                    _copy_bounded(resp, out, args.max_input_bytes)
            except BaseException:
                path.unlink(missing_ok=True)  # a partial download is no input, and fills the emptyDir
                raise
        else:
            path = Path(args.input)
            if path.stat().st_size > args.max_input_bytes:
                raise InputTooLarge(f"it is larger than {args.max_input_bytes} bytes (spec.input.maxBytes)")
        with path.open(encoding="utf-8") as f:  # readable, and UTF-8 throughout: else no line is sent
            for count, _ in enumerate(f, start=1):
                if count > args.max_input_lines:
                    raise InputTooLarge(f"it has more than {args.max_input_lines} lines (spec.input.maxLines)")
        return path
    except InputTooLarge as err:
        raise Usage(f"the input {where} is refused: {err}; split it into several QwenBatches") from None
    except (OSError, ValueError) as err:  # ValueError: a bad URL, or bytes that are not UTF-8
        said = redact_urls(str(err).replace(args.input_url, where) if args.input_url else str(err))  # a redirect's
        raise Usage(f"cannot read the input {where}: {said}") from None


def _lines_of(path: Path) -> Callable[[], Iterator[str]]:
    def read() -> Iterator[str]:
        with path.open(encoding="utf-8") as f:
            yield from f
    return read


def _kube(args: argparse.Namespace) -> KubeApi:
    try:
        return KubeApi(args.kube_api) if args.kube_api else KubeApi.in_cluster()
    except (KubeCallFailed, OSError) as err:
        raise Usage(f"no Kubernetes API to report to: {err}") from None


def _batch(args: argparse.Namespace) -> tuple[str, str]:
    namespace, _, name = str(args.batch or "").partition("/")
    if not namespace or not name:
        raise Usage(f"--batch must be NAMESPACE/NAME, not {args.batch!r}")
    return namespace, name


def _reporter(args: argparse.Namespace) -> Report | None:
    if not args.batch:
        return None
    namespace, name = _batch(args)
    api = _kube(args)
    return lambda status: report_status(api, namespace, name, status)


def _sink(args: argparse.Namespace) -> Sink:
    if args.output_dir:
        return DirectorySink(Path(args.output_dir))
    namespace, _ = _batch(args)
    policy = FlushPolicy(seconds=max(0.0, args.flush_seconds), max_writes=max(1, args.max_writes))
    return ConfigMapSink(_kube(args), namespace, args.output_configmap, policy)


def _stage(args: argparse.Namespace, report: Report | None) -> None:
    sink = _sink(args)
    done = read_done(*sink.existing())
    staged, total = Path(args.stage), 0
    with staged.open("w", encoding="utf-8") as out:
        for line in parse_lines(_lines_of(_input_file(args))()):
            total += 1
            if done.has(line):
                continue
            if not line.valid:
                record = invalid(line)
                sink.write(dumps(record), False)
                done.add(record)
            else:
                out.write(dumps({"custom_id": line.custom_id, "method": "POST", "url": line.url, "body": line.body}))
    sink.close()
    summary = {"total": total, "completed": done.completed, "failed": done.failed}
    (staged.parent / STAGE_SUMMARY).write_text(json.dumps(summary))
    log.info("staged %s: %s", staged, summary)
    if report is not None:
        report(summary)


def follow_output(args: argparse.Namespace, report: Report | None, stop: threading.Event) -> None:
    """Report the output directory's counts every --report-seconds, and once more when told to stop."""
    directory = Path(args.output_dir)
    started, first_tokens = time.monotonic(), None
    while True:
        stopping = stop.wait(args.report_seconds)
        texts = [(directory / k).read_text(encoding="utf-8") if (directory / k).exists() else ""
                 for k in ("output.jsonl", "errors.jsonl")]
        done = read_done(*texts)
        first_tokens = done.completion_tokens if first_tokens is None else first_tokens
        status: dict[str, Any] = {"completed": done.completed, "failed": done.failed,
                                  "promptTokens": done.prompt_tokens, "completionTokens": done.completion_tokens,
                                  "tokensPerSecond": round((done.completion_tokens - first_tokens)
                                                           / max(time.monotonic() - started, 1e-6), 2)}
        summary = Path(args.follow).parent / STAGE_SUMMARY
        if summary.exists():
            status["total"] = int(json.loads(summary.read_text()).get("total") or 0)
        if report is not None:
            try:
                report(status)
            except KubeCallFailed as err:
                log.warning("could not report progress: %s", err)
        if stopping:
            return


def _log_redacted(api_key: str) -> None:
    """Log to stderr with the key (and any Bearer credential, any URL's query) redacted from every record."""
    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(levelname)s %(message)s", stream=sys.stderr)
    for handler in logging.getLogger().handlers:
        for old in [f for f in handler.filters if isinstance(f, RedactingFilter)]:
            handler.removeFilter(old)
        handler.addFilter(RedactingFilter(api_key))


def batch_run_command(args: argparse.Namespace, stop: threading.Event | None = None) -> int:
    api_key = os.environ.get(API_KEY_ENV, "").strip()
    _log_redacted(api_key)
    try:
        report = _reporter(args)
        if args.stage:
            _stage(args, report)
            return 0
        if args.follow:
            if not args.output_dir:
                raise Usage("--follow needs --output-dir")
            stop = stop or _stop_on_sigterm()
            follow_output(args, report, stop)
            return 0
        if not args.endpoint:
            raise Usage("--endpoint is required (or --stage / --follow)")
        settings = Settings(endpoint=args.endpoint.rstrip("/"), api_key=api_key, concurrency=max(1, args.concurrency),
                            priority=args.priority, max_retries=max(0, args.max_retries), timeout=args.timeout,
                            retry_base_seconds=args.retry_base_seconds, report_seconds=args.report_seconds)
        sink = _sink(args)
        previous = _close_on_sigterm(sink)
        try:
            progress = run_batch(settings, _lines_of(_input_file(args)), sink, read_done(*sink.existing()), report)
        finally:
            sink.close()
            if previous is not None:
                signal.signal(signal.SIGTERM, previous)
        log.info("done: %d completed, %d failed of %d", progress.completed, progress.failed, progress.total)
        return 0
    except Usage as err:
        print(f"qwen-fleet batch-run: {redact_keys(str(err), api_key)}", file=sys.stderr)
        return 2
    except Unauthorized as err:
        print(f"qwen-fleet batch-run: {redact_keys(str(err), api_key)}", file=sys.stderr)
        return 4
    except (SinkFull, KubeCallFailed, OSError) as err:
        print(f"qwen-fleet batch-run: cannot write the output: {redact_keys(str(err), api_key)}", file=sys.stderr)
        return 3


def _close_on_sigterm(sink: Sink) -> Any:
    """A pod being stopped (deleted, evicted, drained) gets SIGTERM before SIGKILL: write the records that wait
    (a ConfigMap's), then exit 143, rather than have the next pod send their lines again. Returns the handler it
    replaced (None off the main thread, where none can be set)."""
    if threading.current_thread() is not threading.main_thread():
        return None

    def close_and_exit() -> None:
        try:
            sink.close()
        except Exception as err:  # the next pod sends those lines again: nothing is lost
            log.warning("could not write the output on SIGTERM: %s", err)
        os._exit(143)

    def handler(*_: Any) -> None:  # the main thread may hold the sink's lock: write from another thread
        threading.Thread(target=close_and_exit, name="batch-sigterm", daemon=True).start()

    return signal.signal(signal.SIGTERM, handler)


def _stop_on_sigterm() -> threading.Event:
    stop = threading.Event()

    def handler(*_: Any) -> None:
        stop.set()

    signal.signal(signal.SIGTERM, handler)
    return stop
