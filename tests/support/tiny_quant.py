"""Tiny random-weight Qwen3 checkpoints in the quantized formats vLLM's CPU build loads, made at test time.

``tests/support/tiny_qwen.py`` writes the 16-bit model (config, weights, tokenizer); this module then quantizes
its linear layers (attention q/k/v/o and the MLP's gate/up/down) into a format's on-disk layout and adds the
``quantization_config`` block that real checkpoints of that format carry. Embeddings (tied: also the LM head),
RMSNorms and the per-head q/k norms stay bfloat16, as in every published quantized Qwen checkpoint.

Formats (``FORMATS``), each as the tool that writes it lays it out:

* ``gptq``: AutoGPTQ / GPTQModel int4, symmetric, groups of 128, ``desc_act`` false: ``qweight`` int32
  [in/8, out] (8 nibbles along the input), ``qzeros`` int32 [in/128, out/8] (the zero point 8 stored as 7, the
  AutoGPTQ convention), ``scales`` fp16 [in/128, out], ``g_idx`` int32 [in];
* ``awq``: AutoAWQ GEMM int4 with zero points, groups of 128: ``qweight`` int32 [in, out/8] and ``qzeros`` int32
  [in/128, out/8] packed along the output in AWQ's nibble order 0 2 4 6 1 3 5 7, ``scales`` fp16 [in/128, out];
* ``ct-w8a8-int8``: llm-compressor's W8A8 preset (compressed-tensors ``int-quantized``): ``weight`` int8
  [out, in], symmetric per output channel, ``weight_scale`` [out, 1]; activations int8 per token, dynamic;
* ``ct-w4a16``: llm-compressor's W4A16 preset (compressed-tensors ``pack-quantized``): ``weight_packed`` int32
  [out, in/8] (signed int4 offset by 8, 8 per int32 along the input), ``weight_scale`` [out, in/128],
  ``weight_shape`` int64 [2];
* ``fp8-block``: Qwen's own FP8 releases (e.g. Qwen3-4B-Instruct-2507-FP8): ``weight`` float8_e4m3fn [out, in],
  ``weight_scale_inv`` float32 [out/128, in/128], ``quant_method`` fp8 with ``weight_block_size`` [128, 128].

Like tiny_qwen.py, two halves: ``write_quantized`` runs under the vLLM venv's python (torch, safetensors),
``make_tiny_quantized`` runs it in a subprocess from the project venv.
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
from pathlib import Path
from typing import Any

if __package__:
    from .tiny_qwen import TinyQwen, vllm_python, write_model
else:  # run as a script under the vLLM venv: tiny_qwen.py is beside this file on sys.path
    from tiny_qwen import TinyQwen, vllm_python, write_model  # type: ignore[no-redef]

FORMATS = ("gptq", "awq", "ct-w8a8-int8", "ct-w4a16", "fp8-block")
LINEAR = ("self_attn.q_proj", "self_attn.k_proj", "self_attn.v_proj", "self_attn.o_proj",
          "mlp.gate_proj", "mlp.up_proj", "mlp.down_proj")
GROUP = 128
AWQ_ORDER = (0, 2, 4, 6, 1, 3, 5, 7)  # AutoAWQ's nibble order inside one int32 (WQLinear_GEMM.from_linear)


def make_tiny_quantized(directory: Path, fmt: str, spec: TinyQwen, python: str | None = None) -> Path:
    """Write ``spec``'s model in format ``fmt`` into ``directory`` (created) and return the directory."""
    if fmt not in FORMATS:
        raise ValueError(f"format must be one of {FORMATS}, not {fmt!r}")
    cmd = [python or vllm_python(), str(Path(__file__).resolve()), str(directory), "--format", fmt,
           *spec.cli_args()]
    done = subprocess.run(cmd, capture_output=True, text=True, timeout=600, check=False)
    if done.returncode != 0:
        raise RuntimeError(f"writing tiny {fmt} model failed ({done.returncode}):\n{done.stderr[-4000:]}")
    return Path(directory)


