"""Bad input: a Hypothesis-driven fuzz of 1000+ QwenInference specs (mostly mutations of valid ones) sent to
the real apiserver (server-side dry-run, with kubectl's strict field validation) and to ``qwen-fleet render``
(in-process, through the CLI's entry point). Each spec is accepted or rejected with a message; both layers
must agree; render never tracebacks. A sample of the accepted specs is created for real: each is reconciled
cleanly (Ready, or Stalled/pending with a truthful reason), children exist only for feasible specs, the
operator neither crashes nor loops hot.
"""

from __future__ import annotations

import contextlib
import http.client
import io
import json
import os
import random
import re
import ssl
import time
import urllib.parse
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest
import yaml
from pydantic import ValidationError

from qwen_fleet import cli
from qwen_fleet.api import QwenInference
from qwen_fleet.api.messages import validation_message
from qwen_fleet_dev.cluster import LocalCluster
from tests.chaos.conftest import RESYNC_SECONDS
from tests.chaos.fuzz_specs import draw_documents
from tests.chaos.helpers import (
    QWI_PATH,
    LogWindow,
    actual_children,
    admin,
    condition,
    desired_children,
    reconcile_totals,
    record,
    traceback_count,
)
from tests.support.operator_process import OperatorProcess

pytestmark = [pytest.mark.cluster, pytest.mark.slow]

CASES = 1000
SEED = int(os.environ.get("QF_CHAOS_SEED", "20261130"))
SAMPLE = 24  # accepted specs created for real (each one runs through the operator)
SETTLE_TIMEOUT_S = 90
QUIET_WINDOW_S = 2 * RESYNC_SECONDS
# Reasons a settled resource may show besides Ready: refused by the planner, or waiting for a node (the
# examples ask for GPU products this cluster does not have).
# FailedCreate: the cluster refuses the pods for a reason outside the spec's schema (e.g. a RuntimeClass that
# does not exist); the status names it, and creating the missing object fixes it without a spec change.
# Waiting for what this cluster never gives: a node, an admission, a bound claim for the model prefetch Job.
SETTLED_PENDING = {"PodsPending", "FailedCreate", "ModelPrefetching"}


class KeepAliveApi:
    """One TLS connection for a thousand requests (urllib would open one per request)."""

    def __init__(self, cluster: LocalCluster) -> None:
        url = urllib.parse.urlparse(cluster.server)
        self.host, self.port, self.token = url.hostname or "127.0.0.1", url.port, cluster.admin_token
        self.tls = ssl.create_default_context()
        self.tls.check_hostname = False
        self.tls.verify_mode = ssl.CERT_NONE  # the local apiserver's self-signed certificate
        self.conn: http.client.HTTPSConnection | None = None

    def post(self, path: str, body: bytes) -> tuple[int, dict[str, Any]]:
        for attempt in range(2):
            if self.conn is None:
                self.conn = http.client.HTTPSConnection(self.host, self.port, context=self.tls, timeout=60)
            try:
                self.conn.request("POST", path, body=body, headers={
                    "Authorization": f"Bearer {self.token}", "Content-Type": "application/json",
                    "Accept": "application/json"})
                resp = self.conn.getresponse()
                raw = resp.read()
            except (http.client.HTTPException, OSError):
                self.conn.close()
                self.conn = None
                if attempt:
                    raise
                continue
            return resp.status, json.loads(raw) if raw else {}
        raise AssertionError("unreachable")


@dataclass
class Verdict:
    doc: dict[str, Any]
    api_ok: bool
    api_message: str
    model_ok: bool
    model_message: str
    render_code: int | None  # None: render raised
    render_out: str
    render_err: str

    def brief(self) -> str:
        return (f"apiserver: {'accepted' if self.api_ok else self.api_message[:300]!r}; "
                f"pydantic: {'accepted' if self.model_ok else self.model_message[:300]!r}; "
                f"spec: {json.dumps(self.doc, ensure_ascii=False)[:1200]}")


def apiserver_verdict(api: KeepAliveApi, ns: str, doc: dict[str, Any]) -> tuple[bool, str]:
    # fieldValidation=Strict is what kubectl sends: an unknown field is an error, not silently dropped.
    path = QWI_PATH.format(ns=ns) + "?dryRun=All&fieldValidation=Strict"
    status, body = api.post(path, json.dumps(doc, ensure_ascii=False).encode())
    return status == 201, "" if status == 201 else str(body.get("message", body))


def model_verdict(doc: dict[str, Any]) -> tuple[bool, str]:
    try:
        QwenInference.model_validate({k: v for k, v in doc.items() if k != "status"})
    except ValidationError as err:
        return False, validation_message(err)
    return True, ""


