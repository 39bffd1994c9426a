"""The routing acceptance bench of issue 17: ``make bench-routing`` (``python -m bench.routing``), figures to
bench/results/routing.{json,md,png}.

One run, two real vLLM CPU servers (the suite's tiny Qwen2, each started from the Deployment the operator renders
for the tiny fleet with ``spec.routing`` and two request classes), the real endpoint picker (cmd/epp v1.5.0) run
from the rendered Deployment and ConfigMap against a real local apiserver, and a gateway's half that drives the
picker through its ext-proc gRPC interface: tests/support/picker_fleet.py and tests/support/extproc.py, the same
set-up as tests/integration/test_epp_picks.py. The servers' KV cache is made small
(``engine.extraArgs: --num-gpu-blocks-override``, the same for every phase) so that a shared-prefix working set
fits the two caches together but not one: the case where keeping a prefix on one replica matters.

Phases, one after the other on the same servers and picker:

* **A, shared prefixes**: ``prefixes`` long prompt prefixes (system prompt, tool schemas, history stand-ins of
  ``prefix_chars`` characters, one token a character with the tiny tokenizer), each followed by ``per_prefix``
  different questions, in one seeded shuffled order, sent by ``concurrency`` clients (closed loop), streamed,
  ``prefix_max_tokens`` tokens each. The same workload three times, routed (1) at random, as a plain Service's
  kube-proxy spreads connections (iptables mode), (2) round-robin (kube-proxy's IPVS default), (3) by the picker;
  each run's prefixes start with a tag of their own, so no run finds another's blocks in a cache. Figures: the
  servers' prefix-cache hit rate over the run (``vllm:prefix_cache_hits_total`` / ``queries_total``, both
  servers, before/after), TTFT p50/p99, requests per server and servers per prefix.
* **B, a flood of long requests**: ``flood_concurrency`` clients keep long prompts (``long_chars``, unique) of
  ``long_max_tokens`` tokens in flight through the picker, more than the servers run at once, so a queue forms;
  after ``flood_warmup_s`` a short client sends ``short_count`` short streamed requests at ``short_rate`` a second
  (open loop). Without classes (no objective header, no body priority: all 0), and with the classes of
  docs/routing.md (short: ``x-gateway-inference-objective: qwen-tiny-interactive`` and vLLM priority -10, long:
  ``qwen-tiny-batch`` and 0: the objectives' ``qwenfleet.io/vllm-priority`` annotations), ``flood_repeats``
  times each, alternating. Figures: the short requests' TTFT p50/p99 per run and pooled, the long ones' count,
  rate and latency, preemptions, and each server's waiting and running requests once a second.
* **C, a replica killed mid-run**, twice, once per gateway retry policy, with the same workload and victim:
  ``kill_rate`` requests a second through the picker (open loop: a failed request does not bring the next one
  sooner, as with users); after ``kill_after_s`` one server's process group is SIGKILLed. The bench does the
  kubelet's part (KWOK does none): a pod whose server process has exited is marked NotReady at the next 1-s
  relist, and a running one that fails the rendered readiness probe (``/health``, its period, timeout and failure
  threshold) as the kubelet counts it. The gateway's half (tests/support/extproc.py, Envoy's override_host) goes
  down the picker's endpoint list: **C1** on a connect failure only (``retry_on: connect-failure``), **C2** also
  when the connection that took the request is reset or closed before any response byte (``retry_on:
  connect-failure,reset``). Between the two the killed server is started again from the same argv on the same
  address, its pod marked Ready again (what the kubelet writes once the restarted container passes its readiness
  probe), and the picker holds it again. Figures per policy: requests in flight on the victim at the kill (sent
  to it before) and how many of them failed, failed requests beyond those (the acceptance: none) and by kind,
  retries by reason, requests served by a fallback, requests the picker named the victim for first, the seconds
  until NotReady and until the picker dropped the pod, and the victim named after that (none).

Nothing here asserts a time; it measures. On 2 cores everything (two engines, etcd, apiserver, KWOK, picker, the
clients) shares the machine, so absolute times are this machine's; the comparisons are within one run. Each
server's processes are pinned to a CPU of their own (``pin_engines``; see ``pin_engines()`` for why).
"""

from __future__ import annotations

import argparse
import contextlib
import functools
import http.client
import json
import os
import platform
import random
import re
import shutil
import signal
import socket
import sys
import tempfile
import threading
import time
import urllib.request
from collections import Counter
from collections.abc import Callable
from dataclasses import asdict, dataclass, field, fields
from pathlib import Path
from typing import Any