# ---------------------------------------------------------------------------------------------------------
# Writer side: runs under the vLLM venv.


def write_quantized(directory: Path, fmt: str, spec: TinyQwen) -> None:
    from safetensors.torch import load_file, save_file

    if spec.kind != "qwen3":
        raise ValueError("quantized tiny models are Qwen3ForCausalLM (kind qwen3)")
    write_model(directory, spec)
    weights = load_file(str(directory / "model.safetensors"))
    out: dict[str, Any] = {}
    for name, tensor in weights.items():
        module = name.removesuffix(".weight")
        if name.endswith(".weight") and module.split(".", 3)[-1] in LINEAR:
            for suffix, packed in QUANTIZERS[fmt](tensor.float()).items():
                out[f"{module}.{suffix}"] = packed.contiguous()
        else:
            out[name] = tensor
    (directory / "model.safetensors").unlink()
    save_file(out, str(directory / "model.safetensors"), metadata={"format": "pt"})
    config = json.loads((directory / "config.json").read_text())
    config["quantization_config"] = QUANT_CONFIGS[fmt]
    if fmt in ("gptq", "awq"):
        config["torch_dtype"] = "float16"  # what AutoGPTQ and AutoAWQ write; their scales are fp16
    (directory / "config.json").write_text(json.dumps(config, indent=2) + "\n")


