"""Shapes of the catalog's facts. Data lives beside this module; logic lives in ``qwen_fleet.plan``."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Literal

from qwen_fleet.catalog.mig import MigProfile
from qwen_fleet.catalog.serving import GENERIC, ServingFacts


@dataclass(frozen=True)
class LinearAttentionFacts:
    """Gated DeltaNet (linear attention) layer geometry: a fixed-size recurrent state per sequence."""

    num_key_heads: int
    num_value_heads: int
    key_head_dim: int
    value_head_dim: int
    conv_kernel_size: int


# Which weights a quantized checkpoint stores in its low-bit format; the rest stay in the model dtype.
#   linear:  every linear layer (attention, MLP, experts); embeddings, LM head, norms and a vision encoder stay
#   mlp:     the dense MLP of a dense model, the routed experts of a MoE model (attention, shared experts, MTP and
#            vision left at 16-bit, e.g. Qwen3.5 GPTQ-Int4's `dynamic` exclusions)
#   experts: the routed experts only (vLLM's experts_int8; MXFP4 and moe_wna16 as vLLM applies them to MoE layers)
QuantScope = Literal["linear", "mlp", "experts"]


@dataclass(frozen=True)
class QuantScheme:
    """How a checkpoint stores its quantized weights: its config.json ``quantization_config`` in numbers.

    Bits per quantized weight = ``weight_bits + (scale_bits + zero_bits) / group_size``: one scale (and, for
    asymmetric integer formats, one zero point) per group of ``group_size`` consecutive weights. ``group_size``
    None means one scale per output channel or per tensor: under 0.04 bit per weight for Qwen's widths, counted 0.
    """

    method: str  # vLLM's --quantization name of the format (config.json quant_method)
    weight_bits: int
    group_size: int | None = None
    scale_bits: int = 16
    zero_bits: int = 0
    scope: QuantScope = "linear"
    label: str = ""  # how people name it: "NVFP4", "W4A16 g128", "GPTQ-Int4"

    @property
    def bits_per_weight(self) -> float:
        if self.group_size is None:
            return float(self.weight_bits)
        return self.weight_bits + (self.scale_bits + self.zero_bits) / self.group_size


@dataclass(frozen=True)
class ModelFacts:
    """Architecture facts of one published model, each number traceable to ``sources``."""

    name: str  # Hugging Face repo id, e.g. "Qwen/Qwen3-4B-Instruct-2507"
    family: str  # "qwen3.6", "qwen3.5", "qwen3", "qwen2.5"
    params_billion: float  # total parameters (all experts), billions
    num_layers: int
    full_attention_layers: int  # layers that keep a per-token KV cache
    num_attention_heads: int
    num_kv_heads: int
    head_dim: int
    hidden_size: int
    vocab_size: int
    native_context: int
    active_params_billion: float | None = None  # MoE: parameters used per token
    num_experts: int | None = None
    experts_per_token: int | None = None
    linear_attention: LinearAttentionFacts | None = None  # hybrid models only
    tie_word_embeddings: bool = False
    dtype: str = "bfloat16"  # dtype of the published weights
    weight_quantization: str | None = None  # "awq", "gptq", "fp8" for pre-quantized repos
    # The pre-quantized repo's quantization_config (bits, groups, scales, which layers); None: not quantized.
    quant_scheme: QuantScheme | None = None
    aliases: tuple[str, ...] = ()
    sources: tuple[str, ...] = field(default=())
    # Hybrid models: every N-th layer is full attention (config.json `full_attention_interval`).
    full_attention_interval: int | None = None
    # Parameters in the published safetensors index, where known. Qwen3.5/3.6 cards round ("27B") and
    # count the language model only; the checkpoint also holds the vision encoder and the MTP layer,
    # which vLLM loads, so weight-memory planning should prefer this number when it is present.
    checkpoint_params_billion: float | None = None
    # Repo whose architecture this one reuses (pre-quantized or fine-tuned variants).
    base_model: str | None = None
    # Field names whose value was inherited or inferred rather than read from a source (see
    # docs/catalog.md); the planner may use them, a reviewer should re-check them first.
    unverified_fields: tuple[str, ...] = ()
    # Task, parsers, thinking switch and YaRN of the family (catalog/serving.py).
    serving: ServingFacts = GENERIC
    # MLP widths (config.json `intermediate_size`, `moe_intermediate_size`,
    # `shared_expert_intermediate_size`): the LoRA buffers vLLM preallocates are sized by them.
    intermediate_size: int | None = None  # dense MLP; unused by an all-MoE model
    moe_intermediate_size: int | None = None  # one routed expert
    shared_expert_intermediate_size: int | None = None  # the always-on shared expert, if any
    # Multimodal checkpoints: parameters of the vision encoder (and its patch mergers) inside the
    # checkpoint count; vLLM skips loading them with --language-model-only.
    vision_params_billion: float | None = None
    # Set when vLLM 0.32 cannot load the architecture at all: why, and what to serve instead.
    engine_unsupported: str | None = None

    @property
    def linear_attention_layers(self) -> int:
        return self.num_layers - self.full_attention_layers

    @property
    def is_moe(self) -> bool:
        return bool(self.num_experts)

    @property
    def is_hybrid(self) -> bool:
        return self.linear_attention is not None

    @property
    def tokenizer_family(self) -> str:
        """Models of one tokenizer family share their token ids (a draft model must share the target's): Qwen3.6
        kept Qwen3.5's 248,320-entry vocabulary; Qwen3-VL and Qwen3-Next use Qwen3's (151,669 tokens with the
        <think> tokens Qwen2.5's 151,665 lack)."""
        return _TOKENIZER_FAMILY.get(self.family, self.family)

    @property
    def is_multimodal(self) -> bool:
        return self.vision_params_billion is not None


_TOKENIZER_FAMILY = {"qwen3.6": "qwen3.5", "qwen3-vl": "qwen3", "qwen3-next": "qwen3"}


@dataclass(frozen=True)
class GpuFacts:
    """One GPU type as it appears on nodes (the ``nvidia.com/gpu.product`` label NVIDIA GFD sets)."""

    product: str  # e.g. "NVIDIA-H100-80GB-HBM3"
    memory_gib: float  # memory the driver reports, GiB
    short_name: str  # "H100-80GB"
    interconnect: str  # "NVLink 4 (900 GB/s)", "PCIe 4.0 x16"
    fp8: bool  # native FP8 tensor cores (Ada/Hopper and later)
    aliases: tuple[str, ...] = ()
    sources: tuple[str, ...] = ()
    # The `nvidia.com/gpu.memory` label: NVML total memory in MiB, exactly as GFD writes it.
    memory_mib: int | None = None
    # CUDA compute capability; FP8 tensor cores start at 8.9 (Ada), which `fp8` must agree with.
    compute_capability: tuple[int, int] | None = None
    # Nominal bidirectional GPU-to-GPU bandwidth per GPU, GB/s (NVLink if present, else PCIe).
    interconnect_gb_s: float | None = None
    nvlink: bool = False
    # MIG profiles NVIDIA documents for this GPU (catalog/mig.py); empty: no MIG, or none catalogued.
    mig_profiles: tuple[MigProfile, ...] = ()

    def mig_profile(self, name: str) -> MigProfile | None:
        return next((p for p in self.mig_profiles if p.name == name), None)
