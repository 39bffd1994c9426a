"""The QwenInference v1alpha1 API: pydantic models that are the single source of the CRD schema."""

from qwen_fleet.api.base import ApiModel, Rule
from qwen_fleet.api.resource import (
    KIND,
    PLURAL,
    Condition,
    QwenInference,
    QwenInferenceSpec,
    QwenInferenceStatus,
)
from qwen_fleet.group import API_VERSION, GROUP, VERSION

__all__ = [
    "API_VERSION", "GROUP", "KIND", "PLURAL", "VERSION", "ApiModel", "Condition", "QwenInference",
    "QwenInferenceSpec", "QwenInferenceStatus", "Rule",
]
