"""Where a test run's time went: wall time per top-level area and the slowest modules, printed after the run and
written as JSON (for bench/results/ci-wall-time.json).

A module's time is its tests' setup + call + teardown, summed. pytest times a fixture's setup inside the setup of
the first test that asks for it, so a session fixture (the shared cluster, the engine) counts for the module that
triggered it, and its teardown for the last test of the session: where the time really went.

Under pytest-xdist (``make test`` runs lanes, tests/support/lanes.py) the plugin lives in the controller, which
gets every worker's reports. Modules then run side by side, so their seconds add up to more than the wall time;
each lane (worker) is shown too: its wall from its first test's start to its last test's end, and its seconds in
tests. A session fixture is then started once per lane that asks for it, and charged to that lane's first module.

The JSON goes to ``$QF_TEST_TIMES`` when set, else ``$QF_CACHE/last-test-times.json``
(``~/.cache/qwen-fleet/last-test-times.json``); ``QF_TEST_TIMES=off`` writes none. ``make test`` names
``$QF_CACHE/make-test-times.json``, so a later partial run does not overwrite the whole suite's figures.
"""

from __future__ import annotations

import json
import os
import platform
import time
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Protocol

import pytest

AREAS = ("unit", "integration", "contract", "e2e", "chaos", "chart", "node")
SLOWEST = 10


class Report(Protocol):
    """What a pytest TestReport has that this needs."""

    nodeid: str
    when: str
    duration: float
    outcome: str


def lane_of(report: Report) -> str:
    """The xdist worker that ran the test (``gw0``...): its controller sets ``report.node``; else ``main``."""
    gateway = getattr(getattr(report, "node", None), "gateway", None)
    return str(getattr(gateway, "id", None) or "main")


@dataclass
class LaneTime:
    lane: str
    seconds: float = 0.0
    tests: int = 0
    first_start: float | None = None
    last_stop: float | None = None

    @property
    def wall(self) -> float:
        if self.first_start is None or self.last_stop is None:
            return self.seconds
        return max(self.last_stop - self.first_start, 0.0)


@dataclass
class ModuleTime:
    module: str
    area: str
    seconds: float = 0.0
    tests: int = 0
    failed: int = 0


@dataclass
class Times:
    modules: dict[str, ModuleTime] = field(default_factory=dict)
    lanes: dict[str, LaneTime] = field(default_factory=dict)

    def add(self, report: Report) -> None:
        module = report.nodeid.split("::", 1)[0]
        entry = self.modules.setdefault(module, ModuleTime(module, area_of(module)))
        entry.seconds += report.duration
        if report.when == "call":
            entry.tests += 1
        if report.outcome == "failed":
            entry.failed += 1  # a failed setup or teardown counts too (an error)
        lane = self.lanes.setdefault(lane_of(report), LaneTime(lane_of(report)))
        lane.seconds += report.duration
        lane.tests += report.when == "call"
        start, stop = getattr(report, "start", None), getattr(report, "stop", None)  # epoch seconds (pytest)
        if isinstance(start, int | float) and isinstance(stop, int | float):
            lane.first_start = start if lane.first_start is None else min(lane.first_start, start)
            lane.last_stop = stop if lane.last_stop is None else max(lane.last_stop, stop)

    def areas(self) -> dict[str, ModuleTime]:
        """Per area, in AREAS' order (then any other), the modules' times summed."""
        out: dict[str, ModuleTime] = {}
        for entry in self.modules.values():
            total = out.setdefault(entry.area, ModuleTime(entry.area, entry.area))
            total.seconds += entry.seconds
            total.tests += entry.tests
            total.failed += entry.failed
        order = {name: i for i, name in enumerate(AREAS)}
        return dict(sorted(out.items(), key=lambda kv: (order.get(kv[0], len(AREAS)), kv[0])))

    def slowest(self, n: int = SLOWEST) -> list[ModuleTime]:
        return sorted(self.modules.values(), key=lambda m: (-m.seconds, m.module))[:n]


def area_of(module: str) -> str:
    """``tests/unit/test_x.py`` -> ``unit``; a module straight under tests/ or elsewhere -> ``other``."""
    parts = Path(module).parts
    if len(parts) >= 3 and parts[0] == "tests":
        return parts[1]
    return "other"


def collect(reports: Iterable[Report]) -> Times:
    times = Times()
    for report in reports:
        times.add(report)
    return times


def clock(seconds: float) -> str:
    s = round(seconds)
    return f"{s // 60}m {s % 60:02d}s" if s >= 60 else f"{seconds:.1f}s"


