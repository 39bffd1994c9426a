"""Rendered children of every example against golden files (UPDATE_GOLDEN=1 rewrites them)."""

from __future__ import annotations

import os
from pathlib import Path

import pytest
import yaml

from qwen_fleet.api import QwenInference
from qwen_fleet.cli import dump_yaml
from qwen_fleet.config import OperatorConfig
from qwen_fleet.plan import make_plan
from qwen_fleet.render import ALL_CAPABILITIES, render_children
from qwen_fleet.render.stamp import RENDERED_HASH_ANNOTATION

ROOT = Path(__file__).resolve().parents[2]
EXAMPLES = sorted((ROOT / "examples").glob("*.yaml"))
GOLDEN = ROOT / "tests" / "golden"


def _render(path: Path) -> str:
    doc = yaml.safe_load(path.read_text())
    doc["metadata"].update({"namespace": "llm", "uid": "00000000-0000-0000-0000-000000000001"})
    cr = QwenInference.model_validate(doc)
    children = render_children(cr, make_plan(cr, OperatorConfig()), ALL_CAPABILITIES)
    for child in children:
        if child["kind"] == "ConfigMap":  # the preflight script has its own tests; keep goldens readable
            child["data"] = {k: f"<{len(v)} bytes>" for k, v in child["data"].items()}
            child["metadata"]["annotations"][RENDERED_HASH_ANNOTATION] = "<hash of the script>"
    return dump_yaml(children)


@pytest.mark.parametrize("path", EXAMPLES, ids=[p.stem for p in EXAMPLES])
def test_rendered_children_match_golden(path: Path) -> None:
    golden = GOLDEN / f"{path.stem}.yaml"
    text = _render(path)
    if os.environ.get("UPDATE_GOLDEN"):
        golden.write_text(text)
    assert golden.exists(), f"missing {golden}; run UPDATE_GOLDEN=1 pytest {__file__}"
    assert text == golden.read_text()


def test_rendering_is_deterministic() -> None:
    for path in EXAMPLES:
        assert _render(path) == _render(path)


def test_engine_env_defaults_yield_to_a_users_entry() -> None:
    """The operator's engine env default is set once, and an engine.env entry of the same name replaces it
    (a duplicate name would be refused by server-side apply: env is a list keyed by name)."""
    from qwen_fleet.api import QwenInference
    from qwen_fleet.config import OperatorConfig
    from qwen_fleet.plan import make_plan
    from qwen_fleet.render import ALL_CAPABILITIES, render_children

    def server_env(spec: dict[str, object]) -> list[dict[str, object]]:
        cr = QwenInference.model_validate({"metadata": {"name": "a", "namespace": "n", "uid": "u"}, "spec": spec})
        children = render_children(cr, make_plan(cr, OperatorConfig()), ALL_CAPABILITIES)
        deployment = next(c for c in children if c["kind"] == "Deployment")
        return list(deployment["spec"]["template"]["spec"]["containers"][0]["env"])

    base: dict[str, object] = {"model": {"name": "Qwen/Qwen3-4B-Instruct-2507"}}
    chunk = "VLLM_V1_OUTPUT_PROC_CHUNK_SIZE"
    assert [v for v in server_env(base) if v["name"] == chunk] == [{"name": chunk, "value": "4"}]
    mine = {**base, "engine": {"env": [{"name": chunk, "value": "64"}]}}
    assert [v for v in server_env(mine) if v["name"] == chunk] == [{"name": chunk, "value": "64"}]
