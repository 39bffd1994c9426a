"""What Grafana does to the chart's dashboard queries before Prometheus sees them, and the queries themselves.

Template variables follow Grafana's Prometheus data source (``interpolateQueryExpr``): a multi-value or
include-All variable has each selected value regex-escaped, several values become ``(a|b)``, and "All" with
an ``allValue`` is that value verbatim. ``$__rate_interval`` is Grafana's
``max($__interval + scrape interval, 4 * scrape interval)``, with ``$__interval`` never below the data
source's scrape interval (its "min interval"); Grafana's rounding of ``$__interval`` to a "nice" value is not
modelled (it does not arise while range / max data points is below the scrape interval, as in the e2e test).
Panels run as range queries, as Grafana's panels do.
"""

from __future__ import annotations

import json
import math
import re
import urllib.parse
import urllib.request
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

ALL = object()  # the "All" choice of a variable
_REGEX_SPECIALS = re.compile(r"([\\^$*+?.()|{}\[\]])")


@dataclass(frozen=True)
class Query:
    panel: str
    ref: str
    expr: str


def panel_queries(dashboard: Mapping[str, Any]) -> list[Query]:
    return [Query(p["title"], t.get("refId", "?"), t["expr"])
            for p in dashboard["panels"] for t in p.get("targets", [])]


def variable_value(variable: Mapping[str, Any], choice: object | Sequence[str]) -> str:
    if choice is ALL:
        return str(variable["allValue"])
    assert isinstance(choice, Sequence) and not isinstance(choice, str)
    values = list(choice)
    if not (variable.get("multi") or variable.get("includeAll")):
        (value,) = values
        return value.replace("\\", "\\\\").replace("'", "\\'")
    escaped = [_REGEX_SPECIALS.sub(r"\\\\\1", v) for v in values]
    return escaped[0] if len(escaped) == 1 else "(" + "|".join(escaped) + ")"


def rate_interval_seconds(range_s: float, max_data_points: int, scrape_interval_s: float) -> float:
    interval = max(range_s / max_data_points, scrape_interval_s)
    return max(interval + scrape_interval_s, 4 * scrape_interval_s)


def interpolate(expr: str, dashboard: Mapping[str, Any], choices: Mapping[str, object | Sequence[str]],
                rate_interval_s: float) -> str:
    variables = {v["name"]: v for v in dashboard["templating"]["list"]}
    out = expr.replace("$__rate_interval", f"{rate_interval_s:g}s")
    # Longest names first, so that $namespace is never read as $name + "space".
    for name in sorted(choices, key=len, reverse=True):
        value = variable_value(variables[name], choices[name])
        out = out.replace("${" + name + "}", value).replace("$" + name, value)
    assert "$" not in re.sub(r'"\$\d+"', "", out), f"unsubstituted variable in {out}"
    return out


def label_values_query(variable: Mapping[str, Any]) -> tuple[str, str]:
    """``label_values(selector, label)`` of a query variable: (selector, label)."""
    match = re.fullmatch(r"label_values\((.*),\s*([a-zA-Z_][a-zA-Z0-9_]*)\)", variable["query"]["query"])
    assert match, variable["query"]
    return match.group(1), match.group(2)


def _get(base_url: str, path: str, params: Sequence[tuple[str, str]]) -> Any:
    url = f"{base_url}{path}?" + urllib.parse.urlencode(params)
    with urllib.request.urlopen(url, timeout=30) as resp:
        body = json.loads(resp.read())
    if body.get("status") != "success":
        raise RuntimeError(f"{path} {params} failed: {body}")
    return body["data"]


def query_range(base_url: str, expr: str, start: float, end: float, step_s: float) -> list[dict[str, Any]]:
    return list(_get(base_url, "/api/v1/query_range", [("query", expr), ("start", f"{start:.3f}"),
                                                         ("end", f"{end:.3f}"), ("step", f"{step_s:g}")])["result"])


def label_values(base_url: str, selector: str, label: str, start: float, end: float) -> list[str]:
    """What Grafana's ``label_values(selector, label)`` asks Prometheus (the label-values API with match[])."""
    return list(_get(base_url, f"/api/v1/label/{label}/values",
                     [("match[]", selector), ("start", f"{start:.0f}"), ("end", f"{end:.0f}")]))


def has_data(result: list[dict[str, Any]]) -> bool:
    """At least one finite sample: what a panel draws (NaN, e.g. a quantile of no requests, draws nothing)."""
    return any(math.isfinite(float(v)) for series in result for _, v in series.get("values", []))
