"""A measured throughput for the daily-volume plan: read from a serving benchmark's result file.

Two files are understood, both JSON:

- the report ``qwen-fleet bench-serving`` writes (``rows``, ``recommended``, ``workload``, ``context``): the
  recommended setting's row is taken, and ``context.replicas`` (the fleet's ready replicas when it was measured)
  turns the fleet's figures into one replica's;
- the result ``vllm bench serve --save-result`` writes (``request_throughput``, ``completed``,
  ``total_input_tokens``, ...): one engine, one replica, unless ``--replicas`` says otherwise.

A benchmark's request throughput already holds prefill and decode sharing the engine's steps, so one replica's
time per request is ``replicas / request_throughput``, exactly, for requests of the measured shape. For another
shape it is not (prefill and decode scale differently), so the daily plan refuses a measurement whose prompt and
output lengths differ from the question's by more than ``SHAPE_TOLERANCE`` and says how to measure the right one.

Pure: ``measured_throughput(doc, ...)`` takes the parsed JSON; the CLI reads the file.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

# How far (relative) the measured prompt/output lengths may be from the daily question's.
SHAPE_TOLERANCE = 0.10


class MeasurementError(ValueError):
    """The file cannot supply a per-replica throughput (the message names why and what to do)."""


@dataclass(frozen=True)
class MeasuredThroughput:
    source: str  # the file, as the user named it
    target: str  # what was measured, in the file's words
    requests_per_second: float  # the whole target (all its replicas)
    output_tokens_per_second: float  # the whole target
    prompt_tokens: float  # per request, as measured (mean)
    output_tokens: float  # per request, as measured (mean)
    replicas: int
    setting: str | None  # the engine setting measured, e.g. "maxNumSeqs=16, maxNumBatchedTokens=128"

    @property
    def seconds_per_request(self) -> float:
        """One replica's busy time for one request of the measured shape."""
        return self.replicas / self.requests_per_second

    @property
    def output_tokens_per_second_per_replica(self) -> float:
        return self.output_tokens_per_second / self.replicas

    def shape_mismatch(self, prompt_tokens: int, output_tokens: int) -> str | None:
        """Why this measurement does not answer for requests of this shape, or None when it does."""
        far = [f"{name} {asked:,} vs {measured:,.0f} measured"
               for name, asked, measured in (("prompt tokens", prompt_tokens, self.prompt_tokens),
                                             ("output tokens", output_tokens, self.output_tokens))
               if abs(asked - measured) > SHAPE_TOLERANCE * max(measured, 1.0)]
        if not far:
            return None
        return (f"{self.source} measured requests of another shape ({'; '.join(far)}; more than "
                f"{SHAPE_TOLERANCE:.0%} apart): prefill and decode scale differently, so its throughput does not "
                f"carry over. Measure this shape: qwen-fleet bench-serving FLEET --input-len {prompt_tokens} "
                f"--output-len {output_tokens}")


def _number(doc: Mapping[str, Any], key: str, where: str) -> float:
    value = doc.get(key)
    if isinstance(value, bool) or not isinstance(value, int | float):
        raise MeasurementError(f"{where}: {key} is {value!r}, not a number")
    return float(value)


def _from_report(doc: Mapping[str, Any], source: str, replicas: int | None) -> MeasuredThroughput:
    chosen = doc.get("recommended")
    if not isinstance(chosen, Mapping):
        why = doc.get("reason") or "no reason given"
        raise MeasurementError(f"{source}: the sweep recommended no setting ({why}), so it holds no throughput "
                               "to plan with")
    row = next((r for r in doc.get("rows") or [] if isinstance(r, Mapping)
                and r.get("maxNumSeqs") == chosen.get("maxNumSeqs")
                and r.get("maxNumBatchedTokens") == chosen.get("maxNumBatchedTokens")), None)
    figures = row.get("figures") if row is not None else None
    if not isinstance(figures, Mapping):
        raise MeasurementError(f"{source}: no figures for the recommended setting {dict(chosen)}")
    if _number(figures, "failed", source):
        raise MeasurementError(f"{source}: the recommended setting failed {int(figures['failed'])} request(s): "
                               "a throughput with failures does not plan a fleet")
    workload = doc.get("workload") or {}
    context = doc.get("context") or {}
    measured_replicas = replicas if replicas is not None else context.get("replicas", 1)
    if isinstance(measured_replicas, bool) or not isinstance(measured_replicas, int) or measured_replicas < 1:
        raise MeasurementError(f"{source}: context.replicas is {measured_replicas!r}, not a positive integer")
    return MeasuredThroughput(
        source=source, target=str(doc.get("target") or "unnamed target"),
        requests_per_second=_number(figures, "request_throughput", source),
        output_tokens_per_second=_number(figures, "output_throughput", source),
        prompt_tokens=_number(workload, "input_len", f"{source} workload"),
        output_tokens=_number(workload, "output_len", f"{source} workload"),
        replicas=measured_replicas,
        setting=f"maxNumSeqs={chosen.get('maxNumSeqs')}, maxNumBatchedTokens={chosen.get('maxNumBatchedTokens')}")


def _from_vllm_result(doc: Mapping[str, Any], source: str, replicas: int | None) -> MeasuredThroughput:
    completed = _number(doc, "completed", source)
    if completed < 1:
        raise MeasurementError(f"{source}: no request completed")
    if doc.get("failed"):
        raise MeasurementError(f"{source}: {doc['failed']} request(s) failed: a throughput with failures does not "
                               "plan a fleet")
    return MeasuredThroughput(
        source=source, target=str(doc.get("model_id") or "vllm bench serve"),
        requests_per_second=_number(doc, "request_throughput", source),
        output_tokens_per_second=_number(doc, "output_throughput", source),
        prompt_tokens=_number(doc, "total_input_tokens", source) / completed,
        output_tokens=_number(doc, "total_output_tokens", source) / completed,
        replicas=replicas or 1, setting=None)


def measured_throughput(doc: Any, source: str, *, replicas: int | None = None) -> MeasuredThroughput:
    """The per-replica figures in a bench-serving report or a ``vllm bench serve`` result; ``replicas`` overrides
    how many replicas served the measured load."""
    if replicas is not None and replicas < 1:
        raise MeasurementError("--measured-replicas must be a positive integer")
    if not isinstance(doc, Mapping):
        raise MeasurementError(f"{source}: not a JSON object")
    if "rows" in doc:
        found = _from_report(doc, source, replicas)
    elif "request_throughput" in doc:
        found = _from_vllm_result(doc, source, replicas)
    else:
        raise MeasurementError(f"{source}: neither a qwen-fleet bench-serving report (rows, recommended) nor a "
                               "`vllm bench serve --save-result` file (request_throughput, completed)")
    if not found.requests_per_second > 0 or not found.output_tokens_per_second >= 0:
        raise MeasurementError(f"{source}: the measured throughput is not positive")
    return found
