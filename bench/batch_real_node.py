"""Interactive time to first token beside a QwenBatch, on the real node: ``make bench-batch-node``
(``python -m bench.batch_real_node``), figures to bench/results/batch-real-node.{json,md}.

Every part is the real one: a local control plane with a real kubelet node (containerd, runc, kube-proxy,
CoreDNS), the chart's operator pod (`helm install` of the locally built operator image), a one-replica CPU fleet
of the tiny Qwen2 served by the locally built vLLM image with ``engine.schedulingPolicy: priority``, and for
each batch phase a QwenBatch whose Job the operator renders and the Job controller runs on the node; its runner
calls the fleet as ``http://tiny.<namespace>.svc:8000`` (cluster DNS). The interactive client
(bench/ttft_probe.py, a process of its own on the host) sends short streamed chats through the Service's
ClusterIP at a steady rate (open loop), with no priority field (vLLM's 0), and records each TTFT.

Phases, one after the other on the same fleet pod:

* **A, no batch**: the interactive client alone;
* **B, batch at priority 10** (the spec's default), concurrency 4 (the default; the fleet runs 8 sequences);
* **C, the same at priority 0** (the control: a batch with no priority);
* **D, E**: B and C at ``--saturating-concurrency`` (default 32, 0 to skip): more batch requests in flight than
  the engine runs, so a queue forms and priority decides who leaves it first.

A phase's TTFTs are those of interactive requests *started while its batch ran*: from the first line in its
output.jsonl to the QwenBatch's Complete condition. Figures are p50/p99 TTFT, each batch's answered/failed lines,
its wall time and lines per second, and the ratios between phases of this one run. Nothing here asserts a time;
tests/node/test_real_batch.py checks the batch's correctness on the same parts.
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import tempfile
import time
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from tests.support.real_batch import (
    Written,
    batch_status,
    count_lines,
    data_volume,
    fleet_batch,
    output_dir,
    wait_for,
    write_input,
)

from bench.batch_priority import probe, probe_results, ratio, ttft_summary
from qwen_fleet import versions
from qwen_fleet_dev.cluster import LocalCluster
from qwen_fleet_dev.local_fleet import apply, cpu_fleet, model_volume, service_url, wait_for_answer

ROOT = Path(__file__).resolve().parents[1]
FLEET = "tiny"
NS = "batch-bench"


def _fleet(image: str) -> dict[str, Any]:
    fleet = cpu_fleet(FLEET, image)
    fleet["spec"]["engine"]["schedulingPolicy"] = "priority"
    return fleet


def batch_phase(cluster: LocalCluster, data: Path, url: str, name: str, priority: int,
                concurrency: int, requests: int) -> dict[str, Any]:
    """One QwenBatch through the fleet with the interactive client beside it."""
    out_path = f"out-{name}"
    output_dir(data, out_path)
    interactive = probe(url, 0, FLEET)
    time.sleep(1.0)
    applied = time.time()
    apply(cluster, NS, fleet_batch(name, FLEET, concurrency=concurrency, priority=priority, output_path=out_path))
    output = data / out_path / "output.jsonl"
    wait_for(f"{name}'s first answer", lambda: count_lines(output) > 0, 300, interval=0.1)
    begin = time.time()
    wait_for(f"{name} to end", lambda: batch_status(cluster, NS, name).get("state") in ("Complete", "Failed"),
             1800, interval=0.5)
    end = time.time()
    during = [r for r in probe_results(interactive) if begin <= r["start"] < end]
    status = batch_status(cluster, NS, name)
    written = Written.read(data, out_path)
    seconds = end - begin
    if len(written.output) != requests or written.duplicates():
        raise RuntimeError(f"{name}: {len(written.output)} of {requests} answered, {len(written.duplicates())} "
                           f"duplicated: {status}")
    return {"batch": {"priority": priority, "concurrency": concurrency, "state": status.get("state"),
                      "completed": len(written.output), "failed": len(written.errors),
                      "duplicates": len(written.duplicates()), "first_answer_after_apply_s": round(begin - applied, 1),
                      "seconds": round(seconds, 1), "lines_per_second": round(len(written.output) / seconds, 1)},
            "interactive": ttft_summary(during)}


def scenario(cluster: LocalCluster, data: Path, requests: int, interactive: int, saturating: int) -> dict[str, Any]:
    write_input(data, FLEET, requests, malformed=False)
    url = service_url(cluster, NS, FLEET)
    probe_results(probe(url, 4, FLEET))  # warm-up
    alone = probe_results(probe(url, interactive, FLEET))
    phases: dict[str, Any] = {"A": {"what": "no batch", "interactive": ttft_summary(alone)}}
    plan = [("B", 10, 4), ("C", 0, 4)]
    if saturating:
        plan += [("D", 10, saturating), ("E", 0, saturating)]
    for key, priority, concurrency in plan:
        result = batch_phase(cluster, data, url, f"phase-{key.lower()}", priority, concurrency, requests)
        phases[key] = {"what": f"batch, priority {priority}, concurrency {concurrency}", **result}
    ratios: dict[str, Any] = {}
    for a, b in (("B", "A"), ("C", "A"), ("C", "B"), ("D", "A"), ("E", "A"), ("E", "D")):
        if a in phases and b in phases:
            for key in ("p50_s", "p99_s"):
                ratios[f"{a}/{b} {key[:3]}"] = ratio(phases[a]["interactive"], phases[b]["interactive"], key)
    return {"phases": phases, "ratios": ratios}


def markdown(report: dict[str, Any]) -> str:
    rows = ["| phase | what | interactive n (failed) | TTFT p50 s | TTFT p99 s | batch answered | failed | "
            "duplicates | batch s | lines/s |", "| --- | --- | --- | --- | --- | --- | --- | --- | --- | --- |"]
    for key, phase in report["phases"].items():
        i, b = phase["interactive"], phase.get("batch")
        cells = [key, phase["what"], f"{i['n']} ({i['failed']})", i.get("p50_s", "-"), i.get("p99_s", "-")]
        cells += [b["completed"], b["failed"], b["duplicates"], b["seconds"], b["lines_per_second"]] if b \
            else ["-"] * 5
        rows.append("| " + " | ".join(str(c) for c in cells) + " |")
    ratios = ", ".join(f"{k}: {v}" for k, v in report["ratios"].items())
    return (f"# Interactive TTFT beside a QwenBatch on the real node (tiny Qwen2, vLLM {report['vllm']} CPU image, "
            f"{report['cpus']} CPUs, {report['when']})\n\n"
            f"{report['workload']} Produced by `make bench-batch-node` (bench/batch_real_node.py).\n\n"
            + "\n".join(rows) + f"\n\nRatios of TTFT: {ratios}\n")


def run(args: argparse.Namespace) -> dict[str, Any]:
    from tests.support.operator_chart import install_operator
    from tests.support.tiny_qwen import TinyQwen, make_tiny_model, vllm_python

    from qwen_fleet_dev import binaries
    from qwen_fleet_dev.engine_image import ensure_engine_image
    from qwen_fleet_dev.operator_image import ensure_operator_image

    binaries.ensure(real_node=True)
    with tempfile.TemporaryDirectory(prefix="qwen-fleet-bench-batch-node-") as tmp:
        work = Path(tmp)
        model = make_tiny_model(work / "model", TinyQwen(), python=vllm_python())
        engine, operator = ensure_engine_image(), ensure_operator_image()
        cluster = LocalCluster(workdir=work / "cluster", real_node=True)
        cluster.start()
        try:
            assert cluster.real_node is not None
            cluster.real_node.import_archive_dir(engine.archive)
            cluster.real_node.import_archive_dir(operator.archive)
            release = install_operator(cluster, operator)
            try:
                cluster.kubectl("create", "namespace", NS)
                data = work / "data"
                apply(cluster, NS, [*model_volume(NS, model), *data_volume(NS, data), _fleet(engine.tag)])
                wait_for_answer(cluster, NS, FLEET)
                out = scenario(cluster, data, args.requests, args.interactive, args.saturating_concurrency)
            finally:
                release.uninstall()
        finally:
            cluster.stop()
    out |= {"when": datetime.now(UTC).strftime("%Y-%m-%dT%H:%M:%SZ"), "vllm": versions.VLLM,
            "cpus": os.cpu_count(), "machine": platform.processor() or platform.machine(),
            "workload": (f"One fleet pod on the real node (`--scheduling-policy priority`, maxNumSeqs 8, 1 CPU); each "
                         f"batch {args.requests} chat requests of 16 output tokens, sent by the QwenBatch's Job "
                         "through the fleet's cluster DNS name; interactive client on the host: streamed chat, "
                         f"16 tokens, one every 0.5 s through the Service's ClusterIP ({args.interactive} in phase A); "
                         "TTFT of the requests started between a batch's first answer and its Complete.")}
    return out


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--requests", type=int, default=1000, help="lines per batch")
    parser.add_argument("--interactive", type=int, default=40, help="interactive requests with no batch (A)")
    parser.add_argument("--saturating-concurrency", type=int, default=32, help="D and E's concurrency (0: skip)")
    parser.add_argument("--results", type=Path, default=ROOT / "bench" / "results")
    args = parser.parse_args(argv)
    report = run(args)
    args.results.mkdir(parents=True, exist_ok=True)
    (args.results / "batch-real-node.json").write_text(json.dumps(report, indent=1) + "\n")
    (args.results / "batch-real-node.md").write_text(markdown(report))
    print(markdown(report))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
