"""One lock per cache entry, and a progress line for each long set-up step: the Python side of hack/cache-lib.sh.

Two set-ups that share ``$QF_CACHE`` (two checkouts' ``make test``, CI beside a person) must not build one entry
at once: the second would delete or overwrite what the first is writing. Each entry (component and version: two
versions build side by side) has a lock file, ``$QF_CACHE/.locks/<entry>.lock``, taken with ``flock(2)``, the
call ``flock(1)`` makes in the shell scripts, so a Python build and a shell build of one entry wait for each
other too. The kernel drops the lock when its holder exits, however it exits: a killed build never leaves a stale
lock behind. Under the lock the entry is checked again, so a set-up that waited reuses what the first one built.

A step says what it is, why, and how long it took last time (``$QF_CACHE/.timings/<step>``, written when it
succeeds) or a stated cold estimate; then a heartbeat line while it runs, and its time when done.
"""

from __future__ import annotations

import contextlib
import fcntl
import os
import re
import sys
import threading
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import IO, TypeVar

from qwen_fleet_dev.binaries import cache_root

T = TypeVar("T")


def slug(name: str) -> str:
    """A file name for an entry or a step; the same as the shell's ``qf_slug`` (anything else becomes ``_``)."""
    return re.sub(r"[^A-Za-z0-9._-]", "_", name)


def lock_file(entry: str) -> Path:
    return cache_root() / ".locks" / f"{slug(entry)}.lock"


def timing_file(step: str) -> Path:
    return cache_root() / ".timings" / slug(step)


def duration(seconds: float) -> str:
    """``1m 05s`` or ``42s``, as the shell's ``qf_duration``."""
    s = int(seconds)
    return f"{s // 60}m {s % 60:02d}s" if s >= 60 else f"{s}s"


def say(message: str, out: IO[str] | None = None) -> None:
    print(f"[set-up {time.strftime('%H:%M:%S')}] {message}", file=out or sys.stderr, flush=True)


@contextlib.contextmanager
def cache_lock(entry: str, out: IO[str] | None = None) -> Iterator[None]:
    """Hold the entry's lock; says so when another set-up holds it and this one waits."""
    path = lock_file(entry)
    path.parent.mkdir(parents=True, exist_ok=True)
    with path.open("a") as handle:
        try:
            fcntl.flock(handle, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            say(f"waiting for another set-up that is building {entry} (lock: {path})", out)
            fcntl.flock(handle, fcntl.LOCK_EX)
            say(f"the other set-up finished with {entry}; checking what it left", out)
        try:
            yield
        finally:
            fcntl.flock(handle, fcntl.LOCK_UN)


def cached(entry: str, done: Callable[[], T | None], build: Callable[[], T], out: IO[str] | None = None) -> T:
    """``done()`` when it has the entry already (no lock), else ``build()`` under the entry's lock unless
    ``done()`` finds it there once the lock is held (another set-up built it meanwhile). ``build`` must leave the
    entry complete only by its last act (a rename, a ``.complete`` marker), so an interrupted one is redone."""
    found = done()
    if found is not None:
        return found
    with cache_lock(entry, out):
        found = done()
        return found if found is not None else build()


def last_time(step: str, cold: str) -> str:
    """``took 2m 10s last time (what)`` from the step's timing file, else ``cold: <cold>``."""
    try:
        seconds, _, what = timing_file(step).read_text().strip().partition(" ")
        took = f"took {duration(float(seconds))} last time"
        return f"{took} ({what})" if what else took
    except (OSError, ValueError):
        return f"cold: {cold}"


def heartbeat_seconds(out: IO[str]) -> float:
    explicit = os.environ.get("QF_HEARTBEAT_SECONDS")
    if explicit:
        return float(explicit)
    return 20.0 if out.isatty() else 60.0


@contextlib.contextmanager
def step(name: str, what: str, cold: str, why: str = "", entry: str = "", out: IO[str] | None = None,
         now: Callable[[], str] | None = None) -> Iterator[None]:
    """A long step: its start line (``what``, ``why``, last or cold time), a heartbeat (with ``now()``, e.g.
    bytes written so far), its time when done; the time is recorded for the next run only when it succeeds."""
    stream = out or sys.stderr
    say(f"{what}{f' ({why})' if why else ''}: starting, {last_time(name, cold)}", stream)
    started = time.monotonic()
    stop = threading.Event()

    def beat() -> None:
        interval = heartbeat_seconds(stream)
        while not stop.wait(interval):
            try:
                extra = f"; {now()}" if now is not None else ""
            except Exception as exc:  # a progress probe that fails must not end the heartbeat
                extra = f"; ({type(exc).__name__})"
            say(f"  ... {what}: {duration(time.monotonic() - started)} so far{extra}", stream)

    thread = threading.Thread(target=beat, name=f"heartbeat-{name}", daemon=True)
    thread.start()
    try:
        yield
    except BaseException:
        say(f"{what}: failed after {duration(time.monotonic() - started)}", stream)
        raise
    finally:
        stop.set()
        thread.join()
    took = time.monotonic() - started
    path = timing_file(name)
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(f"{int(took)} {entry or name}\n")
    say(f"{what}: done in {duration(took)}", stream)


def tree_bytes(path: Path) -> int:
    """Bytes of the regular files under ``path`` (a build's progress: what it has written so far)."""
    total = 0
    for root, _, files in os.walk(path):
        for name in files:
            with contextlib.suppress(OSError):
                total += os.lstat(os.path.join(root, name)).st_size
    return total


def size(n: float) -> str:
    for unit in ("B", "KB", "MB", "GB"):
        if n < 1000 or unit == "GB":
            return f"{n:.0f} {unit}" if unit == "B" else f"{n:.1f} {unit}"
        n /= 1000
    raise AssertionError("unreachable")
