"""bench/profile.py's summary of py-spy's raw stacks, checked against counts worked out by hand."""

from bench.profile import component, summarize

RAW = """\
<module> (qwen_fleet/cli.py:10);run (kopf/_core/reactor/running.py:5);apply (qwen_fleet/reconcile/kube.py:40);\
dumps (json/__init__.py:231) 6
<module> (qwen_fleet/cli.py:10);run (kopf/_core/reactor/running.py:5);\
render_children (qwen_fleet/render/__init__.py:9) 3
<module> (qwen_fleet/cli.py:10);run (kopf/_core/reactor/running.py:5);process (kopf/_core/actions/execution.py:7) 1
not a stack line
"""


def test_components_by_file() -> None:
    assert component("apply (qwen_fleet/reconcile/kube.py:40)") == "qwen_fleet.reconcile"
    assert component("x (/opt/venv/lib/python3.11/site-packages/kopf/_core/a.py:1)") == "kopf"
    assert component("loads (json/__init__.py:346)") == "json"
    assert component("main (spin.py:6)") == "other"


def test_self_and_inclusive_shares() -> None:
    out = summarize(RAW)
    assert out["samples"] == 10
    self_comp = {d["name"]: d["samples"] for d in out["self_by_component"]}
    assert self_comp == {"json": 6, "qwen_fleet.render": 3, "kopf": 1}
    incl = {d["name"]: d["samples"] for d in out["inclusive_by_component"]}
    # every sample starts in qwen_fleet/cli.py and passes through kopf
    assert incl["qwen_fleet (other)"] == 10 and incl["kopf"] == 10
    assert incl["qwen_fleet.reconcile"] == 6 and incl["json"] == 6 and incl["qwen_fleet.render"] == 3
    top = out["self_by_function"][0]
    assert top == {"name": "dumps (json/__init__.py)", "samples": 6, "percent": 60.0}