def _pack_nibbles(values: Any, dim: int, order: tuple[int, ...] = tuple(range(8))) -> Any:
    """Pack 4-bit values (0..15) into int32, 8 consecutive ones along ``dim``; nibble i holds ``order[i]``."""
    import torch

    v = values.to(torch.int64).movedim(dim, -1)
    v = v.reshape(*v.shape[:-1], v.shape[-1] // 8, 8)
    packed = torch.zeros(v.shape[:-1], dtype=torch.int64)
    for i, src in enumerate(order):
        packed |= v[..., src] << (4 * i)
    packed = torch.where(packed >= 2**31, packed - 2**32, packed).to(torch.int32)  # two's complement int32
    return packed.movedim(-1, dim)


def _groups(w: Any) -> Any:
    """[out, in] -> [out, in/128, 128]."""
    return w.reshape(w.shape[0], w.shape[1] // GROUP, GROUP)


def quantize_gptq(w: Any) -> dict[str, Any]:
    import torch

    g = _groups(w)
    scale = (g.abs().amax(dim=-1) / 7).clamp(min=1e-8)  # [out, groups]; symmetric: q in -8..7 around 8
    q = (torch.round(g / scale[..., None]) + 8).clamp(0, 15).reshape(w.shape)  # [out, in]
    groups = w.shape[1] // GROUP
    return {
        "qweight": _pack_nibbles(q.t(), dim=0),  # [in/8, out]
        "qzeros": _pack_nibbles(torch.full((groups, w.shape[0]), 7), dim=1),  # [groups, out/8]: 8 stored as 7
        "scales": scale.t().to(torch.float16),  # [groups, out]
        "g_idx": torch.arange(w.shape[1], dtype=torch.int32) // GROUP,
    }


def quantize_awq(w: Any) -> dict[str, Any]:
    import torch

    g = _groups(w)
    lo, hi = g.amin(dim=-1), g.amax(dim=-1)
    scale = ((hi - lo) / 15).clamp(min=1e-8)
    zero = torch.round(-lo / scale).clamp(0, 15)
    q = (torch.round(g / scale[..., None]) + zero[..., None]).clamp(0, 15).reshape(w.shape)
    return {
        "qweight": _pack_nibbles(q.t(), dim=1, order=AWQ_ORDER),  # [in, out/8]
        "qzeros": _pack_nibbles(zero.t(), dim=1, order=AWQ_ORDER),  # [groups, out/8]
        "scales": scale.t().to(torch.float16),  # [groups, out]
    }


def quantize_w8a8_int8(w: Any) -> dict[str, Any]:
    import torch

    scale = (w.abs().amax(dim=1, keepdim=True) / 127).clamp(min=1e-8)  # [out, 1]
    return {"weight": torch.round(w / scale).clamp(-128, 127).to(torch.int8),
            "weight_scale": scale.to(torch.bfloat16)}


def quantize_w4a16(w: Any) -> dict[str, Any]:
    import torch

    g = _groups(w)
    scale = (g.abs().amax(dim=-1) / 7).clamp(min=1e-8)  # [out, groups]
    q = torch.round(g / scale[..., None]).clamp(-8, 7).reshape(w.shape)
    return {"weight_packed": _pack_nibbles(q + 8, dim=1),  # [out, in/8]
            "weight_scale": scale.to(torch.bfloat16),
            "weight_shape": torch.tensor(list(w.shape), dtype=torch.int64)}


def quantize_fp8_block(w: Any) -> dict[str, Any]:
    import torch

    out, inp = w.shape
    b = w.reshape(out // 128, 128, inp // 128, 128)
    scale = (b.abs().amax(dim=(1, 3)) / torch.finfo(torch.float8_e4m3fn).max).clamp(min=1e-12)  # [out/128, in/128]
    q = (b / scale[:, None, :, None]).reshape(out, inp).to(torch.float8_e4m3fn)
    return {"weight": q, "weight_scale_inv": scale.to(torch.float32)}


QUANTIZERS = {"gptq": quantize_gptq, "awq": quantize_awq, "ct-w8a8-int8": quantize_w8a8_int8,
              "ct-w4a16": quantize_w4a16, "fp8-block": quantize_fp8_block}


def _ct_args(bits: int, strategy: str, group_size: int | None, dynamic: bool = False) -> dict[str, Any]:
    return {"num_bits": bits, "type": "int", "symmetric": True, "strategy": strategy, "group_size": group_size,
            "dynamic": dynamic, "actorder": None, "block_structure": None, "observer": None if dynamic else "minmax",
            "observer_kwargs": {}}


def _compressed_tensors(fmt: str, weights: dict[str, Any], activations: dict[str, Any] | None) -> dict[str, Any]:
    return {
        "quant_method": "compressed-tensors",
        "format": fmt,
        "quantization_status": "compressed",
        "config_groups": {"group_0": {"targets": ["Linear"], "weights": weights,
                                      "input_activations": activations, "output_activations": None,
                                      "format": fmt}},
        "ignore": ["lm_head"],
        "kv_cache_scheme": None,
        "sparsity_config": {},
        "transform_config": {},
        "global_compression_ratio": None,
        "version": "0.12.2",
    }


QUANT_CONFIGS: dict[str, dict[str, Any]] = {
    "gptq": {"quant_method": "gptq", "bits": 4, "group_size": GROUP, "desc_act": False, "sym": True,
             "damp_percent": 0.01, "static_groups": False, "true_sequential": True, "checkpoint_format": "gptq",
             "model_file_base_name": None, "model_name_or_path": None},
    "awq": {"quant_method": "awq", "bits": 4, "group_size": GROUP, "zero_point": True, "version": "gemm",
            "modules_to_not_convert": None},
    "ct-w8a8-int8": _compressed_tensors("int-quantized", _ct_args(8, "channel", None),
                                        _ct_args(8, "token", None, dynamic=True)),
    "ct-w4a16": _compressed_tensors("pack-quantized", _ct_args(4, "group", GROUP), None),
    "fp8-block": {"quant_method": "fp8", "activation_scheme": "dynamic", "fmt": "e4m3",
                  "weight_block_size": [128, 128]},
}


def main(argv: list[str] | None = None) -> int:
    import dataclasses

    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("outdir", type=Path)
    parser.add_argument("--format", choices=FORMATS, required=True)
    for f in dataclasses.fields(TinyQwen):
        parser.add_argument(f"--{f.name.replace('_', '-')}", dest=f.name, type=type(f.default), default=f.default)
    args = vars(parser.parse_args(argv))
    outdir, fmt = args.pop("outdir"), args.pop("format")
    write_quantized(outdir, fmt, TinyQwen(**args))
    print(outdir)
    return 0


if __name__ == "__main__":
    sys.exit(main())
