"""Tiny random-weight Qwen models for tests that run the real vLLM engine on CPU.

No weights can be downloaded in tests, so we write a model directory ourselves: ``config.json``,
``model.safetensors``, a byte-level BPE tokenizer with no merges and a ChatML chat template. The model
talks nonsense but exercises the real engine: loading, KV-cache sizing, scheduling, the HTTP API, metrics.

Two halves, because the two Python environments differ:

* the writer (``write_model``, run as ``python tests/support/tiny_qwen.py OUTDIR [--layers N ...]``) needs
  torch, safetensors, tokenizers and transformers, so it runs under the vLLM venv's python;
* ``make_tiny_qwen2`` / ``make_tiny_hybrid`` (called from the project venv) run that script in a
  subprocess, and ``TinyQwen.facts()`` gives the catalog's ``ModelFacts`` for the same geometry, so the
  capacity planner can be checked against what the engine reports.

Flavours:

* ``qwen3``: ``Qwen3ForCausalLM`` (no q/k/v biases, per-head q/k RMSNorm), with Qwen's added tokens
  ``<think>``, ``</think>``, ``<tool_call>``, ``</tool_call>`` (what vLLM's qwen3 reasoning parser and the
  tool parsers look up) and the plain tokens ``no`` / ``yes`` (what the Qwen3-Reranker conversion scores), and a
  chat template that honours ``enable_thinking`` as Qwen3's does. Served as a chat model, an embedding model
  (``--convert embed``) and a reranker (``Qwen3ForSequenceClassification`` over "no"/"yes").
* ``qwen2``: ``Qwen2ForCausalLM`` exactly as FACTS.md records (vocab 512, hidden 128, 2 layers, 2 heads,
  1 KV head, head_dim 64, q/k/v biases, tied embeddings, bfloat16); every number can be overridden.
* ``qwen3_moe``: ``Qwen3MoeForCausalLM``, Qwen3's attention with a tiny mixture of experts in every layer (no
  shared expert, as in Qwen3-30B-A3B and Qwen3-235B-A22B); weights from transformers' module tree, as the
  hybrids'. The model for expert parallelism on CPU (tests/contract/test_cpu_parallel.py).
* hybrids, Gated DeltaNet ``linear_attention`` layers interleaved with ``full_attention`` layers
  (every ``full_attention_interval``-th layer): ``qwen3_next`` (``Qwen3NextForCausalLM``, with a tiny
  mixture of experts) and ``qwen3_5`` (``Qwen3_5ForCausalLM``, the dense text tower of Qwen3.5). Their
  weights come from transformers' own module tree, so the parameter names are the published ones.
  vLLM 0.32's ``qwen3_5`` module imports its vision tower, which needs torchvision, which the vLLM venv
  leaves out (FACTS.md), so only ``qwen3_next`` loads there; see docs/capacity.md.
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import subprocess
import sys
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:  # the writer side (vLLM venv) has no qwen_fleet on its path
    from qwen_fleet.catalog.types import ModelFacts

REPO_ROOT = Path(__file__).resolve().parents[2]

# kind -> (architecture in config.json, model_type)
ARCHITECTURES = {
    "qwen2": ("Qwen2ForCausalLM", "qwen2"),
    "qwen3": ("Qwen3ForCausalLM", "qwen3"),
    "qwen3_moe": ("Qwen3MoeForCausalLM", "qwen3_moe"),
    "qwen3_next": ("Qwen3NextForCausalLM", "qwen3_next"),
    "qwen3_5": ("Qwen3_5ForCausalLM", "qwen3_5_text"),
}

SPECIAL_TOKENS = ("<|endoftext|>", "<|im_start|>", "<|im_end|>")
# qwen3 flavour only, added after SPECIAL_TOKENS (so the ids above do not move). Qwen's tokenizer has the
# first four as added, non-special tokens; "no" and "yes" are single tokens of Qwen's vocabulary.
QWEN3_ADDED_TOKENS = ("<think>", "</think>", "<tool_call>", "</tool_call>", "no", "yes")
# The Qwen ChatML template, reduced to what a test needs (no tools, no system-prompt default).
CHATML_TEMPLATE = (
    "{% for message in messages %}"
    "{{ '<|im_start|>' + message['role'] + '\n' + message['content'] + '<|im_end|>' + '\n' }}"
    "{% endfor %}"
    "{% if add_generation_prompt %}{{ '<|im_start|>assistant\n' }}{% endif %}"
)
# Qwen3's switch, reduced: with enable_thinking false the template writes an empty think block into the prompt.
QWEN3_TEMPLATE = CHATML_TEMPLATE.replace(
    "{{ '<|im_start|>assistant\n' }}",
    "{{ '<|im_start|>assistant\n' }}{% if enable_thinking is defined and enable_thinking is false %}"
    "{{ '<think>\n\n</think>\n\n' }}{% endif %}",
)


@dataclass(frozen=True)
class TinyQwen:
    """Geometry of a tiny model. Defaults are FACTS.md's tiny Qwen2."""

    kind: str = "qwen2"  # "qwen2", "qwen3", "qwen3_moe", "qwen3_next" or "qwen3_5"
    layers: int = 2
    hidden: int = 128
    intermediate: int = 256
    heads: int = 2
    kv_heads: int = 1
    head_dim: int = 64  # 16 fails in the CPU attention kernel; 64 works
    vocab: int = 512
    max_position: int = 4096
    dtype: str = "bfloat16"
    seed: int = 0
    # hybrid only: every ``full_attention_interval``-th layer is full attention, the rest Gated DeltaNet
    full_attention_interval: int = 4
    linear_key_heads: int = 1
    linear_value_heads: int = 2
    linear_key_head_dim: int = 128  # the CPU GDN kernel rejects 32 ("Unexpected head dim size, 32")
    linear_value_head_dim: int = 128
    linear_conv_kernel: int = 4
    # qwen3_next and qwen3_moe: a tiny mixture of experts in every layer (qwen3_next adds a shared expert)
    experts: int = 4
    experts_per_token: int = 2
    moe_intermediate: int = 64
    shared_expert_intermediate: int = 64
    # qwen3_next only: multi-token-prediction layers (``mtp.*`` weights, as the published checkpoints ship
    # them), which vLLM's speculative method "mtp" drafts with
    mtp_layers: int = 0

    def __post_init__(self) -> None:
        if self.kind not in ARCHITECTURES:
            raise ValueError(f"kind must be one of {sorted(ARCHITECTURES)}, not {self.kind!r}")
        if self.mtp_layers and self.kind != "qwen3_next":
            raise ValueError("mtp_layers: only the qwen3_next flavour writes MTP weights")

    @property
    def architecture(self) -> str:
        return ARCHITECTURES[self.kind][0]

    @property
    def is_hybrid(self) -> bool:
        return self.kind not in ("qwen2", "qwen3", "qwen3_moe")

    @property
    def is_moe(self) -> bool:
        return self.kind in ("qwen3_moe", "qwen3_next")

    @property
    def layer_types(self) -> list[str]:
        if not self.is_hybrid:
            return ["full_attention"] * self.layers
        return [
            "full_attention" if (i + 1) % self.full_attention_interval == 0 else "linear_attention"
            for i in range(self.layers)
        ]

    def params(self) -> int:
        """Parameter count of the weights this module writes (embeddings tied, so counted once)."""
        h, hd = self.hidden, self.head_dim
        attn = h * self.heads * hd + 2 * h * self.kv_heads * hd + self.heads * hd * h
        if self.kind == "qwen2":
            attn += self.heads * hd + 2 * self.kv_heads * hd  # q/k/v biases
        elif self.kind in ("qwen3", "qwen3_moe"):
            attn += 2 * hd  # q/k RMSNorm, no biases
        else:
            attn += self.heads * hd * h + 2 * hd  # q_proj doubled (output gate), q/k RMSNorm
        mlp = 3 * h * self.intermediate
        if self.kind == "qwen3_next":
            mlp = (
                self.experts * (h + 3 * h * self.moe_intermediate)  # router row + expert per expert
                + 3 * h * self.shared_expert_intermediate
                + h  # shared_expert_gate
            )
        if self.kind == "qwen3_moe":
            mlp = self.experts * (h + 3 * h * self.moe_intermediate)  # router row + expert per expert
        linear = self._linear_attention_params()
        per_type = {"full_attention": attn, "linear_attention": linear}
        layers = sum(per_type[t] + mlp + 2 * h for t in self.layer_types)
        return self.vocab * h + layers + h

    def _linear_attention_params(self) -> int:
        if not self.is_hybrid:
            return 0
        h = self.hidden
        k = self.linear_key_heads * self.linear_key_head_dim
        v = self.linear_value_heads * self.linear_value_head_dim
        conv_dim = 2 * k + v
        return (
            h * conv_dim  # in_proj_qkv
            + h * v  # in_proj_z
            + 2 * h * self.linear_value_heads  # in_proj_b, in_proj_a
            + conv_dim * self.linear_conv_kernel  # depthwise conv1d, no bias
            + 2 * self.linear_value_heads  # dt_bias, A_log
            + self.linear_value_head_dim  # gated RMSNorm
            + v * h  # out_proj
        )

    def facts(self, name: str = "qwen-fleet/tiny") -> ModelFacts:
        """The catalog's view of this model, for the capacity planner."""
        from qwen_fleet.catalog.types import LinearAttentionFacts, ModelFacts

        linear = None
        if self.is_hybrid:
            linear = LinearAttentionFacts(
                num_key_heads=self.linear_key_heads,
                num_value_heads=self.linear_value_heads,
                key_head_dim=self.linear_key_head_dim,
                value_head_dim=self.linear_value_head_dim,
                conv_kernel_size=self.linear_conv_kernel,
            )
        return ModelFacts(
            name=name,
            family={"qwen2": "qwen2.5", "qwen3": "qwen3", "qwen3_moe": "qwen3", "qwen3_next": "qwen3-next",
                    "qwen3_5": "qwen3.5"}[self.kind],
            params_billion=self.params() / 1e9,
            num_layers=self.layers,
            full_attention_layers=self.layer_types.count("full_attention"),
            num_attention_heads=self.heads,
            num_kv_heads=self.kv_heads,
            head_dim=self.head_dim,
            hidden_size=self.hidden,
            vocab_size=self.vocab,
            native_context=self.max_position,
            linear_attention=linear,
            num_experts=self.experts if self.is_moe else None,
            experts_per_token=self.experts_per_token if self.is_moe else None,
            tie_word_embeddings=True,
            dtype=self.dtype,
            sources=("tests/support/tiny_qwen.py",),
        )

    def cli_args(self) -> list[str]:
        args: list[str] = []
        for f in dataclasses.fields(self):
            value = getattr(self, f.name)
            if value != f.default:
                args += [f"--{f.name.replace('_', '-')}", str(value)]
        return args


