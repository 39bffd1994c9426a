"""`make bench`'s fleet scenario at a small N, so it cannot rot unseen again (issue 38 item 5: on 2026-12-03 it failed
at once, a 404 for an InferencePool of an example the bench cluster does not serve). The very code `make bench`
runs (bench/run.py fleet): the bare-client arm and the operator arm, each on its own control plane, every phase
(burst, steady state, restart, single change). The figures are not judged here (2 shared cores make them noise at
N = 20); that every phase completes and counts what it should is.
"""

from __future__ import annotations

import pytest
from bench import fleet as bench_fleet
from bench import run as bench_run

from qwen_fleet_dev import binaries

pytestmark = [pytest.mark.cluster, pytest.mark.slow]
N = 20


def test_every_example_the_bench_cycles_through_is_served_by_its_cluster() -> None:
    docs = bench_fleet.resources(N)
    assert len(docs) == N
    assert not [d["metadata"]["name"] for d in docs if {"routing", "pools"} & set(d["spec"])]


def test_the_fleet_scenario_runs_every_phase_at_small_n() -> None:
    binaries.ensure()
    result = bench_run.fleet([N], timeout=600, steady=3, settle=3)[str(N)]
    bare, op = result["bare_limit"], result["operator"]
    assert bare["completed"] and bare["available"] == N, bare
    assert bare["children"] >= 2 * N  # at least a Deployment and a Service each
    assert op["burst"]["completed"] and op["burst"]["ready"] == N, op["burst"]
    assert op["burst"]["operator_writes"] >= bare["children"], op["burst"]  # every child applied, status written
    assert op["steady"]["window_seconds"] == 3
    assert op["restart"]["verified"], op["restart"]
    assert op["single_change"]["completed"], op["single_change"]
    assert result["burst_ratio_operator_to_limit"] > 0
