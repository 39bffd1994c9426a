"""The dedicated Job's own steps (stage, the engine's ``sh -c`` script, the progress sidecar), rendered and run as
local processes with a stand-in for ``vllm run-batch``: the script appends the answers only when run-batch
succeeds, so a run that dies midway leaves nothing behind and the next pod stages the same lines; a pod after a
finished run stages nothing and does not start the engine. The stand-in writes its output file once, at the end,
as vLLM 0.32's does (``vllm/entrypoints/launchers/run_batch.py``, ``write_file`` after ``asyncio.gather``); the
real engine is tests/contract/test_batch_dedicated.py.
"""

from __future__ import annotations

import json
import sys
from pathlib import Path

from tests.support.batch_job import rendered_job, run_dedicated_pod

SPEC = {"dedicated": {"model": "qwen-fleet/tiny-qwen2", "gpus": 0, "maxNumSeqs": 8},
        "input": {"pvc": {"claimName": "data", "path": "in.jsonl"}},
        "output": {"pvc": {"claimName": "data", "path": "results"}}}
# Called as `<python> -m vllm.entrypoints.openai.run_batch -i IN -o OUT <flags>`: records its argv, then answers
# every line into OUT, or (DIE) writes half of them and dies as a killed process would.
STUB = """#!{python}
import json, os, sys
args = sys.argv[1:]
assert args[:2] == ["-m", "vllm.entrypoints.openai.run_batch"], args
with open({calls!r}, "a") as calls:
    calls.write(json.dumps(args) + "\\n")
lines = open(args[args.index("-i") + 1]).read().splitlines()
with open(args[args.index("-o") + 1], "w") as out:
    for n, line in enumerate(lines):
        if {die} and n == len(lines) // 2:
            out.flush()
            os._exit(137)
        answer = {{"status_code": 200, "request_id": "r", "body": {{"usage": {{"completion_tokens": 3}}}}}}
        out.write(json.dumps({{"id": "v", "custom_id": json.loads(line)["custom_id"], "response": answer,
                               "error": None}}) + "\\n")
"""


def _stub(tmp: Path, die: bool) -> tuple[str, Path]:
    calls = tmp / "calls.jsonl"
    path = tmp / ("dying-run-batch" if die else "run-batch")
    path.write_text(STUB.format(python=sys.executable, calls=str(calls), die=die))
    path.chmod(0o755)
    return str(path), calls


def _ids(path: Path) -> list[str]:
    return [json.loads(x)["custom_id"] for x in path.read_text().splitlines()] if path.exists() else []


def test_a_dying_run_keeps_nothing_the_next_pod_redoes_it_and_a_finished_batch_stages_nothing(tmp_path: Path) -> None:
    claim, log, model = tmp_path / "claim", tmp_path / "job.log", tmp_path / "model"
    claim.mkdir()
    model.mkdir()
    ids = [f"q{i}" for i in range(10)]
    lines = [json.dumps({"custom_id": i, "method": "POST", "url": "/v1/chat/completions", "body": {"model": "m"}})
             for i in ids]
    (claim / "in.jsonl").write_text("\n".join([*lines[:3], "not json", *lines[3:]]) + "\n")
    out = claim / "results"
    job = rendered_job(SPEC)

    dying, calls = _stub(tmp_path, die=True)
    run = run_dedicated_pod(job, {"claim-0": claim, "work": tmp_path / "pod-1"}, dying, model, log)
    assert run.stage == 0 and run.engine not in (0, None), log.read_text()
    assert _ids(out / "output.jsonl") == []  # half the answers were written to the scratch file, none appended
    assert [json.loads(x)["line"] for x in (out / "errors.jsonl").read_text().splitlines()] == [4]
    argv = json.loads(calls.read_text().splitlines()[-1])
    assert argv[argv.index("--model") + 1] == str(model) and argv[argv.index("--max-num-seqs") + 1] == "8"

    answering, calls = _stub(tmp_path, die=False)
    run = run_dedicated_pod(job, {"claim-0": claim, "work": tmp_path / "pod-2"}, answering, model, log)
    assert (run.stage, run.engine, run.sidecar_outlived_engine) == (0, 0, True), log.read_text()
    assert _ids(tmp_path / "pod-2" / "pending.jsonl") == ids  # the dead run's lines, all staged again
    assert _ids(out / "output.jsonl") == ids
    assert len(calls.read_text().splitlines()) == 2

    run = run_dedicated_pod(job, {"claim-0": claim, "work": tmp_path / "pod-3"}, answering, model, log)
    assert (run.stage, run.engine) == (0, 0), log.read_text()
    assert (tmp_path / "pod-3" / "pending.jsonl").read_text() == ""
    assert len(calls.read_text().splitlines()) == 2  # the engine did not start
    assert _ids(out / "output.jsonl") == ids
    assert len((out / "errors.jsonl").read_text().splitlines()) == 1
