"""The QwenBatch API: invalid specs refused by pydantic with the words the apiserver uses, the generated CRD,
the examples."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
import yaml
from pydantic import ValidationError

from qwen_fleet.api.batch import DEFAULT_BATCH_PRIORITY, QwenBatch
from qwen_fleet.api.crd import crd, render_yaml
from tests.invalid_batch_specs import BATCH_BASE, BATCH_CASES
from tests.invalid_specs import Case

ROOT = Path(__file__).resolve().parents[2]
BATCH_EXAMPLES = sorted((ROOT / "examples" / "batch").glob("*.yaml"))


def _resource(spec: dict[str, Any], name: str = "ok") -> dict[str, Any]:
    return {"apiVersion": "qwenfleet.io/v1alpha1", "kind": "QwenBatch", "metadata": {"name": name}, "spec": spec}


@pytest.mark.parametrize("case", BATCH_CASES, ids=lambda c: c.id)
def test_invalid_batch_is_refused_by_pydantic_with_a_clear_message(case: Case) -> None:
    with pytest.raises(ValidationError) as err:
        QwenBatch.model_validate(_resource(case.spec))
    assert case.pydantic in str(err.value), str(err.value)


def test_base_batch_is_valid_and_defaults_put_it_behind_interactive_traffic() -> None:
    batch = QwenBatch.model_validate(_resource(BATCH_BASE))
    assert batch.spec.priority == DEFAULT_BATCH_PRIORITY > 0  # vLLM: lower runs first; interactive is 0
    assert 1 <= batch.spec.concurrency <= 16
    assert batch.spec.input.config_map is not None and batch.spec.input.config_map.key == "input.jsonl"


def test_long_and_badly_formed_names_are_refused() -> None:
    with pytest.raises(ValidationError, match="at most 52 characters"):
        QwenBatch.model_validate(_resource(BATCH_BASE, "b" * 53))
    with pytest.raises(ValidationError, match="must start with a letter"):
        QwenBatch.model_validate(_resource(BATCH_BASE, "9lives"))


def test_committed_batch_crd_matches_the_models_and_the_chart_copy() -> None:
    text = render_yaml("QwenBatch")
    assert (ROOT / "crds" / "qwenfleet.io_qwenbatches.yaml").read_text() == text, "run `make generate`"
    assert (ROOT / "charts" / "qwen-fleet" / "files" / "crds" / "qwenfleet.io_qwenbatches.yaml").read_text() \
        == text, "run `make generate`"


def test_batch_crd_has_status_columns_and_an_immutable_spec() -> None:
    doc = crd("QwenBatch")
    version = doc["spec"]["versions"][0]
    assert doc["spec"]["names"]["shortNames"] == ["qwb"]
    assert version["subresources"] == {"status": {}}  # no scale subresource: a batch has no replicas
    columns = {c["name"]: c["jsonPath"] for c in version["additionalPrinterColumns"]}
    assert columns["Status"] == ".status.state"
    assert {"Completed", "Total", "Failed", "Age"} <= set(columns)
    spec_rules = version["schema"]["openAPIV3Schema"]["properties"]["spec"]["x-kubernetes-validations"]
    assert {"rule": "self == oldSelf"}.items() <= spec_rules[-1].items()


@pytest.mark.parametrize("path", BATCH_EXAMPLES, ids=lambda p: p.name)
def test_batch_examples_are_valid(path: Path) -> None:
    docs = [d for d in yaml.safe_load_all(path.read_text()) if d and d.get("kind") == "QwenBatch"]
    assert docs
    for doc in docs:
        QwenBatch.model_validate(doc)
