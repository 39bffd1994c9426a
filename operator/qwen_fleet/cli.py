"""qwen-fleet: operator | render | plan | bench-serving | crd | batch-run | dev up/down | run."""

from __future__ import annotations

import argparse
import sys
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import yaml


class _NoAliasDumper(yaml.SafeDumper):
    def ignore_aliases(self, data: Any) -> bool:
        return True


def dump_yaml(docs: Sequence[Any]) -> str:
    return yaml.dump_all(docs, Dumper=_NoAliasDumper, sort_keys=False, width=120)


def fail(message: str, code: int = 1) -> int:
    print(f"qwen-fleet: {message}", file=sys.stderr)
    return code


def _load_docs(path: str) -> list[dict[str, Any]]:
    text = sys.stdin.read() if path == "-" else Path(path).read_text()
    return [d for d in yaml.safe_load_all(text) if d]


def cmd_crd(args: argparse.Namespace) -> int:
    from qwen_fleet.api.crd import render_yaml

    text = render_yaml(args.kind)
    if args.output:
        Path(args.output).write_text(text)
    else:
        sys.stdout.write(text)
    return 0


def cmd_render(args: argparse.Namespace) -> int:
    from pydantic import ValidationError

    from qwen_fleet.api import KIND, QwenInference
    from qwen_fleet.api.advice import rollout_warning
    from qwen_fleet.api.messages import validation_message
    from qwen_fleet.config import OperatorConfig
    from qwen_fleet.plan import make_plan
    from qwen_fleet.render import ALL_CAPABILITIES, Capabilities, render_children

    try:
        docs = _load_docs(args.file)
    except (OSError, yaml.YAMLError) as err:
        return fail(f"cannot read {args.file}: {err}")
    caps = Capabilities() if args.no_prometheus_operator else ALL_CAPABILITIES
    config = OperatorConfig.from_env()
    out: list[dict[str, Any]] = []
    errors = 0
    for doc in docs:
        if not isinstance(doc, dict) or doc.get("kind") != KIND:
            continue
        name = (doc.get("metadata") or {}).get("name", "?")
        if args.namespace and isinstance(doc.get("metadata"), dict):
            doc["metadata"].setdefault("namespace", args.namespace)
        try:
            cr = QwenInference.model_validate({k: v for k, v in doc.items() if k != "status"})
        except ValidationError as err:
            errors += 1
            print(f"qwen-fleet: {name}: invalid spec: {validation_message(err)}", file=sys.stderr)
            continue
        plan = make_plan(cr, config)
        if plan.problems:
            errors += 1
            for p in plan.problems:
                print(f"qwen-fleet: {name}: Stalled ({p.reason}): {p.message}", file=sys.stderr)
            continue
        for warning in plan.warnings:
            print(f"qwen-fleet: {name}: warning: {warning}", file=sys.stderr)
        if (rollout := rollout_warning(cr.spec)) is not None:
            print(f"qwen-fleet: {name}: warning: {rollout}", file=sys.stderr)
        out.extend(render_children(cr, plan, caps))
    if not out and not errors:
        return fail(f"no {KIND} found in {args.file}")
    if out:
        sys.stdout.write(dump_yaml(out))
    return 1 if errors else 0


def cmd_operator(args: argparse.Namespace) -> int:
    from qwen_fleet.reconcile.run import run_operator

    return run_operator(verbose=args.verbose)


def cmd_plan(args: argparse.Namespace) -> int:
    from qwen_fleet.plan.cli import plan_command

    return plan_command(args)


def cmd_bench_serving(args: argparse.Namespace) -> int:
    from qwen_fleet.servebench.cli import command

    return command(args)


DEV_TOOLS_MISSING = ("the local control plane is not part of this installation: it lives in devtools/ of the "
                     "repository (make venv installs it); the operator image does not ship it")


def cmd_dev(args: argparse.Namespace) -> int:
    try:
        from qwen_fleet_dev.cli import dev_command
    except ModuleNotFoundError as err:
        if err.name != "qwen_fleet_dev":
            raise
        return fail(DEV_TOOLS_MISSING)
    return dev_command(args)


def cmd_run(args: argparse.Namespace) -> int:
    try:
        from qwen_fleet_dev.demo import run_demo
    except ModuleNotFoundError as err:
        if err.name != "qwen_fleet_dev":
            raise
        return fail(DEV_TOOLS_MISSING)
    return run_demo(Path(args.example), keep=not args.once, real_node=args.real_node)


