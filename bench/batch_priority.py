"""Interactive time to first token while a QwenBatch runs through the fleet: ``make bench-batch``
(``python -m bench.batch_priority``), figures to bench/results/batch-priority.{json,md}.

One real vLLM CPU server, started from the Deployment the operator renders for the suite's tiny fleet spec
(tests/support/serving.py: ``engine.schedulingPolicy: priority`` renders ``--scheduling-policy priority``,
checked below), serving the suite's tiny Qwen2 (tests/support/tiny_qwen.py). Phases, one after the other on the
same server:

* **A, no batch**: the interactive client (bench/ttft_probe.py, a process of its own) sends ``--interactive``
  short streamed chat requests at a steady rate, priority 0 (no field), and records each TTFT;
* **B, batch at priority 10**: the batch runner, run as its Job runs it (the rendered Job's own command and flags,
  tests/support/batch_job.py) as a subprocess, sends ``--requests`` lines with the spec's defaults (concurrency 4,
  priority 10) while the same interactive client sends at the same rate until the batch ends;
* **C, the same batch at priority 0**: what a batch without priority does (the control).

With the spec's default concurrency (4) and the fleet's ``maxNumSeqs`` (8), the batch never fills the engine, so
no request waits and priority has nothing to reorder: B against C shows that, and B against A the cost of sharing
the engine. ``--saturating-concurrency`` (default 32, 0 to skip) adds **D** and **E**, the same pair with more
batch requests in flight than the engine runs, so that a queue forms and priority decides who leaves it first.

Figures are p50/p99 TTFT of the interactive requests *started while the batch ran* (A: all of them), the batch's
completed/failed counts (lines in output.jsonl / errors.jsonl) and wall time, and the ratios between phases; all
from the same run. Nothing here asserts a time. With few requests in a phase, p99 is about its slowest request.

Time on an idle 2-core machine (estimate, not measured here): engine start 1-2 min, the model 10 s, A 30 s,
each batch phase about 1-2 min of 1,000 requests of ~130 prompt and 16 output tokens: 7-10 min in all; pass
``--saturating-concurrency 0`` for about 4 minutes less.
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

from tests.support.batch_job import pod_containers, rendered_job, runner_step
from tests.support.serving import NAME, rendered_server
from tests.support.tiny_qwen import TinyQwen, make_tiny_model, vllm_python

from qwen_fleet import versions

RESULTS = Path(__file__).resolve().parent / "results"
PROBE = Path(__file__).resolve().parent / "ttft_probe.py"
BATCH_MAX_TOKENS = 16
INTERVAL_S = 0.5  # the interactive client's rate: 2 requests a second
INTERACTIVE_MAX_TOKENS = 16
WARMUP = 4


def batch_spec(priority: int | None, concurrency: int | None) -> dict[str, Any]:
    """A QwenBatch through the tiny fleet; None leaves the spec's default."""
    spec: dict[str, Any] = {"fleetRef": {"name": NAME},
                            "input": {"pvc": {"claimName": "batch-data", "path": "in/input.jsonl"}},
                            "output": {"pvc": {"claimName": "batch-data", "path": "out"}}}
    if priority is not None:
        spec["priority"] = priority
    if concurrency is not None:
        spec["concurrency"] = concurrency
    return spec


def write_input(path: Path, requests: int) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    text = "Quarterly report of the fleet: latency held, two nodes drained, one GPU replaced."
    with path.open("w") as out:
        for i in range(requests):
            body = {"model": NAME, "max_tokens": BATCH_MAX_TOKENS, "ignore_eos": True, "temperature": 0,
                    "messages": [{"role": "user", "content": f"Summarize ({i}): {text}"}]}
            out.write(json.dumps({"custom_id": f"doc-{i:05d}", "method": "POST", "url": "/v1/chat/completions",
                                  "body": body}) + "\n")


def probe(url: str, count: int, model: str = NAME) -> subprocess.Popen[str]:
    config = {"url": url, "model": model, "count": count, "interval": INTERVAL_S, "max_tokens": INTERACTIVE_MAX_TOKENS}
    return subprocess.Popen([sys.executable, str(PROBE), json.dumps(config)], text=True,
                            stdin=subprocess.PIPE if count <= 0 else subprocess.DEVNULL, stdout=subprocess.PIPE)


