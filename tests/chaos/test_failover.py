"""Leader election (reconcile/leader.py): two operator replicas on one Lease, the leader SIGKILLed in the middle
of a churn of edits. The standby must take over within the lease duration (plus its retry period: it can
only notice on a retry), bring every fleet to exactly the rendered children (the churn test's oracle), and
never race the old leader: no child applied by both replicas for the same generation of its QwenInference
("double-applies", from the apiserver's audit log, where each replica's User-Agent names it), and no write by
the standby before it held the Lease.
"""

from __future__ import annotations

import random
import time
from collections import defaultdict
from datetime import datetime
from typing import Any

import pytest

from qwen_fleet_dev.cluster import LocalCluster
from tests.chaos.helpers import QWI_PATH, admin, qwi, record, small_spec
from tests.chaos.test_churn import fleet_problems
from tests.support.kube import wait_until
from tests.support.operator_process import OperatorProcess, audit_writes

pytestmark = [pytest.mark.cluster, pytest.mark.slow]

FLEETS = 16
LEASE = "qwen-fleet-failover"
DURATION_S, RENEW_DEADLINE_S, RETRY_S = 15.0, 10.0, 2.0  # the chart's defaults
IN_FLIGHT_S = 1.0  # see after_kill below
SCHEDULING_SLACK_S = 4.0  # see the takeover bound below
CHILD_RESOURCES = {"deployments", "services", "horizontalpodautoscalers", "poddisruptionbudgets", "configmaps"}


def _replica(cluster: LocalCluster, log_dir: Any, ns: str, identity: str) -> OperatorProcess:
    return OperatorProcess(cluster, log_dir / f"{identity}.log", env={
        "QWEN_FLEET_NAMESPACES": ns, "QWEN_FLEET_RESYNC_SECONDS": "10", "QWEN_FLEET_LEASE_NAMESPACE": ns,
        "QWEN_FLEET_LEASE_NAME": LEASE, "QWEN_FLEET_IDENTITY": identity,
        "QWEN_FLEET_LEASE_DURATION_SECONDS": str(DURATION_S),
        "QWEN_FLEET_LEASE_RENEW_DEADLINE_SECONDS": str(RENEW_DEADLINE_S),
        "QWEN_FLEET_LEASE_RETRY_SECONDS": str(RETRY_S)})


def _lease(cluster: LocalCluster, ns: str) -> dict[str, Any]:
    return dict(admin(cluster).get(f"/apis/coordination.k8s.io/v1/namespaces/{ns}/leases/{LEASE}")["spec"])


def _epoch(ts: str) -> float:
    return datetime.fromisoformat(ts.replace("Z", "+00:00")).timestamp()


def _who(entry: dict[str, Any]) -> str:
    agent = str(entry.get("userAgent") or "")
    return agent.rsplit("(", 1)[-1].rstrip(")") if "(" in agent else agent


def _child_applies(writes: list[dict[str, Any]], ns: str) -> list[tuple[float, str, str]]:
    """(time, replica, child) of every real (not dry-run) apply of a child in ``ns``."""
    out = []
    for w in writes:
        ref = w.get("objectRef") or {}
        if (w["verb"] == "patch" and "dryRun" not in w["requestURI"] and ref.get("namespace") == ns
                and ref.get("resource") in CHILD_RESOURCES and not ref.get("subresource")):
            out.append((_epoch(w["requestReceivedTimestamp"]), _who(w), f"{ref['resource']}/{ref['name']}"))
    return sorted(out)


def double_applies(applies: list[tuple[float, str, str]], edits: dict[str, list[float]]) -> list[str]:
    """Children applied by two replicas within one generation of their QwenInference (between two edits)."""
    by_period: dict[tuple[str, int], set[str]] = defaultdict(set)
    for at, who, child in applies:
        fleet = child.split("/", 1)[1]
        period = sum(1 for t in edits.get(fleet, []) if t <= at)
        by_period[(child, period)].add(who)
    return [f"{child} (generation period {period}): {sorted(who)}"
            for (child, period), who in sorted(by_period.items()) if len(who) > 1]


