"""Where the operator's time goes during a burst: py-spy's sampled stacks, summed by function and by component.

`record()` samples a running process with py-spy (collapsed "raw" stacks: one line per distinct stack, frames
separated by ';', the sample count last) until the block ends; `summarize()` reads such a file and answers two
questions: which functions are on-CPU themselves (self samples), and which components (kopf, the kubernetes
client, our render / plan / reconcile code, JSON, the HTTP stack, ...) hold the CPU, counting a sample once for
every component anywhere on its stack (inclusive) and once for the component of its innermost frame (self).
"""

from __future__ import annotations

import re
import signal
import subprocess
import sys
from collections import Counter
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

# The first pattern that matches a frame's file decides its component; order matters (our packages first).
COMPONENTS: tuple[tuple[str, str], ...] = (
    ("qwen_fleet.render", r"(^|/)qwen_fleet/render/"),
    ("qwen_fleet.plan", r"(^|/)qwen_fleet/plan/"),
    ("qwen_fleet.api (pydantic models)", r"(^|/)qwen_fleet/api/"),
    ("qwen_fleet.reconcile", r"(^|/)qwen_fleet/reconcile/"),
    ("qwen_fleet (other)", r"(^|/)qwen_fleet/"),
    ("kopf", r"(^|/)kopf/"),
    ("kubernetes client", r"(^|/)kubernetes/"),
    ("pydantic", r"(^|/)pydantic(_core)?/"),
    ("urllib3 / http", r"(^|/)(urllib3|http|aiohttp|multidict|yarl)/"),
    ("ssl", r"(^|/)ssl\.py"),
    ("json", r"(^|/)json/"),
    ("yaml", r"(^|/)yaml/"),
    ("asyncio", r"(^|/)asyncio/"),
    ("logging", r"(^|/)logging/"),
)
_FRAME = re.compile(r"^(?P<func>.*?) \((?P<file>[^()]*?)(?::(?P<line>\d+))?\)$")


def component(frame: str) -> str:
    match = _FRAME.match(frame.strip())
    where = match.group("file") if match else frame
    for name, pattern in COMPONENTS:
        if re.search(pattern, where):
            return name
    return "other"


def _function(frame: str) -> str:
    match = _FRAME.match(frame.strip())
    if not match:
        return frame.strip()
    return f"{match.group('func')} ({match.group('file')})"


def parse(text: str) -> list[tuple[list[str], int]]:
    """The (frames outermost first, samples) of each line of a py-spy raw file; malformed lines are skipped."""
    out = []
    for line in text.splitlines():
        stack, _, count = line.rstrip().rpartition(" ")
        if not stack or not count.isdigit():
            continue
        frames = [f for f in stack.split(";") if f and not f.startswith("process ") and not f.startswith("thread ")]
        out.append((frames, int(count)))
    return out


def summarize(text: str, top: int = 20) -> dict[str, Any]:
    stacks = parse(text)
    total = sum(n for _, n in stacks)
    self_fn: Counter[str] = Counter()
    self_comp: Counter[str] = Counter()
    incl_comp: Counter[str] = Counter()
    for frames, n in stacks:
        if not frames:
            continue
        self_fn[_function(frames[-1])] += n
        self_comp[component(frames[-1])] += n
        for comp in {component(f) for f in frames}:
            incl_comp[comp] += n

    def share(counter: Counter[str], limit: int | None = None) -> list[dict[str, Any]]:
        return [{"name": k, "samples": v, "percent": round(100 * v / total, 1) if total else 0.0}
                for k, v in counter.most_common(limit)]

    return {"samples": total, "self_by_component": share(self_comp), "inclusive_by_component": share(incl_comp),
            "self_by_function": share(self_fn, top)}


@contextmanager
def record(pid: int, path: Path, rate: int = 50) -> Iterator[Path]:
    """Sample ``pid`` with py-spy from entering the block to leaving it; the raw stacks land in ``path``."""
    spy = Path(sys.executable).with_name("py-spy")
    proc = subprocess.Popen([str(spy), "record", "--format", "raw", "-r", str(rate), "--nonblocking",
                             "-o", str(path), "-p", str(pid)], stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
    try:
        yield path
    finally:
        proc.send_signal(signal.SIGINT)  # py-spy writes what it sampled when interrupted
        try:
            proc.wait(timeout=60)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()
