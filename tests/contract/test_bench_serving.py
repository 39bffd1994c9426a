"""The serving benchmark's local target end to end: two real CPU engines (one per setting), vLLM's real client,
the table it writes (bench/serving.py, the tool behind `make bench-serving`)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from bench import serving

pytestmark = [pytest.mark.vllm, pytest.mark.slow]

NUMERIC = ("duration_s", "request_throughput", "output_throughput", "total_token_throughput", "mean_ttft_ms",
           "median_ttft_ms", "p99_ttft_ms", "mean_itl_ms", "p99_itl_ms", "p99_e2el_ms")


def test_a_2x1_sweep_on_the_tiny_model_writes_a_row_per_setting(tmp_path: Path) -> None:
    workdir = tmp_path / "work"
    code = serving.main(["--mode", "grid", "--max-num-seqs", "2,8", "--max-num-batched-tokens", "1024",
                         "--num-prompts", "8", "--input-len", "32", "--output-len", "16",
                         "--results-dir", str(tmp_path), "--name", "t", "--workdir", str(workdir)])
    doc = json.loads((tmp_path / "t.json").read_text())
    assert code == 0, doc
    assert [(r["maxNumSeqs"], r["maxNumBatchedTokens"]) for r in doc["rows"]] == [(2, 1024), (8, 1024)]
    for row in doc["rows"]:
        assert row["error"] is None
        figures = row["figures"]
        assert figures["failed"] == 0
        assert figures["completed"] == 8
        for name in NUMERIC:
            assert figures[name] > 0, (row["maxNumSeqs"], name, figures[name])
        # The setting reached the engine: the server's command line (first line of its log) carries it.
        argv = (workdir / f"seqs{row['maxNumSeqs']}-tokens1024.vllm.log").read_text().splitlines()[0].split()
        assert argv[argv.index("--max-num-seqs") + 1] == str(row["maxNumSeqs"])
        assert argv[argv.index("--max-num-batched-tokens") + 1] == "1024"
    assert doc["recommended"] in ({"maxNumSeqs": 2, "maxNumBatchedTokens": 1024},
                                  {"maxNumSeqs": 8, "maxNumBatchedTokens": 1024})
    table = [line for line in (tmp_path / "t.md").read_text().splitlines() if line.startswith("| ")]
    assert len(table) == 3  # header and two settings
    assert sum("**←**" in line for line in table) == 1