from tests.support.extproc import (
    CONNECT_FAILURE,
    CONNECT_FAILURE_RESET,
    RETRIED_CONNECT,
    RETRIED_RESET,
    Attempt,
    Gateway,
    PickerError,
    UpstreamError,
    forward,
)
from tests.support.picker_fleet import (
    EarlyRenderedServer,
    PickerFleet,
    loopback_hosts,
    new_namespace,
    one,
    render,
    set_not_ready,
    set_ready,
    spawn_servers,
    start_picker_fleet,
)
from tests.support.serving import NAME
from tests.support.tiny_qwen import TinyQwen, make_tiny_model, vllm_python

from bench.routing_report import markdown, plot, summary
from qwen_fleet import versions
from qwen_fleet_dev import binaries
from qwen_fleet_dev.cluster import LocalCluster

RESULTS = Path(__file__).resolve().parent / "results"
CLASSES = [{"name": "interactive", "priority": 10}, {"name": "batch", "priority": 0}]
OBJECTIVE_HEADER = "x-gateway-inference-objective"
WORDS = ("replica", "prefix", "cache", "token", "queue", "gateway", "picker", "pool", "shard", "tenant", "schema",
         "tool", "history", "summary", "latency", "budget")


@dataclass(frozen=True)
class Settings:
    kv_blocks: int = 48
    prefixes: int = 12
    per_prefix: int = 12
    prefix_chars: int = 760
    concurrency: int = 4
    prefix_max_tokens: int = 4
    flood_concurrency: int = 24
    long_chars: int = 840
    long_max_tokens: int = 64
    flood_warmup_s: float = 5.0
    flood_repeats: int = 3
    short_rate: float = 4.0
    short_count: int = 80
    short_max_tokens: int = 8
    kill_rate: float = 8.0
    kill_max_tokens: int = 48
    kill_after_s: float = 8.0
    after_drop_s: float = 10.0
    seed: int = 17
    pin_engines: int = 1  # 1: each server's processes on a CPU of their own, as a pod with its own CPU


@dataclass
class Record:
    start: float  # monotonic
    end: float
    endpoint: str | None  # where it was served, or failed (None: the picker named none)
    ttft: float | None  # streamed requests that succeeded
    status: int | None
    error: str | None = None
    picked: list[str] = field(default_factory=list)  # the picker's endpoints, best first (empty: not through it)
    refused: list[str] = field(default_factory=list)  # refused at connect (nothing sent), before ``endpoint``
    sent: float | None = None  # monotonic: when the request went out to ``endpoint`` (None: never sent)
    attempts: list[Attempt] = field(default_factory=list)  # every endpoint tried, in order (through the picker)


def chat(content: str, max_tokens: int, stream: bool, priority: int | None = None) -> dict[str, Any]:
    body: dict[str, Any] = {"model": NAME, "messages": [{"role": "user", "content": content}],
                            "max_tokens": max_tokens, "ignore_eos": True, "temperature": 0}
    if stream:
        body["stream"] = True
    if priority is not None:
        body["priority"] = priority
    return body


def through_picker(gateway: Gateway, body: dict[str, Any], headers: dict[str, str] | None = None) -> Record:
    start = time.monotonic()
    try:
        exchange = gateway.post("/v1/chat/completions", body, headers)
    except UpstreamError as err:  # "<kind>: <endpoint>: ...": kill_report counts failures by kind
        kind = type(err.__cause__).__name__
        return Record(start, time.monotonic(), err.endpoint, None, None, f"{kind}: {err}"[:200], err.picked,
                      err.refused, err.sent, err.attempts)
    except (PickerError, AssertionError, StopIteration, OSError) as err:
        return Record(start, time.monotonic(), None, None, None, f"picker: {type(err).__name__}: {err}"[:200])
    except Exception as err:  # grpc.RpcError and the like: the exchange broke, count it
        return Record(start, time.monotonic(), None, None, None, f"{type(err).__name__}: {err}"[:200])
    error = None if exchange.status == 200 else f"HTTP {exchange.status}: {str(exchange.reply)[:150]}"
    return Record(start, time.monotonic(), exchange.endpoint, exchange.ttft, exchange.status, error, exchange.picked,
                  exchange.refused, exchange.sent, exchange.attempts)


def direct(endpoint: str, body: dict[str, Any]) -> Record:
    """What a plain Service does once kube-proxy has chosen: the request goes straight to the endpoint."""
    start = time.monotonic()
    try:
        status, _, raw, first = forward(endpoint, "/v1/chat/completions", json.dumps(body).encode(), 300)
    except (OSError, http.client.HTTPException) as err:
        return Record(start, time.monotonic(), endpoint, None, None, f"{type(err).__name__}: {err}"[:200])
    error = None if status == 200 else f"HTTP {status}: {raw[:150]!r}"
    return Record(start, time.monotonic(), endpoint, None if first is None else first - start, status, error)


