"""bench/routing.py's pure parts (the real engines, picker and apiserver are the bench's own run, ``make
bench-routing``): the shared-prefix workload, the kill phase's classification of requests, the summaries, and that
a report renders to Markdown and a plot."""

from __future__ import annotations

from dataclasses import asdict
from pathlib import Path

from bench.routing import Record, Settings, closed_loop, kill_report, prefix_workload
from bench.routing_report import markdown, plot, summary

from tests.support.extproc import RETRIED_CONNECT, RETRIED_RESET, Attempt

PROBE = {"httpGet": {"path": "/health"}, "periodSeconds": 5, "timeoutSeconds": 3, "failureThreshold": 3}


def test_the_prefix_workload_is_the_same_for_every_routing_but_shares_no_prefix_across_runs() -> None:
    s = Settings(prefixes=3, per_prefix=4, prefix_chars=200)
    one, again, other = prefix_workload(s, "random"), prefix_workload(s, "random"), prefix_workload(s, "picker")
    assert one == again and len(one) == 12
    assert [p.replace("[picker", "[random") for p in other] == one  # same order and texts, another tag
    prefixes = {p.split("\n")[0] for p in one}
    assert len(prefixes) == 3 and all(len(p) == len(p.split("] ")[0]) + 2 + 200 for p in prefixes)
    assert len(set(one)) == 12  # every question differs
    assert [one.count(p) for p in one] == [1] * 12 and sorted(sum(q.startswith(p) for q in one)
                                                               for p in prefixes) == [4, 4, 4]


def test_closed_loop_runs_every_job_once_and_keeps_their_order() -> None:
    done: list[int] = []

    def job(i: int) -> Record:
        done.append(i)
        return Record(float(i), float(i), None, None, 200)

    records = closed_loop([lambda i=i: job(i) for i in range(20)], 4)  # type: ignore[misc]
    assert [r.start for r in records] == [float(i) for i in range(20)] and sorted(done) == list(range(20))


def test_the_kill_report_classifies_each_request_by_where_and_when() -> None:
    v, k = "127.0.0.2:8000", "127.0.0.3:8000"
    records = [
        Record(1.0, 2.0, v, None, 200, None, [v, k], [], 1.1),  # before the kill, done
        Record(9.0, 10.5, v, None, None, "x: reset", [v, k], [], 9.1),  # in flight on the victim at the kill (10)
        Record(9.5, 10.2, k, None, 200, None, [k, v], [], 9.6),  # in flight on the survivor: not the victim's
        Record(9.9, 10.3, k, None, 200, None, [v, k], [v], 10.05),  # picked before, refused after the kill: fallback
        Record(11.0, 11.4, k, None, 200, None, [v, k], [v], 11.1),  # picked the dead victim first: served by k
        Record(11.5, 11.6, v, None, None, "y: refused", [v], [v], None),  # the list had only the victim: a failure
        Record(12.0, 13.0, k, None, 200, None, [k, v], [], 12.1),
        Record(21.0, 22.0, k, None, 200, None, [k], [], 21.1),  # after the drop (20)
        Record(21.5, 22.0, k, None, 200, None, [k], [], 21.6),
    ]
    out = kill_report(records, v, k, 0.0, 10.0, 18.0, 20.0, PROBE)
    assert {key: out[key] for key in (
        "requests", "failed", "in_flight_on_victim_at_kill", "failed_in_flight_at_kill", "failed_beyond_in_flight",
        "picked_victim_first_after_kill", "sent_to_victim_after_kill", "served_by_fallback",
        "served_by_fallback_refused_by_victim", "failed_elsewhere", "picks_of_victim_after_drop",
        "requests_after_drop", "endpoints_named", "seconds_kill_to_not_ready", "seconds_kill_to_dropped")} == {
        "requests": 9, "failed": 2, "in_flight_on_victim_at_kill": 1, "failed_in_flight_at_kill": 1,
        "failed_beyond_in_flight": 1, "picked_victim_first_after_kill": 2, "sent_to_victim_after_kill": 0,
        "served_by_fallback": 2, "served_by_fallback_refused_by_victim": 2, "failed_elsewhere": 0,
        "picks_of_victim_after_drop": 0, "requests_after_drop": 2, "endpoints_named": {1: 3, 2: 6},
        "seconds_kill_to_not_ready": 8.0, "seconds_kill_to_dropped": 10.0}
    assert out["errors"] == [("x", 1), ("y", 1)]
    # the sixth went to no fallback: the picker named only the victim, refused, and the request failed there
    assert [p["fallback"] for p in out["timeline"]] == [False, False, False, True, True, False, False, False, False]
    assert out["retried_by_reason"] == {RETRIED_CONNECT: 2, RETRIED_RESET: 0}
    assert out["served_by_fallback_by_reason"] == {RETRIED_CONNECT: 2, RETRIED_RESET: 0}