def test_standby_takes_over_from_a_killed_leader_without_double_applies(
        chaos_cluster: LocalCluster, operator_process: OperatorProcess, chaos_namespace: str,
        tmp_path_factory: pytest.TempPathFactory) -> None:
    operator_process.stop()  # the suite's own operator would be a third writer
    rest, ns, rng = admin(chaos_cluster), chaos_namespace, random.Random(14)
    logs = tmp_path_factory.mktemp("failover")
    a, b = _replica(chaos_cluster, logs, ns, "replica-a"), _replica(chaos_cluster, logs, ns, "replica-b")
    since = time.time()
    try:
        a.start()
        wait_until("replica-a leads", lambda: _lease(chaos_cluster, ns).get("holderIdentity") == "replica-a", 30)
        b.start()
        seqs: dict[str, int] = {}
        edits: dict[str, list[float]] = defaultdict(list)
        for i in range(FLEETS):
            name = f"fo-{i:02d}"
            seqs[name] = 32
            rest.request("POST", QWI_PATH.format(ns=ns), qwi(name, small_spec(32)))
        wait_until("replica-a converged the new fleets", lambda: not fleet_problems(rest, ns, seqs), 120)

        def edit() -> None:
            name = rng.choice(sorted(seqs))
            seqs[name] = rng.choice([n for n in (16, 24, 48, 64, 96, 128) if n != seqs[name]])
            edits[name].append(time.time())
            rest.request("PATCH", f"{QWI_PATH.format(ns=ns)}/{name}", {"spec": {"engine": {"maxNumSeqs": seqs[name]}}},
                         content_type="application/merge-patch+json")

        for _ in range(15):  # churn while replica-a leads ...
            edit()
            time.sleep(rng.uniform(0.05, 0.3))
        last_renewal = _lease(chaos_cluster, ns)["renewTime"]
        killed_at = time.time()
        a.kill()  # SIGKILL, and returns once the process is reaped
        dead_at = time.time()
        for _ in range(30):  # ... and on, with no leader until replica-b takes over
            edit()
            time.sleep(rng.uniform(0.05, 0.3))
        lease = wait_until("replica-b leads", lambda: (s := _lease(chaos_cluster, ns)).get("holderIdentity")
                           == "replica-b" and s, DURATION_S + 3 * RETRY_S + 10)
        takeover_s = _epoch(lease["acquireTime"]) - killed_at
        since_renewal_s = _epoch(lease["acquireTime"]) - _epoch(last_renewal)
        converge_from = time.monotonic()
        last: list[str] = []

        def converged() -> bool:
            nonlocal last
            last = fleet_problems(rest, ns, seqs)
            return not last

        try:
            wait_until("replica-b converged", converged, 120, interval=1)
        except AssertionError:
            raise AssertionError("not converged:\n" + "\n".join(last[:30])) from None
        converge_s = time.monotonic() - converge_from
        writes = audit_writes(chaos_cluster, since)
        applies = _child_applies(writes, ns)
        doubles = double_applies(applies, edits)
        acquired = _epoch(lease["acquireTime"])
        standby_early = [w for w in writes if _who(w) == "replica-b" and _epoch(w["requestReceivedTimestamp"])
                         < acquired - 0.001 and (w.get("objectRef") or {}).get("resource") != "leases"]
        # A request the old leader sent in its last milliseconds can reach the apiserver's handler just after the
        # kill (the CI run of 2026-12-01 saw one: an Event create received 5 ms before the apiserver logged
        # "context canceled" for it). Such a request is in flight, not written after death; anything received
        # more than IN_FLIGHT_S after the process was reaped can only come from a writer that is still alive.
        in_flight = [w for w in writes if _who(w) == "replica-a"
                     and killed_at < _epoch(w["requestReceivedTimestamp"]) <= dead_at + IN_FLIGHT_S]
        after_kill = [w for w in writes if _who(w) == "replica-a"
                      and _epoch(w["requestReceivedTimestamp"]) > dead_at + IN_FLIGHT_S]
        figures = {"fleets": FLEETS, "edits": sum(map(len, edits.values())), "lease_duration_s": DURATION_S,
                   "retry_period_s": RETRY_S, "takeover_after_kill_s": round(takeover_s, 2),
                   "takeover_after_last_renewal_s": round(since_renewal_s, 2),
                   "converge_after_takeover_s": round(converge_s, 1),
                   "child_applies": {who: sum(1 for _, w, _ in applies if w == who)
                                     for who in ("replica-a", "replica-b")},
                   "double_applies": len(doubles), "standby_writes_before_lease": len(standby_early),
                   "old_leader_requests_in_flight_at_kill": len(in_flight),
                   "old_leader_writes_after_kill": len(after_kill)}
        record("failover", figures)
        assert doubles == [], doubles[:10]
        assert standby_early == [], [w["requestURI"] for w in standby_early[:10]]
        assert after_kill == [], [(w["requestReceivedTimestamp"], w["requestURI"]) for w in after_kill[:10]]
        # The standby notices on a retry (every RETRY_S, +20% jitter), once the record has stood still for a
        # lease duration on its clock: one duration and two retries after the last renewal, plus what a loaded
        # 2-core machine adds to the standby's timers (a clean-clone run of 2026-12-02 took over 21.7 s after
        # the last renewal, 1.4 s past the bare sum, while the suite's first vLLM engine was starting). The
        # slack stays well under a second lease duration, the bug this bound is here for.
        assert since_renewal_s <= DURATION_S + 2 * RETRY_S * 1.2 + SCHEDULING_SLACK_S, figures
        assert lease["leaseTransitions"] >= 1
    finally:
        a.stop()
        b.stop()


def test_the_double_apply_count_sees_two_writers(chaos_cluster: LocalCluster, operator_process: OperatorProcess,
                                                 chaos_namespace: str,
                                                 tmp_path_factory: pytest.TempPathFactory) -> None:
    """The control for the count above: two replicas without leader election both write, and the same
    measure finds children applied by both for one generation."""
    operator_process.stop()
    rest, ns = admin(chaos_cluster), chaos_namespace
    logs = tmp_path_factory.mktemp("no-election")
    replicas = [OperatorProcess(chaos_cluster, logs / f"{who}.log", env={
        "QWEN_FLEET_NAMESPACES": ns, "QWEN_FLEET_RESYNC_SECONDS": "10", "QWEN_FLEET_IDENTITY": who})
        for who in ("replica-a", "replica-b")]
    since = time.time()
    try:
        for replica in replicas:
            replica.start()
        seqs = {f"two-{i:02d}": 32 for i in range(8)}
        for name in seqs:
            rest.request("POST", QWI_PATH.format(ns=ns), qwi(name, small_spec(32)))
        wait_until("converged", lambda: not fleet_problems(rest, ns, seqs), 120)
        applies = _child_applies(audit_writes(chaos_cluster, since), ns)
        doubles = double_applies(applies, {})
        record("failover-control", {"child_applies": len(applies), "double_applies": len(doubles)})
        assert doubles, applies
    finally:
        for replica in replicas:
            replica.stop()
