"""The prefetch Job's download command (render/prefetch.py) against the real `hf` CLI of the pinned engine's
huggingface_hub: the CLI takes the rendered arguments (a wrong option is a usage error, exit code 2) and looks
up exactly the rendered repo and revision. Offline (HF_HUB_OFFLINE=1, an empty HF_HOME): no network is used,
the lookup ends at "offline mode"."""

from __future__ import annotations

import os
import subprocess
from pathlib import Path

import pytest

from qwen_fleet.api import QwenInference
from qwen_fleet.render.prefetch import download_command

pytestmark = pytest.mark.vllm


def test_hf_download_takes_the_rendered_arguments(vllm_python: str, tmp_path: Path) -> None:
    cr = QwenInference.model_validate({"metadata": {"name": "q", "namespace": "ns"}, "spec": {"model": {
        "name": "Qwen/Qwen3-4B-Instruct-2507", "revision": "main",
        "cache": {"size": "20Gi", "prefetch": {"enabled": True}}}}})
    command = download_command(cr)
    assert command[0] == "hf"
    hf = Path(vllm_python).parent / "hf"
    env = {**{k: v for k, v in os.environ.items() if not k.startswith(("HF_", "HUGGING"))},
           "HF_HOME": str(tmp_path), "HF_HUB_OFFLINE": "1", "NO_COLOR": "1"}
    out = subprocess.run([str(hf), *command[1:]], capture_output=True, text=True, env=env, timeout=120, check=False)
    text = out.stdout + out.stderr
    assert out.returncode != 2, text  # a usage error: the CLI refused the arguments
    assert "offline mode is enabled" in text, text
    assert "Qwen/Qwen3-4B-Instruct-2507/revision/main" in text, text
