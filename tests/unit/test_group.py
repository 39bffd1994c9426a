"""Our API group and version are written once (qwen_fleet/group.py); everything else reads the constants.

The oracle for the constants is the committed CRDs (crds/, generated and checked for drift elsewhere) and the
strings written here by hand; the source scan fails when a new module writes the group out again.
"""

from __future__ import annotations

import ast
import typing
from pathlib import Path

import yaml

from qwen_fleet.api import QwenInference
from qwen_fleet.api.batch import QwenBatch
from qwen_fleet.batchrun.kube import batch_status_path
from qwen_fleet.group import API_VERSION, GROUP, VERSION

ROOT = Path(__file__).resolve().parents[2]
PRODUCT = ROOT / "operator" / "qwen_fleet"


def test_the_constants() -> None:
    assert (GROUP, VERSION, API_VERSION) == ("qwenfleet.io", "v1alpha1", "qwenfleet.io/v1alpha1")


def test_the_committed_crds_serve_that_group_and_version() -> None:
    files = sorted((ROOT / "crds").glob("qwenfleet.io_*.yaml"))
    assert [f.name for f in files] == ["qwenfleet.io_qwenbatches.yaml", "qwenfleet.io_qweninferences.yaml"]
    for path in files:
        crd = yaml.safe_load(path.read_text())
        assert crd["spec"]["group"] == GROUP
        assert [v["name"] for v in crd["spec"]["versions"]] == [VERSION]


def test_the_models_apiversion_literals_are_the_constant() -> None:
    # pydantic needs the Literal written out; it must say what the constant says.
    for model in (QwenInference, QwenBatch):
        field = model.model_fields["api_version"]
        assert typing.get_args(field.annotation) == (API_VERSION,), model
        assert field.default == API_VERSION
    assert batch_status_path("ns", "b") == "/apis/qwenfleet.io/v1alpha1/namespaces/ns/qwenbatches/b/status"


def _docstrings(tree: ast.AST) -> set[int]:
    out = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.Module | ast.ClassDef | ast.FunctionDef | ast.AsyncFunctionDef) and node.body:
            first = node.body[0]
            if isinstance(first, ast.Expr) and isinstance(first.value, ast.Constant):
                out.add(id(first.value))
    return out


def _literal_fields(tree: ast.AST) -> set[int]:
    """String constants of a field annotated ``Literal[...]``: the Literal's and its default's."""
    out = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.AnnAssign) and isinstance(node.annotation, ast.Subscript) \
                and isinstance(node.annotation.value, ast.Name) and node.annotation.value.id == "Literal":
            out |= {id(c) for c in ast.walk(node) if isinstance(c, ast.Constant)}
    return out


def test_no_module_writes_the_group_out_again() -> None:
    found = []
    for path in sorted(PRODUCT.rglob("*.py")):
        if path.name == "group.py" and path.parent == PRODUCT:
            continue
        tree = ast.parse(path.read_text())
        allowed = _docstrings(tree) | _literal_fields(tree)
        for node in ast.walk(tree):
            if isinstance(node, ast.Constant) and isinstance(node.value, str) and GROUP in node.value \
                    and id(node) not in allowed:
                found.append(f"{path.relative_to(PRODUCT)}:{node.lineno}: {node.value[:60]!r}")
    assert found == []
