"""The local LeaderWorkerSet controller's wiring (devcluster/lws.py): what the apiserver is told about its webhooks."""

from __future__ import annotations

import base64
from pathlib import Path

from qwen_fleet_dev.lws import LWS_NAME_LABEL, manager_configuration, webhook_configurations


def test_webhooks_are_called_on_loopback_with_our_ca_and_see_only_pods_of_a_leaderworkerset() -> None:
    mutating, validating = webhook_configurations(9443, b"PEM")
    assert (mutating["kind"], validating["kind"]) == ("MutatingWebhookConfiguration",
                                                      "ValidatingWebhookConfiguration")
    hooks = mutating["webhooks"] + validating["webhooks"]
    assert sorted(h["name"] for h in hooks) == ["mleaderworkerset.kb.io", "mpod.kb.io", "vleaderworkerset.kb.io",
                                               "vpod.kb.io"]
    for hook in hooks:
        assert hook["clientConfig"]["url"].startswith("https://127.0.0.1:9443/")
        assert base64.b64decode(hook["clientConfig"]["caBundle"]) == b"PEM"
        (rule,) = hook["rules"]
        if rule["resources"] == ["pods"]:  # any other pod of the cluster never waits on this process
            assert hook["objectSelector"] == {"matchExpressions": [{"key": LWS_NAME_LABEL, "operator": "Exists"}]}
        else:
            assert "objectSelector" not in hook


def test_the_manager_runs_alone_with_our_certificates() -> None:
    cfg = manager_configuration(9443, 8081, Path("/certs"))
    assert cfg["internalCertManagement"] == {"enable": False}
    assert cfg["leaderElection"] == {"leaderElect": False}
    assert cfg["webhook"] == {"port": 9443, "host": "127.0.0.1", "certDir": "/certs"}
