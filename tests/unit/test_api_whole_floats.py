"""Integer fields written as whole floats (64.0): pydantic gives the apiserver's verdict and names the fix.

The apiserver's schema check takes 64.0 for an integer, but a CEL rule that reads it fails; a rule whose
`has()` guard stops first does not. The verdicts here are checked against the real apiserver in
tests/integration/test_crd_admission.py; these tests pin the message and the pieces.
"""

from __future__ import annotations

import json
from typing import Any

import pytest
from pydantic import ValidationError

from qwen_fleet.api import QwenInference
from qwen_fleet.api.base import FloatRead, WrittenAsFloat, cel_and
from qwen_fleet.api.messages import validation_message


def _validate(spec_json: str) -> QwenInference:
    body = ('{"apiVersion": "qwenfleet.io/v1alpha1", "kind": "QwenInference", "metadata": {"name": "f"}, '
            '"spec": {"model": {"name": "Qwen/Qwen3-4B-Instruct-2507"}, ' + spec_json + "}}")
    return QwenInference.model_validate(json.loads(body))


def _refusal(spec_json: str) -> str:
    with pytest.raises(ValidationError) as err:
        _validate(spec_json)
    return validation_message(err.value)


def test_a_rule_reading_a_whole_float_refuses_and_names_the_fix() -> None:
    assert _refusal('"engine": {"maxNumSeqs": 64.0, "maxNumBatchedTokens": 2048}') == (
        "spec.engine: maxNumSeqs is written 64.0: write it as 64 "
        "(the apiserver's CEL rules read 64.0 as a float and refuse it)")


def test_the_fuzz_finding_rope_scaling_is_refused() -> None:
    message = _refusal('"engine": {"ropeScaling": {"originalMaxPositionEmbeddings": 16.0, "factor": 8.25}}')
    assert message.startswith("spec.engine.ropeScaling: originalMaxPositionEmbeddings is written 16.0: "
                              "write it as 16"), message


def test_the_scale_subresource_reads_spec_replicas() -> None:
    assert _refusal('"replicas": 2.0').startswith("spec: replicas is written 2.0: write it as 2")


def test_a_quantitys_own_rule_reads_it() -> None:
    assert _refusal('"resources": {"cpu": 8.0}').startswith("spec.resources: cpu is written 8.0: write it as 8")


@pytest.mark.parametrize("spec_json", [
    '"engine": {"maxNumSeqs": 64.0}',  # the rule's has(self.maxNumBatchedTokens) is false first
    '"engine": {"ropeScaling": {"originalMaxPositionEmbeddings": 16.0}}',
    '"engine": {"shutdownTimeoutSeconds": 45.0}',  # no rule reads it
])
def test_a_whole_float_that_no_rule_reads_is_admitted_as_an_int(spec_json: str) -> None:
    written = _validate(spec_json)
    as_int = _validate(spec_json.replace(".0", ""))
    assert written == as_int
    assert written.model_dump() == as_int.model_dump()


def test_a_float_field_written_whole_is_read_as_a_float() -> None:
    # factor is a `number` in the CRD: CEL reads 8.0 without trouble.
    spec = _validate('"engine": {"ropeScaling": {"factor": 8.0, "originalMaxPositionEmbeddings": 16}}').spec
    assert spec.engine.rope_scaling is not None and spec.engine.rope_scaling.factor == 8.0


def test_cel_and_lets_a_false_term_win_over_an_unreadable_one() -> None:
    # maxSurge 1.0 beside the default maxUnavailable 1: `err && false` is false in CEL, so the rule holds.
    _validate('"rollout": {"maxSurge": 1.0}')
    assert "maxSurge is written 0.0" in _refusal('"rollout": {"maxSurge": 0.0, "maxUnavailable": 0}')


def test_written_as_float_is_present_but_unreadable() -> None:
    value: Any = WrittenAsFloat("tensor", 2.0)
    assert value is not None
    for use in (lambda: value == 2, lambda: value * 2, lambda: value >= 2, lambda: str(value),
                lambda: bool(value), lambda: value in (1, 2), lambda: int(value)):
        with pytest.raises(FloatRead, match=r"tensor is written 2\.0: write it as 2"):
            use()


def test_cel_and() -> None:
    def unreadable() -> bool:
        raise FloatRead("x")

    assert cel_and(lambda: True, lambda: True) is True
    assert cel_and(unreadable, lambda: False) is False
    assert cel_and(lambda: False, unreadable) is False
    with pytest.raises(FloatRead):
        cel_and(unreadable, lambda: True)
