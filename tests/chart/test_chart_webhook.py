"""The chart's admission webhook as `helm template` renders it: off by default; on, a Service to every operator
replica, a ValidatingWebhookConfiguration scoped to QwenInference creates and updates, and a serving
certificate the apiserver will trust (the chart's own CA, checked with openssl, or cert-manager's)."""

from __future__ import annotations

import base64
import json
import subprocess
from pathlib import Path
from typing import Any

import pytest

from qwen_fleet_dev.cluster import LocalCluster
from tests.chart.support import CHART, by_kind, helm, one, template, values_file

ON = {"webhook": {"enabled": True}}


def _container(docs: list[dict[str, Any]]) -> dict[str, Any]:
    return dict(one(docs, "Deployment")["spec"]["template"]["spec"]["containers"][0])


def test_off_by_default() -> None:
    docs = template()
    assert by_kind(docs, "ValidatingWebhookConfiguration") == []
    assert "QWEN_FLEET_WEBHOOK_PORT" not in {e["name"] for e in _container(docs)["env"]}


def test_on_the_operator_serves_it_and_the_apiserver_calls_it_for_the_two_kinds_only() -> None:
    docs = template(ON)
    container = _container(docs)
    env = {e["name"]: e.get("value") for e in container["env"]}
    assert env["QWEN_FLEET_WEBHOOK_PORT"] == "9443"
    assert {"name": "webhook", "containerPort": 9443, "protocol": "TCP"} in container["ports"]
    assert {"name": "webhook-tls", "mountPath": env["QWEN_FLEET_WEBHOOK_CERT_DIR"], "readOnly": True} \
        in container["volumeMounts"]
    service = one(docs, "Service", "-webhook")
    assert service["spec"]["ports"][0]["targetPort"] == "webhook"
    assert service["spec"]["selector"] == one(docs, "Deployment")["spec"]["selector"]["matchLabels"]
    (hook,) = one(docs, "ValidatingWebhookConfiguration")["webhooks"]
    assert hook["clientConfig"]["service"] == {"name": service["metadata"]["name"], "namespace": "qwen-fleet-system",
                                               "path": "/validate", "port": 443}
    assert hook["rules"] == [{"apiGroups": ["qwenfleet.io"], "apiVersions": ["v1alpha1"],
                              "resources": ["qweninferences", "qwenbatches"], "operations": ["CREATE", "UPDATE"],
                              "scope": "Namespaced"}]
    assert (hook["failurePolicy"], hook["timeoutSeconds"], hook["sideEffects"]) == ("Ignore", 5, "None")
    assert "namespaceSelector" not in hook


def test_watched_namespaces_scope_the_webhook() -> None:
    (hook,) = one(template({**ON, "watchNamespaces": ["team-a", "team-b"]}),
                  "ValidatingWebhookConfiguration")["webhooks"]
    assert hook["namespaceSelector"]["matchExpressions"] == [
        {"key": "kubernetes.io/metadata.name", "operator": "In", "values": ["team-a", "team-b"]}]


def test_the_charts_own_certificate_is_trusted_by_the_ca_bundle_for_the_service_name(tmp_path: Path) -> None:
    docs = template(ON)
    secret = one(docs, "Secret", "-webhook-tls")
    assert secret["type"] == "kubernetes.io/tls"
    (hook,) = one(docs, "ValidatingWebhookConfiguration")["webhooks"]
    assert hook["clientConfig"]["caBundle"] == secret["data"]["ca.crt"]
    for key in ("ca.crt", "tls.crt"):
        (tmp_path / key).write_bytes(base64.b64decode(secret["data"][key]))
    name = "qf-qwen-fleet-webhook.qwen-fleet-system.svc"
    verified = subprocess.run(["openssl", "verify", "-CAfile", tmp_path / "ca.crt", "-verify_hostname", name,
                               tmp_path / "tls.crt"], capture_output=True, text=True, check=False)
    assert verified.returncode == 0, verified.stdout + verified.stderr
    wrong = subprocess.run(["openssl", "verify", "-CAfile", tmp_path / "ca.crt", "-verify_hostname", "evil.svc",
                            tmp_path / "tls.crt"], capture_output=True, text=True, check=False)
    assert wrong.returncode != 0


def test_cert_manager_issues_the_certificate_and_injects_the_ca() -> None:
    docs = template({"webhook": {"enabled": True, "certManager": {"enabled": True}}})
    assert [s for s in by_kind(docs, "Secret") if s["metadata"]["name"].endswith("-webhook-tls")] == []
    certificate = one(docs, "Certificate")
    assert certificate["spec"]["secretName"] == "qf-qwen-fleet-webhook-tls"
    assert "qf-qwen-fleet-webhook.qwen-fleet-system.svc" in certificate["spec"]["dnsNames"]
    assert certificate["spec"]["issuerRef"] == {"name": one(docs, "Issuer")["metadata"]["name"], "kind": "Issuer"}
    config = one(docs, "ValidatingWebhookConfiguration")
    assert config["metadata"]["annotations"]["cert-manager.io/inject-ca-from"] == \
        f"qwen-fleet-system/{certificate['metadata']['name']}"
    assert "caBundle" not in config["webhooks"][0]["clientConfig"]
    own = template({"webhook": {"enabled": True, "certManager": {"enabled": True, "issuerRef": {
        "name": "corp-ca", "kind": "ClusterIssuer", "group": "cert-manager.io"}}}})
    assert by_kind(own, "Issuer") == []
    assert one(own, "Certificate")["spec"]["issuerRef"]["name"] == "corp-ca"