def render_verdict(doc: dict[str, Any], workdir: Path, ns: str) -> tuple[int | None, str, str]:
    """``qwen-fleet render -f FILE`` in this process (as the console script calls it); any exception is a
    crash, reported with its type and message."""
    path = workdir / "cr.yaml"
    path.write_text(yaml.safe_dump(doc, allow_unicode=True))
    out, err = io.StringIO(), io.StringIO()
    try:
        with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
            code = cli.main(["render", "-f", str(path), "-n", ns, "--no-prometheus-operator"])
    except BaseException as exc:  # SystemExit too: a traceback or an abort is the finding
        return None, out.getvalue(), f"{type(exc).__name__}: {exc}"
    return code, out.getvalue(), err.getvalue()


def render_problem(v: Verdict) -> str | None:
    """How render's answer contradicts the model layer's verdict, if it does."""
    if v.render_code is None:
        return f"render raised {v.render_err}"
    if "Traceback" in v.render_err:
        return "render printed a traceback"
    if not v.model_ok:
        if v.render_code == 0 or "invalid spec:" not in v.render_err:
            return f"invalid spec not refused with a message (exit {v.render_code}): {v.render_err[:200]!r}"
        return None
    if v.render_code == 0:
        # The workload: a Deployment, or one LeaderWorkerSet group per replica when parallelism.nodes > 1.
        nodes = ((v.doc.get("spec") or {}).get("parallelism") or {}).get("nodes", 1)
        workload = "LeaderWorkerSet" if isinstance(nodes, int) and nodes > 1 else "Deployment"
        return None if f"kind: {workload}" in v.render_out else f"exit 0 without a {workload}"
    if v.render_code == 1 and "Stalled (" in v.render_err:
        return None  # valid, but the planner refuses it (does not fit, tensor size does not divide ...)
    return f"valid spec failed to render (exit {v.render_code}): {v.render_err[:300]!r}"


def disagreement_class(v: Verdict) -> str:
    """A short name for a disagreement: who accepted, and the field the other layer refused."""
    if v.api_ok:
        return "only the apiserver accepts; pydantic refuses " + v.model_message.split(":", 1)[0]
    match = re.search(r"(spec\.[\w.\[\]]+|metadata\.name)", v.api_message)
    return "only pydantic accepts; the apiserver refuses " + (match[1] if match else v.api_message[:80])


def _settled(cr: dict[str, Any] | None) -> bool:
    if cr is None:
        return False
    gen = cr["metadata"]["generation"]
    if (cr.get("status") or {}).get("observedGeneration") != gen:
        return False
    ready, stalled, rec = condition(cr, "Ready"), condition(cr, "Stalled"), condition(cr, "Reconciling")
    return (ready.get("status") == "True" or stalled.get("status") == "True"
            or (rec.get("status") == "True" and rec.get("reason") in SETTLED_PENDING))


