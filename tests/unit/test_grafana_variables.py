"""Dashboard variables substituted as Grafana's Prometheus data source does (tests/support/grafana.py)."""

from __future__ import annotations

import re

from tests.support import grafana

DASHBOARD = {"templating": {"list": [
    {"name": "namespace", "multi": True, "includeAll": True, "allValue": ".*"},
    {"name": "inference", "multi": True, "includeAll": True, "allValue": ".*"},
    {"name": "single", "multi": False, "includeAll": False},
]}}
EXPR = 'sum(rate(x{namespace=~"$namespace", i=~"${inference}"}[$__rate_interval]))'


def _promql_string(text: str) -> str:
    """The regex Prometheus compiles from a double-quoted PromQL string literal."""
    return re.sub(r"\\(.)", r"\1", text)


def test_all_is_the_all_value_and_a_selection_is_an_escaped_alternation() -> None:
    everything = grafana.interpolate(EXPR, DASHBOARD, {"namespace": grafana.ALL, "inference": grafana.ALL}, 4)
    assert everything == 'sum(rate(x{namespace=~".*", i=~".*"}[4s]))'
    some = grafana.interpolate(EXPR, DASHBOARD, {"namespace": ["team.a", "b"], "inference": ["q"]}, 4)
    assert some == 'sum(rate(x{namespace=~"(team\\\\.a|b)", i=~"q"}[4s]))'
    (selector,) = re.findall(r'namespace=~"([^"]*)"', some)
    regex = re.compile(_promql_string(selector))
    assert regex.fullmatch("team.a") and regex.fullmatch("b")
    assert not regex.fullmatch("teamXa")


def test_a_single_value_variable_escapes_only_quotes_and_backslashes() -> None:
    assert grafana.variable_value(DASHBOARD["templating"]["list"][2], ["a.b'c"]) == "a.b\\'c"


def test_rate_interval_follows_grafanas_formula() -> None:
    assert grafana.rate_interval_seconds(40, 1000, 1) == 4  # max(1 + 1, 4 * 1)
    assert grafana.rate_interval_seconds(3600, 1000, 15) == 60  # $__interval clamped to 15 s
    assert grafana.rate_interval_seconds(86400, 1000, 15) == 86.4 + 15
