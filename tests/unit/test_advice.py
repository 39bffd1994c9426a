"""The one-replica rollout warning (api/advice.py): when a spec change leaves the fleet with nothing serving."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
import yaml

from qwen_fleet import cli
from qwen_fleet.api import QwenInference
from qwen_fleet.api.advice import rollout_warning
from tests.invalid_specs import BASE, merged

POOLS = {"routing": {}, "pools": [{"name": "short", "maxRequestTokens": 4096, "replicas": 1},
                                  {"name": "long", "maxRequestTokens": 32768, "replicas": 2}]}
CASES: list[tuple[str, dict[str, Any], bool]] = [
    ("default-one-replica", {}, True),
    ("replicas-1", {"replicas": 1}, True),
    ("replicas-2", {"replicas": 2}, False),
    ("surge-1", {"rollout": {"maxSurge": 1, "maxUnavailable": 0}}, False),
    ("surge-percent-rounds-up", {"rollout": {"maxSurge": "25%"}}, False),
    ("surge-0-percent", {"rollout": {"maxSurge": "0%", "maxUnavailable": 1}}, True),
    ("autoscaling-min-1", {"autoscaling": {"enabled": True, "maxReplicas": 4}}, True),
    ("autoscaling-min-2", {"autoscaling": {"enabled": True, "minReplicas": 2, "maxReplicas": 4}}, False),
    ("a-pool-of-one", POOLS, True),
    ("multi-node-one-group", {"parallelism": {"tensor": 8, "nodes": 2}}, True),
]


@pytest.mark.parametrize(("patch", "warned"), [(p, w) for _, p, w in CASES], ids=[c[0] for c in CASES])
def test_rollout_warning(patch: dict[str, Any], warned: bool) -> None:
    spec = QwenInference.model_validate({"metadata": {"name": "f"}, "spec": merged(patch)}).spec
    warning = rollout_warning(spec)
    assert (warning is not None) is warned
    if warning:
        assert "serves nothing for a whole model load" in warning and "rollout.maxSurge 1" in warning


def test_render_prints_the_warning_and_still_renders(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    path = tmp_path / "f.yaml"
    path.write_text(yaml.safe_dump({"apiVersion": "qwenfleet.io/v1alpha1", "kind": "QwenInference",
                                    "metadata": {"name": "one"}, "spec": BASE}))
    assert cli.main(["render", "-f", str(path), "-n", "llm"]) == 0
    out = capsys.readouterr()
    assert "qwen-fleet: one: warning: one replica with rollout.maxSurge 0" in out.err
    assert any(d["kind"] == "Deployment" for d in yaml.safe_load_all(out.out))
