"""The sweep's driver and its report: one row per setting, as Markdown and JSON, with the recommendation.

``run_sweep`` asks ``sweep.next_setting`` what to measure and a target's ``measure`` to measure it; it knows
nothing of clusters or engines, so the loop is tested with a fake target.
"""

from __future__ import annotations

import dataclasses
import json
import math
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from qwen_fleet.servebench.client import Workload
from qwen_fleet.servebench.sweep import Mode, Recommendation, Row, Rule, Setting, next_setting, recommend

# Column title -> Figures field and its format; the table's order.
COLUMNS: tuple[tuple[str, str, str], ...] = (
    ("req/s", "request_throughput", "{:.2f}"),
    ("output tok/s", "output_throughput", "{:.1f}"),
    ("TTFT mean ms", "mean_ttft_ms", "{:.1f}"),
    ("TTFT median ms", "median_ttft_ms", "{:.1f}"),
    ("TTFT p99 ms", "p99_ttft_ms", "{:.1f}"),
    ("ITL mean ms", "mean_itl_ms", "{:.1f}"),
    ("ITL p99 ms", "p99_itl_ms", "{:.1f}"),
    ("E2E p99 ms", "p99_e2el_ms", "{:.1f}"),
    ("failed", "failed", "{:d}"),
)


def run_sweep(measure: Callable[[Setting], Row], mode: Mode, seqs: Sequence[int], tokens: Sequence[int],
              rule: Rule, on_row: Callable[[Row], None] = lambda row: None) -> list[Row]:
    rows: list[Row] = []
    while (setting := next_setting(mode, seqs, tokens, rows, rule)) is not None:
        row = measure(setting)
        if row.setting != setting:
            raise RuntimeError(f"measured {row.setting} when {setting} was asked for")
        rows.append(row)
        on_row(row)
    return rows


@dataclass(frozen=True)
class Report:
    target: str  # what was measured, in words (a fleet, or a local engine and its model)
    mode: Mode
    workload: Workload
    rule: Rule
    rows: list[Row]
    context: dict[str, Any] = field(default_factory=dict)  # versions, machine, date: shown as given

    @property
    def recommendation(self) -> Recommendation:
        return recommend(self.rows, self.rule)

    def to_json(self) -> dict[str, Any]:
        rec = self.recommendation
        workload = dataclasses.asdict(self.workload)
        if math.isinf(self.workload.request_rate):
            workload["request_rate"] = "inf"  # JSON has no infinity
        return {
            "target": self.target,
            "mode": self.mode,
            "workload": workload,
            "rule": {**dataclasses.asdict(self.rule), "text": self.rule.describe()},
            "context": self.context,
            "rows": [{"maxNumSeqs": row.setting.max_num_seqs,
                      "maxNumBatchedTokens": row.setting.max_num_batched_tokens,
                      "figures": dataclasses.asdict(row.figures) if row.figures is not None else None,
                      "error": row.error or None} for row in self.rows],
            "recommended": rec.setting.engine_patch() if rec.setting is not None else None,
            "reason": rec.reason,
        }

    def to_markdown(self) -> str:
        rec = self.recommendation
        head = ["maxNumSeqs", "maxNumBatchedTokens", *(title for title, _, _ in COLUMNS)]
        lines = [
            f"# Serving benchmark: {self.target}",
            "",
            f"Load: {self.workload.describe()}. Sweep: {self.mode}. Client: vLLM's `vllm bench serve`.",
        ]
        if self.context:
            lines.append("Context: " + ", ".join(f"{k} {v}" for k, v in self.context.items()) + ".")
        lines += ["", "| " + " | ".join(head) + " |", "|" + "---:|" * len(head)]
        for row in self.rows:
            mark = " **←**" if rec.setting == row.setting else ""
            cells = [str(row.setting.max_num_seqs), str(row.setting.max_num_batched_tokens) + mark]
            if row.figures is None:
                cells += [f"— ({row.error})", *([""] * (len(COLUMNS) - 1))]
            else:
                cells += [fmt.format(getattr(row.figures, name)) for _, name, fmt in COLUMNS]
            lines.append("| " + " | ".join(cells) + " |")
        lines.append("")
        if rec.setting is not None:
            lines.append(f"Recommended: `{rec.setting.label()}`: {rec.reason}.")
        else:
            lines.append(f"Recommended: none: {rec.reason}.")
        return "\n".join(lines) + "\n"

    def write(self, directory: Path, name: str) -> tuple[Path, Path]:
        directory.mkdir(parents=True, exist_ok=True)
        md, js = directory / f"{name}.md", directory / f"{name}.json"
        md.write_text(self.to_markdown())
        js.write_text(json.dumps(self.to_json(), indent=2) + "\n")
        return md, js
