"""Invalid QwenBatch specs, used against both layers: the real apiserver (tests/integration/test_batch.py) and
the pydantic models (tests/unit/test_batch_api.py). Each case names what a person should read."""

from __future__ import annotations

from typing import Any

from tests.invalid_specs import Case, merged

BATCH_BASE: dict[str, Any] = {
    "input": {"configMap": {"name": "prompts"}},
    "output": {"pvc": {"claimName": "results", "path": "run-1"}},
    "fleetRef": {"name": "qwen"},
}


def _rule(id: str, spec: dict[str, Any], message: str) -> Case:
    return Case(id, merged(spec, BATCH_BASE), message, message)


BATCH_CASES = [
    _rule("two-inputs", {"input": {"url": "https://example.com/in.jsonl"}},
          "input needs exactly one of configMap, pvc or url"),
    _rule("no-input", {"input": {"configMap": None}}, "input needs exactly one of configMap, pvc or url"),
    _rule("two-outputs", {"output": {"configMap": {"name": "out"}}}, "output needs exactly one of configMap or pvc"),
    _rule("both-modes", {"dedicated": {"model": "Qwen/Qwen3-0.6B"}}, "spec needs exactly one of fleetRef or "
          "dedicated"),
    _rule("no-mode", {"fleetRef": None}, "spec needs exactly one of fleetRef or dedicated"),
    _rule("dedicated-to-configmap", {"fleetRef": None, "dedicated": {"model": "Qwen/Qwen3-0.6B"},
                                     "output": {"pvc": None, "configMap": {"name": "out"}}},
          "dedicated mode needs output.pvc"),
    _rule("path-escapes-claim", {"output": {"pvc": {"path": "a/../../etc"}}}, "path must stay inside the claim"),
    Case("url-not-http", merged({"input": {"configMap": None, "url": "ftp://example.com/x"}}, BATCH_BASE),
         "spec.input.url", "String should match pattern"),
    Case("concurrency-too-high", merged({"concurrency": 1000}, BATCH_BASE), "spec.concurrency",
         "less than or equal to 256"),
    Case("concurrency-zero", merged({"concurrency": 0}, BATCH_BASE), "spec.concurrency",
         "greater than or equal to 1"),
    Case("absolute-path", merged({"input": {"configMap": None, "pvc": {"claimName": "c", "path": "/etc/x"}}},
                                 BATCH_BASE), "spec.input.pvc.path", "String should match pattern"),
    Case("too-many-retries", merged({"maxRetries": 50}, BATCH_BASE), "spec.maxRetries",
         "less than or equal to 20"),
    Case("kueue-queue-name", merged({"fleetRef": None, "dedicated": {"model": "m", "queueName": "bad name!"}},
                                    BATCH_BASE), "spec.dedicated.queueName", "String should match pattern"),
    Case("model-claim-relative-path",
         merged({"fleetRef": None, "dedicated": {"model": "m", "modelClaim": {"claimName": "w", "path": "models/x"}}},
                BATCH_BASE), "spec.dedicated.modelClaim.path", "String should match pattern"),
    _rule("dedicated-env-value-and-value-from",
          {"fleetRef": None, "dedicated": {"model": "m", "env": [
              {"name": "TOKEN", "value": "x", "valueFrom": {"secretKeyRef": {"name": "s", "key": "k"}}}]}},
          "an environment variable takes value or valueFrom, not both"),
    _rule("toleration-without-key", {"scheduling": {"tolerations": [{"operator": "Equal", "value": "x"}]}},
          "a toleration without a key must use operator Exists"),
    _rule("configmap-output-of-a-url", {"input": {"configMap": None, "url": "https://example.com/in.jsonl"},
                                        "output": {"pvc": None, "configMap": {"name": "out"}}},
          "output.configMap holds at most 1000000 bytes and the answers of an input larger than that cannot fit: "
          "use output.pvc"),
    _rule("configmap-output-of-a-large-pvc-file",
          {"input": {"configMap": None, "pvc": {"claimName": "c", "path": "in.jsonl"}, "maxBytes": 1_000_001},
           "output": {"pvc": None, "configMap": {"name": "out"}}},
          "use output.pvc, or (for an input from a url or pvc) set input.maxBytes to at most 1000000"),
    Case("input-max-bytes-zero", merged({"input": {"maxBytes": 0}}, BATCH_BASE), "spec.input.maxBytes",
         "greater than or equal to 1"),
    Case("input-max-lines-too-high", merged({"input": {"maxLines": 200_000_000}}, BATCH_BASE), "spec.input.maxLines",
         "less than or equal to 100000000"),
    Case("flush-seconds-zero", merged({"output": {"pvc": None, "configMap": {"name": "out", "flushSeconds": 0}}},
                                      BATCH_BASE), "spec.output.configMap.flushSeconds", "greater than or equal to 1"),
    Case("scheduling-bad-label-value", merged({"scheduling": {"nodeSelector": {"type": "not a label!"}}}, BATCH_BASE),
         "spec.scheduling.nodeSelector.type", "String should match pattern"),
]
