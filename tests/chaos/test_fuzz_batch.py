"""Bad input for QwenBatch: a Hypothesis-driven fuzz of QwenBatch specs (mutations of the examples and of the
refusal table's base, steered by the QwenBatch CRD's own schema, with tests/chaos/fuzz_specs.py's value
strategies) sent to the real apiserver (server-side dry-run, strict field validation) and to the pydantic models.
Both layers must agree on every spec, every refusal must say why, and the operator's pure batch renderer must
turn every accepted spec into its children without raising. Dry-run only: a batch's Job runs nothing here (the
operator's handling of accepted batches is tests/integration/test_batch.py's), so this takes seconds.
"""

from __future__ import annotations

import copy
import json
import os
import time
from pathlib import Path
from typing import Any

import pytest
import yaml
from hypothesis import HealthCheck, Phase, given, settings
from hypothesis import seed as hypothesis_seed
from hypothesis import strategies as st
from pydantic import ValidationError

from qwen_fleet.api.batch import QwenBatch
from qwen_fleet.api.messages import validation_message
from qwen_fleet.render.batch import render_batch_children
from qwen_fleet_dev.cluster import LocalCluster
from tests.chaos.fuzz_specs import NAME, Path_, leaf_paths, mutate, typed
from tests.chaos.test_fuzz import KeepAliveApi
from tests.invalid_batch_specs import BATCH_BASE
from tests.support.kube import wait_until

pytestmark = [pytest.mark.cluster, pytest.mark.slow]

ROOT = Path(__file__).resolve().parents[2]
BATCH_CRD_FILE = ROOT / "crds" / "qwenfleet.io_qwenbatches.yaml"
QWB_PATH = "/apis/qwenfleet.io/v1alpha1/namespaces/{ns}/qwenbatches"
# Small by default, to keep make test's time (the QwenInference fuzz is the long one); more with the variable.
CASES = int(os.environ.get("QF_BATCH_FUZZ_CASES", "150"))
SEED = int(os.environ.get("QF_CHAOS_SEED", "20261130"))


def batch_schema() -> dict[str, Any]:
    crd = yaml.safe_load(BATCH_CRD_FILE.read_text())
    return dict(crd["spec"]["versions"][0]["schema"]["openAPIV3Schema"]["properties"]["spec"])


def base_specs() -> list[dict[str, Any]]:
    """Valid starting points: every QwenBatch example, the refusal table's base, and one of each input kind."""
    bases = [doc["spec"] for p in sorted((ROOT / "examples" / "batch").glob("*.yaml"))
             for doc in yaml.safe_load_all(p.read_text()) if doc and doc.get("kind") == "QwenBatch"]
    bases.append(copy.deepcopy(BATCH_BASE))
    bases.append({"fleetRef": {"name": "qwen"}, "input": {"url": "https://example.com/in.jsonl?sig=x"},
                  "output": {"pvc": {"claimName": "results", "path": "run"}}, "concurrency": 16})
    bases.append({"fleetRef": {"name": "qwen"}, "input": {"url": "https://example.com/in.jsonl", "maxBytes": 1000},
                  "output": {"configMap": {"name": "out", "flushSeconds": 30}}})
    bases.append({"dedicated": {"model": "Qwen/Qwen3-0.6B", "gpus": 2, "modelClaim": {"claimName": "w"}},
                  "input": {"pvc": {"claimName": "data", "path": "in.jsonl"}, "maxLines": 10},
                  "output": {"pvc": {"claimName": "data", "path": "out"}}})
    return bases


@st.composite
def documents(draw: st.DrawFn, bases: list[dict[str, Any]],
              fields: list[tuple[Path_, st.SearchStrategy[Any]]]) -> dict[str, Any]:
    spec = copy.deepcopy(draw(st.sampled_from(bases)))
    for _ in range(draw(st.sampled_from([1, 1, 1, 2, 2, 3]))):
        mutate(draw, spec, fields, lambda values: values)
    name = draw(NAME) if draw(st.integers(0, 19)) == 0 else "fuzz"
    return {"apiVersion": "qwenfleet.io/v1alpha1", "kind": "QwenBatch", "metadata": {"name": name}, "spec": spec}


