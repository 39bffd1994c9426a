"""The CEL and the Python readings of ``engine.extraArgs`` agree: 400 seeded random argument lists (vLLM's option
strings, their prefixes, one-character misspellings, underscore and ``=`` forms, values, junk) sent to the real
apiserver (server-side dry run) and to the pydantic models. Same verdict every time, and for a refusal the
apiserver's text carries the pydantic message (the apiserver lists every failing rule, pydantic the first)."""

from __future__ import annotations

import json
import random
import string
from pathlib import Path

import pytest
from pydantic import ValidationError

from qwen_fleet.api import QwenInference
from qwen_fleet.api.engine_flags import vllm_flags
from qwen_fleet.reconcile.controller import validation_message
from qwen_fleet_dev.cluster import LocalCluster
from qwen_fleet_dev.rest import Rest, RestError

pytestmark = pytest.mark.cluster
LISTS = 400
SEED = 20261130
VALUES = ["8", "-1", "0.5", "-0.25", "auto", '{"a": 1}', "x y", ""]
JUNK = ["--foo; rm -rf /", "-", "--", "---model", "-x", "--=1", "-O3", "--hf-overrides.a", "-qawq",
        # code points beyond ASCII: both layers count and compare them alike
        "-é", "--måx-num-seqs", "--max-num-seqś", "-\u0661", "--seed\u200b", "--tool-call-parser\U0001f600"]


def _misspell(rng: random.Random, option: str) -> str:
    i = rng.randrange(1, len(option))  # never the leading dash
    letter = rng.choice(string.ascii_lowercase + "-_")
    edit = rng.choice(["insert", "delete", "substitute", "swap"])
    if edit == "insert":
        return option[:i] + letter + option[i:]
    if edit == "delete":
        return option[:i] + option[i + 1:]
    if edit == "substitute":
        return option[:i] + letter + option[i + 1:]
    return option[:i - 1] + option[i] + option[i - 1] + option[i + 1:]


def _token(rng: random.Random) -> str:
    option = rng.choice(vllm_flags().options)
    kind = rng.choice(["exact", "exact=", "prefix", "misspelt", "underscore", "value", "junk"])
    if kind == "exact":
        return option
    if kind == "exact=":
        return f"{option}={rng.choice(VALUES)}"
    if kind == "prefix":
        return option[:rng.randrange(2, len(option) + 1)]
    if kind == "misspelt":
        return _misspell(rng, option)
    if kind == "underscore":
        return option[:2] + option[2:].replace("-", "_")
    return rng.choice(VALUES if kind == "value" else JUNK)


def _tokens(rng: random.Random) -> list[str]:
    out: list[str] = []
    for _ in range(rng.randrange(1, 5)):
        token = _token(rng)
        out.append(token)
        flag = vllm_flags().by_option.get(token)
        if flag is not None and flag.nargs != "0" and rng.random() < 0.8:  # mostly with its value
            out.append(rng.choice(VALUES))
    return out


def corpus() -> list[list[str]]:
    rng = random.Random(SEED)
    return [_tokens(rng) for _ in range(LISTS)]


def _pydantic(args: list[str]) -> str | None:
    doc = {"metadata": {"name": "agree", "namespace": "default"},
           "spec": {"model": {"name": "Qwen/Qwen3-4B-Instruct-2507"}, "engine": {"extraArgs": args}}}
    try:
        QwenInference.model_validate(doc)
    except ValidationError as err:
        return validation_message(err).removeprefix("spec.engine: ")
    return None


def _apiserver(rest: Rest, args: list[str]) -> str | None:
    body = {"apiVersion": "qwenfleet.io/v1alpha1", "kind": "QwenInference", "metadata": {"name": "agree"},
            "spec": {"model": {"name": "Qwen/Qwen3-4B-Instruct-2507"}, "engine": {"extraArgs": args}}}
    try:
        rest.request("POST", "/apis/qwenfleet.io/v1alpha1/namespaces/default/qweninferences?dryRun=All", body)
    except RestError as err:
        return str(json.loads(err.body)["message"])
    return None


def test_the_apiserver_and_pydantic_read_extra_args_alike(cluster: LocalCluster, crd: Path) -> None:
    rest = Rest(cluster.server, cluster.admin_token, timeout=30)
    disagreements, refused = [], 0
    for args in corpus():
        ours, theirs = _pydantic(args), _apiserver(rest, args)
        refused += ours is not None
        if (ours is None) != (theirs is None) or (ours is not None and ours not in str(theirs)):
            disagreements.append((args, ours, theirs))
    assert disagreements == []
    # Both verdicts well represented (seeded: 350 refused, 50 admitted since the serving and multi-node flags
    # became owned).
    assert 100 < refused <= LISTS - 40, refused