# ---------------------------------------------------------------------------------------------------------
# Project-venv side: run the writer under the vLLM venv's python.


def vllm_python() -> str:
    """Path of the vLLM venv's python; builds the venv (minutes, once) when it is missing."""
    out = subprocess.run(
        ["bash", str(REPO_ROOT / "hack" / "vllm-venv.sh")], check=True, capture_output=True, text=True
    )
    return out.stdout.strip().splitlines()[-1]


def make_tiny_model(directory: Path, spec: TinyQwen, python: str | None = None) -> Path:
    """Write ``spec``'s model into ``directory`` (created) and return the directory."""
    directory = Path(directory)
    cmd = [python or vllm_python(), str(Path(__file__).resolve()), str(directory), *spec.cli_args()]
    done = subprocess.run(cmd, capture_output=True, text=True, timeout=600, check=False)
    if done.returncode != 0:
        raise RuntimeError(f"writing tiny model failed ({done.returncode}):\n{done.stderr[-4000:]}")
    return directory


def make_tiny_qwen2(directory: Path, python: str | None = None, **overrides: Any) -> Path:
    """FACTS.md's tiny Qwen2 (any geometry field overridable, e.g. ``layers=4``)."""
    return make_tiny_model(directory, TinyQwen(kind="qwen2", **overrides), python)


