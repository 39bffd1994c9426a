"""render/engine_args.py ``EngineSettings``: the one mapping from engine settings to vLLM flags, used by the
server's arguments and by a dedicated batch's ``vllm run-batch`` arguments.

The oracle for the flag names is the pinned vLLM's own parser table (catalog/vllm_flags.json, generated from
vLLM and checked for drift by tests/contract/test_vllm_flags.py); expected argument lists are written by hand.
"""

from __future__ import annotations

import dataclasses
import json
from importlib.resources import files
from typing import Any

from qwen_fleet.api.batch import QwenBatch
from qwen_fleet.render.batch import run_batch_args
from qwen_fleet.render.engine_args import EngineSettings

VLLM_OPTIONS = {o for f in json.loads(files("qwen_fleet.catalog").joinpath("vllm_flags.json").read_text())["flags"]
                for o in f["options"]}


def test_every_setting_names_one_flag_that_vllm_has() -> None:
    for f in dataclasses.fields(EngineSettings):
        assert len(set(f.metadata) & {"valued", "switch"}) == 1, f.name
        if "valued" in f.metadata:
            assert f.metadata["valued"] in VLLM_OPTIONS, f.name
        else:  # a switch is written either way round
            assert {f"--{f.metadata['switch']}", f"--no-{f.metadata['switch']}"} <= VLLM_OPTIONS, f.name


def test_unset_settings_write_nothing() -> None:
    assert EngineSettings().valued_args() == [] and EngineSettings().switch_args() == []


def test_valued_flags_in_order_and_switches_both_ways() -> None:
    s = EngineSettings(dtype="bfloat16", max_model_len=4096, gpu_memory_utilization=0.9, cpu_offload_gib=2.0,
                       enforce_eager=False, enable_chunked_prefill=True)
    assert s.valued_args() == ["--max-model-len", "4096", "--gpu-memory-utilization", "0.9", "--dtype", "bfloat16",
                               "--cpu-offload-gb", "2"]
    assert s.switch_args() == ["--no-enforce-eager", "--enable-chunked-prefill"]


def _batch(dedicated: dict[str, Any]) -> QwenBatch:
    return QwenBatch.model_validate({
        "metadata": {"name": "b", "namespace": "team", "uid": "u-b"},
        "spec": {"input": {"configMap": {"name": "in"}}, "output": {"pvc": {"claimName": "out", "path": "run-1"}},
                 "dedicated": dedicated}})


def test_run_batch_writes_the_same_flags_for_the_same_settings() -> None:
    args = run_batch_args(_batch({"model": "Qwen/Qwen3-4B-Instruct-2507", "gpus": 1, "maxNumSeqs": 8,
                                  "dtype": "float16", "enforceEager": True}))
    assert args == ["--model", "Qwen/Qwen3-4B-Instruct-2507", "--max-num-seqs", "8", "--dtype", "float16",
                    "--enforce-eager"]
    # enforceEager false is vLLM's default: not written for a batch.
    assert "--no-enforce-eager" not in run_batch_args(_batch({"model": "m", "gpus": 1, "enforceEager": False}))
