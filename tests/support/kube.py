"""Small helpers for tests that talk to the local cluster through kubectl."""

from __future__ import annotations

import json
import time
from collections.abc import Callable
from typing import Any, TypeVar

from qwen_fleet_dev.cluster import LocalCluster

T = TypeVar("T")


def wait_until(what: str, check: Callable[[], T | None], timeout: float = 60, interval: float = 0.25) -> T:
    deadline = time.monotonic() + timeout
    last: Any = None
    while time.monotonic() < deadline:
        try:
            last = check()
        except Exception as err:
            last = err
        if last and not isinstance(last, Exception):
            return last  # type: ignore[return-value]
        time.sleep(interval)
    raise AssertionError(f"timed out after {timeout:.0f}s waiting for {what} (last: {last!r})")


def get(cluster: LocalCluster, kind: str, name: str, ns: str) -> dict[str, Any] | None:
    out = cluster.kubectl("get", kind, name, "-n", ns, "-o", "json", check=False)
    return json.loads(out.stdout) if out.returncode == 0 else None


def condition(obj: dict[str, Any] | None, type_: str) -> dict[str, Any] | None:
    for cond in ((obj or {}).get("status") or {}).get("conditions") or []:
        if cond.get("type") == type_:
            return dict(cond)
    return None


def reconciled(cluster: LocalCluster, kind: str, name: str, ns: str) -> dict[str, Any] | None:
    """The object once its controller has acted on its current generation (status.observedGeneration), else None.
    The operator writes a fleet's status after every child, so this is the end of a reconcile: waiting for one
    child alone is not, the children after it may still be on their way."""
    obj = get(cluster, kind, name, ns)
    if obj is None or (obj.get("status") or {}).get("observedGeneration") != obj["metadata"].get("generation"):
        return None
    return obj


def events_for(cluster: LocalCluster, ns: str, name: str) -> list[dict[str, Any]]:
    out = cluster.kubectl("get", "events", "-n", ns, "-o", "json",
                          f"--field-selector=involvedObject.name={name}").stdout
    return list(json.loads(out)["items"])


def apply(cluster: LocalCluster, ns: str, doc: dict[str, Any] | str) -> None:
    text = doc if isinstance(doc, str) else json.dumps(doc)
    cluster.kubectl("apply", "-n", ns, "-f", "-", input=text)


def wait_fleet(cluster: LocalCluster, ns: str, fleet: str, logs: Callable[[], str], what: str,
               check: Callable[[], T | None], timeout: float = 60) -> T:
    """wait_until that says, on a timeout, where the QwenInference ``fleet`` stands and what ``logs`` (the
    operator's tail) returns."""
    try:
        return wait_until(what, check, timeout)
    except AssertionError as err:
        qwi = get(cluster, "qwi", fleet, ns) or {}
        raise AssertionError(f"{err}\nstatus: {json.dumps(qwi.get('status'), indent=1)}\n{logs()}") from None
