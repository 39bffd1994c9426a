"""The platform admin's guardrails (qwen_fleet.admission.guardrails) through the webhook's decision: each
refusal with its exact message (the field, the value, the chart value to change), what they leave alone, and
the configuration's parser (QWEN_FLEET_GUARDRAILS, the chart's values as JSON)."""

from __future__ import annotations

import json
from typing import Any

import pytest

from qwen_fleet.admission import decide
from qwen_fleet.admission.guardrails import secret_refs
from qwen_fleet.config import Guardrails, OperatorConfig

FITS: dict[str, Any] = {"model": {"name": "Qwen/Qwen3-4B-Instruct-2507"}, "gpu": {"product": "NVIDIA-A10G"},
        "engine": {"maxModelLen": 8192}}
BATCH: dict[str, Any] = {"dedicated": {"model": "Qwen/Qwen3-4B-Instruct-2507", "image": "docker.io/someone/vllm:1"},
         "input": {"configMap": {"name": "in"}}, "output": {"pvc": {"claimName": "out"}}}
RAILS = Guardrails(image_prefixes=("registry.corp.example/vllm/",), priority_class_names=("batch-low",),
                   runtime_class_names=("nvidia",), service_types=("ClusterIP",), secret_names=("hf-token",),
                   secret_name_prefixes=("qwen-",), any_secret=False)
CONFIG = OperatorConfig(guardrails=RAILS)
SECRET_RULE = ("which the guardrails do not allow (names: hf-token; prefixes: qwen-; chart values "
               "guardrails.secretNames, guardrails.secretNamePrefixes, guardrails.anySecret)")


def _request(kind: str, spec: dict[str, Any], operation: str = "CREATE",
             old: dict[str, Any] | None = None) -> dict[str, Any]:
    obj = {"kind": kind, "metadata": {"name": "q", "namespace": "ns"}, "spec": spec}
    return {"uid": "u", "kind": {"group": "qwenfleet.io", "version": "v1alpha1", "kind": kind},
            "operation": operation, "object": obj,
            "oldObject": {"metadata": obj["metadata"], "spec": old} if old is not None else None}


def _env(name: str, secret: str) -> dict[str, Any]:
    return {"name": name, "valueFrom": {"secretKeyRef": {"name": secret, "key": "k"}}}


@pytest.mark.parametrize(("spec", "message"), [
    ({**FITS, "engine": {**FITS["engine"], "image": "docker.io/someone/vllm:latest"}},
     "engine.image 'docker.io/someone/vllm:latest' does not start with an allowed image prefix "
     "(registry.corp.example/vllm/; chart value guardrails.imagePrefixes)"),
    ({**FITS, "routing": {"image": "ghcr.io/x/epp:1"}},
     "routing.image 'ghcr.io/x/epp:1' does not start with an allowed image prefix "
     "(registry.corp.example/vllm/; chart value guardrails.imagePrefixes)"),
    ({**FITS, "scheduling": {"priorityClassName": "system-node-critical"}},
     "scheduling.priorityClassName 'system-node-critical' is not an allowed PriorityClass (batch-low; chart value "
     "guardrails.priorityClassNames)"),
    ({**FITS, "scheduling": {"runtimeClassName": "kata"}},
     "scheduling.runtimeClassName 'kata' is not an allowed RuntimeClass (nvidia; chart value "
     "guardrails.runtimeClassNames)"),
    ({**FITS, "service": {"type": "LoadBalancer"}},
     "service.type 'LoadBalancer' is not an allowed Service type (ClusterIP; chart value guardrails.serviceTypes)"),
    ({**FITS, "service": {"type": "NodePort"}},
     "service.type 'NodePort' is not an allowed Service type (ClusterIP; chart value guardrails.serviceTypes)"),
    ({**FITS, "engine": {**FITS["engine"], "env": [_env("DB", "postgres-admin")]}},
     f"engine.env[0].valueFrom.secretKeyRef names Secret 'postgres-admin', {SECRET_RULE}"),
    ({**FITS, "nccl": {"env": [_env("NCCL_X", "ci-deploy-key")]}},
     f"nccl.env[0].valueFrom.secretKeyRef names Secret 'ci-deploy-key', {SECRET_RULE}"),
    ({**FITS, "model": {**FITS["model"], "source": {"huggingFace": {"tokenSecretRef": {"name": "other"}}}}},
     f"model.source.huggingFace.tokenSecretRef names Secret 'other', {SECRET_RULE}"),
], ids=["engine-image", "picker-image", "priority-class", "runtime-class", "load-balancer", "node-port",
        "engine-env-secret", "nccl-env-secret", "token-secret"])
def test_a_qwen_inference_outside_the_guardrails_is_refused_naming_value_and_setting(
        spec: dict[str, Any], message: str) -> None:
    assert decide(_request("QwenInference", spec), CONFIG) == ("Guardrail", message)


