"""`make bench`: control-plane startup, the operator at N = 100 and 1000 against the bare-client limit,
steady state, restart, a single change; and the autoscaling reaction. Results: bench/results/."""

from __future__ import annotations

import argparse
import json
import os
import platform
import statistics
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

from qwen_fleet import __version__, versions
from qwen_fleet_dev import binaries
from qwen_fleet_dev.cluster import LocalCluster

RESULTS = Path(__file__).resolve().parent / "results"


def machine() -> dict[str, Any]:
    mem = next(int(line.split()[1]) for line in Path("/proc/meminfo").read_text().splitlines()
               if line.startswith("MemTotal:"))
    model = next((line.split(":", 1)[1].strip() for line in Path("/proc/cpuinfo").read_text().splitlines()
                  if line.startswith("model name")), platform.processor())
    return {"cores": os.cpu_count(), "memory_gib": round(mem / 1024 / 1024, 1), "cpu": model,
            "python": platform.python_version(), "kernel": platform.release()}


def startup(runs: int = 3) -> dict[str, Any]:
    times = []
    for _ in range(runs):
        with tempfile.TemporaryDirectory() as tmp:
            cluster = LocalCluster(workdir=Path(tmp) / "c")
            try:
                cluster.start()
                times.append(round(cluster.startup_seconds or 0, 2))
            finally:
                cluster.stop()
    return {"runs": times, "median_seconds": statistics.median(times),
            "what": "etcd + kube-apiserver + controller-manager + scheduler + kwok + 11 fake nodes Ready, warm "
                    "binaries"}


def fleet(ns: list[int], timeout: float, steady: float, profile_dir: Path | None = None,
          settle: float = 45) -> dict[str, Any]:
    from bench import fleet as f

    out: dict[str, Any] = {}
    for n in ns:
        docs = f.resources(n)
        with tempfile.TemporaryDirectory() as tmp:
            bare = f.bare_limit(docs, Path(tmp) / "bare", timeout)
        with tempfile.TemporaryDirectory() as tmp:
            op = f.with_operator(docs, Path(tmp) / "op", timeout, steady, profile_dir, settle)
        ratio = op["burst"]["all_ready_seconds"] / bare["all_available_seconds"]
        out[str(n)] = {"n": n, "gpus": f.gpus_needed(docs), "bare_limit": bare, "operator": op,
                       "burst_ratio_operator_to_limit": round(ratio, 3)}
        print(json.dumps({n: out[str(n)]}, indent=1), flush=True)
    return out


def summary(results: dict[str, Any]) -> str:
    lines = ["# Benchmark results", "", f"Machine: {results['machine']['cores']} cores, "
             f"{results['machine']['memory_gib']} GiB, {results['machine']['cpu']}. Versions: "
             + ", ".join(f"{k} {v}" for k, v in results["versions"].items()) + f". Run: {results['when']}.", ""]
    if "startup" in results:
        lines += [f"Control plane startup (warm binaries): median {results['startup']['median_seconds']} s "
                  f"(runs {results['startup']['runs']}).", ""]
    if "fleet" in results:
        lines += ["| N | GPUs | bare limit: all Available (s) | operator: all Ready (s) | ratio | per-CR to "
                  "Deployment p50/p99 (s) | per-CR to Ready p50/p99 (s) | steady writes/min | steady CPU s/min | "
                  "RSS MiB | restart: verify all (s) | restart writes | single change (s) | writes per fleet: at all "
                  "Ready / 45 s later |",
                  "|" + "---|" * 14]
        for n, r in results["fleet"].items():
            op = r["operator"]
            b = op["burst"]
            lines.append(
                f"| {n} | {r['gpus']} | {r['bare_limit']['all_available_seconds']} | {b['all_ready_seconds']} | "
                f"{r['burst_ratio_operator_to_limit']} | {b['per_cr_to_deployment_seconds'].get('p50')}/"
                f"{b['per_cr_to_deployment_seconds'].get('p99')} | {b['per_cr_to_ready_seconds'].get('p50')}/"
                f"{b['per_cr_to_ready_seconds'].get('p99')} | {op['steady']['writes_per_minute']} | "
                f"{op['steady']['cpu_seconds_per_minute']} | {op['steady']['rss_mib']} | "
                f"{op['restart']['seconds_to_verify_all']} | {op['restart']['writes']} | "
                f"{op['single_change']['seconds_to_deployment_change']} | {b['operator_writes_per_fleet']} / "
                f"{b.get('settled', {}).get('operator_writes_per_fleet', '-')} |")
        lines.append("")
    if "autoscaling" in results:
        lines += ["Autoscaling: see autoscaling.json / autoscaling.png.", ""]
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--n", type=int, nargs="*", default=[100, 1000])
    parser.add_argument("--timeout", type=float, default=1800)
    parser.add_argument("--steady-seconds", type=float, default=60)
    parser.add_argument("--skip", nargs="*", default=[], choices=["startup", "fleet", "autoscaling"])
    parser.add_argument("--output", default=str(RESULTS / "fleet.json"))
    parser.add_argument("--profile-dir", type=Path, help="sample the operator with py-spy during each burst; raw "
                        "stacks land here, their summary (bench/profile.py) in the results")
    args = parser.parse_args(argv)
    binaries.ensure()
    results: dict[str, Any] = {
        "machine": machine(), "when": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()),
        "versions": {"qwen-fleet": __version__, "kubernetes": versions.KUBERNETES, "etcd": versions.ETCD,
                     "kwok": versions.KWOK, "vllm": versions.VLLM},
    }
    RESULTS.mkdir(parents=True, exist_ok=True)
    if "startup" not in args.skip:
        results["startup"] = startup()
        print(json.dumps(results["startup"]), flush=True)
    if "fleet" not in args.skip:
        if args.profile_dir is not None:
            args.profile_dir.mkdir(parents=True, exist_ok=True)
        results["fleet"] = fleet(args.n, args.timeout, args.steady_seconds, args.profile_dir)
    if "autoscaling" not in args.skip:
        from bench import autoscaling

        results["autoscaling"] = autoscaling.run(RESULTS)
    Path(args.output).write_text(json.dumps(results, indent=2) + "\n")
    Path(args.output).with_suffix(".md").write_text(summary(results) + "\n")
    print(summary(results))
    return 0


if __name__ == "__main__":
    sys.exit(main())
