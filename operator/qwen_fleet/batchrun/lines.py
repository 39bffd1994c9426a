"""The OpenAI batch format, both ways. Pure: no I/O.

Input: one JSON object a line, ``{"custom_id", "method", "url", "body"}`` (platform.openai.com/docs/api-reference/
batch/request-input). Output: ``{"id", "custom_id", "response": {"status_code", "request_id", "body"}, "error"}``
(…/batch/request-output), answered lines in output.jsonl and the rest in errors.jsonl, as OpenAI splits them.

A line that cannot be sent (not JSON, no custom_id, an endpoint the fleet does not serve, a custom_id seen
before) gets an error record with its line number (``"line"``), so a resumed run neither sends it nor writes it
twice. Resuming reads what the output already holds: every custom_id with a record there has its verdict.
"""

from __future__ import annotations

import json
import uuid
from collections.abc import Iterable, Iterator
from dataclasses import dataclass, field
from typing import Any

# What vLLM's OpenAI server answers (and `vllm run-batch` accepts, less completions and the v1-less aliases).
SUPPORTED_URLS = frozenset({
    "/v1/chat/completions", "/v1/completions", "/v1/embeddings", "/v1/score", "/v1/rerank", "/score", "/rerank",
})
INVALID_LINE = "invalid_line"


@dataclass(frozen=True)
class Line:
    number: int  # 1-based, counting every line of the file
    custom_id: str | None
    url: str = ""
    body: dict[str, Any] | None = None
    problem: str = ""  # why it cannot be sent; empty when it can

    @property
    def valid(self) -> bool:
        return not self.problem


def _check(obj: Any) -> str:
    if not isinstance(obj, dict):
        return "not a JSON object"
    custom_id = obj.get("custom_id")
    if not isinstance(custom_id, str) or not custom_id:
        return "custom_id must be a non-empty string"
    if obj.get("method") != "POST":
        return f"method must be POST, not {obj.get('method')!r}"
    url = obj.get("url")
    if url not in SUPPORTED_URLS:
        return f"url {url!r} is not served; one of {', '.join(sorted(SUPPORTED_URLS))}"
    if not isinstance(obj.get("body"), dict):
        return "body must be a JSON object"
    return ""


def parse_lines(lines: Iterable[str]) -> Iterator[Line]:
    """Every non-blank line as a Line; a repeated custom_id is a problem of the later line."""
    first_seen: dict[str, int] = {}
    for number, text in enumerate(lines, start=1):
        if not text.strip():
            continue
        try:
            obj = json.loads(text)
        except ValueError as err:
            yield Line(number, None, problem=f"not JSON ({err})")
            continue
        problem = _check(obj)
        custom_id = obj.get("custom_id") if isinstance(obj, dict) and isinstance(obj.get("custom_id"), str) \
            else None
        if not problem and custom_id in first_seen:
            problem = f"custom_id {custom_id!r} repeats line {first_seen[custom_id]}"
        if problem:
            yield Line(number, custom_id, problem=problem)
            continue
        assert custom_id is not None
        first_seen[custom_id] = number
        yield Line(number, custom_id, obj["url"], obj["body"])


def record_id() -> str:
    return f"batch_req_{uuid.uuid4().hex}"


def answered(line: Line, status: int, request_id: str, body: Any, error: dict[str, str] | None) -> dict[str, Any]:
    return {"id": record_id(), "custom_id": line.custom_id,
            "response": {"status_code": status, "request_id": request_id, "body": body}, "error": error}


def unanswered(line: Line, code: str, message: str) -> dict[str, Any]:
    out: dict[str, Any] = {"id": record_id(), "custom_id": line.custom_id, "response": None,
                           "error": {"code": code, "message": message}}
    if code == INVALID_LINE:
        out["line"] = line.number
    return out


def invalid(line: Line) -> dict[str, Any]:
    return unanswered(line, INVALID_LINE, f"line {line.number}: {line.problem}")


def succeeded(record: dict[str, Any]) -> bool:
    """A record with an answer and no error: what output.jsonl holds (vLLM's run-batch mixes both in one file)."""
    response = record.get("response") or {}
    return record.get("error") is None and isinstance(response, dict) \
        and 200 <= int(response.get("status_code") or 0) < 300


@dataclass
class Done:
    """What an earlier run already wrote: the verdicts a resumed run keeps."""

    custom_ids: set[str] = field(default_factory=set)
    lines: set[int] = field(default_factory=set)  # invalid lines, by number
    completed: int = 0
    failed: int = 0
    prompt_tokens: int = 0
    completion_tokens: int = 0

    def has(self, line: Line) -> bool:
        if not line.valid:
            return line.number in self.lines
        return line.custom_id in self.custom_ids

    def add(self, record: dict[str, Any]) -> None:
        if isinstance(record.get("line"), int):
            self.lines.add(record["line"])
        elif isinstance(record.get("custom_id"), str):
            self.custom_ids.add(record["custom_id"])
        if succeeded(record):
            self.completed += 1
            usage = ((record.get("response") or {}).get("body") or {}).get("usage") or {}
            if isinstance(usage, dict):
                self.prompt_tokens += int(usage.get("prompt_tokens") or 0)
                self.completion_tokens += int(usage.get("completion_tokens") or 0)
        else:
            self.failed += 1


def complete_lines(text: str) -> tuple[list[str], int]:
    """The whole lines of an output file, and the length of the text they span. A run killed while writing
    leaves a torn last line (no newline): it is no verdict, and it is cut off before appending."""
    end = text.rfind("\n") + 1
    return text[:end].splitlines(), end


def read_done(*texts: str) -> Done:
    done = Done()
    for text in texts:
        for raw in complete_lines(text)[0]:
            try:
                record = json.loads(raw)
            except ValueError:
                continue  # not ours; a verdict we cannot read is no verdict
            if isinstance(record, dict):
                done.add(record)
    return done


def dumps(record: dict[str, Any]) -> str:
    return json.dumps(record, ensure_ascii=False, separators=(",", ":")) + "\n"