def test_a_request_sent_to_the_victim_after_the_kill_is_not_in_flight() -> None:
    """Only a request that went out before the kill is excused: a failure on one sent later counts."""
    v, k = "127.0.0.2:8000", "127.0.0.3:8000"
    late = Record(9.0, 10.6, v, None, None, "x: reset", [v, k], [], 10.1)  # started before, sent after the kill
    out = kill_report([late], v, k, 0.0, 10.0, None, None, PROBE)
    assert (out["in_flight_on_victim_at_kill"], out["failed_beyond_in_flight"], out["sent_to_victim_after_kill"]) \
        == (0, 1, 1)


def test_requests_sent_while_the_killed_server_still_accepted_are_counted_apart() -> None:
    """Between the SIGKILL (10) and the socket refusing (12) the kernel still accepts connections: a request sent
    then fails (reset), and counts beyond in flight from the kill, in flight from the socket's close."""
    v, k = "127.0.0.2:8000", "127.0.0.3:8000"
    records = [Record(9.0, 12.1, v, None, None, "x: reset", [v, k], [], 9.1),
               Record(11.0, 12.1, v, None, None, "x: reset", [v, k], [], 11.1),
               Record(12.5, 13.0, k, None, 200, None, [v, k], [v], 12.6)]
    out = kill_report(records, v, k, 0.0, 10.0, 13.0, 13.5, PROBE, refusing=12.0)
    assert (out["in_flight_on_victim_at_kill"], out["failed_beyond_in_flight"], out["sent_to_victim_while_dying"],
            out["failed_beyond_in_flight_at_exit"], out["served_by_fallback"], out["seconds_kill_to_refusing"]) \
        == (1, 1, 1, 0, 1, 2.0)


def test_a_request_in_flight_on_the_victim_and_retried_after_its_reset_is_in_flight_and_served() -> None:
    """With retry_on reset: a request sent to the victim before the kill (10), reset with no response byte and
    served by the survivor counts in flight on the victim at the kill, not failed, served by a fallback; one sent
    while it was dying and served elsewhere the same way is no failure beyond in flight."""
    v, k = "127.0.0.2:8000", "127.0.0.3:8000"
    in_flight = Record(9.0, 11.5, k, None, 200, None, [v, k], [], 10.6, [
        Attempt(v, 9.1, 10.5, RETRIED_RESET, 0, True), Attempt(k, 10.6, 11.5, "served", 300)])
    dying = Record(10.2, 11.9, k, None, 200, None, [v, k], [], 10.7, [
        Attempt(v, 10.3, 10.5, RETRIED_RESET, 0, True), Attempt(k, 10.7, 11.9, "served", 300)])
    refused = Record(11.0, 11.4, k, None, 200, None, [v, k], [v], 11.1, [
        Attempt(v, None, 11.0, RETRIED_CONNECT, 0, True), Attempt(k, 11.1, 11.4, "served", 300)])
    started = Record(9.5, 10.5, v, None, None, "x: reset", [v, k], [], 9.6, [  # headers came back: not retried
        Attempt(v, 9.6, 10.5, "failed", 120)])
    out = kill_report([in_flight, dying, refused, started], v, k, 0.0, 10.0, 12.0, 12.5, PROBE, refusing=10.5)
    assert {key: out[key] for key in (
        "in_flight_on_victim_at_kill", "failed_in_flight_at_kill", "served_by_fallback_in_flight_at_kill",
        "failed_beyond_in_flight", "sent_to_victim_after_kill", "sent_to_victim_while_dying",
        "failed_beyond_in_flight_at_exit", "served_by_fallback", "served_by_fallback_refused_by_victim",
        "retried_by_reason", "retried_on_victim_by_reason", "served_by_fallback_by_reason", "failed_elsewhere")} == {
        "in_flight_on_victim_at_kill": 2, "failed_in_flight_at_kill": 1, "served_by_fallback_in_flight_at_kill": 1,
        "failed_beyond_in_flight": 0, "sent_to_victim_after_kill": 1, "sent_to_victim_while_dying": 1,
        "failed_beyond_in_flight_at_exit": 0, "served_by_fallback": 3, "served_by_fallback_refused_by_victim": 1,
        "retried_by_reason": {RETRIED_CONNECT: 1, RETRIED_RESET: 2},
        "retried_on_victim_by_reason": {RETRIED_CONNECT: 1, RETRIED_RESET: 2},
        "served_by_fallback_by_reason": {RETRIED_CONNECT: 1, RETRIED_RESET: 2}, "failed_elsewhere": 0}
    assert [p["retried"] for p in out["timeline"]] == [[RETRIED_RESET], [RETRIED_RESET], [RETRIED_CONNECT], []]
    assert [p["in_flight"] for p in out["timeline"]] == [True, False, False, True]


def test_a_request_reset_on_the_victim_after_the_kill_and_failed_elsewhere_counts_beyond_in_flight() -> None:
    """Retried after a reset but failed on the next endpoint too: a failure, beyond in flight (sent after the
    kill), and counted against the endpoint it failed on."""
    v, k = "127.0.0.2:8000", "127.0.0.3:8000"
    record = Record(10.2, 10.9, k, None, None, "y: reset", [v, k], [], 10.6, [
        Attempt(v, 10.3, 10.5, RETRIED_RESET, 0, True), Attempt(k, 10.6, 10.9, "failed", 0)])
    out = kill_report([record], v, k, 0.0, 10.0, None, None, PROBE)
    assert (out["failed_beyond_in_flight"], out["failed_elsewhere"], out["served_by_fallback"],
            out["retried_by_reason"]) == (1, 1, 0, {RETRIED_CONNECT: 0, RETRIED_RESET: 1})


