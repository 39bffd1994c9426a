"""The per-area wall-time summary of a test run (tests/support/wall_times.py), from hand-made reports."""

from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path

from tests.support.wall_times import WallTimes, area_of, collect, output_path, summary_lines


@dataclass
class Rep:
    nodeid: str
    when: str
    duration: float
    outcome: str = "passed"


def run_of(module: str, test: str, setup: float, call: float, teardown: float, outcome: str = "passed"
           ) -> list[Rep]:
    nodeid = f"{module}::{test}"
    return [Rep(nodeid, "setup", setup), Rep(nodeid, "call", call, outcome), Rep(nodeid, "teardown", teardown)]


# The shared cluster's 40 s start lands in the setup of the first integration test that asks for it, its 5 s stop
# in the teardown of the session's last test (a unit test here): each module is charged with what it triggered.
REPORTS = [
    *run_of("tests/chart/test_chart.py", "test_a", 0.1, 2.0, 0.0),
    *run_of("tests/integration/test_b.py", "test_first", 40.0, 3.0, 0.1),
    *run_of("tests/integration/test_b.py", "test_second", 0.0, 7.0, 0.1, outcome="failed"),
    *run_of("tests/integration/test_c.py[x]", "test_c", 0.0, 1.5, 0.0),
    *run_of("tests/unit/test_d.py", "test_d", 0.0, 0.2, 5.0),
    *run_of("tests/test_top.py", "test_e", 0.0, 0.3, 0.0),
]


def test_modules_sum_setup_call_and_teardown_and_areas_sum_modules() -> None:
    times = collect(REPORTS)
    b = times.modules["tests/integration/test_b.py"]
    assert (round(b.seconds, 6), b.tests, b.failed) == (50.2, 2, 1)
    assert round(times.modules["tests/unit/test_d.py"].seconds, 6) == 5.2
    areas = times.areas()
    assert list(areas) == ["unit", "integration", "chart", "other"]  # AREAS' order, then the rest
    assert round(areas["integration"].seconds, 6) == 51.7 and areas["integration"].tests == 3
    assert [m.module for m in times.slowest(3)] == ["tests/integration/test_b.py", "tests/unit/test_d.py",
                                                    "tests/chart/test_chart.py"]


def test_area_of_a_module_path() -> None:
    assert area_of("tests/e2e/test_x.py") == "e2e"
    assert area_of("tests/node/sub/test_y.py") == "node"
    assert area_of("tests/test_top.py") == "other"
    assert area_of("bench/test_z.py") == "other"


def test_summary_lines() -> None:
    lines = summary_lines(collect(REPORTS), wall_seconds=70.0)
    assert lines[0] == "wall 1m 10s: 59.3s in tests (setup+call+teardown), 10.7s collecting and between them"
    assert lines[1] == "  unit              5.2s   8.8%  1 tests"
    assert lines[2] == "  integration      51.7s  87.2%  3 tests, 1 failed"
    assert lines[5] == "slowest 5 modules:"
    assert lines[6] == "      50.2s  tests/integration/test_b.py (2 tests)"
    assert len(lines) == 11


class Terminal:
    def __init__(self) -> None:
        self.lines: list[str] = []

    def write_sep(self, sep: str, title: str) -> None:
        self.lines.append(f"{sep * 3} {title}")

    def write_line(self, line: str) -> None:
        self.lines.append(line)


def test_the_plugin_prints_and_writes_json(tmp_path: Path) -> None:
    out = tmp_path / "times.json"
    plugin = WallTimes(env={"QF_TEST_TIMES": str(out)})
    for report in REPORTS:
        plugin.pytest_runtest_logreport(report)
    terminal = Terminal()
    plugin.pytest_terminal_summary(terminal)
    assert terminal.lines[0] == "=== wall time per area (qwen-fleet)"
    assert terminal.lines[-1] == f"written to {out}"
    data = json.loads(out.read_text())
    assert data["areas"]["integration"] == {"seconds": 51.7, "tests": 3, "failed": 1}
    assert [m["module"] for m in data["slowest_modules"]][:2] == ["tests/integration/test_b.py",
                                                                  "tests/unit/test_d.py"]
    assert len(data["modules"]) == 5 and data["wall_seconds"] >= 0


def test_where_the_json_goes() -> None:
    assert output_path({"QF_TEST_TIMES": "/x/t.json", "QF_CACHE": "/c"}) == Path("/x/t.json")
    assert output_path({"QF_CACHE": "/c"}) == Path("/c/last-test-times.json")
    assert output_path({"QF_TEST_TIMES": "off"}) is None
    assert output_path({"XDG_CACHE_HOME": "/xdg"}) == Path("/xdg/qwen-fleet/last-test-times.json")
