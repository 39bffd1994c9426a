"""Test engines run eager under pytest unless their argv chooses a compilation mode (tests/support/vllm_server.py)."""

from __future__ import annotations

import pytest

from tests.support.vllm_server import EAGER_ENV, with_test_compile_mode

BASE = ["/venv/bin/python", "-m", "vllm.entrypoints.openai.api_server", "--model", "/m", "--max-num-seqs", "8"]


@pytest.mark.parametrize("own", [["--enforce-eager"], ["--no-enforce-eager"], ["-O3"], ["-O", "0"],
                                 ["--compilation-config", "{}"], ["--compilation-config.mode=0"], ["-cc.mode=3"],
                                 ["--enforce_eager"], ["-O=0"]])
def test_an_argv_that_chooses_a_mode_keeps_it(monkeypatch: pytest.MonkeyPatch, own: list[str]) -> None:
    monkeypatch.setenv(EAGER_ENV, "1")
    assert with_test_compile_mode([*BASE, *own]) == [*BASE, *own]


def test_an_argv_without_a_choice_runs_eager_under_pytest(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv(EAGER_ENV, "1")
    assert with_test_compile_mode(BASE) == [*BASE, "--enforce-eager"]


def test_outside_pytest_the_argv_is_unchanged(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv(EAGER_ENV, raising=False)
    assert with_test_compile_mode(BASE) == BASE


@pytest.mark.parametrize("pp", [["--pipeline-parallel-size", "2"], ["--pipeline-parallel-size=2"], ["-pp", "4"],
                                ["--pipeline_parallel_size", "2"]])
def test_a_pipeline_parallel_argv_keeps_compiling(monkeypatch: pytest.MonkeyPatch, pp: list[str]) -> None:
    """vLLM 0.32's CPU runner sets up a stage's intermediate tensors only in the compile warm-up."""
    monkeypatch.setenv(EAGER_ENV, "1")
    assert with_test_compile_mode([*BASE, *pp]) == [*BASE, *pp]
    assert with_test_compile_mode([*BASE, "--pipeline-parallel-size", "1"]) == [*BASE, "--pipeline-parallel-size",
                                                                                 "1", "--enforce-eager"]
