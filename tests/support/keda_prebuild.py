"""KEDA built while the other tests run (issue 30): a pytest plugin, registered by tests/conftest.py.

The real KEDA's cold build (operator and metrics apiserver, then the HTTP add-on) takes ~25 min on 2 cores: in
``make setup`` it would lengthen every cold run by that much. Instead, once collection knows that the run has tests
marked ``keda_controller`` or ``keda_http`` and the cache lacks what they start, this plugin starts
``hack/build-binaries.sh keda [keda-http]`` in the background at nice 19 (devtools/qwen_fleet_dev/keda.py
BackgroundBuild): it takes the CPU the earlier tests leave idle and yields it to them when they want it.

The first KEDA test waits for the build before its own protocol begins (outside its pytest-timeout: a build is no
test's time), then its fixture's ``ensure_built`` finds the binaries (or, if the background build failed, builds
again itself and fails with the build's own error). A session that ends first stops the build; Go's build cache
keeps what it compiled. How long the build took, and how long the KEDA tests waited for it, is printed at the end.
With pytest-xdist each worker does the same; the cache lock makes one of them build and the others wait for it.
"""

from __future__ import annotations

import time
from collections.abc import Generator
from pathlib import Path

import pytest

from qwen_fleet_dev import keda, keda_http
from qwen_fleet_dev.binaries import cache_root

MARKERS = ("keda_controller", "keda_http")


def _needs(item: pytest.Item) -> set[str]:
    return {m for m in MARKERS if item.get_closest_marker(m) is not None}


class KedaPrebuild:
    def __init__(self, script: Path | None = None) -> None:
        self.script = script  # hack/build-binaries.sh unless given (a test's stand-in)
        self.build: keda.BackgroundBuild | None = None
        self.waited = 0.0

    def components(self, items: list[pytest.Item]) -> list[str]:
        """What the selected tests start and the cache lacks: ``keda``, and ``keda-http`` for keda_http tests."""
        marks = set().union(*(_needs(item) for item in items)) if items else set()
        out: list[str] = []
        if marks and keda.missing():
            out.append("keda")
        if "keda_http" in marks and keda_http.missing():
            out.append("keda-http")
        return out

    def pytest_collection_finish(self, session: pytest.Session) -> None:
        components = self.components(list(session.items))
        if not components or session.config.option.collectonly:
            return
        log = cache_root() / "logs" / "keda-background.log"
        self.build = keda.BackgroundBuild(components, log, script=self.script)
        reporter = session.config.pluginmanager.get_plugin("terminalreporter")
        if reporter is not None:
            reporter.write_line(f"keda-prebuild: {' and '.join(components)} not in the cache; building in the "
                                f"background at nice 19 while the other tests run (log: {log})")

    @pytest.hookimpl(wrapper=True, tryfirst=True)
    def pytest_runtest_protocol(self, item: pytest.Item, nextitem: pytest.Item | None) -> Generator[None, object,
                                                                                                    object]:
        # tryfirst: this wrapper is outside pytest-timeout's, so the wait is not the test's time.
        needs = _needs(item)
        if self.build is not None and needs and self.build.running():
            # A keda_controller test needs KEDA only: it goes on once that is built, while the add-on builds.
            began = time.monotonic()
            try:
                self.build.wait_until(lambda: not keda.missing()
                                      and ("keda_http" not in needs or not keda_http.missing()))
            finally:  # an interrupted wait counts too
                self.waited += time.monotonic() - began
        return (yield)

    def pytest_sessionfinish(self, session: pytest.Session) -> None:
        if self.build is not None:
            self.build.stop()

    def pytest_terminal_summary(self, terminalreporter: pytest.TerminalReporter) -> None:
        if self.build is None:
            return
        took = self.build.took()
        rc = self.build.proc.returncode
        done = (f"done in {took:.0f} s" if rc == 0 and took is not None
                else f"stopped or failed (exit {rc}; log: {self.build.log})")
        terminalreporter.write_line(f"keda-prebuild: the background build of {' and '.join(self.build.components)} "
                                    f"{done}; the KEDA tests waited {self.waited:.0f} s for it")