def make_tiny_qwen3(directory: Path, python: str | None = None, **overrides: Any) -> Path:
    """A tiny Qwen3ForCausalLM with Qwen's think / tool-call tokens and "no" / "yes" (any geometry overridable)."""
    return make_tiny_model(directory, TinyQwen(kind="qwen3", **overrides), python)


def make_tiny_qwen3_moe(directory: Path, python: str | None = None, **overrides: Any) -> Path:
    """A tiny Qwen3MoeForCausalLM: 4 experts of which 2 per token in each of 2 layers (any field overridable)."""
    return make_tiny_model(directory, TinyQwen(kind="qwen3_moe", **overrides), python)


def make_tiny_hybrid(
    directory: Path, python: str | None = None, kind: str = "qwen3_next", **overrides: Any
) -> Path:
    """A tiny hybrid (Gated DeltaNet layers, every fourth layer full attention); 4 layers by default."""
    return make_tiny_model(directory, TinyQwen(kind=kind, **{"layers": 4, **overrides}), python)


# ---------------------------------------------------------------------------------------------------------
# Writer side: runs under the vLLM venv (torch, safetensors, tokenizers, transformers).


def write_model(directory: Path, spec: TinyQwen) -> None:
    directory.mkdir(parents=True, exist_ok=True)
    eos_id = int(len(pre_tokenizers_alphabet()) + SPECIAL_TOKENS.index("<|im_end|>"))
    config = {"qwen2": qwen2_config, "qwen3": qwen3_config, "qwen3_moe": qwen3_moe_config}.get(
        spec.kind, hybrid_config)(spec, eos_id)
    if spec.kind in ("qwen2", "qwen3"):
        from safetensors.torch import save_file

        save_file(qwen2_weights(spec), str(directory / "model.safetensors"), metadata={"format": "pt"})
    else:
        save_module_tree_weights(directory, spec, config)
    # Written after the weights: save_pretrained writes a config.json of its own.
    if spec.kind in ("qwen3", "qwen3_moe"):
        assert write_tokenizer(directory, QWEN3_ADDED_TOKENS, QWEN3_TEMPLATE) == eos_id
    else:
        assert write_tokenizer(directory) == eos_id
    (directory / "config.json").write_text(json.dumps(config, indent=2) + "\n")
    (directory / "generation_config.json").write_text(
        json.dumps({"bos_token_id": eos_id - 2, "eos_token_id": eos_id, "do_sample": False}, indent=2) + "\n"
    )


