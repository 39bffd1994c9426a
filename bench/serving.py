"""The serving benchmark's local target: ``make bench-serving`` (``python -m bench.serving``).

Same sweep, client, rule and table as ``qwen-fleet bench-serving`` (operator/qwen_fleet/servebench/), with a
local engine in place of a fleet: for each setting the tiny Qwen2 of the test suite (written at start,
tests/support/tiny_qwen.py) is served by the CPU engine venv on loopback, started from the Deployment the
operator renders for the suite's tiny fleet spec (tests/support/serving.py) with ``spec.engine``'s
``maxNumSeqs`` / ``maxNumBatchedTokens`` set to the setting, the patch the cluster target applies to a fleet.
A setting the spec's validation refuses is a row with the reason, as the apiserver would refuse it.

One engine at a time, and the client runs beside it on the same cores: on a small machine the client's
own CPU use is part of the figures (docs/bench-serving.md). Output: bench/results/serving-cpu-tiny.{md,json}.
"""

from __future__ import annotations

import argparse
import copy
import json
import os
import platform
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

from pydantic import ValidationError
from tests.support.serving import NAME, SPEC, rendered_server
from tests.support.tiny_qwen import make_tiny_qwen2, vllm_python

from qwen_fleet import versions
from qwen_fleet.api.messages import validation_message
from qwen_fleet.servebench.cli import add_sweep_arguments, print_row, sweep_inputs
from qwen_fleet.servebench.client import LAUNCHER, Workload, client_args, parse_result
from qwen_fleet.servebench.report import Report, run_sweep
from qwen_fleet.servebench.sweep import Row, Setting

RESULTS = Path(__file__).resolve().parent / "results"
# The tiny model's context is SPEC's maxModelLen (1024): input + output must fit in it.
TINY_WORKLOAD = Workload(input_len=128, output_len=64, num_prompts=64)
CLIENT_TIMEOUT_S = 1800
_DROP_ENV = ("PYTHONPATH", "PYTHONHOME", "VIRTUAL_ENV", "PYTEST_CURRENT_TEST", "PYTEST_ADDOPTS")


def spec_for(setting: Setting) -> dict[str, Any]:
    spec = copy.deepcopy(SPEC)
    spec["engine"].update(setting.engine_patch())
    return spec


class LocalTarget:
    def __init__(self, python: str, model_dir: Path, workdir: Path, workload: Workload) -> None:
        self.python, self.model_dir, self.workdir, self.workload = python, model_dir, workdir, workload

    def measure(self, setting: Setting) -> Row:
        stem = f"seqs{setting.max_num_seqs}-tokens{setting.max_num_batched_tokens}"
        try:
            server = rendered_server(self.python, self.model_dir, self.workdir / f"{stem}.vllm.log",
                                     spec=spec_for(setting))
        except ValidationError as err:
            return Row(setting, error=f"refused: {validation_message(err)}")
        try:
            server.start()
        except (RuntimeError, TimeoutError) as err:
            return Row(setting, error=f"engine did not start: {str(err).splitlines()[-1]}")
        try:
            return self._client(setting, server.base_url, stem)
        finally:
            server.stop()

    def _client(self, setting: Setting, base_url: str, stem: str) -> Row:
        args = client_args(self.workload, base_url, NAME, str(self.model_dir), str(self.workdir), f"{stem}.json")
        env = {k: v for k, v in os.environ.items() if k not in _DROP_ENV}
        env |= {"HF_HUB_OFFLINE": "1", "TRANSFORMERS_OFFLINE": "1", "VLLM_NO_USAGE_STATS": "1"}
        log = self.workdir / f"{stem}.client.log"
        with log.open("wb") as out:
            done = subprocess.run([self.python, "-c", LAUNCHER, *args], stdout=out, stderr=subprocess.STDOUT,
                                  env=env, cwd=self.workdir, timeout=CLIENT_TIMEOUT_S, check=False)
        if done.returncode != 0:
            tail = log.read_text(errors="replace").strip().splitlines()[-1:] or ["no output"]
            return Row(setting, error=f"vllm bench serve exited {done.returncode}: {tail[0]}")
        try:
            return Row(setting, parse_result(json.loads((self.workdir / f"{stem}.json").read_text())))
        except (OSError, ValueError) as err:
            return Row(setting, error=f"unreadable result: {err}")


def context() -> dict[str, Any]:
    return {"vllm": versions.VLLM, "cores": os.cpu_count(), "machine": platform.machine(),
            "date": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()),
            "engine": "tiny random-weight Qwen2 (tests/support/tiny_qwen.py) on the CPU engine venv"}


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    add_sweep_arguments(parser, "1,2,4,8,16", "128,512,2048", TINY_WORKLOAD)
    parser.add_argument("--workdir", help="engine and client logs, the tiny model (default: a temporary dir)")
    parser.set_defaults(results_dir=str(RESULTS), name="serving-cpu-tiny")
    args = parser.parse_args(argv)
    try:
        seqs, tokens, workload, rule = sweep_inputs(args)
    except ValueError as err:
        parser.error(str(err))
    workdir = Path(args.workdir or tempfile.mkdtemp(prefix="bench-serving-")).resolve()
    workdir.mkdir(parents=True, exist_ok=True)
    python = vllm_python()
    model = make_tiny_qwen2(workdir / "tiny-qwen2", python)
    target = LocalTarget(python, model, workdir, workload)
    rows = run_sweep(target.measure, args.mode, seqs, tokens, rule, on_row=print_row)
    report = Report("tiny Qwen2 on the vLLM CPU engine, local", args.mode, workload, rule, rows, context())
    md, js = report.write(Path(args.results_dir), args.name)
    print(report.to_markdown())
    print(f"written: {md} {js} (logs in {workdir})")
    return 0 if report.recommendation.setting is not None else 1


if __name__ == "__main__":
    sys.exit(main())
