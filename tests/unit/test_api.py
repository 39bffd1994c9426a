"""The API models: the invalid-spec table in pydantic, the generated CRD, the examples."""

from __future__ import annotations

import re
from pathlib import Path
from typing import Any

import pytest
import yaml
from pydantic import ValidationError

from qwen_fleet.api import QwenInference
from qwen_fleet.api.crd import crd, render_yaml
from qwen_fleet.api.engine import owned_flag
from tests.invalid_specs import BASE, CASES, Case, merged

ROOT = Path(__file__).resolve().parents[2]
EXAMPLES = sorted((ROOT / "examples").glob("*.yaml"))


def _resource(spec: dict[str, Any], name: str = "ok") -> dict[str, Any]:
    return {"apiVersion": "qwenfleet.io/v1alpha1", "kind": "QwenInference",
            "metadata": {"name": name, "namespace": "default"}, "spec": spec}


@pytest.mark.parametrize("case", CASES, ids=[c.id for c in CASES])
def test_invalid_spec_is_refused_by_pydantic_with_a_clear_message(case: Case) -> None:
    with pytest.raises(ValidationError) as err:
        QwenInference.model_validate(_resource(merged(case.spec), case.name))
    assert case.pydantic in str(err.value), str(err.value)


def test_the_table_is_large_enough() -> None:
    assert len(CASES) >= 30


def test_base_spec_is_valid() -> None:
    cr = QwenInference.model_validate(_resource(BASE))
    assert cr.spec.parallelism.tensor == 1
    assert cr.spec.gpu.resource_name == "nvidia.com/gpu"
    assert cr.spec.autoscaling.behavior.scale_down.stabilization_window_seconds == 600


def test_a_cpu_fleet_may_run_the_preflight_and_a_one_gpu_fleet_may_not() -> None:
    cpu = {"model": {"name": "Qwen/Qwen2.5-0.5B-Instruct"}, "device": "CPU",
           "engine": {"image": "example.org/vllm-cpu:0.32.0"}, "nccl": {"preflight": {"enabled": True}}}
    cr = QwenInference.model_validate(_resource(cpu))
    assert cr.spec.nccl.preflight.max_small_message_latency_microseconds is None  # the render picks per device
    with pytest.raises(ValidationError, match=r"nccl\.preflight needs at least 2 GPUs per replica"):
        QwenInference.model_validate(_resource({**cpu, "device": "GPU", "engine": {}}))


@pytest.mark.parametrize("path", EXAMPLES, ids=[p.name for p in EXAMPLES])
def test_examples_are_valid(path: Path) -> None:
    doc = yaml.safe_load(path.read_text())
    QwenInference.model_validate(doc)


def test_examples_cover_what_the_issues_ask_for() -> None:
    specs = [yaml.safe_load(p.read_text())["spec"] for p in EXAMPLES]
    assert any(s["model"]["name"].startswith(("Qwen/Qwen3.5", "Qwen/Qwen3.6")) for s in specs)
    assert any(s.get("parallelism", {}).get("tensor") == 2 and s["engine"].get("kvCacheDtype") == "fp8"
               for s in specs)
    assert any(str(s["engine"].get("quantization", "")).startswith("awq") for s in specs)
    assert any(s.get("autoscaling", {}).get("enabled") for s in specs)


def test_committed_crd_matches_the_models() -> None:
    committed = (ROOT / "crds" / "qwenfleet.io_qweninferences.yaml").read_text()
    assert committed == render_yaml(), "run `make generate`"


def test_chart_carries_the_same_crd() -> None:
    # The chart renders its CRD from this copy (templates/crd.yaml), so `helm upgrade` can update it.
    chart_copy = ROOT / "charts" / "qwen-fleet" / "files" / "crds" / "qwenfleet.io_qweninferences.yaml"
    if not chart_copy.parent.parent.parent.exists():
        pytest.fail("charts/qwen-fleet is missing")
    assert chart_copy.read_text() == render_yaml(), "run `make generate`"


def _walk(schema: dict[str, Any], path: str = "") -> list[tuple[str, dict[str, Any]]]:
    out = []
    for name, prop in (schema.get("properties") or {}).items():
        out.append((f"{path}.{name}", prop))
        out.extend(_walk(prop, f"{path}.{name}"))
    if isinstance(schema.get("items"), dict):
        out.extend(_walk(schema["items"], f"{path}[]"))
    return out