def cmd_batch_run(args: argparse.Namespace) -> int:
    from qwen_fleet.batchrun.cli import batch_run_command

    return batch_run_command(args)


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="qwen-fleet", description=__doc__)
    sub = parser.add_subparsers(dest="command", required=True)

    p = sub.add_parser("operator", help="run the operator against the current kubeconfig or in-cluster config")
    p.add_argument("-v", "--verbose", action="store_true")
    p.set_defaults(func=cmd_operator)

    p = sub.add_parser("render", help="print the objects the operator would apply for a QwenInference")
    p.add_argument("-f", "--file", required=True, help="QwenInference YAML (- for stdin)")
    p.add_argument("-n", "--namespace", default="default", help="namespace when the file names none")
    p.add_argument("--no-prometheus-operator", action="store_true",
                   help="render as for a cluster without the ServiceMonitor/PrometheusRule CRDs")
    p.set_defaults(func=cmd_render)

    p = sub.add_parser("plan", help="print the capacity planner's table for a spec or a model and GPU")
    p.add_argument("-f", "--file", help="QwenInference YAML")
    p.add_argument("--model", help="model repo id, e.g. Qwen/Qwen2.5-7B-Instruct")
    p.add_argument("--gpu", help="GPU product or short name, e.g. NVIDIA-A10G or a10g")
    p.add_argument("--max-model-len", type=int)
    p.add_argument("--gpu-memory-utilization", type=float)
    p.add_argument("--kv-cache-dtype")
    p.add_argument("--tensor-parallel", type=int, default=1)
    p.add_argument("--quantization")
    p.add_argument("--max-loras", type=int, default=0, help="LoRA adapters served at once (vLLM --max-loras)")
    p.add_argument("--max-lora-rank", type=int, default=16, help="largest adapter rank (vLLM --max-lora-rank)")
    layouts = p.add_argument_group("layouts that fit", "the smallest layouts for --model/--gpu (docs/planner.md)")
    layouts.add_argument("--max-gpus-per-node", type=int, default=8, help="GPUs one node has (default 8)")
    layouts.add_argument("--max-nodes", type=int, default=4, help="nodes one replica may span (default 4)")
    layouts.add_argument("--target-context", type=int, help="context every proposal must hold (default: "
                         "--max-model-len, else the native context or the longest that fits)")
    layouts.add_argument("--target-concurrency", type=int, help="sequences of that context held at once, over "
                         "all replicas (adds replicas)")
    daily = p.add_argument_group("daily volume", "replicas that finish a day's requests (docs/capacity.md)")
    daily.add_argument("--requests-per-day", type=int, help="requests to finish per day, e.g. 100000")
    daily.add_argument("--prompt-tokens", type=int, help="prompt tokens per request")
    daily.add_argument("--output-tokens", type=int, help="output tokens per request")
    daily.add_argument("--window-hours", type=float, default=24.0, help="hours the requests must finish in")
    daily.add_argument("--output-tokens-per-second-per-replica", type=float,
                       help="measured or stated decode throughput of one replica, all sequences together")
    daily.add_argument("--prefill-tokens-per-second-per-replica", type=float,
                       help="measured or stated prompt (prefill) throughput of one replica")
    daily.add_argument("--throughput-from", metavar="FILE",
                       help="a measured throughput instead: the JSON of `qwen-fleet bench-serving` (its recommended "
                            "setting) or of `vllm bench serve --save-result`, for requests of the same shape")
    daily.add_argument("--measured-replicas", type=int,
                       help="replicas that served the measured load (default: the report's context.replicas, else 1)")
    p.set_defaults(func=cmd_plan)

    p = sub.add_parser("bench-serving", help="sweep a fleet's maxNumSeqs / maxNumBatchedTokens with vllm bench serve "
                       "and recommend one (docs/bench-serving.md)")
    from qwen_fleet.servebench.cli import add_arguments as add_bench_arguments

    add_bench_arguments(p)
    p.set_defaults(func=cmd_bench_serving)

    p = sub.add_parser("crd", help="print (or write) the generated CustomResourceDefinition")
    p.add_argument("-o", "--output", help="write to this file instead of stdout")
    p.add_argument("--kind", choices=("QwenInference", "QwenBatch"), default="QwenInference")
    p.set_defaults(func=cmd_crd)

    p = sub.add_parser("batch-run", help="run a QwenBatch's requests (what its Job runs; docs/batch.md)")
    from qwen_fleet.batchrun.cli import add_arguments

    add_arguments(p)
    p.set_defaults(func=cmd_batch_run)

    p = sub.add_parser("dev", help="a local control plane with fake GPU nodes, for people")
    dev = p.add_subparsers(dest="dev_command", required=True)
    up = dev.add_parser("up", help="start it and print the kubeconfig path")
    up.add_argument("--dir", default=".dev/cluster")
    up.add_argument("--real-node", action="store_true",
                    help="add a real node (kubelet, containerd, kube-proxy) beside the fake GPU nodes")
    down = dev.add_parser("down", help="stop it")
    down.add_argument("--dir", default=".dev/cluster")
    p.set_defaults(func=cmd_dev)

    p = sub.add_parser("run", help="the demo: local cluster, CRD, operator, an example, its status")
    p.add_argument("--example", default="examples/qwen3-4b-instruct-a10g.yaml")
    p.add_argument("--once", action="store_true", help="exit once the example is Ready")
    p.add_argument("--real-node", action="store_true",
                   help="a real node, and the tiny Qwen2 served by the vLLM CPU image on it instead of the example")
    p.set_defaults(func=cmd_run)
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    try:
        return int(args.func(args))
    except KeyboardInterrupt:
        return 130


if __name__ == "__main__":
    sys.exit(main())
