"""The cache lock and the set-up's progress lines (hack/cache-lib.sh, devtools cachelock.py), on a fake cache entry.

The fake component is built by the real shell helper ``qf_cached`` (what build-binaries.sh, vllm-venv.sh and
real-node-deps.sh call) and by the real Python ``cachelock.cached`` (the image builds). The oracle is independent
of both: the test itself holds the entry's lock file with ``fcntl.flock`` so that every set-up it starts must wait,
and a journal the fake build appends to counts the builds.
"""

from __future__ import annotations

import fcntl
import io
import os
import re
import signal
import subprocess
import sys
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path

import pytest

from qwen_fleet_dev import cachelock

ROOT = Path(__file__).resolve().parents[2]
LIB = ROOT / "hack" / "cache-lib.sh"

# A fake component "fake" at version v1, built the way build-binaries.sh builds one: check, step line, scratch,
# the .complete marker last. FAKE_FAIL makes it fail midway; FAKE_HOLD makes it wait for the file FAKE_HOLD names.
SHELL_BUILD = r"""
set -euo pipefail
source "$1"
build_fake() {
  [ -f "$QF_CACHE/fake/v1/.complete" ] && return 0
  qf_step_start "fake v1" "a moment" "the test's stand-in"
  echo "begin shell $$" >> "$JOURNAL"
  rm -rf "$QF_CACHE/fake/v1"; mkdir -p "$QF_CACHE/fake/v1"
  echo "downloading fake-dependency v0.1.0"
  echo half > "$QF_CACHE/fake/v1/half-written"
  if [ -n "${FAKE_FAIL:-}" ]; then echo "fake compiler error"; exit 3; fi
  if [ -n "${FAKE_HOLD:-}" ]; then while [ ! -e "$FAKE_HOLD" ]; do sleep 0.05; done; fi
  rm "$QF_CACHE/fake/v1/half-written"
  touch "$QF_CACHE/fake/v1/.complete"
  echo "end shell $$" >> "$JOURNAL"
}
qf_cached fake/v1 fake build_fake
echo "ready: $QF_CACHE/fake/v1"
"""

PYTHON_BUILD = r"""
import os, sys
from pathlib import Path
from qwen_fleet_dev import cachelock
entry = Path(os.environ["QF_CACHE"]) / "fake" / "v1"
journal = Path(os.environ["JOURNAL"])
def done():
    return "found" if (entry / ".complete").exists() else None
def build():
    with journal.open("a") as f:
        f.write(f"begin python {os.getpid()}\n")
    entry.mkdir(parents=True, exist_ok=True)
    (entry / ".complete").touch()
    with journal.open("a") as f:
        f.write(f"end python {os.getpid()}\n")
    return "built"
print(cachelock.cached("fake/v1", done, build))
"""


