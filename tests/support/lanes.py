"""Lanes: which tests share an xdist worker (``--dist loadgroup``) and in which order the groups are handed out.

``make test`` runs the suite in parallel lanes (pytest-xdist workers). Each worker is its own pytest session, so a
session fixture is started once per worker that asks for it. The groups keep the expensive ones to one start:

- ``tests/node`` is one group: one real-node cluster per run (its kubelet, containerd, the imported engine and
  operator images; ~7 GB of /tmp), never two side by side.
- ``tests/chaos`` and ``tests/chart`` are one group each: their clusters are package-scoped, and a package split
  over two workers would start its cluster twice (and a worker running it in two pieces would tear it down
  and start it again between them).
- Every module that asks for ``serving_vllm`` (the shared real engine, a minute of CPU to start) is one group.
- Every other module is a group of its own: a module's tests stay together (module-scoped fixtures start once),
  and modules spread over the lanes. The session cluster and operator of tests/integration then start once per
  worker that runs an integration module (bench/results/suite-cpu.md: what lanes cost and buy).

A test module may still name its own group with ``@pytest.mark.xdist_group("name")``; that wins.

How the groups reach xdist: not through xdist's own ``--dist loadgroup`` suffix on the node id, which pytest 9.2
no longer honours (its node ids are structured; pytest-dev/pytest-xdist#1386: the tests are then spread one by
one, silently). Each worker writes its collection's ``{nodeid: group}`` to a file at collection time, and
``LaneScheduling`` (xdist's scope scheduler, which the controller gets through ``pytest_xdist_make_scheduler``)
reads it and uses the groups as its scopes.

Order: the scheduler hands the groups out in collection order, the next one to the first worker that runs low,
so each worker reorders its collection longest group first (the classic longest-processing-time rule), keeping
each group's tests in their own order. A group's length is what its modules took in the previous ``make test``
(``$QF_CACHE/make-test-times.json``), else a per-area guess; the controller reads that file once and hands the
figures to every worker (``workerinput``), so all workers collect the same order even while the file changes.
"""

from __future__ import annotations

import json
import os
from collections.abc import Iterable, Mapping, Sequence
from pathlib import Path
from typing import Any

import pytest
from xdist.scheduler import LoadScopeScheduling

from tests.support.wall_times import area_of

WHOLE_AREA_GROUPS = ("node", "chaos", "chart")
SHARED_FIXTURE_GROUPS = {"serving_vllm": "serving-vllm"}
# Seconds per module when no previous run says (a module that is new, or the first run on a machine): round
# figures near a typical module of each area in CI's sequential run of 4fbc76e.
GUESS_SECONDS = {"node": 120.0, "e2e": 150.0, "contract": 40.0, "chaos": 40.0, "integration": 20.0, "chart": 15.0,
                 "unit": 1.0}
GUESS_OTHER_SECONDS = 10.0


def module_of(nodeid: str) -> str:
    return nodeid.split("::", 1)[0]


def group_of(module: str, fixturenames: Iterable[str]) -> str:
    area = area_of(module)
    if area in WHOLE_AREA_GROUPS:
        return area
    for fixture, group in SHARED_FIXTURE_GROUPS.items():
        if fixture in fixturenames:
            return group
    return module


def module_seconds(times_json: Path) -> dict[str, float]:
    """Each module's seconds in a previous run's wall-time JSON (tests/support/wall_times.py); {} when unreadable."""
    try:
        data = json.loads(times_json.read_text())
        return {str(m["module"]): float(m["seconds"]) for m in data.get("modules", [])}
    except (OSError, ValueError, TypeError, KeyError, AttributeError):
        return {}


def guess(module: str) -> float:
    return GUESS_SECONDS.get(area_of(module), GUESS_OTHER_SECONDS)


def plan(tests: Sequence[tuple[str, str]], seconds: Mapping[str, float]) -> list[tuple[str, float]]:
    """Groups, longest first, with their expected seconds, from ``(module, group)`` per test in collection order.

    A module takes its recorded seconds, or the area's guess; a group is the sum of its modules. Ties keep the
    collection order (sorted() is stable)."""
    modules_of: dict[str, list[str]] = {}
    for module, group in tests:
        members = modules_of.setdefault(group, [])
        if module not in members:
            members.append(module)
    expected = {group: sum(seconds.get(m, guess(m)) for m in members) for group, members in modules_of.items()}
    return sorted(expected.items(), key=lambda kv: -kv[1])


def order(items: Sequence[Any], groups: Sequence[str], seconds: Mapping[str, float]) -> list[Any]:
    """``items`` (with ``groups[i]`` the group of ``items[i]``) reordered group by group, longest group first."""
    rank = {group: i for i, (group, _) in enumerate(plan([(module_of(it.nodeid), g)
                                                           for it, g in zip(items, groups, strict=True)], seconds))}
    position = sorted(range(len(items)), key=lambda i: rank[groups[i]])
    return [items[i] for i in position]


def write_groups(directory: Path, worker: str, groups: Mapping[str, str]) -> None:
    """A worker's ``{nodeid: group}``, written whole (rename) before xdist sends the controller its collection."""
    tmp = directory / f".{worker}.json.tmp"
    tmp.write_text(json.dumps(dict(groups)))
    os.replace(tmp, directory / f"{worker}.json")


def read_groups(directory: Path) -> dict[str, str]:
    """The groups one worker wrote (every worker collects the same tests, and xdist checks that)."""
    for path in sorted(directory.glob("*.json")):
        return {str(k): str(v) for k, v in json.loads(path.read_text()).items()}
    return {}


class LaneScheduling(LoadScopeScheduling):
    """xdist's scope scheduler with the lane groups as its scopes (a test no worker named: its module)."""

    def __init__(self, config: pytest.Config, log: Any, groups_dir: Path) -> None:
        super().__init__(config, log)
        # Hand the groups out in the collection's order (longest first, see order()), not by test count.
        config.option.loadscopereorder = False
        self.groups_dir = groups_dir
        self.groups: dict[str, str] | None = None

    def _split_scope(self, nodeid: str) -> str:
        if self.groups is None:  # first asked in schedule(), when every worker has sent its collection
            self.groups = read_groups(self.groups_dir)
        return self.groups.get(nodeid) or module_of(nodeid)
