"""Replicas for a daily volume: how many replicas finish N requests a day within a window.

Pure arithmetic on stated per-replica throughput (measured with a serving benchmark, or taken from one);
nothing here models a GPU's speed. The capacity planner supplies what a replica can hold at once
(``max_num_seqs`` and the KV cache), which bounds the concurrency the stated throughput must come from.

    replica-seconds = requests x (prompt_tokens / prefill_tps + output_tokens / output_tps)
    replicas        = ceil(replica-seconds / (window_hours x 3600))

Prefill and decode are counted one after the other on the same replica (vLLM runs them in the same steps,
so they share the GPU's time): a conservative sum. Without a prefill throughput the prompt's time is left
out and the answer is a lower bound; the plan says so.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

# A ceiling on one sequence's decode speed, used only to flag a stated throughput as implausible for the
# concurrency a replica allows: 1,000 tokens/s per sequence is 1 ms per decode step. An assumption, not a
# measurement: plain decode on one replica (no speculative decoding) takes several ms per step.
MAX_PLAUSIBLE_TOKENS_PER_SECOND_PER_SEQUENCE = 1000.0

THROUGHPUT_FLAGS = "--output-tokens-per-second-per-replica and/or --prefill-tokens-per-second-per-replica"


class DailyPlanError(ValueError):
    """The question cannot be answered from what was given (the message names what is missing)."""


@dataclass(frozen=True)
class DailyWork:
    requests_per_day: int
    prompt_tokens: int  # per request
    output_tokens: int  # per request
    window_hours: float = 24.0  # the requests must finish within this many hours


@dataclass(frozen=True)
class ReplicaThroughput:
    output_tokens_per_second: float | None = None  # decode, all sequences of one replica together
    prefill_tokens_per_second: float | None = None  # prompt tokens processed, one replica
    # Measured instead (qwen_fleet.plan.measured): one replica's time per request of the question's shape, which
    # already holds prefill and decode sharing the engine's steps; `measured` says where it comes from.
    seconds_per_request: float | None = None
    measured: str | None = None


@dataclass(frozen=True)
class DailyPlan:
    work: DailyWork
    throughput: ReplicaThroughput
    replica_seconds: float  # one replica's busy time for the whole day's work
    replicas: int
    window_utilization: float  # replica-seconds / (replicas x window): how full the replicas are
    concurrency: int | None  # sequences one replica runs at once (None: not known)
    tokens_per_second_per_sequence: float | None  # the stated output throughput over that concurrency
    notes: tuple[str, ...] = ()
    warnings: tuple[str, ...] = ()


def allowed_concurrency(*, max_num_seqs: int, kv_cache_tokens: int, prompt_tokens: int, output_tokens: int,
                        max_model_len: int | None = None) -> int:
    """Sequences of prompt+output tokens one engine runs at once: max_num_seqs, or fewer when the KV cache
    cannot hold that many whole sequences (prefix caching would let shared prompts hold more); 0 when one
    request is longer than max_model_len."""
    per_sequence = prompt_tokens + output_tokens
    if max_model_len is not None and per_sequence > max_model_len:
        return 0
    return min(max_num_seqs, kv_cache_tokens // per_sequence) if per_sequence else max_num_seqs


def plan_daily(work: DailyWork, throughput: ReplicaThroughput, *, concurrency: int | None = None) -> DailyPlan:
    if work.requests_per_day <= 0:
        raise DailyPlanError("--requests-per-day must be positive")
    if work.prompt_tokens < 0 or work.output_tokens < 0 or work.prompt_tokens + work.output_tokens == 0:
        raise DailyPlanError("--prompt-tokens and --output-tokens must be >= 0, and not both 0")
    if not work.window_hours > 0:
        raise DailyPlanError("--window-hours must be positive")
    out_tps, pre_tps = throughput.output_tokens_per_second, throughput.prefill_tokens_per_second
    for value in (out_tps, pre_tps, throughput.seconds_per_request):
        if value is not None and not value > 0:
            raise DailyPlanError("a per-replica throughput must be positive")
    notes: list[str] = []
    if throughput.seconds_per_request is not None:
        seconds_per_request = throughput.seconds_per_request
        notes.append(f"measured: {throughput.measured or 'a serving benchmark'}")
    elif out_tps is None and pre_tps is None:
        raise DailyPlanError(f"per-replica throughput is not known: state it with {THROUGHPUT_FLAGS} "
                             "(measure it with a serving benchmark, e.g. `vllm bench serve`, on one replica)")
    elif work.output_tokens and out_tps is None:
        raise DailyPlanError("the requests generate output tokens: state the decode throughput with "
                             "--output-tokens-per-second-per-replica")
    else:
        seconds_per_request = 0.0
        if work.output_tokens and out_tps is not None:
            seconds_per_request += work.output_tokens / out_tps
        if work.prompt_tokens:
            if pre_tps is None:
                notes.append("prefill time not counted (no --prefill-tokens-per-second-per-replica): "
                             "a lower bound on the replicas")
            else:
                seconds_per_request += work.prompt_tokens / pre_tps
    replica_seconds = work.requests_per_day * seconds_per_request
    window_seconds = work.window_hours * 3600.0
    replicas = max(1, math.ceil(replica_seconds / window_seconds))
    utilization = replica_seconds / (replicas * window_seconds)

    warnings: list[str] = []
    per_sequence: float | None = None
    if concurrency is not None:
        if concurrency < 1:
            warnings.append(f"a replica cannot hold one sequence of {work.prompt_tokens + work.output_tokens} "
                            "tokens (KV cache or max_model_len): these requests cannot run on this spec")
        elif out_tps is not None:
            per_sequence = out_tps / concurrency
            if per_sequence > MAX_PLAUSIBLE_TOKENS_PER_SECOND_PER_SEQUENCE:
                warnings.append(
                    f"{out_tps:,.0f} output tokens/s over at most {concurrency} concurrent sequences is "
                    f"{per_sequence:,.0f} tokens/s per sequence, faster than "
                    f"{MAX_PLAUSIBLE_TOKENS_PER_SECOND_PER_SEQUENCE:,.0f} (1 ms per decode step): check the figure")
    return DailyPlan(work=work, throughput=throughput, replica_seconds=replica_seconds, replicas=replicas,
                     window_utilization=utilization, concurrency=concurrency,
                     tokens_per_second_per_sequence=per_sequence, notes=tuple(notes), warnings=tuple(warnings))


def format_daily_plan(plan: DailyPlan, gpus_per_replica: int | None = None) -> list[str]:
    w, t = plan.work, plan.throughput
    stated = ", ".join(f"{label} {value:,.0f} tokens/s" for label, value in
                       (("output", t.output_tokens_per_second), ("prefill", t.prefill_tokens_per_second))
                       if value is not None)
    if t.seconds_per_request is not None:
        per = f"{1 / t.seconds_per_request:,.2f} requests/s" + (f", {stated}" if stated else "")
        stated = f"(measured): {per}"
    else:
        stated = f"(stated): {stated}"
    gpus = f" ({plan.replicas * gpus_per_replica} GPU(s))" if gpus_per_replica else ""
    lines = [f"daily volume: {w.requests_per_day:,} requests x ({w.prompt_tokens:,} prompt + {w.output_tokens:,} "
             f"output tokens) within {w.window_hours:g} h; per replica {stated}",
             f"  replica-hours of work: {plan.replica_seconds / 3600:,.1f}; replicas needed: {plan.replicas}{gpus}, "
             f"busy {plan.window_utilization:.0%} of the window"]
    if plan.concurrency is not None:
        rate = (f", {plan.tokens_per_second_per_sequence:,.1f} output tokens/s per sequence at that concurrency"
                if plan.tokens_per_second_per_sequence is not None else "")
        lines.append(f"  concurrency a replica allows: {plan.concurrency} sequence(s){rate}")
    lines += [f"  note: {n}" for n in plan.notes] + [f"  warning: {m}" for m in plan.warnings]
    return lines
