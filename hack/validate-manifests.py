"""Offline validation of every manifest we ship (part of `make lint`): kubeconform, strict, against schemas
generated from the real kube-apiserver (hack/kube-schemas.py).

    .venv/bin/python hack/validate-manifests.py <kubeconform> <schema folder>

Validated: `helm template` of the chart for every values combination the chart tests render
(tests/chart/support.py VALUES_CASES), `qwen-fleet render` of every example, the examples themselves, and for
each QwenBatch example (examples/batch/) what the operator creates for it (render/batch.py).
First a self-check: manifests with a misspelled field must be refused, or the run fails (a validator that
accepts everything would otherwise pass silently).
"""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from tests.chart.support import VALUES_CASES, template_text  # noqa: E402

EXAMPLES = sorted((ROOT / "examples").glob("*.yaml"))
BATCH_EXAMPLES = sorted((ROOT / "examples" / "batch").glob("*.yaml"))
# Each must be refused: a misspelled field in a core kind, in a Prometheus Operator kind, in KEDA's (the
# ScaledObject's count fields are minReplicaCount/maxReplicaCount), in our own kind.
MUST_FAIL = {
    "Deployment spec.replica": "apiVersion: apps/v1\nkind: Deployment\nmetadata: {name: x}\nspec:\n  replica: 2\n"
    "  selector: {matchLabels: {a: b}}\n  template: {metadata: {labels: {a: b}}, spec: {containers: "
    "[{name: c, image: i}]}}\n",
    "ServiceMonitor honourLabels": "apiVersion: monitoring.coreos.com/v1\nkind: ServiceMonitor\nmetadata: {name: x}\n"
    "spec:\n  selector: {}\n  endpoints: [{port: m, honourLabels: true}]\n",
    "ScaledObject spec.minReplicas": "apiVersion: keda.sh/v1alpha1\nkind: ScaledObject\nmetadata: {name: x}\n"
    "spec:\n  scaleTargetRef: {name: x}\n  minReplicas: 1\n  triggers: [{type: prometheus, metadata: {}}]\n",
    "QwenInference spec.modle": "apiVersion: qwenfleet.io/v1alpha1\nkind: QwenInference\nmetadata: {name: x}\n"
    "spec:\n  modle: {name: Qwen/Qwen3-4B}\n",
}


def kubeconform(binary: str, schemas: str, text: str) -> tuple[int, str, dict[str, int]]:
    argv = [binary, "-strict", "-summary", "-output", "json",
            "-schema-location", f"{schemas}/{{{{ .ResourceKind }}}}{{{{ .KindSuffix }}}}.json", "-"]
    result = subprocess.run(argv, input=text, capture_output=True, text=True)
    try:
        summary = json.loads(result.stdout).get("summary", {})
    except json.JSONDecodeError:
        summary = {}
    return result.returncode, result.stdout + result.stderr, summary


def sources() -> dict[str, str]:
    out = {f"helm template ({case})": template_text(values) for case, values in VALUES_CASES.items()}
    for example in EXAMPLES:
        rendered = subprocess.run([sys.executable, "-m", "qwen_fleet.cli", "render", "-f", str(example)],
                                  check=True, capture_output=True, text=True)
        out[f"qwen-fleet render {example.name}"] = rendered.stdout
        out[f"examples/{example.name}"] = example.read_text()
    for example in BATCH_EXAMPLES:
        out[f"examples/batch/{example.name}"] = example.read_text()
        out[f"QwenBatch children of {example.name}"] = _batch_children(example)
    return out


def _batch_children(example: Path) -> str:
    import yaml

    from qwen_fleet.api.batch import QwenBatch
    from qwen_fleet.config import OperatorConfig
    from qwen_fleet.render.batch import render_batch_children

    config = OperatorConfig()
    children: list[dict[str, object]] = []
    for doc in yaml.safe_load_all(example.read_text()):  # an example may carry its input ConfigMap too
        if doc and doc.get("kind") == "QwenBatch":
            batch = QwenBatch.model_validate(doc)
            children += render_batch_children(batch, config.runner_image, config.default_image)
    return yaml.safe_dump_all(children, sort_keys=False)


def main(binary: str, schemas: str) -> int:
    for name, text in MUST_FAIL.items():
        code, output, _ = kubeconform(binary, schemas, text)
        if code == 0 or '"status": "statusInvalid"' not in output:
            print(f"validate-manifests: self-check failed, {name} was not refused:\n{output}", file=sys.stderr)
            return 1
    failed, resources, texts = 0, 0, sources()
    for name, text in texts.items():
        code, output, summary = kubeconform(binary, schemas, text)
        resources += summary.get("valid", 0)
        if code != 0 or not summary.get("valid"):
            failed += 1
            print(f"validate-manifests: {name}:\n{output}", file=sys.stderr)
    print(f"validate-manifests: {resources} resources valid in {len(texts)} sources, {failed} failing "
          f"(self-check: {len(MUST_FAIL)} bad manifests refused)")
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main(*sys.argv[1:3]))
