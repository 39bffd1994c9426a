"""The webhook's decision (qwen_fleet.admission.review), without a server: what it refuses, what it never does."""

from __future__ import annotations

from typing import Any

import pytest

from qwen_fleet.admission import decide, review
from qwen_fleet.config import OperatorConfig

TOO_BIG = {"model": {"name": "Qwen/Qwen3.6-27B"}, "gpu": {"product": "NVIDIA-A10G"}}
FITS = {"model": {"name": "Qwen/Qwen3-4B-Instruct-2507"}, "gpu": {"product": "NVIDIA-A10G"},
        "engine": {"maxModelLen": 8192}}


def _request(operation: str, spec: dict[str, Any] | None, old: dict[str, Any] | None = None,
             **metadata: Any) -> dict[str, Any]:
    obj = {"metadata": {"name": "q", "namespace": "ns", **metadata}, "spec": spec}
    return {"uid": "u-1", "operation": operation, "object": obj if spec is not None else None,
            "oldObject": {"metadata": obj["metadata"], "spec": old} if old is not None else None}


def test_a_spec_the_planner_refuses_is_denied_with_the_stalled_reason_and_message() -> None:
    answer = review({"request": _request("CREATE", TOO_BIG)}, OperatorConfig())
    response = answer["response"]
    assert answer["kind"] == "AdmissionReview" and response["uid"] == "u-1" and response["allowed"] is False
    assert response["status"]["message"].startswith("WeightsDoNotFit: Qwen/Qwen3.6-27B needs")
    assert response["status"]["code"] == 422


def test_a_spec_that_fits_is_allowed() -> None:
    assert review({"request": _request("CREATE", FITS)}, OperatorConfig())["response"] == {"uid": "u-1",
                                                                                           "allowed": True}


@pytest.mark.parametrize("request_", [
    _request("UPDATE", TOO_BIG, old=TOO_BIG),  # a label or finalizer on an object stored while we were down
    _request("UPDATE", TOO_BIG, old=FITS, deletionTimestamp="2026-01-01T00:00:00Z"),
    _request("DELETE", None),
    _request("CONNECT", TOO_BIG),
])
def test_changes_that_leave_the_spec_alone_are_never_refused(request_: dict[str, Any]) -> None:
    assert decide(request_, OperatorConfig()) is None


def test_a_spec_change_to_something_worse_is_refused() -> None:
    refusal = decide(_request("UPDATE", {**FITS, "parallelism": {"tensor": 3}}, old=FITS), OperatorConfig())
    assert refusal is not None and refusal[0] == "TensorSizeDoesNotDivideHeads"


def test_a_spec_the_models_refuse_is_refused_as_invalid() -> None:
    refusal = decide(_request("CREATE", {"model": {"name": "x"}, "engine": {"extraArgs": ["--max-num-seq=4"]}}),
                     OperatorConfig())
    assert refusal is not None and refusal[0] == "InvalidSpec"
    assert "must not repeat a flag that a typed field owns" in refusal[1]


def test_seed_000_awq_on_the_2507_base_is_refused_at_apply_with_what_to_use() -> None:
    """Seed 000 sets quantization awq on Qwen/Qwen3-4B-Instruct-2507, a bfloat16 checkpoint: vLLM fails at load."""
    seed = {**FITS, "engine": {"maxModelLen": 8192, "quantization": "awq"}}
    refusal = decide(_request("CREATE", seed), OperatorConfig())
    assert refusal is not None
    reason, message = refusal
    assert reason == "QuantizationNotInCheckpoint"
    assert "Qwen/Qwen3-4B-Instruct-2507-FP8 (fp8)" in message and "engine.quantization fp8" in message
    on_the_fly = {**FITS, "engine": {"maxModelLen": 8192, "quantization": "fp8"}}
    assert decide(_request("CREATE", on_the_fly), OperatorConfig()) is None
