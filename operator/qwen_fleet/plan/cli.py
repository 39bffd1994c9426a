"""``qwen-fleet plan``: the planner's table for a QwenInference file, or for --model/--gpu."""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

import yaml
from pydantic import ValidationError

from qwen_fleet.api import KIND, QwenInference
from qwen_fleet.catalog import all_gpus, find_gpu, find_model
from qwen_fleet.catalog.types import GpuFacts, ModelFacts
from qwen_fleet.plan import pool_view
from qwen_fleet.plan.advice import format_capacity_table, suggest_batching
from qwen_fleet.plan.capacity import Capacity, CapacityInput, plan_capacity, valid_tensor_sizes
from qwen_fleet.plan.daily import (
    DailyPlanError,
    DailyWork,
    ReplicaThroughput,
    allowed_concurrency,
    format_daily_plan,
    plan_daily,
)
from qwen_fleet.plan.measured import MeasurementError, measured_throughput
from qwen_fleet.plan.parallel import format_layout, parallel_problems, parallel_warnings
from qwen_fleet.plan.planner import (
    VLLM_DEFAULT_GPU_MEMORY_UTILIZATION,
    capacity_input,
    gpu_memory_gib,
    layout_of,
)
from qwen_fleet.plan.propose import Constraints, format_proposals, propose_layouts


def _print_details(caps: list[Capacity]) -> None:
    print(format_capacity_table(caps))
    for cap in caps:
        for problem in cap.problems:
            print(f"  {cap.input.model.name}: {problem.reason}: {problem.message}")
        for warning in cap.warnings:
            print(f"  {cap.input.model.name}: warning: {warning}")


def _daily_inputs(args: argparse.Namespace) -> tuple[DailyWork, ReplicaThroughput] | str | None:
    """The daily-volume question, if asked: None when not, a message when it cannot be answered."""
    if getattr(args, "requests_per_day", None) is None:
        return None
    if args.prompt_tokens is None or args.output_tokens is None:
        return "--requests-per-day needs --prompt-tokens and --output-tokens (tokens per request)"
    work = DailyWork(requests_per_day=args.requests_per_day, prompt_tokens=args.prompt_tokens,
                     output_tokens=args.output_tokens, window_hours=args.window_hours)
    if getattr(args, "throughput_from", None):
        measured = _measured(args, work)
        if isinstance(measured, str):
            return measured
        throughput = measured
    else:
        if getattr(args, "measured_replicas", None) is not None:
            return "--measured-replicas goes with --throughput-from"
        throughput = ReplicaThroughput(output_tokens_per_second=args.output_tokens_per_second_per_replica,
                                       prefill_tokens_per_second=args.prefill_tokens_per_second_per_replica)
    try:
        plan_daily(work, throughput)  # refuse before planning when the figures cannot answer
    except DailyPlanError as err:
        return str(err)
    return work, throughput


def _measured(args: argparse.Namespace, work: DailyWork) -> ReplicaThroughput | str:
    """One replica's throughput from a benchmark file (qwen_fleet.plan.measured), or why it cannot be had."""
    if args.output_tokens_per_second_per_replica is not None or args.prefill_tokens_per_second_per_replica is not None:
        return ("--throughput-from measures what the --...-tokens-per-second-per-replica flags state: "
                "give one or the other")
    source = args.throughput_from
    try:
        doc = json.loads(Path(source).read_text())
    except (OSError, ValueError) as err:
        return f"cannot read {source}: {err}"
    try:
        found = measured_throughput(doc, source, replicas=args.measured_replicas)
    except MeasurementError as err:
        return str(err)
    mismatch = found.shape_mismatch(work.prompt_tokens, work.output_tokens)
    if mismatch:
        return mismatch
    setting = f" at {found.setting} (give the fleet that engine setting)" if found.setting else ""
    return ReplicaThroughput(
        output_tokens_per_second=found.output_tokens_per_second_per_replica,
        seconds_per_request=found.seconds_per_request,
        measured=f"{source} ({found.target}): {found.requests_per_second:,.2f} requests/s over "
                 f"{found.replicas} replica(s){setting}")


