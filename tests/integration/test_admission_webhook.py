"""The admission webhook against the real apiserver: what only the planner knows is refused at `kubectl apply`
with the message the operator would put in Stalled; with the webhook down (failurePolicy Ignore) the same
specs are stored and the running operator marks them Stalled with that very message (the oracle: the
reconcile's own path, not the webhook's code)."""

from __future__ import annotations

import base64
import json
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import pytest
import yaml

from qwen_fleet.admission.server import PATH, WebhookServer, WebhookSettings
from qwen_fleet.config import Guardrails, OperatorConfig
from qwen_fleet_dev.cluster import LocalCluster, free_port
from tests.chart.support import one, template
from tests.support.kube import condition, get, wait_until
from tests.support.operator_process import OperatorProcess
from tests.support.webhook_certs import ServingCert, make_serving_cert

pytestmark = pytest.mark.cluster
WEBHOOK = "qwen-fleet-admission-test"
ROOT = Path(__file__).resolve().parents[2]

# Specs the CRD admits and the planner refuses: weights that do not fit, heads a tensor size does not divide,
# more pipeline stages than layers, a context no KV cache can hold.
PLANNER_ONLY: dict[str, dict[str, Any]] = {
    "q27b-on-a10g": {"model": {"name": "Qwen/Qwen3.6-27B"}, "gpu": {"product": "NVIDIA-A10G"}},
    "q235b-on-2-h100": {"model": {"name": "Qwen/Qwen3-235B-A22B"}, "gpu": {"product": "NVIDIA-H100-80GB-HBM3"},
                       "parallelism": {"tensor": 2}},
    "q30b-on-l4": {"model": {"name": "Qwen/Qwen3-30B-A3B"}, "gpu": {"product": "NVIDIA-L4"}},
    "q122b-on-a100": {"model": {"name": "Qwen/Qwen3.5-122B-A10B"}, "gpu": {"product": "NVIDIA-A100-SXM4-80GB"}},
    "q9b-on-8gib": {"model": {"name": "Qwen/Qwen3.5-9B"}, "gpu": {"memoryGiB": 8}},
    "q7b-at-half-memory": {"model": {"name": "Qwen/Qwen2.5-7B-Instruct"}, "gpu": {"product": "NVIDIA-A10G"},
                          "engine": {"gpuMemoryUtilization": 0.5}},
    "q7b-tp3": {"model": {"name": "Qwen/Qwen2.5-7B-Instruct"}, "gpu": {"product": "NVIDIA-A10G"},
               "parallelism": {"tensor": 3}},
    "q4b-tp3": {"model": {"name": "Qwen/Qwen3-4B-Instruct-2507"}, "gpu": {"product": "NVIDIA-L4"},
               "parallelism": {"tensor": 3}},
    "q4b-tp6-unknown-gpu": {"model": {"name": "Qwen/Qwen3-4B-Instruct-2507"}, "parallelism": {"tensor": 6}},
    "q4b-2m-context": {"model": {"name": "Qwen/Qwen3-4B-Instruct-2507"}, "gpu": {"product": "NVIDIA-A10G"},
                      "engine": {"maxModelLen": 2000000}},
    "q27b-16m-context": {"model": {"name": "Qwen/Qwen3.5-27B"}, "gpu": {"product": "NVIDIA-H100-80GB-HBM3"},
                         "engine": {"maxModelLen": 16000000}},
}


def _doc(name: str, spec: dict[str, Any]) -> str:
    return json.dumps({"apiVersion": "qwenfleet.io/v1alpha1", "kind": "QwenInference",
                       "metadata": {"name": name}, "spec": spec})


def webhook_configuration(namespace: str, port: int, ca: Path) -> dict[str, Any]:
    """The chart's configuration (its rules, failurePolicy, timeout, and namespace scope from watchNamespaces),
    reached by URL instead of its Service: there is no kube-proxy here."""
    docs = template({"webhook": {"enabled": True}, "watchNamespaces": [namespace]})
    config = one(docs, "ValidatingWebhookConfiguration")
    config["metadata"] = {"name": WEBHOOK}
    config["webhooks"][0]["clientConfig"] = {"url": f"https://127.0.0.1:{port}{PATH}",
                                             "caBundle": base64.b64encode(ca.read_bytes()).decode()}
    return dict(config)