def pre_tokenizers_alphabet() -> list[str]:
    from tokenizers import pre_tokenizers

    return sorted(pre_tokenizers.ByteLevel.alphabet())


def write_tokenizer(directory: Path, added: tuple[str, ...] = (), template: str = CHATML_TEMPLATE) -> int:
    """Byte-level BPE with the 256 byte symbols and no merges, plus ``added`` tokens after the special ones;
    returns the id of ``<|im_end|>``."""
    from tokenizers import Tokenizer, decoders, models, pre_tokenizers
    from transformers import PreTrainedTokenizerFast

    alphabet = pre_tokenizers_alphabet()
    tok = Tokenizer(models.BPE(vocab={ch: i for i, ch in enumerate(alphabet)}, merges=[]))
    tok.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    tok.decoder = decoders.ByteLevel()
    tok.add_special_tokens(list(SPECIAL_TOKENS))
    if added:
        tok.add_tokens(list(added))
    fast = PreTrainedTokenizerFast(
        tokenizer_object=tok, eos_token="<|im_end|>", pad_token="<|endoftext|>", unk_token=None
    )
    fast.chat_template = template
    fast.save_pretrained(str(directory))
    return int(tok.token_to_id("<|im_end|>"))


def _common_config(spec: TinyQwen, eos_id: int) -> dict[str, Any]:
    return {
        "vocab_size": spec.vocab,
        "hidden_size": spec.hidden,
        "intermediate_size": spec.intermediate,
        "num_hidden_layers": spec.layers,
        "num_attention_heads": spec.heads,
        "num_key_value_heads": spec.kv_heads,
        "head_dim": spec.head_dim,
        "hidden_act": "silu",
        "max_position_embeddings": spec.max_position,
        "rms_norm_eps": 1e-6,
        "tie_word_embeddings": True,
        "torch_dtype": spec.dtype,
        "bos_token_id": eos_id - 2,
        "eos_token_id": eos_id,
        "use_cache": True,
    }


def qwen2_config(spec: TinyQwen, eos_id: int) -> dict[str, Any]:
    return {
        "architectures": ["Qwen2ForCausalLM"],
        "model_type": "qwen2",
        **_common_config(spec, eos_id),
        "rope_theta": 1000000.0,
        "use_sliding_window": False,
        "sliding_window": None,
        "attention_dropout": 0.0,
    }


