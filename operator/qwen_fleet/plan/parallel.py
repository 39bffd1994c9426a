"""The parallel layout of one replica: pods, GPUs per pod, data-parallel ranks, expert placement. Pure.

vLLM 0.32 lays its world out as (data, pipeline, tensor) ranks with tensor the fastest, and a multi-node
launch (``--nnodes N --node-rank k``) gives each node an equal, consecutive slice of that world. The layout
below follows the same order, so what ``qwen-fleet plan`` prints is where vLLM puts each rank.
"""

from __future__ import annotations

from dataclasses import dataclass

from qwen_fleet.catalog.types import ModelFacts
from qwen_fleet.plan.capacity import Problem


@dataclass(frozen=True)
class Layout:
    tensor: int = 1
    pipeline: int = 1
    data: int = 1
    expert: bool = False
    nodes: int = 1

    @property
    def gpus_per_replica(self) -> int:
        return self.tensor * self.pipeline * self.data

    @property
    def gpus_per_pod(self) -> int:
        return self.gpus_per_replica // self.nodes

    @property
    def rank_gpus(self) -> int:
        """GPUs of one data-parallel rank (one engine): tensor x pipeline."""
        return self.tensor * self.pipeline

    @property
    def data_ranks_per_pod(self) -> int:
        """vLLM's inferred --data-parallel-size-local: at least 1 when a rank spans pods."""
        return max(self.gpus_per_pod // self.rank_gpus, 1)

    @property
    def expert_size(self) -> int:
        return self.tensor * self.data if self.expert else 1

    @property
    def multi_node(self) -> bool:
        return self.nodes > 1

    def pod_ranks(self, pod: int) -> tuple[list[int], list[int]]:
        """The data-parallel ranks and pipeline stages pod ``pod`` holds."""
        first = pod * self.gpus_per_pod
        ranks = range(first, first + self.gpus_per_pod)
        data = sorted({r // self.rank_gpus for r in ranks})
        stages = sorted({(r // self.tensor) % self.pipeline for r in ranks})
        return data, stages


def expert_params_billion(model: ModelFacts) -> float:
    """Parameters in routed experts: total - active = the (E - k) experts a token does not use, so the
    whole expert set is (total - active) / (1 - k / E). Shared experts count as always active (not routed)."""
    if not model.num_experts or not model.experts_per_token or model.active_params_billion is None:
        return 0.0
    unused = model.params_billion - model.active_params_billion
    return unused / (1 - model.experts_per_token / model.num_experts)


def valid_expert_sizes(model: ModelFacts, max_size: int = 64) -> list[int]:
    return [n for n in range(2, max_size + 1) if model.num_experts and model.num_experts % n == 0]


def parallel_problems(model: ModelFacts, layout: Layout) -> list[Problem]:
    """Combinations the catalog can judge and the CRD cannot (it does not know the model)."""
    problems = []
    if layout.expert and not model.is_moe:
        problems.append(Problem(
            "ExpertParallelNeedsMoE",
            f"{model.name} is a dense model (no experts), so expert parallelism has nothing to spread (vLLM "
            "refuses it: 'Number of experts in the model must be greater than 0'); remove parallelism.expert "
            "and use parallelism.tensor, or more replicas for throughput."))
    elif layout.expert and model.num_experts and model.num_experts % layout.expert_size:
        sizes = ", ".join(map(str, valid_expert_sizes(model)[:8]))
        problems.append(Problem(
            "ExpertsNotDivisible",
            f"The {model.num_experts} experts of {model.name} do not divide over tensor x data = "
            f"{layout.expert_size} GPUs: some GPUs would hold more experts than others and bound every step; "
            f"choose tensor x data among {sizes}."))
    return problems


def parallel_warnings(model: ModelFacts, layout: Layout) -> list[str]:
    out = []
    if layout.data > 1 and not model.is_moe:
        out.append(f"parallelism.data {layout.data} on the dense {model.name}: vLLM accepts it, but its "
                   "data-parallel engines step in lockstep; replicas give the same throughput independently.")
    if layout.multi_node and layout.tensor > layout.gpus_per_pod:
        out.append(f"tensor-parallel size {layout.tensor} spans pods ({layout.gpus_per_pod} GPUs each): every "
                   "layer's all-reduce crosses the network; prefer tensor = GPUs per pod and pipeline across "
                   "pods.")
    return out


def format_layout(layout: Layout, layers: int | None = None) -> list[str]:
    """Human lines for ``qwen-fleet plan``: one per pod of a replica."""
    head = (f"layout: {layout.nodes} pod(s) per replica x {layout.gpus_per_pod} GPUs = "
            f"{layout.gpus_per_replica} GPUs (tensor {layout.tensor} x pipeline {layout.pipeline} x data "
            f"{layout.data}{f', experts over {layout.expert_size} GPUs' if layout.expert else ''})")
    lines = [head]
    for pod in range(layout.nodes):
        data, stages = layout.pod_ranks(pod)
        role = "" if not layout.multi_node else (" leader (API server)" if pod == 0 else " worker (headless)")
        per_stage = f", ~{-(-layers // layout.pipeline)} layers each" if layers and layout.pipeline > 1 else ""
        lines.append(f"  pod {pod}{role}: data ranks {_span(data)}, pipeline stages {_span(stages)}"
                     f"{per_stage}")
    return lines


def _span(values: list[int]) -> str:
    return str(values[0]) if len(values) == 1 else f"{values[0]}-{values[-1]}"
