"""A pytest plugin that times each fixture's set-up and each test's call: ``pytest -p bench.fixture_times``.

At the end of the session it prints, slowest first, every set-up or call that took a second or more: where a
module's wall time goes (a session fixture's start-up counts to the first test that asks for it). Figures
only; it changes nothing the tests do.
"""

from __future__ import annotations

import time
from collections.abc import Generator
from typing import Any

import pytest

_TIMES: list[tuple[float, str]] = []
MIN_SECONDS = 1.0


@pytest.hookimpl(hookwrapper=True)
def pytest_fixture_setup(fixturedef: pytest.FixtureDef[Any], request: pytest.FixtureRequest) -> Generator[None]:
    began = time.monotonic()
    yield
    took = time.monotonic() - began
    if took >= MIN_SECONDS:
        _TIMES.append((took, f"setup {fixturedef.scope:8} {fixturedef.argname} (first for {request.node.nodeid})"))


@pytest.hookimpl(hookwrapper=True)
def pytest_runtest_call(item: pytest.Item) -> Generator[None]:
    began = time.monotonic()
    yield
    took = time.monotonic() - began
    if took >= MIN_SECONDS:
        _TIMES.append((took, f"call           {item.nodeid}"))


@pytest.hookimpl(hookwrapper=True)
def pytest_runtest_teardown(item: pytest.Item) -> Generator[None]:
    began = time.monotonic()
    yield
    took = time.monotonic() - began
    if took >= MIN_SECONDS:
        _TIMES.append((took, f"teardown       {item.nodeid}"))


def pytest_terminal_summary(terminalreporter: Any) -> None:
    terminalreporter.section("fixture set-up and call times (>= 1 s)")
    for took, what in sorted(_TIMES, reverse=True):
        terminalreporter.write_line(f"{took:8.1f} s  {what}")