def closed_loop(jobs: list[Callable[[], Record]], concurrency: int) -> list[Record]:
    """``concurrency`` clients, each sending the next job as soon as its last one has ended; in job order."""
    results: list[Record | None] = [None] * len(jobs)
    lock = threading.Lock()
    next_job = iter(range(len(jobs)))

    def client() -> None:
        while True:
            with lock:
                i = next(next_job, None)
            if i is None:
                return
            results[i] = jobs[i]()

    threads = [threading.Thread(target=client, daemon=True) for _ in range(concurrency)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    return [r for r in results if r is not None]


def flood(job: Callable[[int], Record], concurrency: int, stop: threading.Event) -> tuple[list[Record], list[Any]]:
    """``concurrency`` clients sending ``job(i)`` back to back until ``stop``; returns the records and threads."""
    records: list[Record] = []
    lock = threading.Lock()
    counter = iter(range(10**9))

    def client() -> None:
        while not stop.is_set():
            with lock:
                i = next(counter)
            record = job(i)
            with lock:
                records.append(record)

    threads = [threading.Thread(target=client, daemon=True) for _ in range(concurrency)]
    for thread in threads:
        thread.start()
    return records, threads


def open_loop(job: Callable[[int], Record], rate: float, count: int | None = None,
              stop: threading.Event | None = None) -> list[Record]:
    """Request i starts at i / rate seconds, whatever the earlier ones are doing (users arrive, and a failed
    request does not make the next one come sooner), until ``count`` were sent or ``stop`` is set; then waits
    for the ones in flight."""
    records: dict[int, Record] = {}

    def send(i: int) -> None:
        records[i] = job(i)

    threads = []
    began = time.monotonic()
    i = 0
    while (count is None or i < count) and not (stop is not None and stop.is_set()):
        thread = threading.Thread(target=send, args=(i,), daemon=True)
        thread.start()
        threads.append(thread)
        i += 1
        delay = max(0.0, began + i / rate - time.monotonic())
        if stop is not None:
            stop.wait(delay)
        else:
            time.sleep(delay)
    for thread in threads:
        thread.join()
    return [records[k] for k in sorted(records)]


def filler(rng: random.Random, chars: int) -> str:
    text = ""
    while len(text) < chars:
        text += (" " if text else "") + rng.choice(WORDS)
    return text[:chars]


def prefix_workload(s: Settings, tag: str) -> list[str]:
    """The shared-prefix prompts in send order: the order and the texts come from the seed, the tag leads every
    prefix so that two runs of the workload share no block."""
    rng = random.Random(s.seed)
    prefixes = [f"[{tag} tenant {p}] " + filler(random.Random(s.seed * 1000 + p), s.prefix_chars)
                for p in range(s.prefixes)]
    order = [p for p in range(s.prefixes) for _ in range(s.per_prefix)]
    rng.shuffle(order)
    return [f"{prefixes[p]}\nQuestion {i}: which {WORDS[i % len(WORDS)]} comes next?" for i, p in enumerate(order)]


COUNTERS = ("vllm:prefix_cache_hits_total", "vllm:prefix_cache_queries_total", "vllm:num_preemptions_total")


def counters(servers: dict[str, EarlyRenderedServer]) -> dict[str, float]:
    """The servers' counters of COUNTERS, summed over both."""
    totals = dict.fromkeys(COUNTERS, 0.0)
    for server in servers.values():
        samples = server.metrics()
        for key in COUNTERS:
            totals[key] += samples.get(key, 0.0)
    return totals


def delta(before: dict[str, float], after: dict[str, float], key: str) -> float:
    return after[key] - before[key]


def phase_a(fleet: PickerFleet, s: Settings) -> dict[str, Any]:
    endpoints = sorted(fleet.servers)
    out: dict[str, Any] = {}
    for mode in ("random", "round-robin", "picker"):
        prompts = prefix_workload(s, mode)
        rng = random.Random(s.seed)
        jobs: list[Callable[[], Record]] = []
        for i, prompt in enumerate(prompts):
            body = chat(prompt, s.prefix_max_tokens, stream=True)
            if mode == "picker":
                jobs.append(functools.partial(through_picker, fleet.gateway, body))
            else:
                target = rng.choice(endpoints) if mode == "random" else endpoints[i % len(endpoints)]
                jobs.append(functools.partial(direct, target, body))
        before = counters(fleet.servers)
        began = time.monotonic()
        records = closed_loop(jobs, s.concurrency)
        seconds = time.monotonic() - began
        after = counters(fleet.servers)
        hits = delta(before, after, "vllm:prefix_cache_hits_total")
        queries = delta(before, after, "vllm:prefix_cache_queries_total")
        prefix_of = [int(p.split(" tenant ")[1].split("]")[0]) for p in prompts]
        servers_per_prefix = Counter(len({r.endpoint for r, p in zip(records, prefix_of, strict=True) if p == q})
                                     for q in range(s.prefixes))
        out[mode] = {**summary(records), "seconds": round(seconds, 1), "hit_tokens": hits, "query_tokens": queries,
                     "hit_rate": round(hits / queries, 4) if queries else None,
                     "preemptions": delta(before, after, "vllm:num_preemptions_total"),
                     "per_server": dict(Counter(r.endpoint for r in records if r.endpoint)),
                     "servers_per_prefix": {str(k): v for k, v in sorted(servers_per_prefix.items())}}
        print("A", mode, json.dumps({k: v for k, v in out[mode].items() if k != "records"}), flush=True)
    return out


def _queues(fleet: PickerFleet, stop: threading.Event, began: float, series: list[dict[str, Any]]) -> None:
    """Each server's waiting and running requests, once a second."""
    while not stop.wait(1.0):
        for endpoint, server in fleet.servers.items():
            try:
                samples = server.metrics()
            except (OSError, RuntimeError):
                continue
            series.append({"t": round(time.monotonic() - began, 1), "endpoint": endpoint,
                           "waiting": samples.get("vllm:num_requests_waiting", 0.0),
                           "running": samples.get("vllm:num_requests_running", 0.0)})


def _per_server(records: list[Record]) -> dict[str, int]:
    return dict(sorted(Counter(r.endpoint for r in records if r.endpoint).items()))


def flood_run(fleet: PickerFleet, s: Settings, with_priority: bool, tag: str
              ) -> tuple[dict[str, Any], list[Record], list[Record]]:
    long_rng = random.Random(s.seed + 1)
    long_prompts = [f"[{tag} long {i}] " + filler(random.Random(long_rng.random()), s.long_chars) for i in range(2000)]
    long_headers = {OBJECTIVE_HEADER: f"{NAME}-batch"} if with_priority else None
    short_headers = {OBJECTIVE_HEADER: f"{NAME}-interactive"} if with_priority else None
    # The vLLM priority of each class: the negation of its objective priority (docs/routing.md, api/routing.py).
    long_priority, short_priority = (0, -10) if with_priority else (None, None)

    def long_job(i: int) -> Record:
        return through_picker(fleet.gateway, chat(long_prompts[i % len(long_prompts)], s.long_max_tokens,
                                                  stream=False, priority=long_priority), long_headers)

    def short_job(i: int) -> Record:
        return through_picker(fleet.gateway, chat(f"[{tag}] Say hello to the on-call engineer ({i}).",
                                                  s.short_max_tokens, stream=True, priority=short_priority),
                              short_headers)

    stop, stop_sampler = threading.Event(), threading.Event()
    series: list[dict[str, Any]] = []
    before = counters(fleet.servers)
    began = time.monotonic()
    sampler = threading.Thread(target=_queues, args=(fleet, stop_sampler, began, series), daemon=True)
    sampler.start()
    longs, threads = flood(long_job, s.flood_concurrency, stop)
    time.sleep(s.flood_warmup_s)
    shorts = open_loop(short_job, s.short_rate, count=s.short_count)
    stop.set()
    for thread in threads:
        thread.join()
    seconds = time.monotonic() - began
    stop_sampler.set()
    sampler.join()
    after = counters(fleet.servers)
    waiting = {e: max((x["waiting"] for x in series if x["endpoint"] == e), default=0.0) for e in fleet.servers}
    result = {"classes": "with" if with_priority else "without",
              "short": {**summary(shorts), "per_server": _per_server(shorts)},
              "long": {**summary(longs), "per_s": round(len(longs) / seconds, 2), "per_server": _per_server(longs)},
              "max_waiting": waiting, "preemptions": delta(before, after, "vllm:num_preemptions_total"),
              "seconds": round(seconds, 1), "queue_series": series}
    return result, shorts, longs


def phase_b(fleet: PickerFleet, s: Settings) -> dict[str, Any]:
    """``flood_repeats`` pairs, alternating without / with, so that neither condition always runs first or on
    warmer caches; the short and long requests of each condition pooled as well."""
    runs: list[dict[str, Any]] = []
    pooled: dict[str, tuple[list[Record], list[Record], float]] = {"without": ([], [], 0.0), "with": ([], [], 0.0)}
    for repeat in range(1, s.flood_repeats + 1):
        for key, with_priority in (("without", False), ("with", True)):
            result, shorts, longs = flood_run(fleet, s, with_priority, f"flood-{key}-{repeat}")
            runs.append({"repeat": repeat, **result})
            all_shorts, all_longs, seconds = pooled[key]
            pooled[key] = (all_shorts + shorts, all_longs + longs, seconds + result["seconds"])
            print("B", key, repeat, json.dumps({k: v for k, v in result.items() if k != "queue_series"}), flush=True)
    return {"runs": runs, "pooled": {key: {"short": summary(shorts), "long": {**summary(longs),
                                                                             "per_s": round(len(longs) / secs, 2)}}
                                     for key, (shorts, longs, secs) in pooled.items()}}


@dataclass
class KubeletWatch:
    """What the kubelet does about a pod's readiness, for every pod, since KWOK does none of it: a container whose
    process has exited is NotReady at the next relist (PLEG, 1 s); a running one that fails the rendered
    readiness probe (``/health`` every ``periodSeconds``, ``timeoutSeconds``) ``failureThreshold`` times in a row
    is NotReady too. Notes when and why."""

    fleet: PickerFleet
    probe: dict[str, Any]
    not_ready: dict[str, tuple[float, str]]  # endpoint -> (monotonic time, reason)

    def run(self, stop: threading.Event) -> None:
        failures: Counter[str] = Counter()
        path, period = self.probe["httpGet"]["path"], int(self.probe["periodSeconds"])
        tick = 0
        while not stop.wait(1.0):
            tick += 1
            for endpoint, pod in self.fleet.pods.items():
                if endpoint in self.not_ready:
                    continue
                reason = None
                if not self.fleet.servers[endpoint].running():
                    reason = "ContainersNotReady"
                elif tick % period == 0:
                    try:
                        with urllib.request.urlopen(f"http://{endpoint}{path}",
                                                    timeout=self.probe["timeoutSeconds"]):
                            failures[endpoint] = 0
                    except OSError:
                        failures[endpoint] += 1
                    if failures[endpoint] >= int(self.probe["failureThreshold"]):
                        reason = "ReadinessProbeFailed"
                if reason is not None:
                    set_not_ready(self.fleet.cluster, self.fleet.namespace, pod, reason)
                    self.not_ready[endpoint] = (time.monotonic(), reason)


def live_threads(pgrp: int) -> int:
    """Threads of process group ``pgrp`` not yet exited (a process whose main thread has exited shows as a zombie
    while its other threads, which still hold its sockets, run on: each thread is counted)."""
    count = 0
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        try:
            if int((entry / "stat").read_text().rsplit(")", 1)[1].split()[2]) != pgrp:
                continue
            for task in (entry / "task").iterdir():
                count += (task / "stat").read_text().rsplit(")", 1)[1].split()[0] not in ("Z", "X")
        except (OSError, IndexError, ValueError):
            continue
    return count


@dataclass
class DeathWatch:
    """When a SIGKILLed server really stopped: its listening socket refusing connections (until then the kernel
    accepts them into the backlog, and a request sent on one is reset when the process is gone), and no thread of
    its process group left running. Probed every 10 ms from the kill."""

    endpoint: str
    server: EarlyRenderedServer
    refusing: float | None = None
    exited: float | None = None

    def run(self, deadline: float) -> None:
        host, port = self.endpoint.rsplit(":", 1)
        while time.monotonic() < deadline and (self.refusing is None or self.exited is None):
            if self.refusing is None:
                try:
                    socket.create_connection((host, int(port)), timeout=0.2).close()
                except OSError:
                    self.refusing = time.monotonic()
            if self.exited is None and self.server.proc is not None and not live_threads(self.server.proc.pid):
                self.exited = time.monotonic()
            time.sleep(0.01)


POLICIES = (("C1", CONNECT_FAILURE), ("C2", CONNECT_FAILURE_RESET))


def kill_run(fleet: PickerFleet, s: Settings, probe: dict[str, Any], victim: str, retry_on: frozenset[str]
             ) -> dict[str, Any]:
    """One kill measurement: the open-loop workload through a gateway with ``retry_on``, ``victim`` SIGKILLed
    after ``kill_after_s``, on until ``after_drop_s`` after the picker dropped its pod."""
    survivor = next(e for e in sorted(fleet.servers) if e != victim)
    watch = KubeletWatch(fleet, probe, {})
    stop_probe, stop = threading.Event(), threading.Event()
    prober = threading.Thread(target=watch.run, args=(stop_probe,), daemon=True)
    prober.start()
    gateway = Gateway(fleet.bridge.address, retry_on=retry_on)

    def job(i: int) -> Record:
        return through_picker(gateway, chat(f"[kill] Write a status line for request {i}.", s.kill_max_tokens,
                                            stream=False))

    records: list[Record] = []
    sender = threading.Thread(target=lambda: records.extend(open_loop(job, s.kill_rate, stop=stop)), daemon=True)
    sender.start()
    began = time.monotonic()
    time.sleep(s.kill_after_s)
    proc = fleet.servers[victim].proc
    assert proc is not None
    death = DeathWatch(victim, fleet.servers[victim])
    killed = time.monotonic()
    os.killpg(proc.pid, signal.SIGKILL)  # the whole replica at once: API server and engine core
    death_thread = threading.Thread(target=death.run, args=(killed + 60,), daemon=True)
    death_thread.start()
    victim_pod = f"{fleet.pods[victim]}-rank-0"
    dropped: float | None = None
    deadline = killed + 120
    while time.monotonic() < deadline:
        if victim_pod not in fleet.picker.endpoints():
            dropped = time.monotonic()
            break
        time.sleep(0.2)
    time.sleep(s.after_drop_s)
    stop.set()
    sender.join()
    stop_probe.set()
    prober.join()
    death_thread.join()
    gateway.close()
    not_ready, reason = watch.not_ready.get(victim, (None, None))
    return {"retry_on": ",".join(sorted(retry_on)),
            **kill_report(records, victim, survivor, began, killed, not_ready, dropped, probe, death.refusing),
            "not_ready_reason": reason,
            "seconds_kill_to_exited": None if death.exited is None else round(death.exited - killed, 2)}


def restart(fleet: PickerFleet, endpoint: str, cpu: int | None) -> dict[str, Any]:
    """The killed server at ``endpoint`` started again (same argv, environment and address; its own log), pinned
    to ``cpu`` as before, warmed up with two requests straight to it, and its pod Ready again (what the kubelet
    writes once a restarted container passes its readiness probe); returns once the picker holds the pod."""
    began = time.monotonic()
    old = fleet.servers[endpoint]
    old.stop()  # its processes are gone; reaps the leader and removes its shared memory
    new = EarlyRenderedServer(old.argv(), old.extra_env, port=old.port, host=old.host,
                              served_model_name=old.served_model_name, python=old.python,
                              log_path=old.log_path.with_name(old.log_path.stem + "-restarted.log"))
    fleet.servers[endpoint] = new
    new.begin()
    new.wait_ready()
    if cpu is not None:
        pin(new, cpu)
    warm = [direct(endpoint, chat(f"restart warm-up {i}", 4, stream=True)) for i in range(2)]
    set_ready(fleet.cluster, fleet.namespace, fleet.pods[endpoint])
    pod = f"{fleet.pods[endpoint]}-rank-0"
    deadline = time.monotonic() + 120
    while pod not in fleet.picker.endpoints():
        if time.monotonic() > deadline:
            raise RuntimeError(f"the picker did not take {pod} back within 120 s")
        time.sleep(0.2)
    return {"endpoint": endpoint, "server_start_s": round(new.startup_seconds or 0.0, 1),
            "seconds": round(time.monotonic() - began, 1), "warm_up_failed": sum(r.error is not None for r in warm)}


def phase_c(fleet: PickerFleet, s: Settings, probe: dict[str, Any], pinned: dict[str, int]) -> dict[str, Any]:
    """C1 then C2 (POLICIES), the same victim killed in each, restarted in between."""
    victim = sorted(fleet.servers)[0]
    runs: list[dict[str, Any]] = []
    restarts: list[dict[str, Any]] = []
    for i, (name, retry_on) in enumerate(POLICIES):
        if i:
            restarts.append(restart(fleet, victim, pinned.get(victim)))
            print("C restart", json.dumps(restarts[-1]), flush=True)
        runs.append({"name": name, **kill_run(fleet, s, probe, victim, retry_on)})
        print("C", name, json.dumps({k: v for k, v in runs[-1].items() if k != "timeline"}), flush=True)
    return {"runs": runs, "restarts": restarts}


def attempts_of(r: Record) -> list[Attempt]:
    """The endpoints a request tried, in order: its own ``attempts``, or (a record without them: the unit tests'
    hand-made ones) what its ``refused``, ``endpoint`` and ``sent`` say: the refused ones retried on a connect
    failure, then the last one, sent at ``sent`` (or, not noted, at its start)."""
    if r.attempts:
        return r.attempts
    out = [Attempt(e, None, r.start, RETRIED_CONNECT, retried=True) for e in r.refused]
    if r.endpoint is None:
        return out
    if r.refused and r.refused[-1] == r.endpoint and r.sent is None and r.error is not None:
        out[-1] = Attempt(r.endpoint, None, r.end, "failed")  # the last endpoint refused too: nothing sent
        return out
    sent = r.sent if r.sent is not None else r.start
    return [*out, Attempt(r.endpoint, sent, r.end, "served" if r.error is None else "failed")]


def kill_report(records: list[Record], victim: str, survivor: str, began: float, killed: float,
                not_ready: float | None, dropped: float | None, probe: dict[str, Any],
                refusing: float | None = None) -> dict[str, Any]:
    """Every request classified by where it went and when, relative to the kill and the picker's drop.

    In flight on the victim at the kill: sent to it (the connection up, the request out) before the kill and that
    attempt not over by then; a policy that retries a reset before any response byte may still serve those
    elsewhere (``served_by_fallback_in_flight_at_kill``), the others fail. Every other failure is "beyond in
    flight" (the acceptance: none). A request that went on from an endpoint to the next one the picker named
    (``retried_by_reason``: refused at connect, ``connect-failure``, or reset with no response byte,
    ``reset-before-response``) and was served there is counted as served by a fallback: what a gateway that
    does not go down the list (upstream's reference Envoy: ORIGINAL_DST, no retry) would have failed.

    A SIGKILLed server is not gone at once: until its processes have exited, its listening socket still accepts
    connections (the kernel does), and a request sent on one is reset when they exit. ``refusing``: when its
    socket first refused a connection; the requests sent between the kill and then are counted apart
    (``sent_to_victim_while_dying``), and ``failed_beyond_in_flight_at_exit`` counts the failures beyond those
    in flight when it stopped accepting. ``failed_beyond_in_flight`` (from the SIGKILL) stays the acceptance
    figure."""
    tries = {id(r): attempts_of(r) for r in records}

    def on_victim(r: Record) -> list[Attempt]:
        return [a for a in tries[id(r)] if a.endpoint == victim]

    in_flight = [r for r in records if any(a.sent is not None and a.sent < killed < a.ended for a in on_victim(r))]
    in_flight_ids = {id(r) for r in in_flight}
    stopped = refusing if refusing is not None else killed
    at_exit = {id(r) for r in records if any(a.sent is not None and a.sent < stopped and a.ended > killed
                                             for a in on_victim(r))}
    after_kill = [r for r in records if r.start >= killed]
    after_drop = [r for r in records if dropped is not None and r.start >= dropped]
    failed = [r for r in records if r.error is not None]
    fallbacks = [r for r in records if r.error is None and any(a.retried for a in tries[id(r)])]
    retried = [a for r in records for a in tries[id(r)] if a.retried]
    sent_to_victim = [a.sent for r in records for a in on_victim(r) if a.sent is not None]
    return {
        "victim": victim, "survivor": survivor, "requests": len(records), "failed": len(failed),
        "in_flight_on_victim_at_kill": len(in_flight),
        "failed_in_flight_at_kill": sum(1 for r in in_flight if r.error is not None),
        "served_by_fallback_in_flight_at_kill": sum(1 for r in in_flight if r.error is None),
        "failed_beyond_in_flight": sum(1 for r in failed if id(r) not in in_flight_ids),
        "picked_victim_first_after_kill": sum(1 for r in after_kill if r.picked[:1] == [victim]),
        "sent_to_victim_after_kill": sum(1 for t in sent_to_victim if t >= killed),
        "sent_to_victim_while_dying": sum(1 for t in sent_to_victim if killed <= t < stopped),
        "failed_beyond_in_flight_at_exit": sum(1 for r in failed if id(r) not in at_exit),
        "seconds_kill_to_refusing": None if refusing is None else round(refusing - killed, 3),
        "retried_by_reason": {reason: sum(1 for a in retried if a.outcome == reason)
                              for reason in (RETRIED_CONNECT, RETRIED_RESET)},
        "retried_on_victim_by_reason": {reason: sum(1 for a in retried if a.outcome == reason
                                                    and a.endpoint == victim)
                                        for reason in (RETRIED_CONNECT, RETRIED_RESET)},
        "served_by_fallback": len(fallbacks),
        "served_by_fallback_refused_by_victim": sum(1 for r in fallbacks if victim in r.refused),
        "served_by_fallback_by_reason": {reason: sum(1 for r in fallbacks if any(
            a.retried and a.outcome == reason for a in tries[id(r)])) for reason in (RETRIED_CONNECT, RETRIED_RESET)},
        "failed_elsewhere": sum(1 for r in failed if r.endpoint != victim),
        "picks_of_victim_after_drop": sum(1 for r in after_drop if victim in r.picked or on_victim(r)),
        "requests_after_drop": len(after_drop),
        "endpoints_named": dict(sorted(Counter(len(r.picked) for r in records).items())),
        "seconds_kill_to_not_ready": None if not_ready is None else round(not_ready - killed, 2),
        "seconds_kill_to_dropped": None if dropped is None else round(dropped - killed, 2),
        "readiness_probe": {k: probe[k] for k in ("periodSeconds", "timeoutSeconds", "failureThreshold")},
        "errors": sorted(Counter((r.error or "").split(":")[0] for r in failed).items()),  # by exception type
        "timeline": [{"t": round(r.start - killed, 3), "end": round(r.end - killed, 3), "endpoint": r.endpoint,
                      "ok": r.error is None, "picked": r.picked[:1][0] if r.picked else None,
                      "fallback": any(a.retried for a in tries[id(r)]),
                      "retried": [a.outcome for a in tries[id(r)] if a.retried],
                      "in_flight": id(r) in in_flight_ids} for r in records],
        "seconds": round(time.monotonic() - began, 1),
    }


def pin_engines(servers: list[EarlyRenderedServer]) -> dict[str, int]:
    """Every thread of server i's processes (API server, engine core) onto CPU i, as each replica's pod would have
    CPUs of its own. Unpinned, vLLM's automatic OMP binding puts both engines' compute threads on the same CPUs
    of this machine, and they take turns."""
    cpus = sorted(os.sched_getaffinity(0))
    out = {}
    for i, server in enumerate(servers):
        out[f"{server.host}:{server.port}"] = pin(server, cpus[i % len(cpus)])
    return out


def pin(server: EarlyRenderedServer, cpu: int) -> int:
    for pid in server.group_pids():
        for task in Path(f"/proc/{pid}/task").iterdir():
            with contextlib.suppress(OSError):
                os.sched_setaffinity(int(task.name), {cpu})
    return cpu


def server_facts(fleet: PickerFleet) -> dict[str, Any]:
    server = next(iter(fleet.servers.values()))
    _, text = server.get("/metrics")
    line = next(x for x in text.splitlines() if x.startswith("vllm:cache_config_info{"))
    labels = dict(re.findall(r'([A-Za-z_]+)="([^"]*)"', line))
    return {k: labels.get(k, "") for k in ("block_size", "num_gpu_blocks", "enable_prefix_caching")}


def run(s: Settings, tmp: Path) -> dict[str, Any]:
    python = vllm_python()
    model = make_tiny_model(tmp / "model", TinyQwen(), python=python)
    hosts, port = loopback_hosts(2)
    routing = {"priorityClasses": CLASSES}
    engine = {"extraArgs": ["--num-gpu-blocks-override", str(s.kv_blocks)]}
    children = render(new_namespace("bench-routing"), port, routing, engine)
    deployment = one(children, "Deployment", NAME)
    servers = spawn_servers(deployment, python, model, hosts, port, tmp)  # their start overlaps the cluster's
    cluster: LocalCluster | None = None
    fleet: PickerFleet | None = None
    try:
        binaries.ensure()
        cluster = LocalCluster(workdir=tmp / "cluster")
        cluster.start()
        fleet = start_picker_fleet(cluster, binaries.ensure_epp(), servers, children, tmp / "epp")
        facts = server_facts(fleet)
        pinned = pin_engines(servers) if s.pin_engines else {}
        for i in range(4):  # the first requests warm each engine; not counted
            through_picker(fleet.gateway, chat(f"warm-up {i}", 4, stream=True))
        container = deployment["spec"]["template"]["spec"]["containers"][0]
        report = {"phase_a": phase_a(fleet, s), "phase_b": phase_b(fleet, s),
                  "phase_c": phase_c(fleet, s, container["readinessProbe"], pinned)}
        argv = next(iter(fleet.servers.values())).argv()
        return {"when": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()),
                "machine": platform.processor() or platform.machine(), "cpus": len(os.sched_getaffinity(0)),
                "vllm": versions.VLLM, "epp": versions.GATEWAY_API_INFERENCE_EXTENSION, "server_argv": argv[1:],
                "server_cache": facts, "settings": asdict(s), "engine_cpu": pinned,
                "engine_start_s": [round(x.startup_seconds or 0.0, 1) for x in servers], **report}  # first starts
    finally:
        if fleet is not None:
            fleet.close()
        else:
            for server in servers:
                server.stop()
        if cluster is not None:
            cluster.stop()


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0] if __doc__ else None)
    for f in fields(Settings):
        p.add_argument("--" + f.name.replace("_", "-"), type=type(f.default), default=f.default)
    p.add_argument("--out", type=Path, default=RESULTS)
    args = p.parse_args(argv)
    settings = Settings(**{f.name: getattr(args, f.name) for f in fields(Settings)})
    tmp = Path(tempfile.mkdtemp(prefix="bench-routing-"))
    try:
        report = run(settings, tmp)
    except BaseException:
        print(f"bench-routing failed; the engines', picker's and cluster's logs are in {tmp}", file=sys.stderr)
        raise
    shutil.rmtree(tmp, ignore_errors=True)
    args.out.mkdir(parents=True, exist_ok=True)
    (args.out / "routing.json").write_text(json.dumps(report, indent=1) + "\n")
    (args.out / "routing.md").write_text(markdown(report))
    plot(report, args.out / "routing.png")
    print(markdown(report))
    return 0


if __name__ == "__main__":
    sys.exit(main())