def test_every_field_has_a_description() -> None:
    schema = crd()["spec"]["versions"][0]["schema"]["openAPIV3Schema"]
    missing = [p for p, prop in _walk(schema) if not prop.get("description") and p != ".metadata"]
    assert missing == []


def test_every_field_name_is_lower_camel_case() -> None:
    schema = crd()["spec"]["versions"][0]["schema"]["openAPIV3Schema"]
    odd = [p for p, _ in _walk(schema) if not re.fullmatch(r"[a-z][a-zA-Z0-9]*", p.rsplit(".", 1)[-1].strip("[]"))]
    assert odd == []
    # acronyms as Kubernetes writes them: p2pDisable, kvOffloadGiB (never p2PDisable)
    names = {p.rsplit(".", 1)[-1] for p, _ in _walk(schema)}
    assert {"p2pDisable", "kvOffloadGiB", "cpuOffloadGiB", "memoryGiB", "busBandwidthGBps"} <= names


def test_crd_is_structural_and_has_the_subresources_and_columns() -> None:
    version = crd()["spec"]["versions"][0]
    text = yaml.safe_dump(version)
    assert "$ref" not in text and "anyOf: null" not in text
    assert version["subresources"]["scale"] == {"specReplicasPath": ".spec.replicas",
                                                "statusReplicasPath": ".status.replicas",
                                                "labelSelectorPath": ".status.selector"}
    columns = {c["name"]: c for c in version["additionalPrinterColumns"]}
    assert [c["name"] for c in version["additionalPrinterColumns"] if not c.get("priority")] == [
        "Ready", "Replicas", "Model", "GPUs", "Endpoint", "ScaledToZero", "ColdStart", "Age"]
    # Scale to zero: each column reads a field the status schema has, of the column's type.
    status = version["schema"]["openAPIV3Schema"]["properties"]["status"]["properties"]["autoscaling"]["properties"]
    assert columns["ScaledToZero"]["jsonPath"] == ".status.autoscaling.scaledToZero"
    assert status["scaledToZero"]["type"] == columns["ScaledToZero"]["type"] == "boolean"
    assert columns["ColdStart"]["jsonPath"] == ".status.autoscaling.lastColdStart.seconds"
    assert status["lastColdStart"]["properties"]["seconds"]["type"] == columns["ColdStart"]["type"] == "integer"
    conditions = version["schema"]["openAPIV3Schema"]["properties"]["status"]["properties"]["conditions"]
    assert conditions["x-kubernetes-list-type"] == "map"
    assert conditions["x-kubernetes-list-map-keys"] == ["type"]


@pytest.mark.parametrize(("arg", "owned"), [
    ("--max-num-seqs=4", True), ("--max-num-seqs", True), ("--max_num_seqs", True), ("-tp", True),
    ("--no-enforce-eager", True), ("-q", True), ("--quantization=awq", True), ("--tensor-parallel-size", True),
    ("--runner=pooling", True), ("--max-num-seqs-extra", False), ("--hf-overrides={}", True), ("8", False),
    ("--enable-log-requests", False),
])
def test_owned_flag_detection(arg: str, owned: bool) -> None:
    assert owned_flag(arg) is owned


@pytest.mark.parametrize(("length", "groups", "admitted"), [(50, 1, True), (51, 1, False), (50, 10, True),
                                                            (50, 11, False), (49, 100, True), (48, 1000, True)])
def test_multi_node_name_limit_follows_the_last_group_index(length: int, groups: int, admitted: bool) -> None:
    """<name>-<last group index>-<10-character revision hash> must fit a 63-character label value."""
    doc = {"metadata": {"name": "q" * length},
           "spec": merged({"parallelism": {"tensor": 8, "nodes": 2}, "replicas": groups})}
    assert (len(f"{'q' * length}-{groups - 1}-{'h' * 10}") <= 63) is admitted
    if admitted:
        QwenInference.model_validate(doc)
    else:
        with pytest.raises(ValidationError, match="too long for a multi-node fleet"):
            QwenInference.model_validate(doc)
