"""The committed table of vLLM's flags is the real parser's, and ``engine.extraArgs`` is read as the real parser
reads it: every token the parser takes for a typed field's flag (abbreviations included) is refused as owned,
and every token the API accepts is the very flag the parser resolves it to."""

from __future__ import annotations

import json
import os
import subprocess
from pathlib import Path

import pytest

from qwen_fleet.api.engine import OWNED_OPTIONS, owned_flag
from qwen_fleet.api.engine_flags import first_stray_value, first_unknown_flag, flag_key, resolve, vllm_flags

pytestmark = pytest.mark.vllm
HERE = Path(__file__).resolve().parent
ROOT = HERE.parents[1]
TABLE = ROOT / "operator" / "qwen_fleet" / "catalog" / "vllm_flags.json"
MISSPELT = ["--tool-call-parsr", "--enable-auto-tool-choise", "--max-loraz", "--hf_overide", "--speculative_confg",
            "--gpu-memory-utilisation", "--enabel-prefix-caching", "-tp2", "--prot", "--disable-log-requests",
            "--swap-space", "--worker-use-ray", "--foo", "--foo; rm -rf /", "--", "-", "-x", "---model"]


def _run(python: str, script: Path, stdin: str = "", *args: str) -> str:
    env = {**{k: v for k, v in os.environ.items() if k not in ("PYTHONPATH", "VIRTUAL_ENV")},
           "VLLM_TARGET_DEVICE": "cpu"}
    out = subprocess.run([python, str(script), *args], input=stdin, text=True, capture_output=True, env=env,
                         timeout=600, check=False)
    assert out.returncode == 0, out.stderr[-3000:]
    return out.stdout


def test_the_committed_table_is_the_real_parsers(vllm_python: str) -> None:
    fresh = _run(vllm_python, ROOT / "hack" / "vllm-flags.py")
    assert fresh == TABLE.read_text(), "vLLM's flags changed: run `make vllm-flags` and review the diff"


def _corpus() -> list[list[str]]:
    """Each option string, every abbreviation of it, its underscore and `=` forms, and misspellings."""
    tokens: set[str] = set(MISSPELT)
    for option in vllm_flags().options:
        shortest = 2 if option.startswith("--") else 1
        tokens.update(option[:n] for n in range(shortest + 1, len(option) + 1))
        tokens.update({option.replace("-", "_").replace("__", "--", 1), option + "=1", option + ".key"})
    tokens.update({"-O3", "-O=3", "-Odecode", "-qawq", "-q=awq", "-tp=2", "-cc.mode", "--hf_overrides.a_b"})
    # `--config <file>` makes vLLM read the file before parsing; `--config=<file>` is parsed like any flag.
    tokens = {"--config=x.yaml" if t == "--config" else t for t in tokens}
    return [[t] if flag_key(t) and _switch(t) else [t, "1"] for t in sorted(tokens)]


def _switch(token: str) -> bool:
    key = flag_key(token)
    found = resolve(key) if key else []
    if "." in token.split("=", maxsplit=1)[0]:  # vLLM moves `--flag.key value` to the end as `--flag {"key": value}`
        return False
    return "=" in token or (len(found) == 1 and vllm_flags().by_option[found[0]].nargs == "0")


@pytest.fixture(scope="module")
def resolved(vllm_python: str) -> list[tuple[str, str]]:
    corpus = _corpus()
    out = json.loads(_run(vllm_python, HERE / "vllm_flag_probe.py", json.dumps(corpus)))
    return [(argv[0], seen[0] if seen else "positional") for argv, seen in zip(corpus, out, strict=True)]


OWNED_DESTS = {flag.dest for flag in vllm_flags().flags if set(flag.options) & OWNED_OPTIONS}


def test_every_token_the_parser_takes_for_an_owned_flag_is_refused_as_owned(resolved: list[tuple[str, str]]
                                                                         ) -> None:
    slipped = [token for token, dest in resolved if dest in OWNED_DESTS and not owned_flag(token)]
    assert slipped == []
    over_claimed = [token for token, dest in resolved if owned_flag(token) and dest not in OWNED_DESTS]
    assert over_claimed == []
    # The abbreviations the pattern of full names let through: there are many.
    abbreviated = [t for t, d in resolved if d in OWNED_DESTS and flag_key(t) not in OWNED_OPTIONS]
    assert len(abbreviated) > 200, len(abbreviated)


def test_every_accepted_token_is_the_flag_the_parser_resolves(resolved: list[tuple[str, str]]) -> None:
    accepted = [(t, d) for t, d in resolved if not owned_flag(t) and first_unknown_flag([t], OWNED_OPTIONS) is None]
    wrong = [(t, d) for t, d in accepted
             if flag_key(t) is not None and vllm_flags().by_option[str(flag_key(t))].dest != d]
    assert wrong == []
    assert len(accepted) > 600, len(accepted)


def test_every_refused_token_is_an_error_or_an_abbreviation_to_the_parser(resolved: list[tuple[str, str]]) -> None:
    """What we refuse the parser either refuses too, ignores (a positional), or takes as an abbreviation."""
    refused = [(t, d) for t, d in resolved if first_unknown_flag([t], OWNED_OPTIONS) is not None]
    for token, dest in refused:
        key = str(flag_key(token))
        meant = [vllm_flags().by_option[o].dest for o in resolve(key)]
        assert dest in ("ambiguous", "unknown", "positional") or meant == [dest], (token, dest, meant)
    assert ("--foo; rm -rf /", "positional") in refused
    assert len(refused) > 4000, len(refused)



STRAY = [["--enable-log-requests", "true"], ["--seed", "1", "2"], ["--seed=1", "2"], ["pooling", "--runner", "x"],
         ["-O3", "x"], ["--hf-overrides.a", "1", "2"], ["--disable-log-stats", "yes"], ["--foo; rm -rf /"]]
CLAIMED = [["--api-key", "a", "b"], ["--seed", "-1"], ["--runner", "pooling", "--enable-log-requests"], ["-O", "3"],
           ["--hf-overrides.a", "1", "--seed", "2"], [], ["--allowed-origins", '["*"]']]


def test_a_value_no_flag_takes_is_what_the_parser_drops(vllm_python: str) -> None:
    """The stray values the API refuses are the ones the server's parser puts in the model_tag it ignores (or
    fails on); the lists it accepts leave model_tag empty: nothing dropped."""
    out = json.loads(_run(vllm_python, HERE / "vllm_flag_probe.py", json.dumps(STRAY + CLAIMED), "--model-tag"))
    for argv, tag in zip(STRAY, out[:len(STRAY)], strict=True):
        stray = first_stray_value(argv) or first_unknown_flag(argv, OWNED_OPTIONS)
        assert stray is not None and (tag == stray or isinstance(tag, dict)), (argv, tag)
    for argv, tag in zip(CLAIMED, out[len(STRAY):], strict=True):
        assert first_stray_value(argv) is None and tag is None, (argv, tag)
