"""``engine.extraArgs`` against vLLM's own flag table: owned flags in every form vLLM reads them, unknown and
abbreviated flags refused with the flag a person meant. (The table itself is checked against the real parser
in tests/contract/test_vllm_flags.py; the same messages from the apiserver in tests/integration.)"""

from __future__ import annotations

import pytest
from pydantic import ValidationError

from qwen_fleet.api import QwenInference
from qwen_fleet.api.engine import OWNED_FLAGS, OWNED_OPTIONS, owned_flag
from qwen_fleet.api.engine_flags import (
    closeness,
    first_stray_value,
    first_unknown_flag,
    flag_key,
    resolve,
    vllm_flags,
)
from qwen_fleet.versions import VLLM
from tests.invalid_specs import merged


def _spec(extra_args: list[str]) -> dict[str, object]:
    return {"metadata": {"name": "f", "namespace": "ns"}, "spec": merged({"engine": {"extraArgs": extra_args}})}


def test_the_table_is_the_pinned_vllm() -> None:
    assert vllm_flags().vllm == VLLM
    assert len(vllm_flags().flags) > 300


def test_every_owned_flag_is_in_the_table() -> None:
    """A typed field's flag renamed in a vLLM upgrade would otherwise stop being protected silently."""
    assert {f"--{name}" for name in OWNED_FLAGS} <= OWNED_OPTIONS
    # and their other names come along: the switch's negation, the short option, vLLM's aliases
    assert {"--no-enforce-eager", "-tp", "-pp", "-q", "--device-memory-utilization"} <= OWNED_OPTIONS


@pytest.mark.parametrize(("token", "key"), [
    ("--max-num-seqs=64", "--max-num-seqs"), ("--max_num_seqs", "--max-num-seqs"), ("-tp", "-tp"),
    ("-tp=2", "-tp"), ("-O3", "--optimization-level"), ("-O=3", "--optimization-level"),
    ("--hf-overrides.architectures+", "--hf-overrides"), ("--hf_overrides.a_b=1", "--hf-overrides"),
    ("--gpu-memory-utilization=0.9", "--gpu-memory-utilization"), ("8", None), ("-1", None), ("-0.5", None),
    ("", None), ("pooling", None), ("-x", "-x"),
])
def test_flag_key_reads_tokens_as_vllms_parser_does(token: str, key: str | None) -> None:
    assert flag_key(token) == key


@pytest.mark.parametrize("token", [
    "--max-num-seq=64", "--max-num-seq", "--max_num_seq", "--max-model", "--dtyp", "--enable-pref",
    "--no-enable-prefix", "--tensor-parallel", "-t", "-qawq", "--pipeline-para", "--trust_remote_code",
    "--served-model", "--gpu-memory-util=0.5",
])
def test_an_abbreviation_of_an_owned_flag_is_that_flag(token: str) -> None:
    assert owned_flag(token)
    with pytest.raises(ValidationError, match=r"engine\.extraArgs must not repeat a flag that a typed field owns"):
        QwenInference.model_validate(_spec([token, "1"] if "=" not in token else [token]))