@pytest.fixture
def cache(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    root = tmp_path / "cache"
    monkeypatch.setenv("QF_CACHE", str(root))
    monkeypatch.setenv("JOURNAL", str(tmp_path / "journal"))
    monkeypatch.setenv("QF_HEARTBEAT_SECONDS", "0.2")
    return root


@contextmanager
def held(lock: Path) -> Iterator[None]:
    """The entry's lock file held by the test itself (flock(2), independent of the helpers under test)."""
    lock.parent.mkdir(parents=True, exist_ok=True)
    with lock.open("a") as handle:
        fcntl.flock(handle, fcntl.LOCK_EX)
        yield
        fcntl.flock(handle, fcntl.LOCK_UN)


class Run:
    def __init__(self, argv: list[str], tmp: Path, name: str, env: dict[str, str] | None = None) -> None:
        self.stderr_path = tmp / f"{name}.stderr"
        self.stdout_path = tmp / f"{name}.stdout"
        with self.stderr_path.open("w") as err, self.stdout_path.open("w") as out:
            self.proc = subprocess.Popen(argv, stdout=out, stderr=err, env={**os.environ, **(env or {})},
                                         start_new_session=True)

    @property
    def stderr(self) -> str:
        return self.stderr_path.read_text()

    def wait_for(self, text: str, guard: float = 60) -> None:
        """Until ``text`` is on its stderr (``guard`` only stops a hang; the wait is for a state)."""
        deadline = time.monotonic() + guard
        while text not in self.stderr:
            assert self.proc.poll() is None, f"exited {self.proc.returncode} before {text!r}:\n{self.stderr}"
            assert time.monotonic() < deadline, f"no {text!r} in:\n{self.stderr}"
            time.sleep(0.05)

    def finish(self) -> int:
        return self.proc.wait(timeout=60)


def shell(tmp: Path, name: str, **env: str) -> Run:
    return Run(["bash", "-c", SHELL_BUILD, "fake-build", str(LIB)], tmp, name, env)


def python(tmp: Path, name: str) -> Run:
    env = {"PYTHONPATH": os.pathsep.join([str(ROOT / "devtools"), str(ROOT / "operator")])}
    return Run([sys.executable, "-c", PYTHON_BUILD], tmp, name, env)


def journal(tmp: Path) -> list[str]:
    path = tmp / "journal"
    return [line.split()[0] for line in path.read_text().splitlines()] if path.exists() else []


def _started_together(cache: Path, tmp: Path, make: list[Callable[[Path, str], Run]]) -> list[Run]:
    """Set-ups started while the lock is held (so each must wait), then the lock let go."""
    with held(cache / ".locks" / "fake_v1.lock"):
        runs = [start(tmp, f"run{i}") for i, start in enumerate(make)]
        for run in runs:
            run.wait_for("waiting for another set-up that is building fake/v1")
    assert [run.finish() for run in runs] == [0] * len(runs), [run.stderr for run in runs]
    return runs


def test_two_shell_set_ups_started_together_build_once_and_both_succeed(cache: Path, tmp_path: Path) -> None:
    runs = _started_together(cache, tmp_path, [shell, shell])
    assert journal(tmp_path) == ["begin", "end"]  # one build; the other found it done
    assert (cache / "fake" / "v1" / ".complete").exists()
    builders = [run for run in runs if "fake v1 (the test's stand-in): starting" in run.stderr]
    assert len(builders) == 1
    waiter = next(run for run in runs if run is not builders[0])
    assert "checking what it left" in waiter.stderr
    assert "fake v1: done in" not in waiter.stderr
    for run in runs:
        assert run.stdout_path.read_text() == f"ready: {cache}/fake/v1\n"


def test_a_shell_and_a_python_set_up_share_the_lock(cache: Path, tmp_path: Path) -> None:
    """A shell build and a Python build of one entry take the same lock file: one builds, one reuses."""
    runs = _started_together(cache, tmp_path, [shell, python])
    assert journal(tmp_path) == ["begin", "end"]
    outputs = [run.stdout_path.read_text() for run in runs]
    assert outputs in ([f"ready: {cache}/fake/v1\n", "found\n"], [f"ready: {cache}/fake/v1\n", "built\n"])


def test_a_failed_build_names_its_log_and_the_next_one_redoes_it_cleanly(cache: Path, tmp_path: Path) -> None:
    failed = shell(tmp_path, "failed", FAKE_FAIL="1")
    assert failed.finish() == 3
    log = cache / "logs" / "fake.log"
    assert f"the last 30 lines of {log}:" in failed.stderr
    assert "fake compiler error" in failed.stderr  # the log's tail, on the terminal
    assert not (cache / "fake" / "v1" / ".complete").exists()
    assert not (cache / ".timings" / "fake").exists()  # a failed build records no time
    again = shell(tmp_path, "again")
    assert again.finish() == 0, again.stderr
    assert sorted(p.name for p in (cache / "fake" / "v1").iterdir()) == [".complete"]
    assert journal(tmp_path) == ["begin", "begin", "end"]
    assert "cold: a moment" in again.stderr
    (cache / "fake" / "v1" / ".complete").unlink()
    third = shell(tmp_path, "third")
    assert third.finish() == 0
    assert re.search(r"fake v1 \(the test's stand-in\): starting, took \d+s last time \(fake/v1\)", third.stderr)


def test_a_killed_build_leaves_no_lock_and_no_complete_entry(cache: Path, tmp_path: Path) -> None:
    hold = tmp_path / "release"
    victim = shell(tmp_path, "victim", FAKE_HOLD=str(hold))
    victim.wait_for("fake v1 (the test's stand-in): starting")
    os.killpg(victim.proc.pid, signal.SIGKILL)
    victim.finish()
    assert not (cache / "fake" / "v1" / ".complete").exists()
    after = shell(tmp_path, "after")
    assert after.finish() == 0, after.stderr
    assert "waiting for another set-up" not in after.stderr
    assert sorted(p.name for p in (cache / "fake" / "v1").iterdir()) == [".complete"]


def test_the_heartbeat_shows_the_step_and_the_chatter_stays_in_the_log(cache: Path, tmp_path: Path) -> None:
    hold = tmp_path / "release"
    run = shell(tmp_path, "beating", FAKE_HOLD=str(hold))
    run.wait_for(" so far; now: downloading fake-dependency v0.1.0")
    hold.touch()
    assert run.finish() == 0
    lines = run.stderr.splitlines()
    assert not [line for line in lines if line.startswith("downloading")]
    assert "downloading fake-dependency v0.1.0" in (cache / "logs" / "fake.log").read_text()
    assert [line for line in lines if "  ... fake v1: " in line]
    assert "fake v1: done in" in lines[-1]


def test_python_step_records_its_time_only_when_it_succeeds(cache: Path) -> None:
    out = io.StringIO()
    with pytest.raises(RuntimeError), cachelock.step("image", "an image", "~3 min", out=out):
        raise RuntimeError("apt failed")
    assert "an image: starting, cold: ~3 min" in out.getvalue()
    assert "an image: failed after 0s" in out.getvalue()
    assert not cachelock.timing_file("image").exists()
    with cachelock.step("image", "an image", "~3 min", entry="images/x", out=out):
        pass
    assert cachelock.timing_file("image").read_text() == "0 images/x\n"
    assert cachelock.last_time("image", "~3 min") == "took 0s last time (images/x)"


def test_durations_and_sizes_read_as_the_shell_writes_them() -> None:
    assert [cachelock.duration(s) for s in (0, 59, 60, 65, 1263)] == ["0s", "59s", "1m 00s", "1m 05s", "21m 03s"]
    assert [cachelock.size(n) for n in (12, 1500, 6_100_000_000)] == ["12 B", "1.5 KB", "6.1 GB"]
    assert cachelock.slug("k8s-control-plane/v1.36.3") == "k8s-control-plane_v1.36.3"
    shell_slug = subprocess.run(["bash", "-c", f'source "{LIB}"; qf_slug "images/vllm-cpu 0.32"'],
                                capture_output=True, text=True, check=True).stdout
    assert shell_slug == cachelock.slug("images/vllm-cpu 0.32") == "images_vllm-cpu_0.32"


LOCK_FOR_SCRIPT = r"""
set -euo pipefail
source "$1"
qf_lock fake/v1
echo "begin $$" >> "$JOURNAL"
sleep 0.2
echo "end $$" >> "$JOURNAL"
"""


def test_qf_lock_holds_the_entry_until_the_script_exits(cache: Path, tmp_path: Path) -> None:
    """hack/third-party-crds.sh's form: the lock for the rest of a script that builds one entry."""
    def start(tmp: Path, name: str) -> Run:
        return Run(["bash", "-c", LOCK_FOR_SCRIPT, "locked", str(LIB)], tmp, name)

    _started_together(cache, tmp_path, [start, start])
    lines = (tmp_path / "journal").read_text().split()
    assert lines[0::2] == ["begin", "end", "begin", "end"]  # one after the other, never both inside
    assert lines[1] == lines[3] != lines[5] == lines[7]
