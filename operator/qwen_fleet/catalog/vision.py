"""Parameter count of the Qwen3-VL / Qwen3.5 vision encoder, from its `vision_config` (data in, one number out).

The shape is vLLM 0.32's `Qwen3_VisionTransformer` (model_executor/models/qwen3_vl.py) and the configs'
`vision_config`: depth 27, hidden 1152, MLP 4304, patch 16 x 16 x 2 frames, 2304 position embeddings,
2 x 2 spatial merge, `out_hidden_size` = the language model's hidden size, and one extra patch merger per
`deepstack_visual_indexes` entry (Qwen3-VL: 3). Biases and LayerNorm weights included.
"""

from __future__ import annotations

_DEPTH, _HIDDEN, _MLP, _POSITIONS, _MERGE = 27, 1152, 4304, 2304, 2
_PATCH_INPUTS = 3 * 2 * 16 * 16  # channels x temporal patch x patch x patch


def qwen3_vision_params_billion(*, out_hidden: int, deepstack: int) -> float:
    block = (4 * _HIDDEN  # two LayerNorms
             + _HIDDEN * 3 * _HIDDEN + 3 * _HIDDEN  # qkv
             + _HIDDEN * _HIDDEN + _HIDDEN  # attention output
             + _HIDDEN * _MLP + _MLP + _MLP * _HIDDEN + _HIDDEN)  # MLP
    merged = _HIDDEN * _MERGE**2

    def merger(norm_width: int) -> int:
        return 2 * norm_width + merged * merged + merged + merged * out_hidden + out_hidden

    total = (_DEPTH * block + _PATCH_INPUTS * _HIDDEN + _HIDDEN + _POSITIONS * _HIDDEN
             + merger(_HIDDEN) + deepstack * merger(merged))  # deepstack mergers norm after the shuffle
    return round(total / 1e9, 3)