def draw_documents(count: int, seed: int) -> list[dict[str, Any]]:
    seen: dict[str, dict[str, Any]] = {}

    @hypothesis_seed(seed)
    @settings(max_examples=count * 2, database=None, deadline=None, phases=[Phase.generate],
              suppress_health_check=list(HealthCheck))
    # Each field's strategy built once (fuzz_specs.typed compiles its patterns anew on every call).
    @given(documents(base_specs(), [(path, typed(schema)) for path, schema in leaf_paths(batch_schema())]))
    def collect(doc: dict[str, Any]) -> None:
        if len(seen) < count:
            seen.setdefault(json.dumps(doc, sort_keys=True), doc)

    collect()
    return list(seen.values())


def model_verdict(doc: dict[str, Any]) -> tuple[bool, str, QwenBatch | None]:
    try:
        batch = QwenBatch.model_validate({**doc, "metadata": {**doc["metadata"], "namespace": "fuzz-ns"}})
    except ValidationError as err:
        return False, validation_message(err), None
    return True, "", batch


@pytest.fixture(scope="module")
def batch_crd(chaos_cluster: LocalCluster) -> Path:
    """The chaos cluster holds the QwenInference CRD only; the operator watches both kinds, so adding the
    QwenBatch CRD puts the cluster in its normal state."""
    chaos_cluster.kubectl("apply", "--server-side", "-f", str(BATCH_CRD_FILE))
    wait_until("the QwenBatch CRD Established", lambda: any(
        c.get("type") == "Established" and c.get("status") == "True"
        for c in (json.loads(chaos_cluster.kubectl("get", "crd", "qwenbatches.qwenfleet.io", "-o", "json").stdout)
                  .get("status") or {}).get("conditions") or []), 60)
    return BATCH_CRD_FILE


def test_fuzzed_batch_specs_get_the_same_verdict_from_the_apiserver_and_pydantic(
        chaos_cluster: LocalCluster, batch_crd: Path, chaos_namespace: str) -> None:
    started = time.monotonic()
    docs = draw_documents(CASES, SEED)
    generated_s = time.monotonic() - started
    assert len(docs) >= CASES * 0.9
    api = KeepAliveApi(chaos_cluster)
    path = QWB_PATH.format(ns=chaos_namespace) + "?dryRun=All&fieldValidation=Strict"
    problems: list[str] = []
    accepted = 0
    for doc in docs:
        status, body = api.post(path, json.dumps(doc, ensure_ascii=False).encode())
        api_ok, api_message = status == 201, "" if status == 201 else str(body.get("message", body))
        model_ok, model_message, batch = model_verdict(doc)
        spec = json.dumps(doc, ensure_ascii=False)[:800]
        if api_ok != model_ok:
            problems.append(f"apiserver {'accepts' if api_ok else 'refuses: ' + api_message[:300]}; pydantic "
                            f"{'accepts' if model_ok else 'refuses: ' + model_message[:300]}; {spec}")
        elif not api_ok and not api_message.strip():
            problems.append(f"refused without a message: {spec}")
        if batch is not None:
            accepted += api_ok
            try:
                render_batch_children(batch, "runner:test", "engine:test")
            except Exception as err:  # an accepted spec must render: a traceback is the finding
                problems.append(f"render raised {type(err).__name__}: {err}; {spec}")
    print(f"QwenBatch fuzz: {len(docs)} specs ({generated_s:.1f} s to draw, "
          f"{time.monotonic() - started - generated_s:.1f} s to check), {accepted} accepted by both, "
          f"{len(problems)} problems")
    assert accepted >= len(docs) // 10, "too few valid specs: the fuzz no longer reaches the renderer"
    assert len(docs) - accepted >= len(docs) // 5, "too few invalid specs: the fuzz no longer tests refusals"
    assert not problems, f"{len(problems)} problems:\n" + "\n".join(problems[:20])