def summary_lines(times: Times, wall_seconds: float) -> list[str]:
    areas = times.areas()
    in_tests = sum(a.seconds for a in areas.values())
    if len(times.lanes) > 1:
        lines = [f"wall {clock(wall_seconds)}: {clock(in_tests)} in tests (setup+call+teardown) over "
                 f"{len(times.lanes)} lanes, {in_tests / wall_seconds if wall_seconds else 0.0:.2f} at a time"]
        for name, lane in sorted(times.lanes.items()):
            lines.append(f"  lane {name:<7} {clock(lane.wall):>9} wall, {clock(lane.seconds):>9} in tests, "
                         f"{lane.tests} tests")
    else:
        lines = [f"wall {clock(wall_seconds)}: {clock(in_tests)} in tests (setup+call+teardown), "
                 f"{clock(max(wall_seconds - in_tests, 0.0))} collecting and between them"]
    for name, area in areas.items():
        share = 100 * area.seconds / in_tests if in_tests else 0.0
        failed = f", {area.failed} failed" if area.failed else ""
        lines.append(f"  {name:<12} {clock(area.seconds):>9} {share:5.1f}%  {area.tests} tests{failed}")
    lines.append(f"slowest {min(SLOWEST, len(times.modules))} modules:")
    for entry in times.slowest():
        lines.append(f"  {clock(entry.seconds):>9}  {entry.module} ({entry.tests} tests)")
    return lines


def as_json(times: Times, wall_seconds: float, args: Iterable[str]) -> dict[str, Any]:
    def row(m: ModuleTime) -> dict[str, Any]:
        return {"module": m.module, "area": m.area, "seconds": round(m.seconds, 1), "tests": m.tests,
                "failed": m.failed}

    return {
        "finished": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()),
        "args": list(args),
        "machine": {"cpus": os.cpu_count(), "processor": platform.processor() or platform.machine(),
                    "cpu_flags": cpu_flags()},
        "wall_seconds": round(wall_seconds, 1),
        "areas": {name: {"seconds": round(a.seconds, 1), "tests": a.tests, "failed": a.failed}
                  for name, a in times.areas().items()},
        "tests_seconds": round(sum(m.seconds for m in times.modules.values()), 1),
        "lanes": {name: {"wall_seconds": round(lane.wall, 1), "seconds": round(lane.seconds, 1),
                         "tests": lane.tests} for name, lane in sorted(times.lanes.items())},
        "slowest_modules": [row(m) for m in times.slowest()],
        "modules": [row(m) for m in sorted(times.modules.values(), key=lambda m: m.module)],
    }


def cpu_flags(cpuinfo: Path = Path("/proc/cpuinfo")) -> list[str]:
    """The flags that matter for the engine's speed here (ci-wall-time.json records the machine's)."""
    try:
        text = cpuinfo.read_text()
    except OSError:
        return []
    flags = next((line.split(":", 1)[1].split() for line in text.splitlines() if line.startswith("flags")), [])
    return sorted(f for f in set(flags) if f.startswith(("avx512", "amx", "avx2")))


def output_path(env: Mapping[str, str]) -> Path | None:
    explicit = env.get("QF_TEST_TIMES")
    if explicit == "off":
        return None
    if explicit:
        return Path(explicit)
    cache = env.get("QF_CACHE") or str(Path(env.get("XDG_CACHE_HOME") or Path.home() / ".cache") / "qwen-fleet")
    return Path(cache) / "last-test-times.json"


class Terminal(Protocol):
    def write_sep(self, sep: str, title: str) -> None: ...

    def write_line(self, line: str) -> None: ...


class WallTimes:
    """The pytest plugin (tests/conftest.py registers it)."""

    def __init__(self, env: Mapping[str, str] | None = None) -> None:
        self.env = os.environ if env is None else env
        self.times = Times()
        self.started = time.monotonic()
        self.args: list[str] = []

    def pytest_configure(self, config: Any) -> None:
        self.args = [str(a) for a in config.invocation_params.args]

    def pytest_sessionstart(self) -> None:
        self.started = time.monotonic()

    def pytest_runtest_logreport(self, report: Report) -> None:
        self.times.add(report)

    @pytest.hookimpl(trylast=True)  # last: after the failures, so the figures end the output
    def pytest_terminal_summary(self, terminalreporter: Terminal) -> None:
        if not self.times.modules:
            return
        wall = time.monotonic() - self.started
        terminalreporter.write_sep("=", "wall time per area (qwen-fleet)")
        for line in summary_lines(self.times, wall):
            terminalreporter.write_line(line)
        path = output_path(self.env)
        if path is None:
            return
        try:
            path.parent.mkdir(parents=True, exist_ok=True)
            path.write_text(json.dumps(as_json(self.times, wall, self.args), indent=1) + "\n")
        except OSError as err:
            terminalreporter.write_line(f"could not write {path}: {err}")
            return
        terminalreporter.write_line(f"written to {path}")
