"""A tiny random-weight EAGLE-3 head for a tiny target (tests/support/tiny_qwen.py), for the real vLLM CPU engine.

An EAGLE-3 head is one Llama decoder layer that reads the token's embedding beside the target's hidden states
(its q/k/v projections take ``2 x hidden``), fed by ``fc``, which folds three of the target's layers' hidden
states (``3 x hidden -> hidden``; every layer's of a target with fewer, named in
``eagle_aux_hidden_state_layer_ids``), then its own norm and LM head; the embedding is the target's. The tensor
names are those of published EAGLE-3 checkpoints (``midlayer.*``, ``fc``, ``norm``, ``lm_head``), which vLLM
0.32's ``models/llama_eagle3.py`` maps onto ``Eagle3LlamaForCausalLM``. No ``d2t``/``t2d`` tables: the head
drafts over the target's whole vocabulary.

Runs under the vLLM venv's python (torch, safetensors): ``python tests/support/tiny_eagle.py TARGET_DIR OUT_DIR``;
``make_tiny_eagle3`` does that from the project venv.
"""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path


def make_tiny_eagle3(target_dir: Path, directory: Path, python: str) -> Path:
    done = subprocess.run([python, str(Path(__file__).resolve()), str(target_dir), str(directory)],
                          capture_output=True, text=True, timeout=600, check=False)
    if done.returncode != 0:
        raise RuntimeError(f"writing the tiny EAGLE-3 head failed ({done.returncode}):\n{done.stderr[-4000:]}")
    return directory


def write_head(target_dir: Path, directory: Path, seed: int = 7) -> None:
    import torch
    from safetensors.torch import save_file

    target = json.loads((target_dir / "config.json").read_text())
    h, heads, kv = target["hidden_size"], target["num_attention_heads"], target["num_key_value_heads"]
    head_dim, inter, vocab = target["head_dim"], target["intermediate_size"], target["vocab_size"]
    dtype = {"bfloat16": torch.bfloat16, "float16": torch.float16, "float32": torch.float32}[target["torch_dtype"]]
    gen = torch.Generator().manual_seed(seed)
    # The target layers whose hidden states fc folds: three spread over the model (published heads take an early,
    # a middle and a late layer), or every layer of a target with fewer than three.
    layers = target["num_hidden_layers"]
    aux = sorted({0, layers // 2, layers - 1}) if layers >= 3 else list(range(layers))

    def rand(*shape: int) -> torch.Tensor:
        return (torch.randn(*shape, generator=gen) * 0.02).to(dtype)

    def ones(n: int) -> torch.Tensor:
        return torch.ones(n, dtype=dtype)

    weights = {
        "fc.weight": rand(h, len(aux) * h),
        "midlayer.input_layernorm.weight": ones(h),
        "midlayer.hidden_norm.weight": ones(h),
        "midlayer.post_attention_layernorm.weight": ones(h),
        "midlayer.self_attn.q_proj.weight": rand(heads * head_dim, 2 * h),
        "midlayer.self_attn.k_proj.weight": rand(kv * head_dim, 2 * h),
        "midlayer.self_attn.v_proj.weight": rand(kv * head_dim, 2 * h),
        "midlayer.self_attn.o_proj.weight": rand(h, heads * head_dim),
        "midlayer.mlp.gate_proj.weight": rand(inter, h),
        "midlayer.mlp.up_proj.weight": rand(inter, h),
        "midlayer.mlp.down_proj.weight": rand(h, inter),
        "norm.weight": ones(h),
        "lm_head.weight": rand(vocab, h),
    }
    directory.mkdir(parents=True, exist_ok=True)
    save_file(weights, str(directory / "model.safetensors"), metadata={"format": "pt"})
    config = {
        "architectures": ["LlamaForCausalLM"],  # vLLM names it Eagle3LlamaForCausalLM for method eagle3
        "model_type": "llama",
        "hidden_size": h,
        "intermediate_size": inter,
        "num_hidden_layers": 1,
        "num_attention_heads": heads,
        "num_key_value_heads": kv,
        "head_dim": head_dim,
        "hidden_act": "silu",
        "max_position_embeddings": target["max_position_embeddings"],
        "rms_norm_eps": target["rms_norm_eps"],
        "rope_theta": target.get("rope_theta", 1000000.0),
        "vocab_size": vocab,
        "draft_vocab_size": vocab,
        "eagle_aux_hidden_state_layer_ids": aux,
        "eagle_config": {"eagle_aux_hidden_state_layer_ids": aux, "use_aux_hidden_state": True},
        "tie_word_embeddings": False,
        "torch_dtype": target["torch_dtype"],
        "bos_token_id": target.get("bos_token_id"),
        "eos_token_id": target.get("eos_token_id"),
    }
    (directory / "config.json").write_text(json.dumps(config, indent=2) + "\n")


if __name__ == "__main__":
    write_head(Path(sys.argv[1]), Path(sys.argv[2]))
    print(sys.argv[2])
