"""What a QwenBatch's ConfigMap output costs the apiserver (and so etcd), read from the apiserver's own metrics.

The project's runner (run_batch with the ConfigMapSink the Job's ``--output-configmap`` builds) writes 1,500 lines
(1,200 malformed ones, which need no engine, and 300 answered by a loopback fleet) into a ConfigMap of the real
control plane, with the token of a ServiceAccount allowed only that ConfigMap. The oracle is the kube-apiserver's
``apiserver_request_body_size_bytes`` histogram (k8s.io/apiserver pkg/endpoints/handlers/metrics: every create,
update and patch body, by group, resource and verb), whose ``_sum`` for ConfigMap patches grows by exactly the
bytes the runner sent; nothing of the runner's code computes it. Before the bounded writes (one whole-ConfigMap
apply per record) the same run sent ~1,500 patches and hundreds of times the final size; the issue measured
1,500 lines -> 368 MB of etcd storage.

The bound: total patch bytes <= K x the final ConfigMap's data, K = 8. Each intermediate write holds at least 1.25x
the data of the one before (FlushPolicy.growth), so all of them add up to at most 5x the last of them, and the
final write is 1x: 6x the data. An apply body is the data JSON-encoded (each record's quotes and newline escaped,
~1.2x here) plus a ~150-byte envelope: 6 x 1.25 < 8. It holds with no time between writes at all (run 2,
FlushPolicy(seconds=0)), the worst case for the growth rule; run 1 is the Job's defaults.
"""

from __future__ import annotations

import json
import re
import ssl
import urllib.request
from typing import Any

import pytest

from qwen_fleet.batchrun.kube import KubeApi
from qwen_fleet.batchrun.lines import read_done
from qwen_fleet.batchrun.runner import Settings, run_batch
from qwen_fleet.batchrun.sinks import ConfigMapSink, FlushPolicy
from qwen_fleet_dev.cluster import LocalCluster
from tests.support.kube import apply, get
from tests.unit.test_batch_runner import FakeFleet

pytestmark = pytest.mark.cluster
MALFORMED, ANSWERED = 1200, 300
K = 8
_SUM = re.compile(r'^apiserver_request_body_size_bytes_(sum|count)\{([^}]*)\} (\S+)$', re.MULTILINE)


def _tls() -> ssl.SSLContext:
    context = ssl.create_default_context()
    context.check_hostname, context.verify_mode = False, ssl.CERT_NONE  # the loopback apiserver's own cert
    return context


def configmap_patches(cluster: LocalCluster) -> tuple[float, float]:
    """(bytes, requests) of every ConfigMap patch body the apiserver has read since it started."""
    req = urllib.request.Request(f"{cluster.server}/metrics",
                                 headers={"Authorization": f"Bearer {cluster.admin_token}"})
    with urllib.request.urlopen(req, timeout=30, context=_tls()) as resp:
        text = resp.read().decode()
    found = {kind: float(value) for kind, labels, value in _SUM.findall(text)
             if 'resource="configmaps"' in labels and 'verb="patch"' in labels and 'group=""' in labels}
    return found.get("sum", 0.0), found.get("count", 0.0)


def _lines() -> list[str]:
    malformed = [f'{{"custom_id": "m{i}", "method": "GET", "url": "/v1/chat/completions", "body": {{}}}}'
                 for i in range(MALFORMED)]
    answered = [json.dumps({"custom_id": f"q{i}", "method": "POST", "url": "/v1/chat/completions",
                            "body": {"model": "m", "messages": [{"role": "user", "content": str(i)}]}})
                for i in range(ANSWERED)]
    return [x for pair in zip(malformed[:ANSWERED], answered, strict=True) for x in pair] + malformed[ANSWERED:]


def _runner_api(cluster: LocalCluster, ns: str, configmaps: list[str]) -> KubeApi:
    """A token that may get and patch those ConfigMaps only, as the runner's Role (render/batch.py) allows."""
    meta = {"name": "writer", "namespace": ns}
    apply(cluster, ns, {"apiVersion": "v1", "kind": "ServiceAccount", "metadata": meta})
    apply(cluster, ns, {"apiVersion": "rbac.authorization.k8s.io/v1", "kind": "Role", "metadata": meta, "rules": [
        {"apiGroups": [""], "resources": ["configmaps"], "resourceNames": configmaps, "verbs": ["get", "patch"]}]})
    apply(cluster, ns, {"apiVersion": "rbac.authorization.k8s.io/v1", "kind": "RoleBinding", "metadata": meta,
                        "roleRef": {"apiGroup": "rbac.authorization.k8s.io", "kind": "Role", "name": "writer"},
                        "subjects": [{"kind": "ServiceAccount", "name": "writer", "namespace": ns}]})
    token = cluster.kubectl("create", "token", "writer", "-n", ns, "--duration=1h").stdout.strip()
    return KubeApi(cluster.server, token, _tls())


def _run(cluster: LocalCluster, ns: str, name: str, fleet: FakeFleet, sink: ConfigMapSink) -> dict[str, Any]:
    before = configmap_patches(cluster)
    try:
        run_batch(Settings(endpoint=fleet.url, retry_base_seconds=0.0, report_seconds=3600), _lines, sink,
                  read_done(*sink.existing()))
    finally:
        sink.close()
    after = configmap_patches(cluster)
    data = (get(cluster, "configmap", name, ns) or {}).get("data") or {}
    output, errors = data.get("output.jsonl", ""), data.get("errors.jsonl", "")
    final = len(output.encode()) + len(errors.encode())
    sent, patches = after[0] - before[0], after[1] - before[1]
    return {"lines": len(output.splitlines()) + len(errors.splitlines()), "answered": len(output.splitlines()),
            "final_bytes": final, "patch_bytes": sent, "patches": patches, "ratio": round(sent / max(final, 1), 2),
            "bytes_per_line": round(sent / (MALFORMED + ANSWERED), 1)}


def test_a_configmap_output_costs_the_apiserver_bytes_linear_in_its_size(cluster: LocalCluster, namespace: str) -> None:
    ns = namespace
    for name in ("answers", "answers-eager"):  # the operator creates the output ConfigMap, empty
        apply(cluster, ns, {"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": name}})
    api = _runner_api(cluster, ns, ["answers", "answers-eager"])
    fleet = FakeFleet()
    fleet.thread.start()
    try:
        runs = {"defaults": _run(cluster, ns, "answers", fleet, ConfigMapSink(api, ns, "answers")),
                "no-interval": _run(cluster, ns, "answers-eager", fleet,
                                    ConfigMapSink(api, ns, "answers-eager", FlushPolicy(seconds=0.0)))}
    finally:
        fleet.server.shutdown()
    said = json.dumps(runs)
    print(f"apiserver ConfigMap patch bytes per run: {said}")
    for run in runs.values():
        assert (run["lines"], run["answered"]) == (MALFORMED + ANSWERED, ANSWERED), said  # every line, once
        assert run["patches"] >= 1 and run["final_bytes"] > 150_000, said
        assert run["patch_bytes"] <= K * run["final_bytes"], said
    assert runs["no-interval"]["patches"] > 3, said  # the growth rule alone spaced those writes
