"""Which setting to measure next, and which one to recommend: pure, so both are table-tested.

Two sweeps over the same two ladders (ascending ``maxNumSeqs`` and ``maxNumBatchedTokens`` values):

* ``grid`` measures every pair, seqs-major.
* ``climb`` is the seeds' loop ("start from a conservative value and raise it step by step until the GPU is
  busy", seed 000): first ``maxNumSeqs`` is raised along its ladder at the smallest token budget, then
  ``maxNumBatchedTokens`` along its ladder at the ``maxNumSeqs`` where the first walk stopped. A walk stops at
  the first step that does not raise the output throughput by more than ``flat_percent`` (the engine is
  saturated: a larger batch buys nothing), that fails requests, or that breaks the TTFT SLO; the setting
  before that step is where it stopped.

The recommendation does not depend on how the rows were produced: among the rows that failed no request and
keep p99 TTFT within the SLO, the highest output throughput wins, and any row within ``flat_percent`` of it
counts as a tie, won by the smaller setting (fewer sequences, then fewer batched tokens: less KV cache held,
shorter prefill chunks, the same throughput).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from itertools import pairwise
from typing import Literal

from qwen_fleet.servebench.client import Figures

Mode = Literal["grid", "climb"]
MODES: tuple[Mode, ...] = ("grid", "climb")


@dataclass(frozen=True, order=True)
class Setting:
    """One point of the sweep: the two ``spec.engine`` fields it sets."""

    max_num_seqs: int
    max_num_batched_tokens: int

    def engine_patch(self) -> dict[str, int]:
        return {"maxNumSeqs": self.max_num_seqs, "maxNumBatchedTokens": self.max_num_batched_tokens}

    def label(self) -> str:
        return f"maxNumSeqs={self.max_num_seqs} maxNumBatchedTokens={self.max_num_batched_tokens}"


@dataclass(frozen=True)
class Row:
    """What one setting gave: the client's figures, or why there are none (refused, engine or client failed)."""

    setting: Setting
    figures: Figures | None = None
    error: str = ""


@dataclass(frozen=True)
class Rule:
    """The stop and recommendation rule. ``flat_percent``: a gain at or below it is no gain.
    ``ttft_p99_slo_ms``: the p99 time to first token a recommended setting must keep (None: no SLO)."""

    flat_percent: float = 5.0
    ttft_p99_slo_ms: float | None = None

    def __post_init__(self) -> None:
        if self.flat_percent < 0:
            raise ValueError(f"flat_percent must be >= 0, not {self.flat_percent}")
        if self.ttft_p99_slo_ms is not None and self.ttft_p99_slo_ms <= 0:
            raise ValueError(f"the p99 TTFT SLO must be > 0 ms, not {self.ttft_p99_slo_ms}")

    def rejection(self, row: Row) -> str:
        """Why ``row`` cannot be recommended ("" when it can)."""
        if row.figures is None:
            return row.error or "no measurement"
        if row.figures.failed:
            return f"{row.figures.failed} failed requests"
        if self.ttft_p99_slo_ms is not None and row.figures.p99_ttft_ms > self.ttft_p99_slo_ms:
            return f"p99 TTFT {row.figures.p99_ttft_ms:.1f} ms > SLO {self.ttft_p99_slo_ms:g} ms"
        return ""

    def describe(self) -> str:
        slo = f"p99 TTFT <= {self.ttft_p99_slo_ms:g} ms" if self.ttft_p99_slo_ms is not None else "no TTFT SLO"
        return (f"highest output tokens/s among settings with 0 failed requests and {slo}; settings within "
                f"{self.flat_percent:g}% of it tie and the smallest (maxNumSeqs, then maxNumBatchedTokens) wins")


def check_ladder(name: str, values: Sequence[int]) -> list[int]:
    """A ladder is a non-empty, strictly ascending list of positive integers."""
    ladder = list(values)
    if not ladder:
        raise ValueError(f"{name}: give at least one value")
    if any(v <= 0 for v in ladder):
        raise ValueError(f"{name}: values must be positive, got {ladder}")
    if any(b <= a for a, b in pairwise(ladder)):
        raise ValueError(f"{name}: values must be strictly ascending, got {ladder}")
    return ladder


def grid(seqs: Sequence[int], tokens: Sequence[int]) -> list[Setting]:
    return [Setting(s, t) for s in seqs for t in tokens]


def _walk(ladder: Sequence[Setting], measured: dict[Setting, Row], rule: Rule) -> tuple[Setting | None, Setting | None]:
    """Walk up ``ladder``: (the next setting to measure, None) while the walk goes on; (None, where it stopped)
    once it has stopped; (None, None) when not even its first setting is acceptable."""
    previous: Row | None = None
    for setting in ladder:
        row = measured.get(setting)
        if row is None:
            return setting, None
        if rule.rejection(row):
            break
        assert row.figures is not None
        if previous is not None:
            assert previous.figures is not None
            base = previous.figures.output_throughput
            gain = (row.figures.output_throughput - base) / base * 100 if base > 0 else float("inf")
            if gain <= rule.flat_percent:
                break
        previous = row
    return None, (previous.setting if previous is not None else None)


def next_setting(mode: Mode, seqs: Sequence[int], tokens: Sequence[int], rows: Sequence[Row],
                 rule: Rule) -> Setting | None:
    """The setting to measure after ``rows`` (None: the sweep is over)."""
    measured = {row.setting: row for row in rows}
    if mode == "grid":
        return next((s for s in grid(seqs, tokens) if s not in measured), None)
    if mode != "climb":
        raise ValueError(f"mode must be one of {MODES}, not {mode!r}")
    todo, stopped = _walk([Setting(s, tokens[0]) for s in seqs], measured, rule)
    if todo is not None or stopped is None:
        return todo
    todo, _ = _walk([Setting(stopped.max_num_seqs, t) for t in tokens], measured, rule)
    return todo


@dataclass(frozen=True)
class Recommendation:
    setting: Setting | None
    reason: str


def recommend(rows: Sequence[Row], rule: Rule) -> Recommendation:
    candidates = [row for row in rows if not rule.rejection(row)]
    if not candidates:
        why = "; ".join(f"{row.setting.label()}: {rule.rejection(row)}" for row in rows) or "nothing measured"
        return Recommendation(None, f"no setting qualifies ({why})")
    best = max(row.figures.output_throughput for row in candidates if row.figures is not None)
    floor = best * (1 - rule.flat_percent / 100)
    ties = [row for row in candidates if row.figures is not None and row.figures.output_throughput >= floor]
    chosen = min(ties, key=lambda row: row.setting)
    assert chosen.figures is not None
    reason = (f"{chosen.figures.output_throughput:.1f} output tokens/s (best {best:.1f}), p99 TTFT "
              f"{chosen.figures.p99_ttft_ms:.1f} ms; rule: {rule.describe()}")
    return Recommendation(chosen.setting, reason)
