"""The CRD in the real kube-apiserver: examples accepted, bad input refused at `kubectl apply` with a message
a person understands (the same table the pydantic layer passes), `kubectl explain` documents the fields.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from qwen_fleet_dev.cluster import LocalCluster
from tests.invalid_specs import CASES, Case, merged

pytestmark = pytest.mark.cluster
ROOT = Path(__file__).resolve().parents[2]
EXAMPLES = sorted((ROOT / "examples").glob("*.yaml"))


def _doc(spec: dict, name: str) -> str:
    return json.dumps({"apiVersion": "qwenfleet.io/v1alpha1", "kind": "QwenInference",
                       "metadata": {"name": name}, "spec": spec})


@pytest.mark.parametrize("path", EXAMPLES, ids=[p.name for p in EXAMPLES])
def test_examples_are_accepted_by_the_apiserver(cluster: LocalCluster, crd: Path, path: Path) -> None:
    result = cluster.kubectl("apply", "--dry-run=server", "-n", "default", "-f", str(path), check=False)
    assert result.returncode == 0, result.stderr


@pytest.mark.parametrize("case", CASES, ids=[c.id for c in CASES])
def test_invalid_spec_is_refused_at_create_with_a_clear_message(cluster: LocalCluster, crd: Path,
                                                                case: Case) -> None:
    result = cluster.kubectl("create", "-n", "default", "-f", "-", input=_doc(merged(case.spec), case.name),
                             check=False)
    assert result.returncode != 0, f"accepted: {result.stdout}"
    assert case.apiserver in result.stderr, result.stderr
    gone = cluster.kubectl("get", "qwi", case.name, "-n", "default", check=False)
    assert gone.returncode != 0


def test_defaults_are_applied_by_the_apiserver(cluster: LocalCluster, crd: Path) -> None:
    out = cluster.kubectl("create", "--dry-run=server", "-o", "json", "-n", "default", "-f", "-",
                          input=_doc({"model": {"name": "Qwen/Qwen3-4B-Instruct-2507"}}, "defaults")).stdout
    spec = json.loads(out)["spec"]
    assert spec["parallelism"] == {"tensor": 1, "pipeline": 1, "data": 1, "expert": False, "nodes": 1}
    assert spec["gpu"]["resourceName"] == "nvidia.com/gpu"
    assert spec["model"]["source"] == {"huggingFace": {}}
    assert spec["autoscaling"]["behavior"]["scaleDown"]["stabilizationWindowSeconds"] == 600
    assert spec["engine"]["shutdownTimeoutSeconds"] == 30
    assert "replicas" not in spec


@pytest.mark.parametrize(("field", "words"), [
    ("qwi.spec.engine.maxNumSeqs", "Most sequences in one batch"),
    ("qwi.spec.engine.kvOffloadGiB", "swap_space"),
    ("qwi.spec.parallelism.tensor", "Tensor-parallel size"),
    ("qwi.spec.autoscaling.queueDepth", "vllm:num_requests_waiting"),
    ("qwi.status.conditions", "kstatus"),
])
def test_kubectl_explain_shows_descriptions(cluster: LocalCluster, crd: Path, field: str, words: str) -> None:
    out = cluster.kubectl("explain", field).stdout
    assert words in out, out


def test_short_name_category_and_columns(cluster: LocalCluster, crd: Path, namespace: str) -> None:
    cluster.kubectl("apply", "-n", namespace, "-f", str(ROOT / "examples" / "qwen3-4b-instruct-a10g.yaml"))
    out = cluster.kubectl("get", "qwi", "-n", namespace).stdout
    header = out.splitlines()[0].split()
    assert header == ["NAME", "READY", "REPLICAS", "MODEL", "GPUS", "ENDPOINT", "SCALEDTOZERO", "COLDSTART", "AGE"]
    assert "Qwen/Qwen3-4B-Instruct-2507" in out
    by_category = cluster.kubectl("get", "qwenfleet", "-n", namespace, "-o", "name").stdout
    assert "qweninference.qwenfleet.io/qwen3-4b" in by_category


def test_the_longest_extra_args_fit_the_apiservers_cel_budget(cluster: LocalCluster, crd: Path) -> None:
    """64 items (the limit), value flags with 1000-character values: the extraArgs rules stay within the
    apiserver's per-call CEL cost limit at runtime, so a valid spec is never refused for its length."""
    from qwen_fleet.api.engine import OWNED_OPTIONS
    from qwen_fleet.api.engine_flags import vllm_flags

    takes_one = [o for f in vllm_flags().flags if f.nargs == "1" for o in f.options
                 if o.startswith("--") and o not in OWNED_OPTIONS]
    args = [token for flag in takes_one[:32] for token in (flag, "v" * 1000)]
    spec = {"model": {"name": "Qwen/Qwen3-4B-Instruct-2507"}, "engine": {"extraArgs": args}}
    result = cluster.kubectl("create", "--dry-run=server", "-n", "default", "-f", "-", input=_doc(spec, "long"),
                             check=False)
    assert len(args) == 64
    assert result.returncode == 0, result.stderr[:2000]


