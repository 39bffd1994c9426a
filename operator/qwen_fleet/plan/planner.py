"""Capacity judgement of a spec: the model fits the GPU, tensor size divides the heads, one sequence fits.

Placeholder until the capacity planner lands: reports nothing and blocks nothing.
"""

from __future__ import annotations

from qwen_fleet.api.resource import CapacityStatus, QwenInferenceSpec


def assess(spec: QwenInferenceSpec) -> tuple[CapacityStatus | None, list["Problem"], list[str]]:  # noqa: UP037
    return None, [], []


from qwen_fleet.plan import Problem  # noqa: E402
