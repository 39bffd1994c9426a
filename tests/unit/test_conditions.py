"""api/conditions.py: the typed condition constants, the one builder and the one lookup.

Expected dicts are written by hand (kstatus's rules and the CRDs' printer columns are the oracle), not
built with the code under test.
"""

from __future__ import annotations

from pathlib import Path

import yaml

from qwen_fleet.api.conditions import (
    AUTOSCALER_CONDITIONS,
    ConditionType,
    Reason,
    condition,
    conditions_of,
    find_condition,
    is_true,
)
from qwen_fleet.reconcile.status import kstatus

ROOT = Path(__file__).resolve().parents[2]
T0, T1 = "2026-01-01T00:00:00Z", "2026-01-02T00:00:00Z"


def test_the_printer_columns_read_the_ready_condition_by_its_constant() -> None:
    for name in ("qwenfleet.io_qweninferences.yaml", "qwenfleet.io_qwenbatches.yaml"):
        crd = yaml.safe_load((ROOT / "crds" / name).read_text())
        paths = [c["jsonPath"] for v in crd["spec"]["versions"] for c in v.get("additionalPrinterColumns", [])]
        assert any(f'@.type=="{ConditionType.READY}"' in p or f"@.type=='{ConditionType.READY}'" in p
                   for p in paths), (name, paths)


def test_values_are_plain_strings_as_the_apiserver_returns_them() -> None:
    assert (ConditionType.READY, ConditionType.RECONCILING, ConditionType.STALLED) == ("Ready", "Reconciling",
                                                                                       "Stalled")
    assert type(ConditionType.READY) is str and type(Reason.ROLLING_OUT) is str
    assert yaml.safe_dump({"type": ConditionType.MODEL_CACHED}) == "type: ModelCached\n"
    assert AUTOSCALER_CONDITIONS == ("ScalingActive", "ScalingLimited", "ScaledObjectReady", "ScaledObjectFallback")


def test_condition_moves_its_transition_time_only_when_the_status_flips() -> None:
    first = condition([], "Ready", "False", "RollingOut", "0/1", 3, T0)
    assert first == {"type": "Ready", "status": "False", "observedGeneration": 3, "lastTransitionTime": T0,
                     "reason": "RollingOut", "message": "0/1"}
    same = condition([first], "Ready", "False", "PodsPending", "pending", 4, T1)
    assert same["lastTransitionTime"] == T0 and same["reason"] == "PodsPending" and same["observedGeneration"] == 4
    flipped = condition([first], "Ready", "True", "Ready", "1/1", 4, T1)
    assert flipped["lastTransitionTime"] == T1
    assert len(condition([], "Stalled", "True", "X", "m" * 40000, 1, T0)["message"]) == 32768


def test_find_condition_and_is_true() -> None:
    obj = {"status": {"conditions": [{"type": "Available", "status": "False"},
                                     {"type": "Complete", "status": "True", "reason": "Done"}]}}
    assert conditions_of(obj) == obj["status"]["conditions"]
    assert conditions_of(None) == [] and conditions_of({"status": None}) == []
    assert find_condition(conditions_of(obj), "Complete") == {"type": "Complete", "status": "True", "reason": "Done"}
    assert find_condition(conditions_of(obj), "Available", "True") is None
    assert find_condition(None, "Ready") is None
    assert is_true(obj, "Complete") and not is_true(obj, "Available") and not is_true(None, "Ready")


def test_kstatus_triples() -> None:
    stalled = kstatus([], "stalled", "InvalidSpec", "bad", 2, T0)
    assert [(c["type"], c["status"], c["reason"], c["message"]) for c in stalled] == [
        ("Ready", "False", "InvalidSpec", "bad"), ("Reconciling", "False", "InvalidSpec", "Waiting for a spec change"),
        ("Stalled", "True", "InvalidSpec", "bad")]
    progressing = kstatus([], "progressing", "RollingOut", "0/2", 2, T0)
    assert [(c["type"], c["status"], c["reason"], c["message"]) for c in progressing] == [
        ("Ready", "False", "RollingOut", "0/2"), ("Reconciling", "True", "RollingOut", "0/2"),
        ("Stalled", "False", "Progressing", "")]
    ready = kstatus(progressing, "ready", "Ready", "2/2", 2, T1)
    assert [(c["type"], c["status"], c["reason"], c["message"]) for c in ready] == [
        ("Ready", "True", "Ready", "2/2"), ("Reconciling", "False", "Ready", "Up to date"),
        ("Stalled", "False", "Ready", "")]
    # Stalled stayed False: its transition time is the first one.
    assert [c["lastTransitionTime"] for c in ready] == [T1, T1, T0]