# Integer fields written as whole floats, as an API client sends them (kubectl would rewrite 16.0 as 16): the
# bytes are written here by hand. The apiserver's schema check takes 16.0 for an integer, but a CEL rule
# that reads the value fails; a rule whose has() guard stops first, or no rule at all, leaves it admitted.
# Each verdict is the apiserver's, written down (a refusal with the words of its CEL error); pydantic must
# give the same.
ADMITTED = None
INT = "invalid data, expected int, got float64 evaluating rule"
INT_OR_STRING = "invalid data, expected XIntOrString value to be either a string or integer evaluating rule"
WHOLE_FLOATS = [
    ("rope-scaling-read", INT,
     b'"engine": {"ropeScaling": {"originalMaxPositionEmbeddings": 16.0, "factor": 8.25}}'),
    ("rope-scaling-guarded", ADMITTED, b'"engine": {"ropeScaling": {"originalMaxPositionEmbeddings": 16.0}}'),
    ("max-num-seqs-read", INT, b'"engine": {"maxNumSeqs": 64.0, "maxNumBatchedTokens": 2048}'),
    ("max-num-seqs-guarded", ADMITTED, b'"engine": {"maxNumSeqs": 64.0}'),
    ("tensor-read", INT, b'"parallelism": {"tensor": 2.0}'),
    ("tolerations-has-only", ADMITTED, b'"scheduling": {"tolerations": [{"key": "k", "operator": "Exists", '
     b'"effect": "NoExecute", "tolerationSeconds": 300.0}]}'),
    # Only has(self.replicas) is asked, but the scale subresource reads spec.replicas as an int64.
    ("replicas-scale-subresource", "spec.replicas accessor error: 2 is of the type float64, expected int64",
     b'"replicas": 2.0'),
    ("no-rule-reads-it", ADMITTED, b'"engine": {"shutdownTimeoutSeconds": 45.0}'),
    ("enum-schema-only", ADMITTED, b'"serving": {"maxLoraRank": 16.0}'),
    ("quantity-own-rule", INT_OR_STRING, b'"resources": {"cpu": 8.0}'),
    # CEL's && is false when either side is, even if the other cannot be read ...
    ("rollout-false-side-wins", ADMITTED, b'"rollout": {"maxSurge": 1.0, "maxUnavailable": 1}'),
    # ... and an error when the other side is true.
    ("rollout-read", INT_OR_STRING, b'"rollout": {"maxSurge": 0.0, "maxUnavailable": 0}'),
]


def _post_raw(cluster: LocalCluster, body: bytes) -> tuple[int, dict]:
    import ssl
    import urllib.error
    import urllib.request

    tls = ssl.create_default_context()
    tls.check_hostname = False
    tls.verify_mode = ssl.CERT_NONE  # the local apiserver's self-signed certificate
    req = urllib.request.Request(
        cluster.server + "/apis/qwenfleet.io/v1alpha1/namespaces/default/qweninferences"
        "?dryRun=All&fieldValidation=Strict", data=body, method="POST",
        headers={"Authorization": f"Bearer {cluster.admin_token}", "Content-Type": "application/json"})
    try:
        with urllib.request.urlopen(req, timeout=30, context=tls) as resp:
            return resp.status, json.loads(resp.read())
    except urllib.error.HTTPError as err:
        return err.code, json.loads(err.read())


def _pydantic_refusal(body: bytes) -> str | None:
    from pydantic import ValidationError

    from qwen_fleet.api import QwenInference
    from qwen_fleet.api.messages import validation_message

    try:
        QwenInference.model_validate(json.loads(body))
    except ValidationError as err:
        return validation_message(err)
    return ADMITTED


@pytest.mark.parametrize(("name", "refusal", "spec"), WHOLE_FLOATS, ids=[c[0] for c in WHOLE_FLOATS])
def test_whole_floats_get_the_apiservers_verdict_from_pydantic(cluster: LocalCluster, crd: Path, name: str,
                                                               refusal: str | None, spec: bytes) -> None:
    body = (b'{"apiVersion": "qwenfleet.io/v1alpha1", "kind": "QwenInference", "metadata": {"name": "'
            + name.encode() + b'"}, "spec": {"model": {"name": "Qwen/Qwen3-4B-Instruct-2507"}, ' + spec + b"}}")
    status, answer = _post_raw(cluster, body)
    message = _pydantic_refusal(body)
    if refusal is ADMITTED:
        assert status == 201, answer.get("message", answer)
        assert message is None, f"pydantic refused what the apiserver admits: {message}"
    else:
        assert status == 422, answer
        assert refusal in answer["message"], answer["message"]
        assert message is not None, "pydantic admitted what the apiserver refuses"
        assert "write it as" in message, message
