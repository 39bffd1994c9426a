"""A dedicated QwenBatch's Job, its steps run in order as local processes on the real vLLM CPU engine: 200 lines
plus 2 malformed ones complete, and a restarted Job (a new pod: same claim, new emptyDir) redoes nothing.

The steps are the rendered Job's own (render/batch.py): the ``stage`` init container (``qwen-fleet batch-run
--stage``), the ``progress`` native sidecar (``--follow``, stopped with SIGTERM once the engine ends, as the
kubelet does) and the ``vllm`` container's ``sh -c`` script, which runs
``python3 -m vllm.entrypoints.openai.run_batch`` with every flag the render writes. Only paths, interpreters and
the model change, by the rule in tests/support/batch_job.py.
"""

from __future__ import annotations

import json
import signal
from collections import Counter
from pathlib import Path

import pytest

from tests.support.batch_job import rendered_job, run_dedicated_pod

pytestmark = [pytest.mark.vllm, pytest.mark.slow]  # starts an engine of its own
REQUESTS = 200
MAX_TOKENS = 8
# 1-based line numbers of the malformed lines in the input, and what the stage must say of each.
MALFORMED = {51: ("{not json", "not JSON"),
             152: (json.dumps({"custom_id": "bad-url", "method": "POST", "url": "/v1/images/generations",
                               "body": {}}), "is not served")}
SPEC = {"dedicated": {"model": "qwen-fleet/tiny-qwen2", "gpus": 0, "maxModelLen": 1024, "maxNumSeqs": 8,
                      "dtype": "bfloat16"},
        "input": {"pvc": {"claimName": "batch-data", "path": "in/input.jsonl"}},
        "output": {"pvc": {"claimName": "batch-data", "path": "out/results"}}}


def _write_input(path: Path, model: str) -> list[str]:
    """REQUESTS chat lines with the malformed ones among them; returns the valid lines' custom_ids."""
    ids: list[str] = []
    lines: list[str] = []
    for i in range(REQUESTS):
        while len(lines) + 1 in MALFORMED:
            lines.append(MALFORMED[len(lines) + 1][0])
        ids.append(f"req-{i:03d}")
        lines.append(json.dumps({"custom_id": ids[-1], "method": "POST", "url": "/v1/chat/completions",
                                 "body": {"model": model, "max_tokens": MAX_TOKENS, "ignore_eos": True,
                                          "temperature": 0,
                                          "messages": [{"role": "user", "content": f"Summarize item {i}."}]}}))
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text("\n".join(lines) + "\n")
    assert len(lines) == REQUESTS + len(MALFORMED)
    return ids


def _pod(claim: Path, work: Path, log: Path, vllm_python: str, model: Path, engine_runs: bool) -> None:
    """One pod of the Job: the init container and the engine must exit 0; the sidecar must outlive the engine
    and stop on SIGTERM (0, after its last report). When the engine has nothing to run (``engine_runs`` false)
    it ends within a second, and the SIGTERM may come before the sidecar's interpreter has installed its handler:
    it then dies of the signal, as it would in a pod, where a sidecar's exit status does not decide the Job."""
    run = run_dedicated_pod(rendered_job(SPEC), {"claim-0": claim, "work": work}, vllm_python, model, log)
    assert (run.stage, run.engine) == (0, 0), log.read_text()[-6000:]
    assert run.sidecar_outlived_engine, log.read_text()[-4000:]
    assert run.sidecar in ((0,) if engine_runs else (0, -signal.SIGTERM)), log.read_text()[-4000:]


def _records(path: Path) -> list[dict[str, object]]:
    return [json.loads(line) for line in path.read_text().splitlines()]


def test_dedicated_job_completes_200_and_a_restarted_job_redoes_nothing(
        vllm_python: str, tiny_qwen_dir: Path, tmp_path: Path) -> None:
    claim, log = tmp_path / "claim", tmp_path / "job.log"
    # The local rule serves the model from its directory (--model <dir>), so that is the name a body gives.
    ids = _write_input(claim / "in" / "input.jsonl", str(tiny_qwen_dir))
    out = claim / "out" / "results"

    _pod(claim, tmp_path / "pod-1", log, vllm_python, tiny_qwen_dir, engine_runs=True)
    staged = (tmp_path / "pod-1" / "pending.jsonl").read_text().splitlines()
    assert [json.loads(line)["custom_id"] for line in staged] == ids
    assert json.loads((tmp_path / "pod-1" / "stage.json").read_text()) == \
        {"total": REQUESTS + len(MALFORMED), "completed": 0, "failed": len(MALFORMED)}

    records = _records(out / "output.jsonl")
    counts = Counter(r["custom_id"] for r in records)
    assert len(records) == REQUESTS and set(counts) == set(ids) and max(counts.values()) == 1
    for record in records:
        response = record["response"]
        assert record["error"] is None and isinstance(response, dict), record
        assert response["status_code"] == 200, record
        assert response["body"]["usage"]["completion_tokens"] == MAX_TOKENS, record
    errors = _records(out / "errors.jsonl")
    assert sorted(int(str(e["line"])) for e in errors) == sorted(MALFORMED)
    for error in errors:
        detail = error["error"]
        assert isinstance(detail, dict) and detail["code"] == "invalid_line", error
        assert MALFORMED[int(str(error["line"]))][1] in detail["message"], error
    first_output, first_errors = (out / "output.jsonl").read_bytes(), (out / "errors.jsonl").read_bytes()

    # The Job's next pod (a restart after the run, e.g. the node went away before the Job saw it succeed).
    _pod(claim, tmp_path / "pod-2", log, vllm_python, tiny_qwen_dir, engine_runs=False)
    assert (tmp_path / "pod-2" / "pending.jsonl").read_text() == ""  # staged 0 lines
    assert json.loads((tmp_path / "pod-2" / "stage.json").read_text()) == \
        {"total": REQUESTS + len(MALFORMED), "completed": REQUESTS, "failed": len(MALFORMED)}
    assert not (tmp_path / "pod-2" / "result.jsonl").exists()  # the engine had nothing to run
    assert (out / "output.jsonl").read_bytes() == first_output
    assert (out / "errors.jsonl").read_bytes() == first_errors
    print(f"output: {len(records)} lines, {len(counts)} distinct custom_ids; errors: {len(errors)}; "
          "second pod staged 0 lines")
