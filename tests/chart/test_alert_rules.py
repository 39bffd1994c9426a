"""The alerts tested the way Prometheus users test theirs: ``promtool test rules`` runs the unit tests in
tests/chart/alerts/ against the rule groups ``helm template`` renders (the chart's PrometheusRule) and those the
operator renders for a fleet (spec.monitoring.prometheusRule). Every alert must have a test where it fires and
one where it stays silent on its own near misses."""

from __future__ import annotations

import shutil
import subprocess
from pathlib import Path
from typing import Any

import pytest
import yaml

from qwen_fleet.api import QwenInference
from qwen_fleet.render.monitoring import render_prometheus_rule
from qwen_fleet_dev.binaries import repo_root
from qwen_fleet_dev.metrics_stack import promtool_binary
from tests.chart.support import ALL_FEATURES, one, template

ALERT_TESTS = Path(__file__).with_name("alerts")
CHART_TESTS = ALERT_TESTS / "chart-alerts.test.yaml"
FLEET_TESTS = ALERT_TESTS / "fleet-alerts.test.yaml"


@pytest.fixture(scope="module")
def promtool() -> Path:
    """promtool of the pinned Prometheus, built from its Go module when the cache lacks it (never skipped)."""
    if not promtool_binary().exists():
        root = repo_root()
        assert root is not None, "promtool is built from the source checkout's hack/build-binaries.sh"
        subprocess.run([str(root / "hack" / "build-binaries.sh"), "prometheus"], check=True)
    return promtool_binary()


def chart_rule_groups() -> list[dict[str, Any]]:
    """The PrometheusRule's groups with every alert on (the operator-down alert needs the ServiceMonitor)."""
    return list(one(template(ALL_FEATURES), "PrometheusRule")["spec"]["groups"])


def _alerts(groups: list[dict[str, Any]]) -> set[str]:
    return {rule["alert"] for group in groups for rule in group["rules"] if "alert" in rule}


def fleet_rule_groups() -> list[dict[str, Any]]:
    """The rules of team-a/qwen-a, autoscaling on with the default queue target (5 per replica)."""
    cr = QwenInference.model_validate({"metadata": {"name": "qwen-a", "namespace": "team-a"}, "spec": {
        "model": {"name": "Qwen/Qwen3-4B-Instruct-2507"}, "autoscaling": {"enabled": True, "maxReplicas": 4},
        "monitoring": {"prometheusRule": True}}})
    return list(render_prometheus_rule(cr)["spec"]["groups"])


def _run(promtool: Path, tests: Path, groups: list[dict[str, Any]], workdir: Path) -> subprocess.CompletedProcess[str]:
    shutil.copy(tests, workdir / tests.name)
    (rules_file,) = yaml.safe_load(tests.read_text())["rule_files"]
    (workdir / rules_file).write_text(yaml.safe_dump({"groups": groups}, sort_keys=False))
    return subprocess.run([str(promtool), "test", "rules", tests.name], cwd=workdir, capture_output=True, text=True,
                          timeout=120, check=False)


def test_promtool_passes_the_chart_alert_tests(promtool: Path, tmp_path: Path) -> None:
    result = _run(promtool, CHART_TESTS, chart_rule_groups(), tmp_path)
    assert result.returncode == 0, result.stdout + result.stderr
    assert "SUCCESS" in result.stdout + result.stderr


def test_promtool_passes_the_fleet_alert_tests(promtool: Path, tmp_path: Path) -> None:
    result = _run(promtool, FLEET_TESTS, fleet_rule_groups(), tmp_path)
    assert result.returncode == 0, result.stdout + result.stderr
    assert "SUCCESS" in result.stdout + result.stderr


@pytest.mark.parametrize(("tests", "groups", "count"), [(CHART_TESTS, chart_rule_groups, 9),
                                                        (FLEET_TESTS, fleet_rule_groups, 3)],
                         ids=["chart", "fleet"])
def test_every_alert_is_shown_to_fire_and_to_stay_silent(tests: Path, groups: Any, count: int) -> None:
    cases = [case for test in yaml.safe_load(tests.read_text())["tests"] for case in test["alert_rule_test"]]
    fires = {c["alertname"] for c in cases if c.get("exp_alerts")}
    silent = {c["alertname"] for c in cases if not c.get("exp_alerts")}
    alerts = _alerts(groups())
    assert len(alerts) == count, alerts
    assert alerts - fires == set(), "alerts never shown to fire"
    assert alerts - silent == set(), "alerts never shown to stay silent"


def test_promtool_fails_when_an_alert_is_broken(promtool: Path, tmp_path: Path) -> None:
    """The check can fail: a threshold off by a lot makes the queue alert fire where the tests say silent."""
    groups = chart_rule_groups()
    for group in groups:
        for rule in group["rules"]:
            if rule.get("alert") == "QwenFleetQueueBackingUp":
                rule["expr"] = rule["expr"].rstrip().rsplit(">", 1)[0] + "> 2"
    result = _run(promtool, CHART_TESTS, groups, tmp_path)
    assert result.returncode != 0
    assert "QwenFleetQueueBackingUp" in result.stdout + result.stderr