def test_fuzzed_specs_are_accepted_and_reconciled_or_rejected_with_a_message(
        chaos_cluster: LocalCluster, chaos_operator: OperatorProcess, chaos_namespace: str, tmp_path: Path) -> None:
    ns = chaos_namespace
    started = time.monotonic()
    docs = draw_documents(CASES, SEED)
    generated_s = time.monotonic() - started
    assert len(docs) >= CASES
    api = KeepAliveApi(chaos_cluster)
    verdicts = []
    for doc in docs:
        api_ok, api_msg = apiserver_verdict(api, ns, doc)
        model_ok, model_msg = model_verdict(doc)
        code, out, err = render_verdict(doc, tmp_path, ns)
        verdicts.append(Verdict(doc, api_ok, api_msg, model_ok, model_msg, code, out, err))
    checked_s = time.monotonic() - started - generated_s

    disagree = [v for v in verdicts if v.api_ok != v.model_ok]
    silent = [v for v in verdicts if not v.api_ok and not v.api_message.strip()]
    render_bad = [(v, p) for v in verdicts if (p := render_problem(v))]
    accepted = [v for v in verdicts if v.api_ok and v.model_ok]

    # A sample of what both layers accept, created for real, plus every spec only the apiserver accepts (the
    # operator must stall those with InvalidSpec and create nothing).
    rng = random.Random(SEED)
    chosen = rng.sample([v for v in accepted if v.doc["metadata"]["name"] == "fuzz"], SAMPLE)
    chosen += [v for v in disagree if v.api_ok and v.doc["metadata"]["name"] == "fuzz"]
    rest = admin(chaos_cluster)
    window = LogWindow(chaos_operator.log)
    assert chaos_operator.proc is not None
    pid = chaos_operator.proc.pid
    names = []
    for i, v in enumerate(chosen):
        doc = json.loads(json.dumps(v.doc))
        doc["metadata"]["name"] = f"fuzz-{i:03d}"
        rest.request("POST", QWI_PATH.format(ns=ns) + "?fieldValidation=Strict", doc)
        names.append(doc["metadata"]["name"])
    deadline = time.monotonic() + SETTLE_TIMEOUT_S
    crs: dict[str, dict[str, Any]] = {}
    while time.monotonic() < deadline:
        crs = {o["metadata"]["name"]: o for o in rest.get(QWI_PATH.format(ns=ns))["items"]}
        if all(_settled(crs.get(n)) for n in names):
            break
        time.sleep(2)
    settle_s = time.monotonic() - deadline + SETTLE_TIMEOUT_S

    # Hot-loop check: over two resync periods of quiet, each resource is reconciled a few times, not hundreds.
    before = reconcile_totals(chaos_operator.metrics())
    time.sleep(QUIET_WINDOW_S)
    after = reconcile_totals(chaos_operator.metrics())
    all_crs = len(rest.get("/apis/qwenfleet.io/v1alpha1/qweninferences")["items"])
    quiet_reconciles = sum(after.values()) - sum(before.values())
    bound = all_crs * (QUIET_WINDOW_S / RESYNC_SECONDS + 2)

    children = actual_children(rest, ns)
    problems: list[str] = []
    apply_rejected: list[str] = []
    for name in names:
        cr = crs.get(name)
        if not _settled(cr):
            conds = [{k: c.get(k) for k in ("type", "status", "reason", "message")}
                     for c in ((cr or {}).get("status") or {}).get("conditions") or []]
            problems.append(f"{name} did not settle: {json.dumps(conds)[:600]} "
                            f"(spec {json.dumps((cr or {}).get('spec'), ensure_ascii=False)[:900]})")
            continue
        assert cr is not None
        mine = {k for k, c in children.items()
                if any(r.get("name") == name for r in c["metadata"].get("ownerReferences") or [])}
        stalled = condition(cr, "Stalled")
        if stalled.get("status") == "True":
            message = str(stalled.get("message"))
            if stalled.get("reason") == "ApplyRejected":
                # The CRD admitted a spec whose rendered child core validation refuses: Stalled with the
                # apiserver's words and nothing applied is the designed answer (listed in the figures). A
                # body the apiserver could not even decode is the operator's own fault.
                apply_rejected.append(f"{message[:300]} (spec {json.dumps(cr['spec'], ensure_ascii=False)[:500]})")
                if "decoding" in message or "decode" in message:
                    problems.append(f"{name}: the operator sent a body the apiserver cannot decode: {message}")
            # A failed model prefetch keeps its claim and its failed Job (to read and to retry), nothing else.
            kept = {k for k in mine if k[0] in ("Job", "PersistentVolumeClaim")} \
                if stalled.get("reason") == "ModelPrefetchFailed" else set()
            if mine - kept:
                problems.append(f"{name} is Stalled ({stalled.get('reason')}) but has children {sorted(mine)}")
        elif mine != set(desired_children(cr)):
            problems.append(f"{name}: children {sorted(mine)} != desired {sorted(desired_children(cr))}")
    log = window.text()
    classes: dict[str, list[Verdict]] = {}
    for v in disagree:
        classes.setdefault(disagreement_class(v), []).append(v)
    outcomes: dict[str, int] = {}
    for name in names:
        cr = crs.get(name) or {}
        key = "Ready" if condition(cr, "Ready").get("status") == "True" else (
            condition(cr, "Stalled").get("reason") if condition(cr, "Stalled").get("status") == "True"
            else condition(cr, "Reconciling").get("reason"))
        outcomes[str(key)] = outcomes.get(str(key), 0) + 1
    record("fuzz", {
        "seed": SEED, "cases": len(verdicts), "generate_seconds": round(generated_s, 1),
        "check_seconds": round(checked_s, 1), "apiserver_accepted": sum(v.api_ok for v in verdicts),
        "apiserver_rejected": sum(not v.api_ok for v in verdicts),
        "pydantic_accepted": sum(v.model_ok for v in verdicts),
        "render_ok": sum(v.render_code == 0 for v in verdicts),
        "render_stalled": sum(v.model_ok and v.render_code == 1 for v in verdicts),
        "disagreements": len(disagree), "disagreement_classes": {c: len(v) for c, v in classes.items()},
        "render_problems": len(render_bad), "silent_rejections": len(silent), "apply_rejected": apply_rejected,
        "created_for_real": len(names), "created_outcomes": outcomes, "settle_seconds": round(settle_s, 1),
        "quiet_window_reconciles": quiet_reconciles, "quiet_window_bound": bound, "resources_in_cluster": all_crs,
        "tracebacks": traceback_count(log),
    })
    report = [f"DISAGREE x{len(vs)} {cls}: e.g. {vs[0].brief()}" for cls, vs in sorted(classes.items())]
    report += [f"RENDER {p} :: {v.brief()}" for v, p in render_bad[:15]]
    report += [f"SILENT {v.brief()}" for v in silent[:5]]
    report += problems[:20]
    assert not report, f"{len(disagree)} disagreements, {len(render_bad)} render problems, " \
                       f"{len(silent)} silent rejections, {len(problems)} reconcile problems:\n" + "\n".join(report)
    assert chaos_operator.proc.pid == pid
    assert chaos_operator.proc.poll() is None, chaos_operator.tail()
    assert traceback_count(log) == 0, log[-5000:]
    assert quiet_reconciles <= bound, f"{quiet_reconciles} reconciles in {QUIET_WINDOW_S}s for {all_crs} resources"
    assert after.get("error", 0) == before.get("error", 0), "reconciles raised during the quiet window"