def test_the_victim_named_as_a_fallback_after_the_drop_is_counted() -> None:
    v, k = "127.0.0.2:8000", "127.0.0.3:8000"
    out = kill_report([Record(21.0, 22.0, k, None, 200, None, [k, v], [], 21.1)], v, k, 0.0, 10.0, 18.0, 20.0,
                      PROBE)
    assert out["picks_of_victim_after_drop"] == 1


def test_summary_counts_failures_and_takes_quantiles_of_the_successful() -> None:
    records = [Record(0.0, 1.0, "a", 0.1 * (i + 1), 200) for i in range(10)] + [Record(0.0, 5.0, "a", None, None, "e")]
    out = summary(records)
    assert (out["n"], out["failed"], out["ttft_p50_s"], out["latency_p50_s"]) == (11, 1, 0.55, 1.0)
    assert out["ttft_p99_s"] > 0.99 and out["errors"] == ["e"]


def test_a_report_renders_to_markdown_and_a_plot(tmp_path: Path) -> None:
    a_mode = {"n": 96, "failed": 0, "ttft_p50_s": 0.05, "ttft_p99_s": 0.2, "seconds": 10.0, "hit_rate": 0.5,
              "per_server": {"a": 48, "b": 48}, "servers_per_prefix": {"1": 2, "2": 10},
              "preemptions": 0.0}
    flood = {"short": {"n": 10, "failed": 0, "ttft_p50_s": 0.1, "ttft_p99_s": 0.5},
             "long": {"n": 50, "failed": 0, "latency_p50_s": 1.0, "per_s": 2.5}, "max_waiting": {"a": 3.0, "b": 4.0},
             "preemptions": 7.0, "seconds": 20.0}
    phase_b = {"runs": [{"repeat": 1, "classes": "without", **flood}, {"repeat": 1, "classes": "with", **flood}],
               "pooled": {"without": {"short": flood["short"], "long": flood["long"]},
                          "with": {"short": {**flood["short"], "ttft_p99_s": 0.25}, "long": flood["long"]}}}
    kill = kill_report([Record(9.0, 10.5, "a", None, None, "x: reset", ["a", "b"], [], 9.1),
                        Record(10.5, 11.0, "b", None, 200, None, ["a", "b"], ["a"], 10.6),
                        Record(21.0, 22.0, "b", None, 200, None, ["b"], [], 21.1)],
                       "a", "b", 0.0, 10.0, 18.0, 20.0, PROBE)
    reset = kill_report([Record(9.0, 10.9, "b", None, 200, None, ["a", "b"], [], 10.6, [
                             Attempt("a", 9.1, 10.5, RETRIED_RESET, 0, True), Attempt("b", 10.6, 10.9, "served", 9)]),
                         Record(21.0, 22.0, "b", None, 200, None, ["b"], [], 21.1)],
                        "a", "b", 0.0, 10.0, 18.0, 20.0, PROBE)
    phase_c = {"runs": [{"name": "C1", "retry_on": "connect-failure", **kill},
                        {"name": "C2", "retry_on": "connect-failure,reset", **reset}],
               "restarts": [{"endpoint": "a", "server_start_s": 70.0, "seconds": 80.0, "warm_up_failed": 0}]}
    report = {"settings": asdict(Settings()), "vllm": "0.32.0", "epp": "v1.5.0", "cpus": 2, "when": "now",
              "server_cache": {"num_gpu_blocks": "48", "block_size": "128"},
              "phase_a": {"random": a_mode, "round-robin": a_mode, "picker": {**a_mode, "hit_rate": 0.8}},
              "phase_b": phase_b, "phase_c": phase_c, "engine_cpu": {"a": 0, "b": 1}}
    text = markdown(report)
    assert "| picker | 96 (0) | 0.8 |" in text and "hit rate 1.60x" in text
    assert "| 1 | with | 10 (0) | 0.1 | 0.5 | 50 (0) | 2.5 | 1.0 | - | 7 | 3 / 4 |" in text
    assert "| all | **with** | 10 (0) | **0.1** | **0.25** |" in text and "p50 1.00x, p99 0.50x" in text
    assert ("| C1 | `connect-failure` | 3 | 1 | 1: 1 / 0 | **0** | 1 / 0 | 1 | 1 | 0 (None) | 8.0 | 10.0 | 0 (1) "
            "| x 1 |") in text
    assert ("| C2 | `connect-failure,reset` | 2 | 0 | 1: 0 / 1 | **0** | 0 / 1 | 1 | 0 | 0 (None) | 8.0 | 10.0 | "
            "0 (1) | none |") in text
    assert "ready 70.0 s after its start" in text
    plot(report, tmp_path / "routing.png")
    assert (tmp_path / "routing.png").read_bytes()[:4] == b"\x89PNG"