@pytest.mark.parametrize(("token", "suggestion"), [
    ("--tool-call-parsr", "--tool-call-parser"),
    ("--enable-auto-tool-choise", "--enable-auto-tool-choice"),
    ("--reasoning-parsr", "--reasoning-parser"),
    ("--max-loraz", "--max-loras"),
    ("--uvicorn-log-levl", "--uvicorn-log-level"),
    ("--hf_overide", "--hf-overrides"),
    ("--limit-mm-per-promt", "--limit-mm-per-prompt"),
    ("--speculative_confg", "--speculative-config"),
    ("--generation-confg", "--generation-config"),
    ("--kv-transfer-confg", "--kv-transfer-config"),
    ("--disable-log-requests", "--enable-log-requests"),
    ("--enabel-prefix-caching", "--enable-prefix-caching"),
    ("--gpu-memory-utilisation", "--gpu-memory-utilization"),
    ("-tp2", "-tp"),
    ("--prot", "--port"),
    # abbreviations of flags no typed field owns: refused too, naming the flag in full
    ("--chat-template-content", "--chat-template-content-format"),
    ("--enable-prompt-token", "--enable-prompt-tokens-details"), ("--allowed-origin", "--allowed-origins"),
])
def test_an_unknown_or_abbreviated_flag_is_refused_naming_the_flag_meant(token: str, suggestion: str) -> None:
    with pytest.raises(ValidationError) as err:
        QwenInference.model_validate(_spec([token, "x"]))
    assert (f"engine.extraArgs: {flag_key(token)} is not a flag of vLLM {VLLM} (write flags in full); "
            f"did you mean {suggestion}?") in str(err.value)


@pytest.mark.parametrize(("token", "hint"), [
    ("--foo; rm -rf /", "; see docs/vllm-contract.md for the flags"),
    ("--max-num", "; it could be any of --max-num-active-seqs, --max-num-batched-tokens"),
    ("--chat-templat", "; it could be any of --chat-template, --chat-template-content-format"),
    ("--enable", "; it abbreviates"),
    ("--", "; it abbreviates"),
])
def test_garbage_and_ambiguous_abbreviations_are_refused(token: str, hint: str) -> None:
    with pytest.raises(ValidationError, match="is not a flag of vLLM") as err:
        QwenInference.model_validate(_spec([token]))
    assert hint in str(err.value)


@pytest.mark.parametrize("args", [
    ["--tokenizer-mode=auto", '--override-generation-config={"a": 1}'], ["--enable-log-requests"], ["--seed", "-1"],
    ["--compilation-config.mode", "3"], ["-O3"], ["--compilation-config", "{}"],
    ["--chat-template-content-format", "openai", "--enable-log-outputs"], ["--api_server_count=2"],
    [],
])
def test_full_flags_are_accepted(args: list[str]) -> None:
    QwenInference.model_validate(_spec(args))


def test_the_first_unknown_flag_is_the_one_named() -> None:
    assert first_unknown_flag(["--seed", "1", "--nope", "--also-nope"], OWNED_OPTIONS) == "--nope"


def test_resolution_follows_argparse() -> None:
    assert resolve("--max-num-seq") == ["--max-num-seqs"]
    assert resolve("--seed") == ["--seed"]
    assert len(resolve("--max-num")) == 6
    assert resolve("-qawq") == ["-q"]
    assert resolve("--nope") == []


def test_closeness_prefers_the_flag_of_the_same_length() -> None:
    assert closeness("--max-loraz", "--max-loras") > closeness("--max-loraz", "--max-lora-cls-labels")


@pytest.mark.parametrize(("args", "stray"), [
    (["--enable-log-requests", "true"], "true"),  # a switch takes no value
    (["--seed", "1", "2"], "2"),
    (["--seed=1", "2"], "2"),  # the value is attached already
    (["pooling", "--runner"], "pooling"),
    (["-O3", "x"], "x"),
    (["--hf-overrides.a", "1", "2"], "2"),  # a dotted key takes exactly the next token
    (["--api-key", "a", "b"], None),  # nargs "+"
    (["--seed", "-1"], None),  # a negative number is a value
    (["--runner", "pooling", "--enable-log-requests"], None),
    (["-O", "3"], None),
    (["--hf-overrides.a", "1", "--seed", "2"], None),
])
def test_a_value_no_flag_takes_is_found(args: list[str], stray: str | None) -> None:
    assert first_stray_value(args) == stray


def test_a_stray_value_is_refused_naming_it() -> None:
    with pytest.raises(ValidationError, match='"true" is not the value of the flag before it'):
        QwenInference.model_validate(_spec(["--enable-log-requests", "true"]))
