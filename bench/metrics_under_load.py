"""Does /metrics answer while the engine is busy? The queue-depth autoscaler depends on it.

One real vLLM CPU server from the operator's rendered Deployment (tests/support/serving.py), one burst of
24 concurrent 900-token completions against ``--max-num-seqs 8`` (16 wait), and a scraper in its own process
that reads /metrics every 100 ms, as Prometheus would. Measured for the operator's default
``VLLM_V1_OUTPUT_PROC_CHUNK_SIZE`` and for vLLM's own default (128), same server settings, same run:

* scrape latency (median, max) during the burst,
* how many scrapes started during the burst saw the queue (``vllm:num_requests_waiting`` > 0) or any running
  request, the signals the HPA reads,
* the burst's wall time (the price of yielding more often).

Each setting runs on a quiet machine and with two busy-looping processes beside the server ("contended"):
what a shared node, or the rest of a test suite, does to the API server. The starvation appears when the API
server turns outputs into responses more slowly than the engine makes them, which the contention provokes.

Run: ``.venv/bin/python -m bench.metrics_under_load`` (about 6 minutes); results in
bench/results/metrics-under-load.{json,md}. docs/vllm-contract.md ("Metrics under load") explains the cause.
"""

from __future__ import annotations

import json
import statistics
import subprocess
import sys
import tempfile
import time
import urllib.request
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

from tests.support.serving import rendered_server
from tests.support.tiny_qwen import TinyQwen, make_tiny_model, vllm_python

RESULTS = Path(__file__).resolve().parent / "results"
CHUNK = "VLLM_V1_OUTPUT_PROC_CHUNK_SIZE"
REQUESTS, MAX_TOKENS = 24, 900

# The scraper: its own interpreter, so the load generator's threads cannot delay it.
SCRAPER = r"""
import json, sys, time, urllib.request
url, seconds = sys.argv[1], float(sys.argv[2])
end = time.time() + seconds
while time.time() < end:
    start = time.time()
    body = urllib.request.urlopen(url, timeout=60).read().decode()
    got = {}
    for line in body.splitlines():
        for name in ("vllm:num_requests_running", "vllm:num_requests_waiting"):
            if line.startswith(name + "{"):
                got[name] = float(line.rsplit(" ", 1)[1])
    print(json.dumps({"start": start, "seconds": time.time() - start, **got}), flush=True)
    time.sleep(0.1)
"""


def completion(base_url: str, i: int) -> int:
    body = json.dumps({"model": "qwen-tiny", "prompt": f"request {i}", "max_tokens": MAX_TOKENS,
                       "ignore_eos": True}).encode()
    req = urllib.request.Request(base_url + "/v1/completions", body, {"Content-Type": "application/json"})
    with urllib.request.urlopen(req, timeout=600) as reply:
        reply.read()
        return int(reply.status)


HOG = "import time\nend = time.time() + 120\nwhile time.time() < end: pass\n"


def one_setting(python: str, model: Path, chunk: str | None, contended: bool, log: Path) -> dict[str, Any]:
    server = rendered_server(python, model, log)
    if chunk is None:
        server.extra_env.pop(CHUNK, None)  # vLLM's own default
    else:
        server.extra_env[CHUNK] = chunk
    with server:
        scraper = subprocess.Popen([sys.executable, "-c", SCRAPER, server.base_url + "/metrics", "60"],
                                   stdout=subprocess.PIPE, text=True)
        hogs = [subprocess.Popen([sys.executable, "-c", HOG]) for _ in range(2 if contended else 0)]
        time.sleep(1.0)
        begin = time.time()
        try:
            with ThreadPoolExecutor(REQUESTS) as pool:
                statuses = list(pool.map(lambda i: completion(server.base_url, i), range(REQUESTS)))
        finally:
            end = time.time()
            for hog in hogs:
                hog.kill()
        scraper.terminate()
        out, _ = scraper.communicate(timeout=30)
    samples = [json.loads(line) for line in out.splitlines() if line.strip()]
    during = [s for s in samples if begin <= s["start"] < end]
    latencies = [s["seconds"] for s in during] or [0.0]
    return {
        "chunk_size": chunk or "128 (vLLM default)",
        "machine": "contended (2 busy loops)" if contended else "quiet",
        "burst_seconds": round(end - begin, 2),
        "ok_requests": statuses.count(200),
        "scrapes_started_during_burst": len(during),
        "scrapes_seeing_queue": sum(1 for s in during if s.get("vllm:num_requests_waiting", 0) > 0),
        "scrapes_seeing_running": sum(1 for s in during if s.get("vllm:num_requests_running", 0) > 0),
        "scrape_seconds_median": round(statistics.median(latencies), 3),
        "scrape_seconds_max": round(max(latencies), 3),
    }


def main() -> None:
    python = vllm_python()
    rows = []
    with tempfile.TemporaryDirectory() as tmp:
        model = make_tiny_model(Path(tmp) / "model", TinyQwen(), python=python)
        for contended in (False, True):
            for chunk in (None, "4"):
                rows.append(one_setting(python, model, chunk, contended, Path(tmp) / f"vllm-{chunk}.log"))
    RESULTS.mkdir(exist_ok=True)
    (RESULTS / "metrics-under-load.json").write_text(json.dumps(rows, indent=2) + "\n")
    head = list(rows[0])
    lines = ["| " + " | ".join(head) + " |", "|" + " --- |" * len(head)]
    lines += ["| " + " | ".join(str(r[k]) for k in head) + " |" for r in rows]
    (RESULTS / "metrics-under-load.md").write_text(
        f"# /metrics during a burst ({REQUESTS} x {MAX_TOKENS}-token completions, --max-num-seqs 8)\n\n"
        + "\n".join(lines) + "\n")
    print("\n".join(lines))


if __name__ == "__main__":
    main()