def probe_results(proc: subprocess.Popen[str]) -> list[dict[str, Any]]:
    out, _ = proc.communicate(timeout=600)  # closes stdin: a count-0 probe stops sending, finishes, reports
    if proc.returncode != 0:
        raise RuntimeError(f"the interactive client exited {proc.returncode}")
    requests: list[dict[str, Any]] = json.loads(out.strip().splitlines()[-1])["requests"]
    return requests


def ttft_summary(requests: list[dict[str, Any]]) -> dict[str, Any]:
    ttfts = sorted(r["ttft"] for r in requests if r["error"] is None)
    out: dict[str, Any] = {"n": len(requests), "failed": sum(1 for r in requests if r["error"] is not None)}
    if ttfts:
        cuts = statistics.quantiles(ttfts, n=100, method="inclusive") if len(ttfts) > 1 else ttfts * 99
        out |= {"p50_s": round(statistics.median(ttfts), 4), "p99_s": round(cuts[98], 4),
                "max_s": round(ttfts[-1], 4)}
    errors = [r["error"] for r in requests if r["error"] is not None]
    if errors:
        out["errors"] = errors[:3]
    return out


def _lines(path: Path) -> int:
    return len(path.read_text().splitlines()) if path.exists() else 0


def batch_phase(base_url: str, work: Path, input_file: Path, priority: int | None,
                concurrency: int | None) -> dict[str, Any]:
    """The rendered Job's runner against the server, with the interactive client beside it."""
    claim, pod_dir = work / "claim", work / "pod"
    claim.mkdir(parents=True)
    pod_dir.mkdir()
    (claim / "in").mkdir()
    (claim / "in" / "input.jsonl").write_bytes(input_file.read_bytes())
    (container,) = pod_containers(rendered_job(batch_spec(priority, concurrency)))
    step = runner_step(container, {"claim-0": claim, "work": pod_dir}, endpoint=base_url)
    args = step.argv
    flags = {"concurrency": args[args.index("--concurrency") + 1], "priority": args[args.index("--priority") + 1]}
    interactive = probe(base_url, 0)
    time.sleep(1.0)  # the client's first requests are out before the batch starts
    begin = time.time()
    with (work / "runner.log").open("wb") as log:
        code = subprocess.run(args, env=step.env, cwd=step.cwd, stdout=log, stderr=subprocess.STDOUT,
                              check=False).returncode
    end = time.time()
    requests = probe_results(interactive)
    during = [r for r in requests if begin <= r["start"] < end]
    return {"batch": {**flags, "exit_code": code, "completed": _lines(claim / "out" / "output.jsonl"),
                      "failed": _lines(claim / "out" / "errors.jsonl"), "seconds": round(end - begin, 1),
                      "argv": args[3:]},
            "interactive": ttft_summary(during)}


def ratio(a: dict[str, Any], b: dict[str, Any], key: str) -> float | None:
    return round(a[key] / b[key], 2) if key in a and key in b and b[key] else None