class Webhook:
    def __init__(self, cert: ServingCert, port: int) -> None:
        self.settings = WebhookSettings(port, cert.cert, cert.key, host="127.0.0.1")
        self.server: WebhookServer | None = None

    def up(self) -> None:
        self.server = WebhookServer(self.settings, OperatorConfig()).start()

    def down(self) -> None:
        if self.server is not None:
            self.server.stop()
            self.server = None


@contextmanager
def registered(cluster: LocalCluster, namespace: str, port: int, ca: Path) -> Iterator[None]:
    cluster.kubectl("apply", "--server-side", "-f", "-", input=json.dumps(webhook_configuration(namespace, port, ca)))
    try:
        yield
    finally:
        cluster.kubectl("delete", "validatingwebhookconfiguration", WEBHOOK, "--ignore-not-found", check=False)


@pytest.fixture
def webhook(cluster: LocalCluster, crd: Path, namespace: str, tmp_path: Path) -> Iterator[Webhook]:
    cert = make_serving_cert(tmp_path / "certs")
    hook = Webhook(cert, free_port())
    hook.up()
    try:
        with registered(cluster, namespace, hook.settings.port, cert.ca):
            yield hook
    finally:
        hook.down()


def _create(cluster: LocalCluster, namespace: str, name: str, spec: dict[str, Any]) -> tuple[int, str]:
    result = cluster.kubectl("create", "-n", namespace, "-f", "-", input=_doc(name, spec), check=False)
    return result.returncode, result.stderr


def _in_force(cluster: LocalCluster, namespace: str) -> bool:
    """The apiserver reads webhook configurations asynchronously: probe with a server-side dry run."""
    result = cluster.kubectl("create", "--dry-run=server", "-n", namespace, "-f", "-",
                             input=_doc("probe", PLANNER_ONLY["q7b-tp3"]), check=False)
    return "denied the request" in result.stderr


def _stalled(cluster: LocalCluster, namespace: str, name: str) -> dict[str, Any]:
    return wait_until(f"{name} Stalled", lambda: (c := condition(get(cluster, "qwi", name, namespace), "Stalled"))
                      and c.get("status") == "True" and c, 60)


def test_planner_only_specs_are_refused_at_apply_with_the_stalled_message(
        cluster: LocalCluster, operator: OperatorProcess, namespace: str, webhook: Webhook) -> None:
    wait_until("webhook in force", lambda: _in_force(cluster, namespace), 30)
    refused = {}
    for name, spec in PLANNER_ONLY.items():
        code, stderr = _create(cluster, namespace, name, spec)
        assert code != 0, f"{name} accepted"
        assert 'admission webhook "qweninferences.qwenfleet.io" denied the request' in stderr, stderr
        refused[name] = stderr
    good = yaml.safe_load((ROOT / "examples" / "qwen3-4b-instruct-a10g.yaml").read_text())["spec"]
    code, stderr = _create(cluster, namespace, "fits", good)
    assert code == 0, stderr

    webhook.down()  # failurePolicy Ignore: applies go on, the reconcile is the safety net
    for name, spec in PLANNER_ONLY.items():
        code, stderr = _create(cluster, namespace, name, spec)
        assert code == 0, stderr
    for name in PLANNER_ONLY:
        stalled = _stalled(cluster, namespace, name)
        assert f"{stalled['reason']}: {stalled['message']}" in refused[name], (refused[name], stalled)
    assert len(refused) >= 10


