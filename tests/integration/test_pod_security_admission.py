"""The apiserver's own PodSecurity admission judges every rendered pod: each pod template of every example, and
of the pods no example makes, is created as a Pod (server-side dry run: admitted, never stored) in a namespace
that enforces ``restricted``. The kube-apiserver's implementation of the profile is the oracle here; the unit
tests' checker (tests/support/pss.py) is the other, written apart from it."""

from __future__ import annotations

import json
import uuid
from collections.abc import Iterator
from typing import Any

import pytest
import yaml

from qwen_fleet_dev.cluster import LocalCluster
from tests.unit.test_pod_security import EXAMPLES, EXTRA_CASES, _children, pod_specs

pytestmark = pytest.mark.cluster
ENFORCE = "pod-security.kubernetes.io/enforce"


@pytest.fixture(scope="module")
def restricted_ns(cluster: LocalCluster) -> Iterator[str]:
    ns = f"pss-{uuid.uuid4().hex[:8]}"
    cluster.kubectl("create", "namespace", ns)
    cluster.kubectl("label", "namespace", ns, f"{ENFORCE}=restricted", f"{ENFORCE}-version=latest")
    yield ns
    cluster.kubectl("delete", "namespace", ns, "--wait=false", check=False)


def _dry_run_pods(cluster: LocalCluster, ns: str, pods: list[tuple[str, dict[str, Any]]]) -> dict[str, str]:
    """Each (where, pod spec) as a Pod, all created in one --dry-run=server call: {where: the refusal's words} for
    each refused. Without the template's serviceAccountName: that account's existence is the ServiceAccount
    admission's, not pod security."""
    items = [{"apiVersion": "v1", "kind": "Pod", "metadata": {"name": f"p{i}"},
              "spec": {k: v for k, v in spec.items() if k != "serviceAccountName"}} for i, (_, spec) in enumerate(pods)]
    out = cluster.kubectl("create", "-n", ns, "--dry-run=server", "-f", "-",
                          input=json.dumps({"apiVersion": "v1", "kind": "List", "items": items}), check=False)
    refused = {}
    for i, (where, _) in enumerate(pods):
        line = next((x for x in out.stderr.splitlines() if f'pods "p{i}" is forbidden' in x), None)
        if line is not None:
            refused[where] = line
        else:
            assert f"pod/p{i} created (server dry run)" in out.stdout, (where, out.stdout, out.stderr)
    return refused


CASES = {p.stem: yaml.safe_load(p.read_text()) for p in EXAMPLES}
CASES.update({name: {"metadata": {"name": "f"}, "spec": spec} for name, spec in EXTRA_CASES.items()})


def test_the_apiserver_admits_every_rendered_pod_under_restricted(cluster: LocalCluster, restricted_ns: str) -> None:
    pods = [(f"{case}: {where}", spec) for case, doc in CASES.items() for where, spec in pod_specs(_children(doc))]
    assert len(pods) >= len(CASES)
    assert _dry_run_pods(cluster, restricted_ns, pods) == {}


def test_the_namespace_refuses_a_pod_that_sets_nothing_and_ipc_lock(cluster: LocalCluster,
                                                                    restricted_ns: str) -> None:
    locked = {"metadata": {"name": "f"}, "spec": {"model": {"name": "Qwen/Qwen3-4B"}, "security": {"ipcLock": True}}}
    pods = [("bare", {"containers": [{"name": "c", "image": "x"}]}), *pod_specs(_children(locked))]
    refused = _dry_run_pods(cluster, restricted_ns, pods)
    assert set(refused) == {where for where, _ in pods}, refused
    assert all('violates PodSecurity "restricted:latest"' in r for r in refused.values())
    assert all("IPC_LOCK" in r for where, r in refused.items() if where != "bare")