def _print_daily(daily: tuple[DailyWork, ReplicaThroughput] | None, cap: Capacity) -> bool:
    """Print the daily-volume answer for one planned spec; True when its requests cannot run on it."""
    if daily is None or not cap.feasible:
        return False
    work, throughput = daily
    # each data-parallel engine has its own scheduler (max_num_seqs) and KV cache
    concurrency = cap.input.data_parallel * allowed_concurrency(
        max_num_seqs=cap.max_num_seqs, kv_cache_tokens=cap.kv_cache_tokens,
        prompt_tokens=work.prompt_tokens, output_tokens=work.output_tokens, max_model_len=cap.max_model_len)
    replica_gpus = cap.gpus * cap.input.data_parallel
    print(f"{cap.input.model.name}:")
    for line in format_daily_plan(plan_daily(work, throughput, concurrency=concurrency), replica_gpus):
        print(f"  {line}")
    return concurrency < 1


def _from_file(path: str, daily: tuple[DailyWork, ReplicaThroughput] | None = None) -> int:
    try:
        docs = [d for d in yaml.safe_load_all(Path(path).read_text()) if isinstance(d, dict) and d.get("kind") == KIND]
    except (OSError, yaml.YAMLError) as err:
        print(f"qwen-fleet: cannot read {path}: {err}", file=sys.stderr)
        return 1
    caps, refused = [], False
    for doc in docs:
        try:
            cr = QwenInference.model_validate({k: v for k, v in doc.items() if k != "status"})
        except ValidationError as err:
            print(f"qwen-fleet: {doc.get('metadata', {}).get('name')}: invalid spec: {err.errors()[0]['msg']}",
                  file=sys.stderr)
            return 1
        for view in _views(cr):
            memory = gpu_memory_gib(view.spec)
            inp = capacity_input(view.spec, memory or 0.0)
            if inp is None or memory is None:
                why = "model not in the catalog" if inp is None else "GPU memory unknown (gpu.product/memoryGiB)"
                print(f"{view.name}: {view.spec.model.name}: not planned: {why}")
                continue
            cap = plan_capacity(inp)
            caps.append(cap)
            refused |= _print_layout(view, cap)
            _print_fits(view, cap)
    if caps:
        _print_details(caps)
        for cap in caps:
            refused |= _print_daily(daily, cap)
    return 1 if refused or any(c.problems for c in caps) else 0


def _print_fits(cr: QwenInference, cap: Capacity) -> None:
    """For a spec that does not fit a catalog GPU: the smallest layouts that do, at its maxModelLen."""
    gpu = find_gpu(cr.spec.gpu.product) if cr.spec.gpu.product else None
    model = find_model(cr.spec.model.name)
    if gpu is None or model is None or not any(p.reason in _DOES_NOT_FIT for p in cap.problems):
        return
    limits = Constraints(context=cr.spec.engine.max_model_len, gpu_memory_utilization=cap.input.gpu_memory_utilization)
    found = propose_layouts(model, gpu, limits)
    print("  layouts that fit:" if found else "  layouts that fit: none within 4 nodes of 8 GPUs")
    for line in format_proposals(found, gpu):
        print(f"    {line}")


_DOES_NOT_FIT = ("WeightsDoNotFit", "NoMemoryForKVCache", "MaxModelLenExceedsKVCache")


def _views(cr: QwenInference) -> list[QwenInference]:
    """The fleet, or with spec.pools each pool as it is served (named <fleet>-<pool>): each is planned alone."""
    views = []
    for pool in cr.spec.pools:
        try:
            view = pool_view(cr, pool)
        except ValidationError as err:
            print(f"{cr.name}-{pool.name}: invalid pool: {err.errors()[0]['msg']}", file=sys.stderr)
            continue
        views.append(view.model_copy(update={"metadata": {**cr.metadata, "name": f"{cr.name}-{pool.name}"}}))
    return views if cr.spec.pools else [cr]


def _print_layout(cr: QwenInference, cap: Capacity) -> bool:
    """Where a replica's ranks sit and what each GPU holds; True when the layout itself is refused."""
    layout, model = layout_of(cr.spec), cap.input.model
    print(f"{cr.name}:")
    for line in format_layout(layout, model.num_layers):
        print(f"  {line}")
    gib = 1024**3
    lora = (f", LoRA {cap.lora_bytes_per_gpu / gib:.2f} GiB ({cap.input.max_loras} adapter(s) x rank "
            f"{cap.input.max_lora_rank})" if cap.lora_bytes_per_gpu else "")
    vision = cap.vision_bytes_per_gpu / gib
    encoder = ((f" (vision encoder {vision:.2f} GiB of them)" if cap.input.vision_encoder else
                f" (vision encoder {vision:.2f} GiB left out: language-model-only)") if vision else "")
    print(f"    per GPU: weights {cap.weight_bytes_per_gpu / gib:.2f} GiB{encoder}{lora}, KV cache "
          f"{cap.kv_cache_bytes_per_gpu / gib:.2f} GiB; per replica: {layout.data} engine(s) x "
          f"{cap.kv_cache_tokens:,} KV tokens")
    problems = parallel_problems(model, layout)
    for problem in problems:
        print(f"  {model.name}: {problem.reason}: {problem.message}")
    for warning in parallel_warnings(model, layout):
        print(f"  {model.name}: warning: {warning}")
    return bool(problems)


