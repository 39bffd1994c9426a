"""When VllmServer(uniproc=True) runs the worker inside the engine core (tests/support/vllm_server.py): one rank
only, never over the caller's own setting, and not under QF_TEST_ENGINE_UNIPROC=0. No engine is started: the
options are read through vLLM's flag table, as the server's argv would be."""

from __future__ import annotations

from pathlib import Path

import pytest

from tests.support.vllm_server import UNIPROC_ENV, VllmServer

VAR = "VLLM_ENABLE_V1_MULTIPROCESSING"


def _env(argv: list[str], env: dict[str, str] | None = None, uniproc: bool = True) -> dict[str, str]:
    return VllmServer(argv, env or {}, Path("/m"), port=1, python="/bin/python", uniproc=uniproc).environment()


@pytest.mark.parametrize("argv", [[], ["--max-model-len", "1024"], ["--tensor-parallel-size", "1"], ["-tp", "1"]])
def test_one_rank_runs_the_worker_in_the_engine_core(argv: list[str], monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv(UNIPROC_ENV, raising=False)
    assert _env(argv)[VAR] == "0"


@pytest.mark.parametrize("argv", [["--tensor-parallel-size", "2"], ["-tp", "2"], ["--pipeline-parallel-size=2"],
                                  ["-pp", "2"], ["--data-parallel-size", "2"]])
def test_more_than_one_rank_keeps_the_multiprocessing_executor(argv: list[str],
                                                               monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv(UNIPROC_ENV, raising=False)
    assert VAR not in _env(argv)


def test_the_caller_s_setting_and_the_opt_out_win(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv(UNIPROC_ENV, raising=False)
    assert _env([], {VAR: "1"})[VAR] == "1"
    assert VAR not in _env([], uniproc=False)
    monkeypatch.setenv(UNIPROC_ENV, "0")
    assert VAR not in _env([])
