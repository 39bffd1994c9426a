"""Every preset from the seed documents exists as an example, and the planner judges it (feasible or not, and
why). The seeds: Qwen3-4B-Instruct-2507 max_num_seqs 256 / max_num_batched_tokens 4096 / block_size 16;
Qwen2.5-7B-Instruct on an A10G 64 / 2048 / gpu_memory_utilization 0.8; Qwen3-Reranker-0.6B 512 sequences,
max_model_len 1024, enforce_eager off."""

from __future__ import annotations

from pathlib import Path

import pytest
import yaml

from qwen_fleet.api import QwenInference
from qwen_fleet.config import OperatorConfig
from qwen_fleet.plan import make_plan

EXAMPLES = Path(__file__).resolve().parents[2] / "examples"


def _plan(name: str) -> tuple[QwenInference, object]:
    cr = QwenInference.model_validate(yaml.safe_load((EXAMPLES / name).read_text()))
    return cr, make_plan(cr, OperatorConfig())


@pytest.mark.parametrize(("file", "model", "seqs", "batched", "extra"), [
    ("qwen3-4b-instruct-a10g.yaml", "Qwen/Qwen3-4B-Instruct-2507", 256, 4096, {"block_size": 16}),
    ("qwen2.5-7b-instruct-a10g.yaml", "Qwen/Qwen2.5-7B-Instruct", 64, 2048, {"gpu_memory_utilization": 0.8}),
    ("qwen3-reranker-0.6b.yaml", "Qwen/Qwen3-Reranker-0.6B", 512, None, {"max_model_len": 1024,
                                                                         "enforce_eager": False}),
])
def test_seed_preset_is_an_example(file: str, model: str, seqs: int, batched: int | None,
                                   extra: dict[str, object]) -> None:
    cr, _ = _plan(file)
    engine = cr.spec.engine
    assert cr.spec.model.name == model
    assert (engine.max_num_seqs, engine.max_num_batched_tokens) == (seqs, batched)
    for field, value in extra.items():
        assert getattr(engine, field) == value


def test_qwen3_4b_preset_fits_an_a10g_but_256_long_sequences_do_not() -> None:
    _, plan = _plan("qwen3-4b-instruct-a10g.yaml")
    assert plan.feasible  # type: ignore[attr-defined]
    cap = plan.capacity  # type: ignore[attr-defined]
    assert cap.source == "catalog" and 7 < cap.weights_gi_b_per_gpu < 8  # 4.0B params in bf16
    assert cap.kv_bytes_per_token == 36 * 2 * 8 * 128 * 2  # 36 layers, K and V, 8 KV heads of 128, bf16
    assert 10 < cap.max_concurrent_sequences < 30  # 4,096-token sequences the cache holds at once
    assert any("max_num_seqs 256" in w for w in cap.warnings)


def test_qwen25_7b_preset_fits_an_a10g_with_little_kv_room() -> None:
    _, plan = _plan("qwen2.5-7b-instruct-a10g.yaml")
    assert plan.feasible  # type: ignore[attr-defined]
    cap = plan.capacity  # type: ignore[attr-defined]
    assert cap.kv_bytes_per_token == 57_344  # FACTS.md: 2 x 28 x 4 x 128 x 2 B
    assert 13 < cap.weights_gi_b_per_gpu < 15.5 and cap.kv_cache_gi_b_per_gpu < 5  # 0.8 x 22.5 GiB is tight
    assert cap.max_concurrent_sequences < 64  # the seed's 64 only holds for short sequences
    assert any("max_num_seqs 64" in w for w in cap.warnings)


def test_reranker_preset_fits_with_room() -> None:
    _, plan = _plan("qwen3-reranker-0.6b.yaml")
    assert plan.feasible  # type: ignore[attr-defined]
    cap = plan.capacity  # type: ignore[attr-defined]
    assert cap.weights_gi_b_per_gpu < 1.5
    assert 100 < cap.max_concurrent_sequences < 512  # not all 512 at full length, but most


def test_the_seed_7b_preset_with_full_context_does_not_fit_one_sequence() -> None:
    """The same preset with Qwen2.5-7B's native 32k context: one sequence no longer fits the KV cache."""
    doc = yaml.safe_load((EXAMPLES / "qwen2.5-7b-instruct-a10g.yaml").read_text())
    doc["spec"]["engine"]["maxModelLen"] = 131072
    cr = QwenInference.model_validate(doc)
    plan = make_plan(cr, OperatorConfig())
    assert not plan.feasible
    assert plan.problems[0].reason == "MaxModelLenExceedsKVCache"
    assert "131,072" in plan.problems[0].message or "131072" in plan.problems[0].message
