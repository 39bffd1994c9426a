"""The one real vLLM server the suite shares: started from the Deployment the operator renders for a tiny
Qwen2 model (mapped to CPU by tests/support/cpu_rule.py). Starting an engine costs one to three minutes on
a small machine, so every test that only needs *a* serving engine uses this one (fixture ``serving_vllm``).
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from qwen_fleet.api import QwenInference
from qwen_fleet.config import OperatorConfig
from qwen_fleet.plan import make_plan
from qwen_fleet.render import ALL_CAPABILITIES, render_children
from tests.support.cpu_rule import local_process
from tests.support.vllm_server import VllmServer, free_port

NAME = "qwen-tiny"  # the served model name (the resource's name), as FACTS.md's recipe calls it
MAX_NUM_SEQS = 8
MAX_MODEL_LEN = 1024
KV_SPACE_GIB = 1
SPEC: dict[str, Any] = {
    "model": {"name": "qwen-fleet/tiny-qwen2", "source": {"pvc": {"claimName": "models", "path": "/"}}},
    "engine": {"maxModelLen": MAX_MODEL_LEN, "maxNumSeqs": MAX_NUM_SEQS, "maxNumBatchedTokens": 1024,
               "dtype": "bfloat16", "enablePrefixCaching": True, "schedulingPolicy": "priority",
               "shutdownTimeoutSeconds": 5},
    "autoscaling": {"enabled": True, "maxReplicas": 3},
    "monitoring": {"prometheusRule": True},
}


def rendered_children(spec: dict[str, Any] | None = None) -> dict[str, dict[str, Any]]:
    """The children the operator renders for ``spec`` (default SPEC); pydantic's ValidationError for a bad one."""
    cr = QwenInference.model_validate({"metadata": {"name": NAME, "namespace": "llm", "uid": "u"},
                                       "spec": SPEC if spec is None else spec})
    return {c["kind"]: c for c in render_children(cr, make_plan(cr, OperatorConfig()), ALL_CAPABILITIES)}


class RenderedServer(VllmServer):
    """VllmServer running an argv taken from a rendered Deployment instead of building its own."""

    def __init__(self, argv: list[str], env: dict[str, str], **kwargs: Any) -> None:
        super().__init__([], env, Path("/nonexistent"), **kwargs)
        self._rendered = argv

    def argv(self) -> list[str]:
        return list(self._rendered)


def rendered_server(python: str, model_dir: Path, log_path: Path,
                    spec: dict[str, Any] | None = None, uniproc: bool = False) -> RenderedServer:
    """The engine of the Deployment rendered for ``spec`` as a local process; ``uniproc``: VllmServer's."""
    port = free_port()
    local = local_process(rendered_children(spec)["Deployment"], python, {"model": model_dir}, port)
    return RenderedServer(local.argv, {**local.env, "VLLM_CPU_KVCACHE_SPACE": str(KV_SPACE_GIB)}, port=port,
                          served_model_name=NAME, python=python, log_path=log_path, uniproc=uniproc)
