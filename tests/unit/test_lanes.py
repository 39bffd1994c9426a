"""Lanes (tests/support/lanes.py): the xdist groups, their order, and the wall-time summary under xdist; then a
real two-worker run of two unit modules through tests/conftest.py's hook."""

from __future__ import annotations

import json
import re
import subprocess
import sys
from dataclasses import dataclass
from pathlib import Path
from types import SimpleNamespace

from tests.support import lanes
from tests.support.wall_times import collect, lane_of, summary_lines

ROOT = Path(__file__).resolve().parents[2]


def test_groups_keep_package_clusters_the_real_node_and_the_shared_engine_to_one_lane() -> None:
    assert lanes.group_of("tests/node/test_real_fleet.py", ["real_cluster"]) == "node"
    assert lanes.group_of("tests/node/test_node_teardown.py", []) == "node"
    assert lanes.group_of("tests/chaos/test_drain.py", ["vllm_python"]) == "chaos"
    assert lanes.group_of("tests/chart/test_chart_render.py", []) == "chart"
    assert lanes.group_of("tests/contract/test_tiny_vllm.py", ["tiny_vllm", "serving_vllm"]) == "serving-vllm"
    assert lanes.group_of("tests/e2e/test_dashboard_live.py", ["cluster", "serving_vllm"]) == "serving-vllm"
    assert lanes.group_of("tests/contract/test_engine_args.py", ["vllm_python"]) == "tests/contract/test_engine_args.py"
    assert lanes.group_of("tests/integration/test_operator.py", ["cluster", "operator"]) == \
        "tests/integration/test_operator.py"
    assert lanes.group_of("tests/unit/test_api.py", []) == "tests/unit/test_api.py"


def test_plan_sums_modules_per_group_and_puts_the_longest_first() -> None:
    tests = [("tests/unit/test_a.py", "tests/unit/test_a.py"),
             ("tests/node/test_n1.py", "node"), ("tests/node/test_n2.py", "node"), ("tests/node/test_n2.py", "node"),
             ("tests/integration/test_i.py", "tests/integration/test_i.py"),
             ("tests/integration/test_j.py", "tests/integration/test_j.py")]
    seconds = {"tests/node/test_n1.py": 100.0, "tests/node/test_n2.py": 50.0, "tests/integration/test_i.py": 200.0}
    # test_j is new: the integration guess; test_a too: the unit guess. A module counts once however many tests.
    assert lanes.plan(tests, seconds) == [
        ("tests/integration/test_i.py", 200.0), ("node", 150.0),
        ("tests/integration/test_j.py", lanes.GUESS_SECONDS["integration"]),
        ("tests/unit/test_a.py", lanes.GUESS_SECONDS["unit"])]


def test_plan_keeps_collection_order_between_equal_groups() -> None:
    tests = [("tests/unit/test_b.py", "tests/unit/test_b.py"), ("tests/unit/test_a.py", "tests/unit/test_a.py")]
    assert [g for g, _ in lanes.plan(tests, {})] == ["tests/unit/test_b.py", "tests/unit/test_a.py"]


def test_order_moves_whole_groups_and_keeps_each_groups_tests_in_their_order() -> None:
    items = [SimpleNamespace(nodeid=n) for n in (
        "tests/chart/test_c.py::t1", "tests/integration/test_i.py::t1", "tests/chart/test_d.py::t1",
        "tests/integration/test_i.py::t2", "tests/chart/test_c.py::t2")]
    groups = ["chart", "tests/integration/test_i.py", "chart", "tests/integration/test_i.py", "chart"]
    out = lanes.order(items, groups, {"tests/integration/test_i.py": 90.0, "tests/chart/test_c.py": 10.0,
                                      "tests/chart/test_d.py": 10.0})
    assert [i.nodeid for i in out] == [
        "tests/integration/test_i.py::t1", "tests/integration/test_i.py::t2",
        "tests/chart/test_c.py::t1", "tests/chart/test_d.py::t1", "tests/chart/test_c.py::t2"]


def test_module_seconds_from_a_previous_run_and_nothing_from_a_bad_file(tmp_path: Path) -> None:
    good = tmp_path / "times.json"
    good.write_text(json.dumps({"modules": [{"module": "tests/unit/test_a.py", "seconds": 1.5, "tests": 2}]}))
    assert lanes.module_seconds(good) == {"tests/unit/test_a.py": 1.5}
    bad = tmp_path / "bad.json"
    bad.write_text("{not json")
    assert lanes.module_seconds(bad) == {}
    assert lanes.module_seconds(tmp_path / "missing.json") == {}
    (tmp_path / "list.json").write_text("[]")
    assert lanes.module_seconds(tmp_path / "list.json") == {}


