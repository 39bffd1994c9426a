"""KEDA built in the background while the other tests run (tests/support/keda_prebuild.py, keda.BackgroundBuild):
what a selection needs built, and a background build's end, failure and stop."""

from __future__ import annotations

import os
import stat
import subprocess
import sys
import time
from pathlib import Path
from typing import Any, cast

import pytest

from qwen_fleet import versions
from qwen_fleet_dev import keda
from tests.support.keda_prebuild import KedaPrebuild


class _Item:
    def __init__(self, *marks: str) -> None:
        self.marks = set(marks)

    def get_closest_marker(self, name: str) -> Any:
        return name if name in self.marks else None


def _items(*items: _Item) -> list[pytest.Item]:
    return cast(list[pytest.Item], list(items))


def _fill(home: Path, bins: list[str], crds: int) -> None:
    (home / "bin").mkdir(parents=True)
    (home / "crds").mkdir()
    for name in bins:
        path = home / "bin" / name
        path.write_text("#!/bin/sh\n")
        path.chmod(0o755)
    for i in range(crds):
        (home / "crds" / f"c{i}.yaml").write_text("{}\n")


def test_a_selection_with_keda_tests_needs_what_the_cache_lacks(tmp_path: Path, monkeypatch: pytest.MonkeyPatch
                                                                ) -> None:
    monkeypatch.setenv("QF_CACHE", str(tmp_path))
    plugin = KedaPrebuild()
    plain, controller, http = _Item("cluster"), _Item("cluster", "keda_controller"), _Item("keda_http")
    assert plugin.components(_items(plain)) == []
    assert plugin.components([]) == []
    assert plugin.components(_items(plain, controller)) == ["keda"]
    assert plugin.components(_items(controller, http)) == ["keda", "keda-http"]

    _fill(tmp_path / "keda" / versions.KEDA, ["keda", "keda-adapter"], 6)
    assert plugin.components(_items(controller, http)) == ["keda-http"]
    _fill(tmp_path / "keda-http" / versions.KEDA_HTTP_ADDON,
          ["keda-http-interceptor", "keda-http-scaler", "keda-http-operator"], 2)
    assert plugin.components(_items(controller, http)) == []


def test_a_build_that_fails_says_so_in_its_exit_status_and_log(tmp_path: Path, monkeypatch: pytest.MonkeyPatch
                                                               ) -> None:
    monkeypatch.setenv("QF_CACHE", str(tmp_path / "cache"))
    build = keda.BackgroundBuild(["no-such-component"], tmp_path / "bg.log")
    assert build.wait() == 2
    assert "unknown component: no-such-component" in (tmp_path / "bg.log").read_text()
    took = build.took()
    assert took is not None and took >= 0


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    # A zombie is gone for our purpose (its parent, the script, was killed too and init reaps it).
    with open(f"/proc/{pid}/stat") as f:
        return f.read().rsplit(")", 1)[1].split()[0] != "Z"


def test_stop_ends_the_build_and_every_process_it_started(tmp_path: Path) -> None:
    script = tmp_path / "build.sh"
    pids = tmp_path / "pids"
    # A stand-in for build-binaries.sh: a child in the background (as go build's compilers), one in the foreground.
    script.write_text(f"#!/bin/sh\nsleep 600 & echo $! > {pids}\nsleep 600\n")
    script.chmod(script.stat().st_mode | stat.S_IXUSR)
    build = keda.BackgroundBuild(["keda"], tmp_path / "bg.log", script=script)
    deadline = time.monotonic() + 60
    while not (pids.exists() and pids.read_text().strip()):
        assert build.running() and time.monotonic() < deadline, (tmp_path / "bg.log").read_text()
        time.sleep(0.1)
    child = int(pids.read_text())
    assert build.running() and _alive(child)
    build.stop()
    assert not build.running() and build.proc.returncode != 0
    gone = time.monotonic() + 30
    while _alive(child) and time.monotonic() < gone:
        time.sleep(0.1)
    assert not _alive(child)


def test_a_test_that_needs_one_part_goes_on_once_that_part_is_built(tmp_path: Path) -> None:
    """wait_until returns when the caller's part is there (KEDA), while the build goes on (the add-on)."""
    script = tmp_path / "build.sh"
    part = tmp_path / "keda-done"
    script.write_text(f"#!/bin/sh\nsleep 1\ntouch {part}\nsleep 600\n")
    script.chmod(script.stat().st_mode | stat.S_IXUSR)
    build = keda.BackgroundBuild(["keda", "keda-http"], tmp_path / "bg.log", script=script)
    try:
        build.wait_until(part.exists, poll=0.1)
        assert part.exists() and build.running()
    finally:
        build.stop()
    # A build that ends without the part ends the wait too (the test's fixture then reports what is missing).
    failing = tmp_path / "fail.sh"
    failing.write_text("#!/bin/sh\nexit 3\n")
    failing.chmod(failing.stat().st_mode | stat.S_IXUSR)
    build = keda.BackgroundBuild(["keda"], tmp_path / "bg2.log", script=failing)
    build.wait_until(lambda: False, poll=0.1)
    assert not build.running() and build.proc.returncode == 3


def test_a_keda_test_waits_for_the_background_build_outside_its_timeout(tmp_path: Path) -> None:
    """An inner pytest session with the plugin: its one keda_controller test has a 1 s timeout and the stand-in build
    takes longer; the test passes (the wait is not its time) and the summary says how long the build took."""
    cache = tmp_path / "cache"
    home = cache / "keda" / versions.KEDA
    build = tmp_path / "build.sh"
    # The stand-in writes what keda.missing() looks for, after a while.
    build.write_text("#!/bin/sh\nsleep 4\n"
                     f"mkdir -p {home}/bin {home}/crds\n"
                     f"for b in keda keda-adapter; do touch {home}/bin/$b; chmod +x {home}/bin/$b; done\n"
                     f"for i in 1 2 3 4 5 6; do echo '{{}}' > {home}/crds/c$i.yaml; done\n")
    build.chmod(build.stat().st_mode | stat.S_IXUSR)
    inner = tmp_path / "inner"
    inner.mkdir()
    (inner / "pytest.ini").write_text("[pytest]\nmarkers =\n  keda_controller: x\n  keda_http: x\ntimeout = 1\n")
    (inner / "conftest.py").write_text(
        "from pathlib import Path\nfrom tests.support.keda_prebuild import KedaPrebuild\n\n"
        "def pytest_configure(config):\n"
        f"    config.pluginmanager.register(KedaPrebuild(script=Path({str(build)!r})), 'keda-prebuild')\n")
    (inner / "test_k.py").write_text(
        "import pytest\nfrom qwen_fleet_dev import keda\n\n@pytest.mark.keda_controller\n"
        "def test_built():\n    assert keda.missing() == []\n")
    root = Path(__file__).resolve().parents[2]
    env = {**os.environ, "QF_CACHE": str(cache), "PYTHONPATH": str(root), "QF_TEST_TIMES": "off"}
    out = subprocess.run([sys.executable, "-m", "pytest", "-p", "no:cacheprovider", "-q", str(inner)], cwd=inner,
                         env=env, capture_output=True, text=True, timeout=300)
    text = out.stdout + out.stderr
    assert out.returncode == 0, text
    assert "1 passed" in text and "keda-prebuild: keda not in the cache" in text, text
    assert "the background build of keda done in" in text, text
