"""The llm-d inference simulator (github.com/llm-d/llm-d-inference-sim, ``hack/build-binaries.sh sim``) as a host
process: an OpenAI-compatible server that exports vLLM's metric names and schedules requests as vLLM does at the
level a client or a scraper sees (``--max-num-seqs`` running, the rest waiting), with a time to first token and an
inter-token latency of its own flags instead of a model.

For tests where the engine's *behaviour* is what the system under test reacts to (the HPA on the queue, a picker
on the metrics), not the engine's internals: its queue under a burst is set by the flags, not by what two CPU
engines and the rest of a loaded 2-core machine leave of the CPU. Where the contract with vLLM itself is the point
(arguments, capacity, probes, the Qwen layer, the real node, drain) the tests run the real engine
(docs/vllm-contract.md, "Which tests run which engine"); tests/contract/test_sim_contract.py checks, against the
real vLLM server, that the simulator's metrics and responses are what our code reads.

What the simulator is run with, and why (its flags: pkg/common/parser.go of v0.10.2):
- ``--model NAME``: with no ``--served-model-name`` the model name is the served name, as in vLLM; it is also the
  ``model_name`` label of its series.
- ``--force-dummy-tokenizer``: its regex tokenizer. Without it, a model name that exists on huggingface.co (asked
  over the network) makes it tokenize through a vLLM render service.
- ``--mode random``: random text, as a random-weight model answers; ``ignore_eos`` then gives exactly
  ``max_tokens`` tokens, as vLLM does.
- the latency and load knobs (``time_to_first_token``, ``inter_token_latency``, ``max_num_seqs``,
  ``max_model_len``) as arguments of :class:`SimServer`.
It listens on every IPv4 address (``net.Listen("tcp4", ":PORT")``; v0.10.2 has no host flag), so two of them
cannot share one port on two loopback addresses as the picker's tests' vLLM servers do.

The process handling (its own process group, death with the parent, SIGTERM then SIGKILL, ``/health``, the
``/metrics`` reader) is :class:`~tests.support.vllm_server.VllmServer`'s; only the command line and the start
differ (no vLLM environment, no eager-mode flag, no nice: the simulator's latencies are sleeps that a reniced
process would oversleep on a busy machine).
"""

from __future__ import annotations

import os
import subprocess
import time
from collections.abc import Sequence
from pathlib import Path

from qwen_fleet_dev import binaries
from qwen_fleet_dev.processes import _die_with_parent
from tests.support.vllm_server import VllmServer

DEFAULT_MODEL = "qwen-tiny"  # the served model name of the suite's tiny Qwen2 (tests/support/tiny_qwen.py)
STARTUP_TIMEOUT_S = 60.0  # it serves within a second; a ceiling against a hang, not a bar


class SimServer(VllmServer):
    """One ``llm-d-inference-sim`` process on ``port`` (a free one by default), serving ``served_model_name``.

    ``time_to_first_token`` and ``inter_token_latency`` are in seconds (sent as Go durations in milliseconds);
    ``extra_args`` are further simulator flags (``--failure-injection-rate``, ``--lora-modules`` ...).
    """

    def __init__(
        self,
        *,
        served_model_name: str = DEFAULT_MODEL,
        port: int | None = None,
        max_num_seqs: int = 5,
        max_model_len: int = 1024,
        time_to_first_token: float = 0.0,
        inter_token_latency: float = 0.0,
        extra_args: Sequence[str] = (),
        log_path: Path | None = None,
        binary: Path | None = None,
        seed: int = 1,
    ) -> None:
        super().__init__([], {}, ".", port, served_model_name=served_model_name, log_path=log_path,
                         startup_timeout=STARTUP_TIMEOUT_S)
        self.binary = binary
        self.max_num_seqs = max_num_seqs
        self.max_model_len = max_model_len
        self.time_to_first_token = time_to_first_token
        self.inter_token_latency = inter_token_latency
        self.seed = seed
        self.extra_args = list(extra_args)

    def argv(self) -> list[str]:
        binary = self.binary or binaries.ensure_sim()  # built from the module proxy when missing, never skipped
        return [
            str(binary),
            "--model", self.served_model_name,
            "--port", str(self.port),
            "--max-num-seqs", str(self.max_num_seqs),
            "--max-model-len", str(self.max_model_len),
            "--time-to-first-token", _ms(self.time_to_first_token),
            "--inter-token-latency", _ms(self.inter_token_latency),
            "--mode", "random",
            "--seed", str(self.seed),
            "--force-dummy-tokenizer",
            *self.extra_args,
        ]

    def environment(self) -> dict[str, str]:
        # POD_IP would become its advertised address; nothing else of ours concerns it.
        return {k: v for k, v in os.environ.items() if k != "POD_IP"}

    def start(self) -> SimServer:
        argv = self.argv()
        self.log_path.parent.mkdir(parents=True, exist_ok=True)
        started = time.monotonic()
        with self.log_path.open("ab") as out:
            out.write(f"# {' '.join(argv)}\n".encode())
            out.flush()
            self.proc = subprocess.Popen(argv, stdout=out, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL,
                                         env=self.environment(), cwd=self.log_path.parent,
                                         start_new_session=True, preexec_fn=_die_with_parent)
        try:
            self._wait_ready()
        except BaseException:
            self.stop()
            raise
        self.startup_seconds = time.monotonic() - started
        return self

    def __enter__(self) -> SimServer:
        return self.start()


def _ms(seconds: float) -> str:
    """A Go duration (time.ParseDuration) in whole milliseconds."""
    return f"{round(seconds * 1000)}ms"