@dataclass
class Rep:
    nodeid: str
    when: str
    duration: float
    start: float
    stop: float
    node: object
    outcome: str = "passed"


def _worker(name: str) -> object:
    return SimpleNamespace(gateway=SimpleNamespace(id=name))


def test_lanes_in_the_summary_and_their_wall_from_first_start_to_last_stop() -> None:
    gw0, gw1 = _worker("gw0"), _worker("gw1")
    reports = [
        Rep("tests/node/test_n.py::a@node", "setup", 30.0, 1000.0, 1030.0, gw0),
        Rep("tests/node/test_n.py::a@node", "call", 60.0, 1030.0, 1090.0, gw0),
        Rep("tests/node/test_n.py::a@node", "teardown", 0.0, 1090.0, 1090.0, gw0),
        Rep("tests/unit/test_u.py::b@tests/unit/test_u.py", "setup", 0.0, 1001.0, 1001.0, gw1),
        Rep("tests/unit/test_u.py::b@tests/unit/test_u.py", "call", 20.0, 1001.0, 1021.0, gw1),
        Rep("tests/unit/test_u.py::b@tests/unit/test_u.py", "teardown", 0.0, 1021.0, 1021.0, gw1),
    ]
    assert lane_of(reports[0]) == "gw0"
    times = collect(reports)
    assert set(times.modules) == {"tests/node/test_n.py", "tests/unit/test_u.py"}  # the @group suffix goes
    assert (times.lanes["gw0"].wall, times.lanes["gw0"].seconds, times.lanes["gw0"].tests) == (90.0, 90.0, 1)
    assert (times.lanes["gw1"].wall, times.lanes["gw1"].tests) == (20.0, 1)
    lines = summary_lines(times, wall_seconds=100.0)
    assert lines[0] == "wall 1m 40s: 1m 50s in tests (setup+call+teardown) over 2 lanes, 1.10 at a time"
    assert lines[1] == "  lane gw0        1m 30s wall,    1m 30s in tests, 1 tests"
    assert lines[2] == "  lane gw1         20.0s wall,     20.0s in tests, 1 tests"
    assert lines[3].startswith("  unit ")


def _run(tmp_path: Path, *args: str) -> tuple[subprocess.CompletedProcess[str], Path]:
    out = tmp_path / "times.json"
    result = subprocess.run(
        [sys.executable, "-m", "pytest", "-p", "no:cacheprovider", "-n", "2", "--dist", "loadgroup",
         f"--basetemp={tmp_path / 'inner'}", "-v", *args],
        cwd=ROOT, capture_output=True, text=True, timeout=600, env={**_env(), "QF_TEST_TIMES": str(out)})
    return result, out


def _env() -> dict[str, str]:
    import os

    return {k: v for k, v in os.environ.items() if not k.startswith(("PYTEST_", "QF_TEST_TIMES"))}


INNER = ("tests/unit/test_wall_times.py", "tests/unit/test_queue.py")


def test_a_two_lane_run_keeps_each_module_on_one_worker_and_the_controller_counts_every_test(
        tmp_path: Path) -> None:
    collected = subprocess.run([sys.executable, "-m", "pytest", "-p", "no:cacheprovider", "--collect-only", "-q",
                                *INNER], cwd=ROOT, capture_output=True, text=True, timeout=300, env=_env())
    expected = sum(1 for line in collected.stdout.splitlines() if "::" in line)
    assert expected > 5, collected.stdout
    result, out = _run(tmp_path, *INNER)
    assert result.returncode == 0, result.stdout[-3000:] + result.stderr[-3000:]
    worker_of: dict[str, set[str]] = {}
    for worker, nodeid in re.findall(r"\[(gw\d)\] \[\s*\d+%\] PASSED (\S+)", result.stdout):
        worker_of.setdefault(nodeid.split("::", 1)[0], set()).add(worker)
    assert set(worker_of) == set(INNER), result.stdout[-3000:]
    assert all(len(workers) == 1 for workers in worker_of.values()), worker_of
    data = json.loads(out.read_text())
    assert sum(a["tests"] for a in data["areas"].values()) == expected
    assert set(data["lanes"]) == {"gw0", "gw1"}
    assert sum(lane["tests"] for lane in data["lanes"].values()) == expected
    assert "over 2 lanes" in result.stdout


def test_a_two_lane_run_that_selects_nothing_exits_5(tmp_path: Path) -> None:
    result, out = _run(tmp_path, "-k", "no_test_has_this_name", INNER[0])
    assert result.returncode == 5, result.stdout[-3000:] + result.stderr[-3000:]
    assert not out.exists()