def plan_command(args: argparse.Namespace) -> int:
    daily = _daily_inputs(args)
    if isinstance(daily, str):
        print(f"qwen-fleet: {daily}", file=sys.stderr)
        return 2
    if args.file:
        return _from_file(args.file, daily)
    if not args.model or not args.gpu:
        print("qwen-fleet: plan needs -f FILE, or --model and --gpu", file=sys.stderr)
        return 2
    model, gpu = find_model(args.model), find_gpu(args.gpu)
    if model is None:
        print(f"qwen-fleet: {args.model} is not in the catalog (see docs/catalog.md)", file=sys.stderr)
        return 1
    if gpu is None:
        known = ", ".join(g.product for g in all_gpus())
        print(f"qwen-fleet: unknown GPU {args.gpu}; known: {known}", file=sys.stderr)
        return 1
    util = args.gpu_memory_utilization or VLLM_DEFAULT_GPU_MEMORY_UTILIZATION
    inp = CapacityInput(model=model, gpu_memory_gib=gpu.memory_gib, tensor_parallel=args.tensor_parallel,
                        gpu_memory_utilization=util, max_model_len=args.max_model_len,
                        kv_cache_dtype=args.kv_cache_dtype or "auto", quantization=args.quantization,
                        max_loras=args.max_loras, max_lora_rank=args.max_lora_rank)
    caps = [plan_capacity(inp)]
    print(f"{model.name} on {gpu.product} ({gpu.memory_gib:.1f} GiB), gpu_memory_utilization {util:g}")
    _print_details(caps)
    if caps[0].lora_bytes_per_gpu:
        print(f"LoRA buffers per GPU: {caps[0].lora_bytes_per_gpu / 1024**3:.2f} GiB ({args.max_loras} adapter(s) "
              f"x rank {args.max_lora_rank}), taken from the KV cache")
    print(f"tensor-parallel sizes that divide the heads: {valid_tensor_sizes(model)}")
    if caps[0].feasible:
        advice = suggest_batching(model, gpu, max_model_len=caps[0].max_model_len, gpu_memory_utilization=util,
                                  tensor_parallel=args.tensor_parallel, quantization=args.quantization,
                                  kv_cache_dtype=args.kv_cache_dtype or "auto")
        print(f"batching that fits: maxModelLen {advice.max_model_len}, maxNumSeqs {advice.max_num_seqs}, "
              f"maxNumBatchedTokens {advice.max_num_batched_tokens}")
        for note in advice.notes:
            print(f"  {note}")
    _print_proposals(model, gpu, args, util)
    if _print_daily(daily, caps[0]):
        return 1
    return 0 if caps[0].feasible else 1


def _print_proposals(model: ModelFacts, gpu: GpuFacts, args: argparse.Namespace, util: float) -> None:
    limits = Constraints(max_gpus_per_node=args.max_gpus_per_node, max_nodes=args.max_nodes,
                         context=args.target_context or args.max_model_len, concurrency=args.target_concurrency,
                         gpu_memory_utilization=util)
    proposals = propose_layouts(model, gpu, limits)
    if not proposals:
        print(f"layouts that fit: none within {limits.max_nodes} node(s) of {limits.max_gpus_per_node} "
              f"{gpu.short_name}; raise --max-nodes or --max-gpus-per-node, or lower --target-context")
        return
    print(f"layouts that fit (smallest first, gpu_memory_utilization {util:g}):")
    for line in format_proposals(proposals, gpu):
        print(f"  {line}")
    explicit = util if args.gpu_memory_utilization else None
    spec = proposals[0].spec(gpu, gpu_memory_utilization=explicit)
    print("spec of the first:")
    print("  " + yaml.safe_dump({"spec": spec}, sort_keys=False).rstrip().replace("\n", "\n  "))