def run(args: argparse.Namespace, tmp: Path) -> dict[str, Any]:
    python = vllm_python()
    model = make_tiny_model(tmp / "model", TinyQwen(), python=python)
    input_file = tmp / "input.jsonl"
    write_input(input_file, args.requests)
    server = rendered_server(python, model, tmp / "vllm.log")
    argv = server.argv()
    if argv[argv.index("--scheduling-policy") + 1] != "priority":
        raise SystemExit(f"the rendered server does not schedule by priority: {argv}")
    phases: dict[str, dict[str, Any]] = {}
    with server:
        probe_results(probe(server.base_url, WARMUP))  # first requests warm the engine; not counted
        began = time.time()
        phases["A"] = {"label": "no batch", "interactive": ttft_summary(probe_results(probe(server.base_url,
                                                                                              args.interactive)))}
        phases["A"]["seconds"] = round(time.time() - began, 1)
        plan = [("B", "batch, priority 10 (spec default)", None, None), ("C", "batch, priority 0", 0, None)]
        if args.saturating_concurrency:
            plan += [("D", f"batch, priority 10, concurrency {args.saturating_concurrency}", None,
                      args.saturating_concurrency),
                     ("E", f"batch, priority 0, concurrency {args.saturating_concurrency}", 0,
                      args.saturating_concurrency)]
        for key, label, priority, concurrency in plan:
            phases[key] = {"label": label, **batch_phase(server.base_url, tmp / key, input_file, priority, concurrency)}
            print(key, json.dumps(phases[key]["interactive"]), json.dumps(phases[key]["batch"]["completed"]),
                  flush=True)
    a = phases["A"]["interactive"]
    ratios = {f"{k}/A p{q}": ratio(phases[k]["interactive"], a, f"p{q}_s") for k in phases if k != "A"
              for q in (50, 99)}
    for busy, calm in (("C", "B"), ("E", "D")):
        if busy in phases:
            ratios |= {f"{busy}/{calm} p{q}": ratio(phases[busy]["interactive"], phases[calm]["interactive"],
                                                    f"p{q}_s") for q in (50, 99)}
    return {"when": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()), "machine": platform.processor()
            or platform.machine(), "cpus": _cpus(), "vllm": versions.VLLM, "server_argv": argv[1:],
            "settings": {"batch_requests": args.requests, "batch_max_tokens": BATCH_MAX_TOKENS,
                         "interactive_requests_a": args.interactive, "interactive_interval_s": INTERVAL_S,
                         "interactive_max_tokens": INTERACTIVE_MAX_TOKENS},
            "engine_start_s": round(server.startup_seconds or 0.0, 1), "phases": phases, "ratios": ratios}


def _cpus() -> int:
    return len(os.sched_getaffinity(0))


def markdown(report: dict[str, Any]) -> str:
    s = report["settings"]
    rows = ["| phase | what | interactive n (failed) | TTFT p50 s | TTFT p99 s | batch completed | batch failed "
            "| batch s |", "|" + " --- |" * 8]
    for key, p in report["phases"].items():
        i, b = p["interactive"], p.get("batch", {})
        rows.append(f"| {key} | {p['label']} | {i['n']} ({i['failed']}) | {i.get('p50_s', '-')} | "
                    f"{i.get('p99_s', '-')} | {b.get('completed', '-')} | {b.get('failed', '-')} | "
                    f"{b.get('seconds', '-')} |")
    ratios = ", ".join(f"{k}: {v}" for k, v in report["ratios"].items())
    return (f"# Interactive TTFT during a QwenBatch (tiny Qwen2, vLLM {report['vllm']} CPU, "
            f"{report['cpus']} CPUs, {report['when']})\n\n"
            f"One server from the rendered Deployment (`--scheduling-policy priority`); batch of "
            f"{s['batch_requests']} chat requests ({s['batch_max_tokens']} output tokens) by the rendered Job's "
            f"runner; interactive client: streamed chat, {s['interactive_max_tokens']} tokens, one every "
            f"{s['interactive_interval_s']} s, its own process; TTFT of the requests started while the batch ran. "
            f"Produced by `make bench-batch` (bench/batch_priority.py).\n\n"
            + "\n".join(rows) + f"\n\nRatios of TTFT: {ratios}\n")


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0] if __doc__ else None)
    p.add_argument("--requests", type=int, default=1000, help="batch lines (default 1000)")
    p.add_argument("--interactive", type=int, default=60, help="interactive requests in phase A (default 60)")
    p.add_argument("--saturating-concurrency", type=int, default=32,
                   help="batch concurrency of phases D/E (above the engine's maxNumSeqs 8); 0 skips them")
    p.add_argument("--out", type=Path, default=RESULTS)
    args = p.parse_args(argv)
    tmp = Path(tempfile.mkdtemp(prefix="bench-batch-"))
    try:
        report = run(args, tmp)
    except BaseException:
        print(f"bench-batch failed; the engine's and the runners' logs are in {tmp}", file=sys.stderr)
        raise
    shutil.rmtree(tmp, ignore_errors=True)
    args.out.mkdir(parents=True, exist_ok=True)
    (args.out / "batch-priority.json").write_text(json.dumps(report, indent=2) + "\n")
    (args.out / "batch-priority.md").write_text(markdown(report))
    print(markdown(report))
    return 0


if __name__ == "__main__":
    sys.exit(main())