def test_a_qwen_batch_outside_the_guardrails_is_refused() -> None:
    spec = {**BATCH, "scheduling": {"priorityClassName": "high"},
            "dedicated": {**BATCH["dedicated"], "env": [_env("T", "prod-db")]}}
    assert decide(_request("QwenBatch", spec), CONFIG) == ("Guardrail", "; ".join([
        "dedicated.image 'docker.io/someone/vllm:1' does not start with an allowed image prefix "
        "(registry.corp.example/vllm/; chart value guardrails.imagePrefixes)",
        "scheduling.priorityClassName 'high' is not an allowed PriorityClass (batch-low; chart value "
        "guardrails.priorityClassNames)",
        f"dedicated.env[0].valueFrom.secretKeyRef names Secret 'prod-db', {SECRET_RULE}"]))


def test_what_the_guardrails_allow_passes_and_a_batch_is_judged_by_them_alone() -> None:
    spec = {**FITS, "engine": {**FITS["engine"], "image": "registry.corp.example/vllm/openai:v0.32.0",
                               "env": [_env("A", "hf-token"), _env("B", "qwen-keys")]},
            "scheduling": {"priorityClassName": "batch-low", "runtimeClassName": "nvidia"},
            "service": {"type": "ClusterIP"}}
    assert decide(_request("QwenInference", spec), CONFIG) is None
    # Defaults are the admin's own: no image, no service type, no class named.
    assert decide(_request("QwenInference", FITS), CONFIG) is None
    allowed = {**BATCH, "dedicated": {**BATCH["dedicated"], "image": "registry.corp.example/vllm/cpu:1"}}
    assert decide(_request("QwenBatch", allowed), CONFIG) is None


def test_without_guardrails_anything_goes_and_planner_refusals_still_come_after_them() -> None:
    spec = {**FITS, "service": {"type": "LoadBalancer"}, "engine": {**FITS["engine"], "image": "x/y:1",
                                                                    "env": [_env("A", "anything")]}}
    assert decide(_request("QwenInference", spec), OperatorConfig()) is None
    too_big = {"model": {"name": "Qwen/Qwen3.6-27B"}, "gpu": {"product": "NVIDIA-A10G"}}
    refusal = decide(_request("QwenInference", too_big), CONFIG)
    assert refusal is not None and refusal[0] == "WeightsDoNotFit"


def test_an_object_stored_before_the_guardrails_stays_editable() -> None:
    spec = {**FITS, "service": {"type": "LoadBalancer"}}
    assert decide(_request("QwenInference", spec, "UPDATE", old=spec), CONFIG) is None
    refusal = decide(_request("QwenInference", {**spec, "replicas": 2}, "UPDATE", old=spec), CONFIG)
    assert refusal is not None and refusal[0] == "Guardrail"


def test_secret_refs_are_found_wherever_they_sit() -> None:
    spec = {"pools": [{"engine": {"env": [_env("A", "s1")]}}],
            "model": {"source": {"modelScope": {"tokenSecretRef": {"name": "s2", "key": "t"}}}},
            "engine": {"env": [{"name": "B", "value": "plain"},
                               {"name": "C", "valueFrom": {"configMapKeyRef": {"name": "cm", "key": "k"}}}]}}
    assert sorted(secret_refs(spec)) == [("model.source.modelScope.tokenSecretRef", "s2"),
                                         ("pools[0].engine.env[0].valueFrom.secretKeyRef", "s1")]


def test_the_configuration_reads_the_charts_json_and_refuses_bad_input() -> None:
    raw = json.dumps({"imagePrefixes": ["r/"], "priorityClassNames": [], "runtimeClassNames": ["nvidia"],
                      "serviceTypes": ["ClusterIP"], "secretNames": ["hf"], "secretNamePrefixes": [],
                      "anySecret": False})
    assert Guardrails.from_json(raw) == Guardrails(image_prefixes=("r/",), runtime_class_names=("nvidia",),
                                                   service_types=("ClusterIP",), secret_names=("hf",),
                                                   any_secret=False)
    assert Guardrails.from_json("") == Guardrails()
    for bad, words in (("{", "is not JSON"), ('{"imagePrefix": []}', "unknown keys: imagePrefix"),
                       ('{"serviceTypes": "ClusterIP"}', "serviceTypes must be a list of strings"),
                       ('{"anySecret": "yes"}', "anySecret must be true or false"), ("[]", "must be a JSON object")):
        with pytest.raises(SystemExit, match=words):
            Guardrails.from_json(bad)


def test_the_operator_reads_the_guardrails_once_from_its_environment(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("QWEN_FLEET_GUARDRAILS", '{"serviceTypes": ["ClusterIP"], "anySecret": true}')
    assert OperatorConfig.from_env().guardrails == Guardrails(service_types=("ClusterIP",))
