"""A LoRA adapter for a tiny model of tests/support/tiny_qwen.py, written at test time in PEFT's layout
(``adapter_config.json`` + ``adapter_model.safetensors``), so vLLM can load it with ``--lora-modules``.

Run as ``python tests/support/tiny_lora.py OUTDIR --layers N --hidden H --q-out Q --kv-out K --rank R`` under the
vLLM venv's python (torch, safetensors); ``make_tiny_lora`` does that from the project venv. lora_B is not zero
(PEFT initialises it so, which would make the adapter a no-op): the adapter must change what the model says.
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
from pathlib import Path
from typing import TYPE_CHECKING

if TYPE_CHECKING:  # the writer side (vLLM venv) has no tests package on its path
    from tests.support.tiny_qwen import TinyQwen

TARGETS = ("q_proj", "v_proj")


def make_tiny_lora(directory: Path, python: str, spec: TinyQwen, rank: int = 8) -> Path:
    cmd = [python, str(Path(__file__).resolve()), str(directory), "--layers", str(spec.layers), "--hidden",
           str(spec.hidden), "--q-out", str(spec.heads * spec.head_dim), "--kv-out",
           str(spec.kv_heads * spec.head_dim), "--rank", str(rank)]
    done = subprocess.run(cmd, capture_output=True, text=True, timeout=300, check=False)
    if done.returncode != 0:
        raise RuntimeError(f"writing the LoRA adapter failed:\n{done.stderr[-3000:]}")
    return directory


def write_lora(directory: Path, layers: int, hidden: int, q_out: int, kv_out: int, rank: int) -> None:
    import torch
    from safetensors.torch import save_file

    gen = torch.Generator().manual_seed(1)
    out_dims = {"q_proj": q_out, "v_proj": kv_out}
    weights = {}
    for i in range(layers):
        for target in TARGETS:
            prefix = f"base_model.model.model.layers.{i}.self_attn.{target}"
            weights[f"{prefix}.lora_A.weight"] = torch.randn(rank, hidden, generator=gen) * 0.5
            weights[f"{prefix}.lora_B.weight"] = torch.randn(out_dims[target], rank, generator=gen) * 0.5
    directory.mkdir(parents=True, exist_ok=True)
    save_file(weights, str(directory / "adapter_model.safetensors"), metadata={"format": "pt"})
    config = {"peft_type": "LORA", "task_type": "CAUSAL_LM", "r": rank, "lora_alpha": 2 * rank,
              "lora_dropout": 0.0, "bias": "none", "target_modules": list(TARGETS), "fan_in_fan_out": False,
              "base_model_name_or_path": None}
    (directory / "adapter_config.json").write_text(json.dumps(config, indent=2) + "\n")


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("outdir", type=Path)
    for name in ("layers", "hidden", "q-out", "kv-out", "rank"):
        parser.add_argument(f"--{name}", type=int, required=True)
    a = parser.parse_args()
    write_lora(a.outdir, a.layers, a.hidden, a.q_out, a.kv_out, a.rank)
    return 0


if __name__ == "__main__":
    sys.exit(main())
