"""``qwen-fleet bench-serving``: the arguments both targets share, and the cluster target's command."""

from __future__ import annotations

import argparse
import sys
import time
from pathlib import Path
from typing import Any

from qwen_fleet.servebench.client import Workload
from qwen_fleet.servebench.report import Report, run_sweep
from qwen_fleet.servebench.sweep import MODES, Row, Rule, check_ladder


def _ints(text: str) -> list[int]:
    try:
        return [int(part) for part in text.split(",") if part.strip()]
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected comma-separated integers, got {text!r}") from None


def add_sweep_arguments(parser: argparse.ArgumentParser, seqs: str, tokens: str, workload: Workload) -> None:
    """The sweep, load and rule arguments (the defaults differ between a GPU fleet and the tiny CPU model)."""
    sweep = parser.add_argument_group("sweep")
    sweep.add_argument("--mode", choices=MODES, default="climb",
                       help="climb: raise maxNumSeqs, then maxNumBatchedTokens, until output throughput is flat "
                            "(the seeds' loop); grid: every pair")
    sweep.add_argument("--max-num-seqs", type=_ints, default=_ints(seqs), help=f"ascending ladder (default {seqs})")
    sweep.add_argument("--max-num-batched-tokens", type=_ints, default=_ints(tokens),
                       help=f"ascending ladder (default {tokens})")
    sweep.add_argument("--flat-percent", type=float, default=5.0,
                       help="a step that raises output tokens/s by no more than this is no gain (default 5)")
    sweep.add_argument("--ttft-p99-slo-ms", type=float, help="p99 time to first token a recommendation must keep")
    load = parser.add_argument_group("load (vllm bench serve, random dataset)")
    load.add_argument("--input-len", type=int, default=workload.input_len)
    load.add_argument("--output-len", type=int, default=workload.output_len)
    load.add_argument("--num-prompts", type=int, default=workload.num_prompts)
    load.add_argument("--request-rate", type=float, default=workload.request_rate,
                      help="requests per second (default inf: all at once)")
    load.add_argument("--max-concurrency", type=int, default=workload.max_concurrency)
    load.add_argument("--seed", type=int, default=workload.seed)
    out = parser.add_argument_group("output")
    out.add_argument("--results-dir", default="bench/results")
    out.add_argument("--name", help="file name stem of the table (.md and .json)")


def sweep_inputs(args: argparse.Namespace) -> tuple[list[int], list[int], Workload, Rule]:
    """Checked ladders, load and rule; ValueError with a message for the user."""
    seqs = check_ladder("--max-num-seqs", args.max_num_seqs)
    tokens = check_ladder("--max-num-batched-tokens", args.max_num_batched_tokens)
    workload = Workload(input_len=args.input_len, output_len=args.output_len, num_prompts=args.num_prompts,
                        request_rate=args.request_rate, max_concurrency=args.max_concurrency, seed=args.seed)
    return seqs, tokens, workload, Rule(flat_percent=args.flat_percent, ttft_p99_slo_ms=args.ttft_p99_slo_ms)


def print_row(row: Row) -> None:
    if row.figures is None:
        print(f"{row.setting.label()}: {row.error}", flush=True)
    else:
        f = row.figures
        print(f"{row.setting.label()}: {f.output_throughput:.1f} output tok/s, {f.request_throughput:.2f} req/s, "
              f"p99 TTFT {f.p99_ttft_ms:.1f} ms, failed {f.failed}", flush=True)


def _replicas(fleet: dict[str, Any]) -> dict[str, int]:
    """The fleet's ready replicas as the sweep starts: `plan --throughput-from` divides the figures by it (a fleet
    that autoscales during the sweep makes that figure approximate; pin its replicas to measure)."""
    ready = (fleet.get("status") or {}).get("readyReplicas")
    return {"replicas": ready} if isinstance(ready, int) and not isinstance(ready, bool) and ready > 0 else {}


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("fleet", help="the QwenInference to tune (it must be Ready)")
    parser.add_argument("-n", "--namespace", default="default")
    parser.add_argument("--kubeconfig", help="default: $KUBECONFIG, ~/.kube/config, or in-cluster")
    parser.add_argument("--leave", choices=("original", "recommended"), default="original",
                        help="the engine setting the fleet keeps afterwards (default: what it had)")
    parser.add_argument("--ready-timeout", type=float, default=1800, help="seconds to wait for each rollout")
    parser.add_argument("--job-timeout", type=int, default=3600, help="seconds one client run may take")
    parser.add_argument("--api-key-secret", metavar="NAME[:KEY]",
                        help="a Secret of the namespace whose key the client sends (Authorization: Bearer), "
                             "through a secretKeyRef of its Job; without :KEY the Secret's first key in sorted "
                             "order. Default: the fleet's serving.apiKeySecretRef, if it has one")
    add_sweep_arguments(parser, "16,32,64,128,256", "2048,4096,8192", Workload())


def command(args: argparse.Namespace) -> int:
    from kubernetes import config

    from qwen_fleet.servebench.cluster import ClusterTarget, KeySecretProblem, parse_key_secret, resolve_api_key

    try:
        seqs, tokens, workload, rule = sweep_inputs(args)
        if args.api_key_secret is not None:
            parse_key_secret(args.api_key_secret)
    except ValueError as err:
        print(f"qwen-fleet bench-serving: {err}", file=sys.stderr)
        return 2
    from kubernetes.client.exceptions import ApiException
    from urllib3.exceptions import HTTPError

    try:
        if args.kubeconfig:
            api = config.new_client_from_config(config_file=args.kubeconfig)
        else:
            try:
                api = config.new_client_from_config()
            except config.ConfigException:
                config.load_incluster_config()
                from kubernetes import client

                api = client.ApiClient()
        target = ClusterTarget(api, args.namespace, args.fleet, workload, args.ready_timeout, args.job_timeout)
        fleet = target.get()
        original = (fleet.get("spec") or {}).get("engine") or {}
        target.api_key, said = resolve_api_key(target.core, args.namespace, fleet, args.api_key_secret)
        print(said, flush=True)
    except KeySecretProblem as err:
        print(f"qwen-fleet bench-serving: {err}", file=sys.stderr)
        return 2
    except config.ConfigException as err:
        print(f"qwen-fleet bench-serving: no usable kubeconfig: {err}", file=sys.stderr)
        return 2
    except ApiException as err:
        what = "not found" if err.status == 404 else f"{err.status} {err.reason}"
        print(f"qwen-fleet bench-serving: QwenInference {args.namespace}/{args.fleet}: {what}", file=sys.stderr)
        return 2
    except HTTPError as err:
        print(f"qwen-fleet bench-serving: cannot reach the API server: {err}", file=sys.stderr)
        return 2
    restore: dict[str, Any] = {k: original.get(k) for k in ("maxNumSeqs", "maxNumBatchedTokens")}
    rows: list[Row] = []
    try:
        rows = run_sweep(target.measure, args.mode, seqs, tokens, rule, on_row=print_row)
    finally:
        report = Report(f"QwenInference {args.namespace}/{args.fleet}", args.mode, workload, rule, rows,
                        {"date": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()), **_replicas(fleet)})
        chosen = report.recommendation.setting
        if args.leave == "recommended" and chosen is not None:
            restore = dict(chosen.engine_patch())
        target.patch_engine(restore)
        md, js = report.write(Path(args.results_dir), args.name or f"serving-{args.fleet}")
        print(report.to_markdown())
        print(f"written: {md} {js}; spec.engine left at {restore}")
    return 0 if report.recommendation.setting is not None else 1