def qwen3_config(spec: TinyQwen, eos_id: int) -> dict[str, Any]:
    return {
        "architectures": ["Qwen3ForCausalLM"],
        "model_type": "qwen3",
        **_common_config(spec, eos_id),
        "rope_theta": 1000000.0,
        "attention_bias": False,
        "use_sliding_window": False,
        "sliding_window": None,
        "attention_dropout": 0.0,
    }


def qwen3_moe_config(spec: TinyQwen, eos_id: int) -> dict[str, Any]:
    return {
        **qwen3_config(spec, eos_id),
        "architectures": ["Qwen3MoeForCausalLM"],
        "model_type": "qwen3_moe",
        "num_experts": spec.experts,
        "num_experts_per_tok": spec.experts_per_token,
        "moe_intermediate_size": spec.moe_intermediate,
        "decoder_sparse_step": 1,
        "norm_topk_prob": True,
        "mlp_only_layers": [],
    }


def hybrid_config(spec: TinyQwen, eos_id: int) -> dict[str, Any]:
    architecture, model_type = ARCHITECTURES[spec.kind]
    moe = {}
    if spec.kind == "qwen3_next":
        moe = {
            "num_experts": spec.experts,
            "num_experts_per_tok": spec.experts_per_token,
            "moe_intermediate_size": spec.moe_intermediate,
            "shared_expert_intermediate_size": spec.shared_expert_intermediate,
            "decoder_sparse_step": 1,
            "norm_topk_prob": True,
            "mlp_only_layers": [],
        }
    if spec.mtp_layers:
        # vLLM 0.32 reads num_nextn_predict_layers for qwen3_next (config/speculative.py); the published
        # Qwen3-Next config names the same count mtp_num_hidden_layers
        moe |= {"num_nextn_predict_layers": spec.mtp_layers, "mtp_num_hidden_layers": spec.mtp_layers}
    return {
        "architectures": [architecture],
        "model_type": model_type,
        **_common_config(spec, eos_id),
        **moe,
        "layer_types": spec.layer_types,
        "full_attention_interval": spec.full_attention_interval,
        "attention_bias": False,
        "linear_num_key_heads": spec.linear_key_heads,
        "linear_num_value_heads": spec.linear_value_heads,
        "linear_key_head_dim": spec.linear_key_head_dim,
        "linear_value_head_dim": spec.linear_value_head_dim,
        "linear_conv_kernel_dim": spec.linear_conv_kernel,
        "partial_rotary_factor": 0.25,
        "rope_parameters": {"rope_type": "default", "rope_theta": 10000000.0, "partial_rotary_factor": 0.25},
    }


def _torch_dtype(name: str) -> Any:
    import torch

    return {"bfloat16": torch.bfloat16, "float16": torch.float16, "float32": torch.float32}[name]


def qwen2_weights(spec: TinyQwen) -> dict[str, Any]:
    """Random weights under the Qwen2 parameter names (q/k/v projections have biases); for the qwen3 flavour
    the Qwen3 names (no biases, per-head q_norm / k_norm)."""
    import torch

    gen = torch.Generator().manual_seed(spec.seed)
    dtype = _torch_dtype(spec.dtype)

    def rand(*shape: int) -> Any:
        return (torch.randn(*shape, generator=gen) * 0.02).to(dtype)

    def ones(n: int) -> Any:
        return torch.ones(n, dtype=dtype)

    h, q, kv = spec.hidden, spec.heads * spec.head_dim, spec.kv_heads * spec.head_dim
    w: dict[str, Any] = {"model.embed_tokens.weight": rand(spec.vocab, h), "model.norm.weight": ones(h)}
    for i in range(spec.layers):
        p = f"model.layers.{i}."
        if spec.kind == "qwen3":  # drawn in the same order as qwen2 minus the biases
            w |= {
                p + "input_layernorm.weight": ones(h),
                p + "post_attention_layernorm.weight": ones(h),
                p + "self_attn.q_proj.weight": rand(q, h),
                p + "self_attn.k_proj.weight": rand(kv, h),
                p + "self_attn.v_proj.weight": rand(kv, h),
                p + "self_attn.q_norm.weight": ones(spec.head_dim),
                p + "self_attn.k_norm.weight": ones(spec.head_dim),
            }
        else:
            w |= {
                p + "input_layernorm.weight": ones(h),
                p + "post_attention_layernorm.weight": ones(h),
                p + "self_attn.q_proj.weight": rand(q, h),
                p + "self_attn.q_proj.bias": rand(q),
                p + "self_attn.k_proj.weight": rand(kv, h),
                p + "self_attn.k_proj.bias": rand(kv),
                p + "self_attn.v_proj.weight": rand(kv, h),
                p + "self_attn.v_proj.bias": rand(kv),
            }
        w |= {
            p + "self_attn.o_proj.weight": rand(h, q),
            p + "mlp.gate_proj.weight": rand(spec.intermediate, h),
            p + "mlp.up_proj.weight": rand(spec.intermediate, h),
            p + "mlp.down_proj.weight": rand(h, spec.intermediate),
        }
    return w


