"""`make image` (hack/operator-image.py): the Makefile target, and that it writes the image the real-node tests run
(``qwen_fleet_dev.operator_image.ensure_operator_image``, tests/node/conftest.py's fixture) as one docker-archive
tar, then prints the push and the chart's install from the pushed image. The build itself is replaced by a small
image here (it runs for real in tests/node)."""

from __future__ import annotations

import ast
import importlib.util
import json
import re
import sys
import tarfile
from pathlib import Path
from types import ModuleType

import pytest

from qwen_fleet_dev import operator_image
from qwen_fleet_dev.images import RunConfig, TreeLayer, write_archive_dir
from qwen_fleet_dev.operator_image import OperatorImage

ROOT = Path(__file__).resolve().parents[2]
SCRIPT = ROOT / "hack" / "operator-image.py"


def _script() -> ModuleType:
    spec = importlib.util.spec_from_file_location("operator_image_cli", SCRIPT)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module
    spec.loader.exec_module(module)
    return module


def test_the_make_target_runs_the_script() -> None:
    makefile = (ROOT / "Makefile").read_text()
    recipe = re.search(r"^image:.*\n((?:\t.*\n)+)", makefile, re.MULTILINE)
    assert recipe is not None
    assert recipe.group(1).split() == ["$(PY)", "hack/operator-image.py", "build/operator-image.tar"]


def test_the_real_node_tests_build_the_image_with_the_same_function() -> None:
    tree = ast.parse((ROOT / "tests" / "node" / "conftest.py").read_text())
    fixture = next(n for n in ast.walk(tree) if isinstance(n, ast.FunctionDef) and n.name == "operator_image")
    called = {n.func.id for n in ast.walk(fixture) if isinstance(n, ast.Call) and isinstance(n.func, ast.Name)}
    assert "ensure_operator_image" in called


def _small_image(tmp_path: Path) -> OperatorImage:
    files = tmp_path / "tree"
    (files / "etc").mkdir(parents=True)
    (files / "etc" / "hello").write_text("hi\n")
    archive = tmp_path / "archive"
    tag = "qwen-fleet.local/operator:0.1.0-abcdef123456"
    write_archive_dir(tag, [TreeLayer(files, "")], ("PATH=/bin",), archive, RunConfig(entrypoint=("qwen-fleet",)))
    return OperatorImage(tag, archive, 0.0)


def test_it_writes_one_docker_archive_and_prints_the_push(tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
                                                           capsys: pytest.CaptureFixture[str]) -> None:
    image = _small_image(tmp_path)
    calls = []

    def ensure() -> OperatorImage:
        calls.append(1)
        return image

    monkeypatch.setattr(operator_image, "ensure_operator_image", ensure)
    out = tmp_path / "out" / "operator-image.tar"
    assert _script().main([str(out)]) == 0
    assert calls == [1]
    with tarfile.open(out) as tar:
        names = tar.getnames()
        manifest = json.loads(tar.extractfile("manifest.json").read())  # type: ignore[union-attr]
    assert names[0] == "manifest.json"
    assert manifest[0]["RepoTags"] == [image.tag]
    assert set(names) == {"manifest.json", manifest[0]["Config"], *manifest[0]["Layers"]}
    assert not out.with_name(out.name + ".partial").exists()
    printed = capsys.readouterr().out
    target = "${REGISTRY}/qwen-fleet-operator:0.1.0-abcdef123456"
    assert f"skopeo copy docker-archive:{out} docker://{target}" in printed
    assert f"crane push {out} {target}" in printed
    assert "--set image.repository=${REGISTRY}/qwen-fleet-operator --set image.tag=0.1.0-abcdef123456" in printed


def test_a_build_failure_is_one_line(monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str],
                                     tmp_path: Path) -> None:
    def fail() -> OperatorImage:
        raise operator_image.OperatorImageError("apt-get download failed: no network")

    monkeypatch.setattr(operator_image, "ensure_operator_image", fail)
    assert _script().main([str(tmp_path / "x.tar")]) == 1
    assert capsys.readouterr().err == "make image: apt-get download failed: no network\n"
    assert not (tmp_path / "x.tar").exists()