@pytest.mark.cluster
def test_the_charts_certificate_is_kept_by_upgrades_and_renewed_near_expiry(chart_cluster: LocalCluster) -> None:
    """`lookup` keeps the Secret across `helm upgrade`; one within renewDaysBefore of expiry makes a new CA and
    certificate, and the webhook configuration's caBundle follows (simulated by a renewal window longer than
    the validity)."""
    release, namespace = "qfwh", "qfwh-system"
    args = ["--namespace", namespace, "--set", "crds.install=false", "--set", "webhook.enabled=true"]

    def issued() -> tuple[str, str]:
        secret = json.loads(chart_cluster.kubectl("get", "secret", "qfwh-qwen-fleet-webhook-tls", "-n", namespace,
                                                  "-o", "json").stdout)
        config = json.loads(chart_cluster.kubectl("get", "validatingwebhookconfiguration", "qfwh-qwen-fleet",
                                                  "-o", "json").stdout)
        assert config["webhooks"][0]["clientConfig"]["caBundle"] == secret["data"]["ca.crt"]
        return secret["data"]["ca.crt"], secret["data"]["tls.crt"]

    helm("install", release, CHART, "--create-namespace", *args, kubeconfig=chart_cluster.kubeconfig)
    try:
        first = issued()
        helm("upgrade", release, CHART, *args, kubeconfig=chart_cluster.kubeconfig)
        assert issued() == first
        helm("upgrade", release, CHART, *args, "--set", "webhook.selfSigned.renewDaysBefore=400",
             kubeconfig=chart_cluster.kubeconfig)
        renewed = issued()
        assert renewed[0] != first[0] and renewed[1] != first[1]
    finally:
        helm("uninstall", release, "--namespace", namespace, kubeconfig=chart_cluster.kubeconfig, check=False)


@pytest.mark.parametrize("values", [ON, {"webhook": {"enabled": True, "certManager": {"enabled": True}}}],
                         ids=["self-signed", "cert-manager"])
def test_helm_lint_strict_passes_with_the_webhook(values: dict[str, Any]) -> None:
    out = helm("lint", "--strict", CHART, "--values", values_file(values))
    assert "1 chart(s) linted, 0 chart(s) failed" in out.stdout, out.stdout


def _render_twice(*args: str) -> tuple[str, str]:
    """Two `helm template` runs (not template()'s cache): what Argo CD compares between syncs."""
    run: tuple[str | Path, ...] = ("template", "qf", CHART, "--namespace", "qwen-fleet-system",
                                   "--set", "webhook.enabled=true", *args)
    return helm(*run).stdout, helm(*run).stdout


EXISTING = ("--set", "webhook.existingSecret.name=corp-webhook-tls",
            "--set", "webhook.existingSecret.caBundle=" + base64.b64encode(b"-----BEGIN CERTIFICATE-----").decode())


@pytest.mark.parametrize("args", [("--set", "webhook.certManager.enabled=true"), EXISTING],
                         ids=["cert-manager", "existing-secret"])
def test_helm_template_renders_the_same_bytes_every_time(args: tuple[str, ...]) -> None:
    first, second = _render_twice(*args)
    assert first == second


def test_the_self_signed_mode_mints_anew_on_every_offline_render() -> None:
    """Why the two modes above exist: without a cluster to `lookup` the kept Secret, each render is a new CA."""
    first, second = _render_twice()
    assert first != second


def test_an_existing_secret_is_mounted_and_its_ca_trusted_and_nothing_is_generated() -> None:
    docs = template({"webhook": {"enabled": True, "existingSecret": {"name": "corp-webhook-tls", "caBundle": "Q0E="}}})
    assert by_kind(docs, "Secret") == [] and by_kind(docs, "Certificate") == []
    volumes = one(docs, "Deployment")["spec"]["template"]["spec"]["volumes"]
    assert {"name": "webhook-tls", "secret": {"secretName": "corp-webhook-tls"}} in volumes
    (hook,) = one(docs, "ValidatingWebhookConfiguration")["webhooks"]
    assert hook["clientConfig"]["caBundle"] == "Q0E="
    for values, message in (({"existingSecret": {"name": "x"}}, "webhook.existingSecret.caBundle is required"),
                            ({"existingSecret": {"name": "x", "caBundle": "Q0E="}, "certManager": {"enabled": True}},
                             "two sources of one certificate")):
        out = helm("template", "qf", CHART, "--values", values_file({"webhook": {"enabled": True, **values}}),
                   check=False)
        assert out.returncode != 0 and message in out.stderr, out.stderr