def save_module_tree_weights(directory: Path, spec: TinyQwen, config: dict[str, Any]) -> None:
    """Random weights from transformers' own module tree, saved by ``save_pretrained`` so that names and
    layout (e.g. one tensor per expert) are those of published checkpoints."""
    import torch
    import transformers

    torch.manual_seed(spec.seed)
    fields = {k: v for k, v in config.items() if k not in ("architectures", "model_type", "torch_dtype")}
    config_cls, model_cls = {
        "qwen3_moe": ("Qwen3MoeConfig", "Qwen3MoeForCausalLM"),
        "qwen3_next": ("Qwen3NextConfig", "Qwen3NextForCausalLM"),
        "qwen3_5": ("Qwen3_5TextConfig", "Qwen3_5ForCausalLM"),
    }[spec.kind]
    hf_config = getattr(transformers, config_cls)(**fields)
    model = getattr(transformers, model_cls)(hf_config).to(_torch_dtype(spec.dtype))
    model.save_pretrained(str(directory))
    if spec.mtp_layers:
        save_mtp_weights(directory, spec)


def save_mtp_weights(directory: Path, spec: TinyQwen) -> None:
    """The MTP module of a Qwen3-Next checkpoint, in a file of its own: ``mtp.fc`` (concatenated embedding and
    hidden state -> hidden), its three RMSNorms, and ``mtp.layers.N``, each a full-attention decoder layer with
    the model's mixture of experts, whose weights are drawn like the model's (transformers' layer init has no
    ``mtp`` module, so a full-attention layer's tensors are copied under the ``mtp.layers.N.`` prefix and
    re-drawn)."""
    import torch
    from safetensors.torch import load_file, save_file

    main = load_file(str(directory / "model.safetensors"))
    full = spec.layer_types.index("full_attention")
    prefix = f"model.layers.{full}."
    gen = torch.Generator().manual_seed(spec.seed + 1)
    dtype = _torch_dtype(spec.dtype)
    h = spec.hidden
    out: dict[str, Any] = {
        "mtp.fc.weight": (torch.randn(h, 2 * h, generator=gen) * 0.02).to(dtype),
        "mtp.norm.weight": torch.ones(h, dtype=dtype),
        "mtp.pre_fc_norm_hidden.weight": torch.ones(h, dtype=dtype),
        "mtp.pre_fc_norm_embedding.weight": torch.ones(h, dtype=dtype),
    }
    for n in range(spec.mtp_layers):
        for name, tensor in main.items():
            if name.startswith(prefix):
                drawn = tensor.clone() if name.endswith("norm.weight") else (
                    torch.randn(tensor.shape, generator=gen) * 0.02).to(tensor.dtype)
                out[f"mtp.layers.{n}." + name[len(prefix):]] = drawn
    save_file(out, str(directory / "model-mtp.safetensors"), metadata={"format": "pt"})


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("outdir", type=Path)
    for f in dataclasses.fields(TinyQwen):
        parser.add_argument(
            f"--{f.name.replace('_', '-')}", dest=f.name, type=type(f.default), default=f.default
        )
    args = vars(parser.parse_args(argv))
    outdir = args.pop("outdir")
    write_model(outdir, TinyQwen(**args))
    print(outdir)
    return 0


if __name__ == "__main__":
    sys.exit(main())