def test_a_stored_refused_spec_stays_editable_but_not_worse(
        cluster: LocalCluster, operator: OperatorProcess, namespace: str, webhook: Webhook) -> None:
    """Stored while the webhook was down: metadata changes and deletion pass, a spec change must pass the planner."""
    webhook.down()
    assert _create(cluster, namespace, "stored", PLANNER_ONLY["q27b-on-a10g"])[0] == 0
    webhook.up()
    wait_until("webhook in force", lambda: _in_force(cluster, namespace), 30)
    cluster.kubectl("label", "qwi", "stored", "-n", namespace, "team=search")
    worse = cluster.kubectl("patch", "qwi", "stored", "-n", namespace, "--type=merge", "-p",
                            json.dumps({"spec": {"parallelism": {"tensor": 3}}}), check=False)
    assert worse.returncode != 0 and "denied the request" in worse.stderr, worse.stderr
    fixed = cluster.kubectl("patch", "qwi", "stored", "-n", namespace, "--type=merge", "-p",
                            json.dumps({"spec": {"model": {"name": "Qwen/Qwen3-4B-Instruct-2507"},
                                                 "engine": {"maxModelLen": 8192}}}), check=False)
    assert fixed.returncode == 0, fixed.stderr
    cluster.kubectl("delete", "qwi", "stored", "-n", namespace)


def test_the_operator_process_serves_the_webhook(cluster: LocalCluster, crd: Path, namespace: str,
                                                 tmp_path: Path) -> None:
    """`qwen-fleet operator` with QWEN_FLEET_WEBHOOK_PORT serves it from the mounted certificate files (this one
    watches a namespace of its own, so it never reconciles what the session's operator does)."""
    cert = make_serving_cert(tmp_path / "certs")
    port = free_port()
    proc = OperatorProcess(cluster, tmp_path / "operator.log", env={
        "QWEN_FLEET_WEBHOOK_PORT": str(port), "QWEN_FLEET_WEBHOOK_CERT_DIR": str(cert.cert.parent),
        "QWEN_FLEET_NAMESPACES": "qf-webhook-only"})
    proc.start()
    try:
        with registered(cluster, namespace, port, cert.ca):
            wait_until("webhook in force", lambda: _in_force(cluster, namespace), 30)
            code, stderr = _create(cluster, namespace, "too-big", PLANNER_ONLY["q27b-on-a10g"])
            assert code != 0 and "denied the request: WeightsDoNotFit: Qwen/Qwen3.6-27B needs" in stderr, stderr
    finally:
        proc.stop()


def test_the_admins_guardrails_refuse_at_apply_naming_the_setting(cluster: LocalCluster, crd: Path, namespace: str,
                                                                  tmp_path: Path) -> None:
    """The chart's guardrails (docs/security.md) through the real apiserver: a LoadBalancer Service and a Secret
    nobody listed are refused with the chart value to change; the same spec within them passes (dry run)."""
    cert = make_serving_cert(tmp_path / "certs")
    rails = Guardrails(service_types=("ClusterIP",), secret_names=("hf-token",), any_secret=False)
    settings = WebhookSettings(free_port(), cert.cert, cert.key, host="127.0.0.1")
    server = WebhookServer(settings, OperatorConfig(guardrails=rails)).start()
    good = yaml.safe_load((ROOT / "examples" / "qwen3-4b-instruct-a10g.yaml").read_text())["spec"]
    token = {"huggingFace": {"tokenSecretRef": {"name": "ci-deploy-key"}}}
    try:
        with registered(cluster, namespace, settings.port, cert.ca):
            wait_until("webhook in force", lambda: _in_force(cluster, namespace), 30)
            code, stderr = _create(cluster, namespace, "public", {**good, "service": {"type": "LoadBalancer"}})
            assert code != 0 and ("denied the request: Guardrail: service.type 'LoadBalancer' is not an allowed "
                                  "Service type (ClusterIP; chart value guardrails.serviceTypes)") in stderr, stderr
            code, stderr = _create(cluster, namespace, "reads", {**good, "model": {**good["model"], "source": token}})
            assert code != 0 and "model.source.huggingFace.tokenSecretRef names Secret 'ci-deploy-key'" in stderr
            token["huggingFace"]["tokenSecretRef"]["name"] = "hf-token"
            allowed = cluster.kubectl("create", "--dry-run=server", "-n", namespace, "-f", "-", check=False,
                                      input=_doc("reads", {**good, "model": {**good["model"], "source": token}}))
            assert allowed.returncode == 0, allowed.stderr
    finally:
        server.stop()
