"""Dequantize a tiny quantized checkpoint with the format's own libraries and compare it with its 16-bit source.

``python tests/support/tiny_quant_check.py SOURCE_DIR FORMAT=QUANT_DIR ...`` (under the vLLM venv) prints one JSON
object: for each format, for every quantized linear weight, ``||W - dequantized|| / ||W||``. The unpacking is not
tests/support/tiny_quant.py's: GPTQ and AWQ nibbles are read with vLLM's ``unpack_quantized_values_into_int32``
and its AWQ order constant ``_REVERSE_AWQ_PACK_ORDER`` (quantization/auto_awq.py), compressed-tensors' packed int4
with ``compressed_tensors``' ``unpack_from_int32``; int8 and FP8 are plain dtype casts times their scales. A
wrong nibble order, packing dimension, zero-point convention or scale layout gives an error near 1 or more;
correct round-to-nearest int4 stays near 0.1, int8 and FP8 near 0.01-0.03.
"""

from __future__ import annotations

import json
import sys
from pathlib import Path
from typing import Any

GROUP = 128


def _dequantize(fmt: str, t: dict[str, Any], out_features: int, in_features: int) -> Any:
    import torch
    from vllm.model_executor.layers.quantization.utils.quant_utils import unpack_quantized_values_into_int32
    from vllm.scalar_type import scalar_types

    if fmt == "gptq":
        q = unpack_quantized_values_into_int32(t["qweight"], scalar_types.uint4b8, 0)  # [in, out]
        zeros = unpack_quantized_values_into_int32(t["qzeros"], scalar_types.uint4b8, 1) + 1  # AutoGPTQ stores z-1
        g = t["g_idx"].long()
        return ((q - zeros[g]).float() * t["scales"].float()[g]).t()
    if fmt == "awq":
        from vllm.model_executor.layers.quantization.auto_awq import _REVERSE_AWQ_PACK_ORDER

        def unpack(packed: Any) -> Any:
            shifts = torch.arange(0, 32, 4, dtype=torch.int32)
            values = (packed.unsqueeze(-1) >> shifts) & 0xF  # nibble i of every int32
            return values[:, :, _REVERSE_AWQ_PACK_ORDER].reshape(packed.shape[0], -1)

        q, z = unpack(t["qweight"]), unpack(t["qzeros"])  # [in, out], [groups, out]
        g = torch.arange(in_features) // GROUP
        return ((q - z[g]).float() * t["scales"].float()[g]).t()
    if fmt == "ct-w4a16":
        from compressed_tensors.compressors.pack_quantized.helpers import unpack_from_int32

        q = unpack_from_int32(t["weight_packed"], 4, torch.Size(t["weight_shape"].tolist()))  # [out, in], signed
        return q.float() * t["weight_scale"].float().repeat_interleave(GROUP, dim=1)
    if fmt == "ct-w8a8-int8":
        return t["weight"].float() * t["weight_scale"].float()
    if fmt == "fp8-block":
        scale = t["weight_scale_inv"].float().repeat_interleave(128, 0).repeat_interleave(128, 1)
        return t["weight"].float() * scale
    raise ValueError(fmt)


def main(source: Path, quantized: Path, fmt: str) -> dict[str, float]:
    from safetensors.torch import load_file

    original, packed = load_file(str(source / "model.safetensors")), load_file(str(quantized / "model.safetensors"))
    errors = {}
    for name, tensor in original.items():
        module = name.removesuffix(".weight")
        parts = {k[len(module) + 1:]: v for k, v in packed.items() if k.startswith(module + ".")}
        if not parts or (name in packed and packed[name].dtype == tensor.dtype):
            continue  # kept at 16 bits
        w = tensor.float()
        deq = _dequantize(fmt, parts, *w.shape)
        errors[module] = float((w - deq).norm() / w.norm())
    return errors


if __name__ == "__main__":
    pairs = [arg.split("=", 1) for arg in sys.argv[2:]]
    print(json.dumps({fmt: main(Path(sys.argv[1]), Path(path), fmt) for fmt, path in pairs}))
